// One node's `status` answer into the database (docs/CONTRACTS.md "Health and traffic";
// the answer's shape is common/tunnel-status.ts): the seam the collector calls after each round, and
// that tests call with real PostgreSQL until the agent answers `status`.
//
// Counters -> deltas: the agent's counters are monotonic for the life of a tunnel on that agent; each
// round's delta is taken against the last counters seen for the tunnel (traffic.seen). A counter that
// went down restarted (agent restart, tunnel re-created): the delta is its new value, never negative.
// A tunnel seen for the first time only sets the baseline (delta 0): what it carried before is not
// known to fall in this minute. Nonzero deltas go into the round's minute: added up in the tunnel's
// traffic.seen row while the minute lasts (that row is rewritten every round anyway) and written to
// traffic.minute once, by the first round of a later minute or by the rollup (storage.ts); readers add
// the buffered minute in. A round of an hour already rolled up (late) goes to the minute and the hour at
// once, so both views stay exact.
//
// Health: each tunnel on the edge (provisioning, provisioned, active) takes what the agent reports;
// one the agent did not report is 'unknown' (it does not have it), as is every tunnel of a node that
// did not answer (markUnknown: we do not know, which is not 'down'). A health change writes its row of
// the tunnel's health history (history.ts) and its `tunnel.health_changed` webhook event in the same
// transaction and, once committed, is published on the status bus (the `tunnelStatus` subscription).
// The history's time of an up or down is the agent's check that saw it (the round's time when the
// report has none), of an 'unknown' the round's: the gateway found it, not the agent.
//
// Writes per round: the tunnel row only when its `health` changes. `health_checked_at` (the agent's own
// last check of the tunnel, docs/CONTRACTS.md "Health and traffic") moves almost every round, so it is
// kept in the tunnel's traffic.seen row, which each round rewrites for every reported tunnel anyway
// (migration 20261128100000): at 10,000 tunnels a round of unchanged health writes no tunnel row, where
// it used to write 10,000 new versions of that wide, hot table.
//
// By change (docs/CONTRACTS.md "Status by change"): an agent that lists `status_delta` is asked with the cursor of
// the last answer this database committed (traffic.node_cursor, cursorOf) and answers only the tunnels whose
// counters or health changed since, and those it stopped having (`gone`). Only those rows are read and written:
// an idle tunnel costs nothing. The cursor moves in the round's transaction, under its row's lock, and only
// forward: an answer older than the stored cursor (another replica stored a later one) is dropped whole; a change
// list whose base is not the stored cursor's run or is ahead of it (the cursor was reset meanwhile) is dropped and
// the cursor reset, so the next round is a full answer. Everything that sets a node's health without its agent's
// word (markUnknown) resets the cursor too: the next answer is full and gives every tunnel its health back. A
// full answer is also asked once in a while (fullEveryMs) as a bound on any divergence nobody foresaw.
import type { Database, Sql } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import { ON_EDGE } from '../domain/tunnels/spec.ts';
import { DROP_REASONS, checkStatusResult, type Health, type StatusCursor, type StatusResult, type TunnelCounters } from '../../common/tunnel-status.ts';
import type { TunnelEventSink } from '../webhooks/events.ts';
import type { TunnelStatusBus } from '../provisioning/status-bus.ts';
import { HOUR_MS, MINUTE_MS, type TrafficStore } from './storage.ts';
import { recordHealthChanges, type HealthChangeRecord } from './history.ts';
import { PushBatcher, type PushBatchOptions, type PushedHealth } from './push-batch.ts';
import type { AttackChange, AttackIngest } from '../attacks/ingest.ts';

/** How long a node answers by change before it is asked for the full list again (docs/CONTRACTS.md "Status by change"). */
export const FULL_EVERY_MS = 3_600_000;

/** An answer older than what another round stored: rolled back whole. */
class StaleAnswer extends Error {
  override name = 'StaleAnswer';
}

/** A status answer that does not have the contract's shape: nothing of it is stored. */
class StatusRejected extends Error {
  override name = 'StatusRejected';
}

