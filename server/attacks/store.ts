// The attack table (server/db/entities.ts Attack; docs/CONTRACTS.md "Attacks"): what the status rounds write and
// the API reads. Records come from the edge agents (common/attacks.ts) and are stored by the agent's id, so a
// record sent in many rounds is one row, its counts and peaks the latest the agent reported.
import type { Sql } from '../db/database.ts';
import type { AttackProtocol, AttackRecord, AttackVector } from '../../common/attacks.ts';
import type { DropReason } from '../../common/tunnel-status.ts';
import type { TunnelStatus } from '../db/entities.ts';

type Q = Pick<Sql, 'query'>;

/** Kept as long as the hourly traffic points (DESIGN 3.11: 90 days), counted from the attack's end. */
export const ATTACK_RETENTION_MS = 90 * 24 * 3_600_000;

/**
 * The class of the per-attack advisory locks (pg_advisory_xact_lock(int, int), "atk" in ASCII; the object is a
 * hash of the attack id): the two-key form never meets the one-key locks of migrations and provisioning.
 */
const ATTACK_LOCK_CLASS = 0x61746b;
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;
/** The record's columns of `attack a`, as AttackRow reads them. */
const RECORD_COLUMNS = `a.id, a.tunnel_id, to_char(a.started_at at time zone 'UTC', ${ISO}) as started_at,
  to_char(a.ended_at at time zone 'UTC', ${ISO}) as ended_at, a.peak_pps::text, a.peak_bps::text, a.vector,
  a.packets_dropped::text, a.packets_passed::text`;

interface AttackRow {
  id: string;
  tunnel_id: string;
  started_at: string;
  ended_at: string | null;
  peak_pps: string;
  peak_bps: string;
  vector: { protocol: AttackProtocol | null; ports: number[] | null; top_drop_reason: DropReason | null };
  packets_dropped: string;
  packets_passed: string;
}

function recordOf(r: AttackRow): AttackRecord {
  const vector: AttackVector = { protocol: r.vector.protocol, ports: r.vector.ports, top_drop_reason: r.vector.top_drop_reason };
  return {
    id: r.id,
    tunnel_id: r.tunnel_id,
    started_at: r.started_at,
    ended_at: r.ended_at,
    peak_pps: Number(r.peak_pps),
    peak_bps: Number(r.peak_bps),
    vector,
    packets_dropped: Number(r.packets_dropped),
    packets_passed: Number(r.packets_passed),
  };
}

/** A record stored by a round, with what the round did to it. */
export interface StoredAttack {
  record: AttackRecord;
  /** The tunnel's status now (the bus notice carries it). */
  status: TunnelStatus;
  /** The row is new: the attack started as far as the gateway knows. */
  inserted: boolean;
  /** It is ended now, and was not before this round (or is new and already ended). */
  endedNow: boolean;
}

/**
 * Stores the records of one node's status answer, in the caller's transaction: those of tunnels of that node
 * only (an agent speaks for its own tunnels; others are left out and counted). An attack ended stays ended:
 * a later report cannot reopen it, and its end is the first one stored.
 */