export interface IngestOutcome {
  /** Tunnels of this node the answer reported (others are ignored). */
  reported: number;
  /** Tunnels whose deltas were nonzero. */
  carried: number;
  /** Tunnels whose health changed (each with its webhook event). */
  healthChanged: string[];
  /** Attacks the answer started or ended (server/attacks/ingest.ts; each with its webhook event). */
  attacks: AttackChange[];
  /**
   * 'full' every tunnel (an agent without `status_delta`, or a full answer), 'delta' only changes, 'stale' an answer
   * older than the stored cursor or a change list that no longer applies: nothing stored (the next round asks again).
   */
  form: 'full' | 'delta' | 'stale';
}

type Counts = Omit<TunnelCounters, 'dropped'> & { dropped: number[] };

const KEYS = ['packets_in', 'bytes_in', 'packets_out', 'bytes_out'] as const;

/** One counter's delta: a decrease means the counter restarted, so the new value is what was carried since. */
function counterDelta(prev: number | undefined, cur: number): number {
  if (prev === undefined) return 0;
  return cur >= prev ? cur - prev : cur;
}

/** The deltas of one tunnel's counters against the last seen (undefined: first sighting, all zero). */
function deltasOf(prev: Counts | undefined, cur: TunnelCounters): Counts {
  const dropped = DROP_REASONS.map((r, i) => counterDelta(prev ? (prev.dropped[i] ?? 0) : undefined, cur.dropped[r]));
  return {
    packets_in: counterDelta(prev?.packets_in, cur.packets_in),
    bytes_in: counterDelta(prev?.bytes_in, cur.bytes_in),
    packets_out: counterDelta(prev?.packets_out, cur.packets_out),
    bytes_out: counterDelta(prev?.bytes_out, cur.bytes_out),
    dropped,
  };
}

const isZero = (c: Counts) => KEYS.every((k) => c[k] === 0) && c.dropped.every((d) => d === 0);

/** The deltas of a tunnel's latest minute, buffered in traffic.seen until that minute is complete. */
interface Pending {
  t: number;
  d: Counts;
}

const addCounts = (a: Counts, b: Counts): Counts => ({
  packets_in: a.packets_in + b.packets_in,
  bytes_in: a.bytes_in + b.bytes_in,
  packets_out: a.packets_out + b.packets_out,
  bytes_out: a.bytes_out + b.bytes_out,
  dropped: DROP_REASONS.map((_, i) => (a.dropped[i] ?? 0) + (b.dropped[i] ?? 0)),
});

/** `dropped` as stored: null when nothing was dropped (most rows), else the counts in DROP_REASONS order. */
const dropsColumn = (d: number[]): number[] | null => (d.every((x) => x === 0) ? null : d);

function pendingOf(row: KnownRow): Pending | null {
  if (row.pend_ms === null) return null;
  const d = (row.pend_d ?? []).map(Number);
  return {
    t: Number(row.pend_ms),
    d: { packets_in: Number(row.pend_pi), bytes_in: Number(row.pend_bi), packets_out: Number(row.pend_po), bytes_out: Number(row.pend_bo), dropped: DROP_REASONS.map((_, i) => d[i] ?? 0) },
  };
}

interface KnownRow {
  id: string;
  status: TunnelStatus;
  health: Health;
  packets_in: string | null;
  bytes_in: string | null;
  packets_out: string | null;
  bytes_out: string | null;
  dropped: string[] | null;
  pend_ms: string | null;
  pend_pi: string | null;
  pend_bi: string | null;
  pend_po: string | null;
  pend_bo: string | null;
  pend_d: string[] | null;
}

export class StatusIngest {
  constructor(
    private readonly db: Database,
    private readonly store: TrafficStore,
    private readonly events: Pick<TunnelEventSink, 'healthChangedAll'>,
    private readonly bus: Pick<TunnelStatusBus, 'publish'>,
    /** The answer's attack records (docs/CONTRACTS.md "Attacks"), in the round's transaction; absent: not stored. */
    private readonly attacks?: Pick<AttackIngest, 'record' | 'published'>,
    private readonly fullEveryMs = FULL_EVERY_MS,
    /** How a node's pushed changes are gathered (push-batch.ts); the defaults outside tests. */
    pushBatch: Pick<PushBatchOptions, 'windowMs' | 'maxBatch'> = {},
  ) {
    this.pushes = new PushBatcher({ ...pushBatch, write: (nodeId, batch) => this.writePushed(nodeId, batch) });
  }

  private readonly pushes: PushBatcher;

  /**
   * The `since` for node `nodeId`'s next `status`: the cursor of the last answer stored, or null (a full answer)
   * when there is none or the last full answer is older than fullEveryMs.
   */
  async cursorOf(nodeId: string, now = new Date()): Promise<StatusCursor | null> {
    const [r] = await this.db.query<{ epoch: string; seq: string; full_at: string | Date }>('select epoch, seq::text as seq, full_at from traffic.node_cursor where node_id = ?', [nodeId]);
    if (!r || now.getTime() - new Date(r.full_at).getTime() >= this.fullEveryMs) return null;
    return { epoch: r.epoch, seq: Number(r.seq) };
  }

  /** Stores one `status` answer of node `nodeId`, collected at `at`. StatusRejected when malformed. */
  async ingestStatus(nodeId: string, result: StatusResult, at: Date): Promise<IngestOutcome> {
    const why = checkStatusResult(result);
    if (why) throw new StatusRejected(`the status answer of node ${nodeId} breaks the contract: ${why}`);
    const reports = new Map(result.tunnels.map((t) => [t.id.toLowerCase(), t]));
    const delta = result.delta;
    const byChange = delta !== undefined && !delta.full;
    const gone = new Set(byChange ? delta.gone.map((g) => g.toLowerCase()) : []);
    await this.store.ensureFor(at);
    const minute = new Date(Math.floor(at.getTime() / MINUTE_MS) * MINUTE_MS);
    const out = await this.db
      .transaction(async (sql) => {
      if (delta) {
        // The node's cursor row, locked: rounds of one node (two replicas) store their answers one after the other.
        const [c] = await sql.query<{ epoch: string; seq: string }>('select epoch, seq::text as seq from traffic.node_cursor where node_id = ? for update', [nodeId]);
        if (c && c.epoch === delta.epoch && Number(c.seq) >= delta.seq) throw new StaleAnswer();
        if (byChange && !(c && c.epoch === delta.epoch && delta.base! <= Number(c.seq))) {
          // Changes since a cursor this database no longer holds: asked in full next round.
          await sql.query('delete from traffic.node_cursor where node_id = ?', [nodeId]);
          return null;
        }
      }
      // Shared: a rollup (storage.ts) waits for this round, and this round sees where it stopped.
      const [r] = await sql.query<{ done_through: string | Date }>('select done_through from traffic.rollup where id = 1 for share');
      const doneThrough = new Date(r!.done_through).getTime();
      // In full, every tunnel of the node on the edge (one not reported loses its health); by change, only the
      // tunnels the answer names (reported or gone): the others did not change.
      const named = JSON.stringify([...reports.keys(), ...gone]);
      const rows = await sql.query<KnownRow>(
        `select t.id, t.status, t.health,
                s.packets_in::text, s.bytes_in::text, s.packets_out::text, s.bytes_out::text, s.dropped::text[] as dropped,
                (extract(epoch from s.pend_t) * 1000)::bigint::text as pend_ms, s.pend_pi::text, s.pend_bi::text, s.pend_po::text, s.pend_bo::text, s.pend_d::text[] as pend_d
           from tunnel t left join traffic.seen s on s.tunnel_id = t.id
          where t.node_id = ? and (${byChange ? 'false' : `t.status in (${ON_EDGE.map(() => '?').join(', ')})`} or t.id in (select x::uuid from jsonb_array_elements_text(?::jsonb) as x))`,
        byChange ? [nodeId, named] : [nodeId, ...ON_EDGE, named],
      );
      // checked: the agent's check time, kept only for a tunnel on the edge (only those take a health).
      const seen: { id: string; c: TunnelCounters; pend: Pending | null; checked: string | null }[] = [];
      const flush: { id: string; t: number; d: Counts }[] = [];
      let carried = 0;
      const health: HealthChangeRecord[] = [];
      const changed: { id: string; status: TunnelStatus; health: Health }[] = [];
      // The check time of each change a report makes (the agent's clock): see writeHealth.
      const checkedOf = new Map<string, string>();
      for (const row of rows) {
        const rep = reports.get(row.id);
        if (rep) {
          const prev: Counts | undefined =
            row.packets_in === null
              ? undefined
              : { packets_in: Number(row.packets_in), bytes_in: Number(row.bytes_in), packets_out: Number(row.packets_out), bytes_out: Number(row.bytes_out), dropped: (row.dropped ?? []).map(Number) };
          const d = deltasOf(prev, rep.counters);
          let pend = pendingOf(row);
          if (!isZero(d)) {
            carried++;
            if (minute.getTime() < doneThrough) {
              // Late: its hour is rolled up already, so it goes to the minute and the hour at once.
              flush.push({ id: row.id, t: minute.getTime(), d });
            } else if (pend && pend.t === minute.getTime()) {
              pend = { t: pend.t, d: addCounts(pend.d, d) };
            } else {
              if (pend) flush.push({ id: row.id, t: pend.t, d: pend.d });
              pend = { t: minute.getTime(), d };
            }
          } else if (pend && pend.t < minute.getTime()) {
            // A later minute came: the buffered one is complete.
            flush.push({ id: row.id, t: pend.t, d: pend.d });
            pend = null;
          }
          seen.push({ id: row.id, c: rep.counters, pend, checked: ON_EDGE.includes(row.status) ? rep.checked_at : null });
        }
        if (!ON_EDGE.includes(row.status)) continue;
        // By change, a tunnel not reported is one the agent no longer has (gone): its health is not known.
        const h: Health = rep ? rep.health : 'unknown';
        if (h !== row.health) {
          const when = h !== 'unknown' && rep?.checked_at ? new Date(rep.checked_at) : at;
          health.push({ id: row.id, at: when, previous: row.health, health: h });
          if (rep?.checked_at) checkedOf.set(row.id, rep.checked_at);
          changed.push({ id: row.id, status: row.status, health: h });
        }
      }
      if (seen.length > 0) {
        // checked_at: a report without a check time (the agent has not checked it yet) keeps the last one,
        // as `health_checked_at` always did; before this row has one, the tunnel column's value shows.
        await sql.query(
          `insert into traffic.seen (tunnel_id, packets_in, bytes_in, packets_out, bytes_out, dropped, seen_at, pend_t, pend_pi, pend_bi, pend_po, pend_bo, pend_d, checked_at)
           select id, pi, bi, po, bo, d, ?::timestamptz, pt, coalesce(ppi, 0), coalesce(pbi, 0), coalesce(ppo, 0), coalesce(pbo, 0), pd, ck
             from jsonb_to_recordset(?::jsonb) as x(id uuid, pi bigint, bi bigint, po bigint, bo bigint, d bigint[], pt timestamptz, ppi bigint, pbi bigint, ppo bigint, pbo bigint, pd bigint[], ck timestamptz)
           on conflict (tunnel_id) do update set packets_in = excluded.packets_in, bytes_in = excluded.bytes_in, packets_out = excluded.packets_out,
             bytes_out = excluded.bytes_out, dropped = excluded.dropped, seen_at = excluded.seen_at, pend_t = excluded.pend_t, pend_pi = excluded.pend_pi,
             pend_bi = excluded.pend_bi, pend_po = excluded.pend_po, pend_bo = excluded.pend_bo, pend_d = excluded.pend_d,
             checked_at = coalesce(excluded.checked_at, seen.checked_at)`,
          [
            at.toISOString(),
            JSON.stringify(
              seen.map((x) => ({
                id: x.id,
                pi: x.c.packets_in,
                bi: x.c.bytes_in,
                po: x.c.packets_out,
                bo: x.c.bytes_out,
                d: DROP_REASONS.map((r) => x.c.dropped[r]),
                ck: x.checked,
                ...(x.pend ? { pt: new Date(x.pend.t).toISOString(), ppi: x.pend.d.packets_in, pbi: x.pend.d.bytes_in, ppo: x.pend.d.packets_out, pbo: x.pend.d.bytes_out, pd: dropsColumn(x.pend.d.dropped) } : {}),
              })),
            ),
          ],
        );
      }
      if (flush.length > 0) {
        // One statement per table whatever the number of tunnels: the rows travel as one JSON document.
        const json = (list: typeof flush, hour: boolean) =>
          JSON.stringify(list.map((c) => ({ id: c.id, t: new Date(hour ? Math.floor(c.t / HOUR_MS) * HOUR_MS : c.t).toISOString(), pi: c.d.packets_in, bi: c.d.bytes_in, po: c.d.packets_out, bo: c.d.bytes_out, d: dropsColumn(c.d.dropped) })));
        const late = flush.filter((c) => c.t < doneThrough);
        for (const [table, list] of [['minute', flush], ['hour', late]] as const) {
          if (list.length === 0) continue;
          await sql.query(
            `insert into traffic.${table} (tunnel_id, t, packets_in, bytes_in, packets_out, bytes_out, dropped)
             select id, t, pi, bi, po, bo, d from jsonb_to_recordset(?::jsonb) as x(id uuid, t timestamptz, pi bigint, bi bigint, po bigint, bo bigint, d bigint[])
             on conflict (tunnel_id, t) do update set packets_in = ${table}.packets_in + excluded.packets_in, bytes_in = ${table}.bytes_in + excluded.bytes_in,
               packets_out = ${table}.packets_out + excluded.packets_out, bytes_out = ${table}.bytes_out + excluded.bytes_out,
               dropped = traffic.add_drops(${table}.dropped, excluded.dropped)`,
            [json(list, table === 'hour')],
          );
        }
      }
      const written = await this.writeHealth(sql, health, checkedOf);
      const attacks = this.attacks ? (await this.attacks.record(sql, nodeId, result, at)).changes : [];
      if (delta) {
        // Forward only (the row lock above holds it; the condition covers a first row two rounds insert at once).
        const moved = await sql.query(
          `insert into traffic.node_cursor as c (node_id, epoch, seq, checked_floor, full_at, stored_at) values (?, ?, ?, ?, ?, ?)
           on conflict (node_id) do update set epoch = excluded.epoch, seq = excluded.seq, checked_floor = excluded.checked_floor,
             full_at = ${delta.full ? 'excluded.full_at' : 'c.full_at'}, stored_at = excluded.stored_at
           where c.epoch <> excluded.epoch or c.seq < excluded.seq returning 1`,
          [nodeId, delta.epoch, delta.seq, delta.checked_floor, at.toISOString(), at.toISOString()],
        );
        if (moved.length === 0) throw new StaleAnswer();
      }
      return { reported: seen.length, carried, changed: changed.filter((c) => written.has(c.id)), attacks };
    })
      .catch((e: unknown) => {
        if (e instanceof StaleAnswer) return null;
        throw e;
      });
    if (out === null) return { reported: 0, carried: 0, healthChanged: [], attacks: [], form: 'stale' };
    await this.publish(out.changed);
    await this.attacks?.published(out.attacks);
    return { reported: out.reported, carried: out.carried, healthChanged: out.changed.map((c) => c.id), attacks: out.attacks, form: byChange ? 'delta' : 'full' };
  }