export async function upsertAttacks(sql: Q, nodeId: string, records: readonly AttackRecord[], at: Date): Promise<{ stored: StoredAttack[]; ignored: number }> {
  if (records.length === 0) return { stored: [], ignored: 0 };
  // One row per id (the last record of it wins): one statement cannot update a row twice.
  const byId = new Map(records.map((r) => [r.id.toLowerCase(), r]));
  const ids = [...byId.keys()];
  // One writer per attack at a time, rows or not yet: the row lock below only holds rows that exist, and a push
  // of an attack's end racing a round that inserts it open would read no row, wait at the insert, then update it
  // and not know it ended it (its attack_ended lost). Taken in the order of the keys, so two writers never deadlock
  // (a volatile function in the select list runs after the sort).
  await sql.query('select pg_advisory_xact_lock(?::int, k) from (select distinct hashtext(id::text) as k from unnest(?::uuid[]) as id) as x order by k', [ATTACK_LOCK_CLASS, `{${ids.join(',')}}`]);
  // Which of them were already ended, read under the rows' lock: a concurrent round waits here.
  const before = await sql.query<{ id: string; ended: boolean }>('select id, ended_at is not null as ended from attack where id = any(?::uuid[]) for update', [`{${ids.join(',')}}`]);
  const wasEnded = new Map(before.map((r) => [r.id, r.ended]));
  const rows = await sql.query<AttackRow & { inserted: boolean; status: TunnelStatus }>(
    `with x as (
       select x.* from jsonb_to_recordset(?::jsonb) as x(id uuid, tunnel_id uuid, started_at timestamptz, ended_at timestamptz, peak_pps bigint, peak_bps bigint,
                                                          vector jsonb, packets_dropped bigint, packets_passed bigint)
         join tunnel t on t.id = x.tunnel_id and t.node_id = ?::uuid),
     a as (
       insert into attack as a (id, tunnel_id, started_at, ended_at, peak_pps, peak_bps, vector, packets_dropped, packets_passed, reported_at)
       select id, tunnel_id, started_at, ended_at, peak_pps, peak_bps, vector, packets_dropped, packets_passed, ?::timestamptz from x
       on conflict (id) do update set ended_at = coalesce(a.ended_at, excluded.ended_at), peak_pps = excluded.peak_pps, peak_bps = excluded.peak_bps,
         vector = excluded.vector, packets_dropped = excluded.packets_dropped, packets_passed = excluded.packets_passed, reported_at = excluded.reported_at
       where a.tunnel_id = excluded.tunnel_id
       returning a.*, (a.xmax = 0) as inserted)
     select ${RECORD_COLUMNS}, a.inserted, t.status from a join tunnel t on t.id = a.tunnel_id`,
    [
      JSON.stringify(
        [...byId.values()].map((r) => ({
          id: r.id.toLowerCase(),
          tunnel_id: r.tunnel_id.toLowerCase(),
          started_at: r.started_at,
          ended_at: r.ended_at,
          peak_pps: r.peak_pps,
          peak_bps: r.peak_bps,
          vector: r.vector,
          packets_dropped: r.packets_dropped,
          packets_passed: r.packets_passed,
        })),
      ),
      nodeId,
      at.toISOString(),
    ],
  );
  const stored = rows.map((r) => ({
    record: recordOf(r),
    status: r.status,
    inserted: r.inserted,
    endedNow: r.ended_at !== null && (r.inserted || wasEnded.get(r.id) === false),
  }));
  return { stored, ignored: records.length - rows.length };
}

/**
 * Ends the open attacks of node `nodeId`'s tunnels that its agent no longer lists (`listed`: the ids its answer
 * carried), at the last round that listed them: the agent restarted, or lost them. Returns them as ended.
 */
export async function closeUnlisted(sql: Q, nodeId: string, listed: readonly string[]): Promise<StoredAttack[]> {
  const rows = await sql.query<AttackRow & { status: TunnelStatus }>(
    `with a as (
       update attack a set ended_at = greatest(a.reported_at, a.started_at)
         from tunnel t
        where t.id = a.tunnel_id and t.node_id = ?::uuid and a.ended_at is null and not (a.id = any(?::uuid[]))
        returning a.*)
     select ${RECORD_COLUMNS}, t.status from a join tunnel t on t.id = a.tunnel_id`,
    [nodeId, `{${listed.map((id) => id.toLowerCase()).join(',')}}`],
  );
  return rows.map((r) => ({ record: recordOf(r), status: r.status, inserted: false, endedNow: true }));
}

/**
 * The attacks of tunnel `tunnelId` going on at some time in [from, to): started before `to` and not ended
 * before `from`; oldest start first, at most `limit` (the oldest).
 */
export async function readAttacks(q: Q, tunnelId: string, from: Date, to: Date, limit: number): Promise<AttackRecord[]> {
  const rows = await q.query<AttackRow>(
    `select ${RECORD_COLUMNS} from attack a
      where a.tunnel_id = ?::uuid and a.started_at < ?::timestamptz and (a.ended_at is null or a.ended_at >= ?::timestamptz)
      order by a.started_at, a.id limit ?`,
    [tunnelId, to.toISOString(), from.toISOString(), limit],
  );
  return rows.map(recordOf);
}

/** Deletes the attacks that ended longer ago than retention; returns how many. An attack going on is kept. */
export async function purgeAttacks(q: Q, now: Date): Promise<number> {
  const rows = await q.query<{ n: string }>(`with gone as (delete from attack where ended_at < ?::timestamptz returning 1) select count(*)::text as n from gone`, [
    new Date(now.getTime() - ATTACK_RETENTION_MS).toISOString(),
  ]);
  return Number(rows[0]?.n ?? 0);
}