  /**
   * One health change pushed on node `nodeId`'s events stream (docs/CONTRACTS.md "Events stream"): as a round
   * would write it (row, history at the agent's check time, `tunnel.health_changed`, then the bus), for a tunnel
   * of that node on the edge whose health differs. The change joins the node's batch before this returns
   * (push-batch.ts: a node's changes are written together, one transaction per batch, in the order handed over);
   * the promise settles once its batch committed. Returns whether it changed the tunnel.
   */
  pushHealth(nodeId: string, tunnelId: string, health: Health, checkedAt: Date): Promise<boolean> {
    return this.pushes.push(nodeId, { tunnelId, health, checkedAt });
  }

  /** Writes every pushed change still waiting in a batch (the gateway's stop). */
  drainPushes(): Promise<void> {
    return this.pushes.drain();
  }

  /**
   * One batch of node `nodeId`'s pushed changes (at most one per tunnel), in one transaction: the rows by one
   * statement, their history by one, their webhook events capped once. Idempotent by the update's own condition:
   * the pull that later reports the same health finds nothing to change.
   *
   * Both replicas hold an events stream to every node, so both push each change: the tunnel rows are taken `for
   * update skip locked`, and a row another transaction holds (the other replica writing the same change, or a
   * round of the node) is left to it rather than waited for; the second replica then finds the health already
   * set. Should the holder not set it (a round's older answer, or a rollback), the next pull of the node brings
   * the agent's health within an interval (docs/SCALE.md "What breaks first").
   */
  private async writePushed(nodeId: string, batch: PushedHealth[]): Promise<Set<string>> {
    const changed = await this.db.transaction(async (sql) => {
      const rows = await sql.query<{ id: string; status: TunnelStatus; previous: Health; health: Health }>(
        `with x as (select * from jsonb_to_recordset(?::jsonb) as x(id uuid, h text)),
              c as (select t.id, x.h, t.health as previous from tunnel t join x on x.id = t.id
                     where t.node_id = ? and t.health <> x.h and t.status in (${ON_EDGE.map(() => '?').join(', ')})
                       for update of t skip locked)
         update tunnel t set health = c.h from c where t.id = c.id returning t.id, t.status, c.previous, t.health`,
        [JSON.stringify(batch.map((b) => ({ id: b.tunnelId, h: b.health }))), nodeId, ...ON_EDGE],
      );
      const at = new Map(batch.map((b) => [b.tunnelId, b.checkedAt]));
      await recordHealthChanges(sql, rows.map((r) => ({ id: r.id, at: at.get(r.id)!, previous: r.previous, health: r.health })));
      await this.events.healthChangedAll(sql, rows.map((r) => r.id));
      return rows.map((r) => ({ id: r.id, status: r.status, health: r.health }));
    });
    await this.publish(changed);
    return new Set(changed.map((c) => c.id));
  }

  /** Node `nodeId` did not answer: each of its tunnels on the edge is 'unknown'. Returns those that changed. */
  async markUnknown(nodeId: string, at = new Date()): Promise<string[]> {
    const changed = await this.db.transaction(async (sql) => {
      // The health before the update, for the history: `returning` shows only the new row.
      const rows = await sql.query<{ id: string; status: TunnelStatus; previous: Health }>(
        `update tunnel t set health = 'unknown' from tunnel o
          where o.id = t.id and t.node_id = ? and t.health <> 'unknown' and t.status in (${ON_EDGE.map(() => '?').join(', ')}) returning t.id, t.status, o.health as previous`,
        [nodeId, ...ON_EDGE],
      );
      await recordHealthChanges(sql, rows.map((r) => ({ id: r.id, at, previous: r.previous, health: 'unknown' })));
      await this.events.healthChangedAll(sql, rows.map((r) => r.id));
      // Health set without the agent's word: the next answer must be the full list, which sets it back (a change
      // list would leave out every tunnel whose health did not change on the agent).
      await sql.query('delete from traffic.node_cursor where node_id = ?', [nodeId]);
      return rows.map((r) => ({ id: r.id, status: r.status, health: 'unknown' as const }));
    });
    await this.publish(changed);
    return changed.map((c) => c.id);
  }

  /**
   * The tunnels whose health changed (only those: the check time is in traffic.seen), and their history. Each row
   * changes only from the health the round read (compare and set): a change pushed on the events stream between
   * the round's read and this write was written, with its webhook, by that push, and is not written twice.
   * And a change from a report whose check (`checked`, by tunnel) is older than the tunnel's last up or down
   * written is not news: the agent answered the pull before the check it pushed since, which the round may have
   * read already (so the compare and set passes); writing it would undo the pushed change until the next round.
   * Only ups and downs are compared: they carry the agent's check times, an 'unknown' the gateway's own.
   * Returns the ids written.
   */
  private async writeHealth(sql: Pick<Sql, 'query'>, health: HealthChangeRecord[], checked: ReadonlyMap<string, string>): Promise<Set<string>> {
    if (health.length === 0) return new Set();
    const rows = await sql.query<{ id: string }>(
      `update tunnel t set health = x.h from jsonb_to_recordset(?::jsonb) as x(id uuid, h text, p text, ck timestamptz)
        where t.id = x.id and t.health = x.p
          and (x.ck is null or not exists (select 1 from traffic.tunnel_health_change c where c.tunnel_id = x.id and c.health <> 'unknown' and c.at > x.ck))
        returning t.id`,
      [JSON.stringify(health.map((x) => ({ id: x.id, h: x.health, p: x.previous, ck: checked.get(x.id) ?? null })))],
    );
    const written = new Set(rows.map((r) => r.id));
    await recordHealthChanges(sql, health.filter((x) => written.has(x.id)));
    // After the change, in its transaction (server/webhooks/events.ts): the event carries the new health.
    await this.events.healthChangedAll(sql, [...written]);
    return written;
  }

  private async publish(changed: { id: string; status: TunnelStatus; health: Health }[]): Promise<void> {
    for (const c of changed) await this.bus.publish(c.id, c.status, c.health);
  }
}
