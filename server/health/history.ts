// A tunnel's health history (docs/CONTRACTS.md "Health and traffic"; table in migration
// Migration20261128220000_tunnel_health_change): what the collection round writes when `health`
// changes (ingest.ts, in the transaction of the change, beside its `tunnel.health_changed` event), what
// the API reads back for the traffic chart's time axis, and the trim at retention (storage.ts maintain).
import type { Sql } from '../db/database.ts';
import type { Health } from '../../common/tunnel-status.ts';

type Q = Pick<Sql, 'query'>;

/** Kept as long as the hourly points (DESIGN 3.9: 90 days), so the chart has marks wherever it has traffic. */
export const HEALTH_CHANGE_RETENTION_MS = 90 * 24 * 3_600_000;

/** One change as the API shows it; `health` and `previous` as REST spells them. */
export interface HealthChange {
  /** ISO 8601, UTC, milliseconds. */
  at: string;
  previous: Health;
  health: Health;
}

/** One change to record: tunnel `id` went from `previous` to `health` at `at`. */
export interface HealthChangeRecord {
  id: string;
  at: Date;
  previous: Health;
  health: Health;
}

/**
 * Records changes, in the caller's transaction. `at` never goes before the tunnel's last recorded
 * change: an up/down takes the agent's check time, which can be older than an 'unknown' the gateway
 * recorded at a round in between (the agent checked before the node went silent and not since), and the
 * history must read in the order it happened, each change's `previous` the one before it.
 */
export async function recordHealthChanges(sql: Q, changes: readonly HealthChangeRecord[]): Promise<void> {
  if (changes.length === 0) return;
  // One statement whatever the number of tunnels: the rows travel as one JSON document (a round
  // changes a tunnel once at most, so the rows of one statement never order each other).
  await sql.query(
    `insert into traffic.tunnel_health_change (tunnel_id, at, previous, health)
     select x.id, greatest(x.at, (select max(c.at) from traffic.tunnel_health_change c where c.tunnel_id = x.id)), x.p, x.h
       from jsonb_to_recordset(?::jsonb) as x(id uuid, at timestamptz, p text, h text)`,
    [JSON.stringify(changes.map((c) => ({ id: c.id, at: c.at.toISOString(), p: c.previous, h: c.health })))],
  );
}

/** The changes of tunnel `tunnelId` with `from` <= at < `to`, oldest first, at most `limit` (the oldest). */
export async function readHealthChanges(q: Q, tunnelId: string, from: Date, to: Date, limit: number): Promise<HealthChange[]> {
  // Ordered by the column, not the text of the same name, so the index gives the order.
  return q.query<HealthChange>(
    `select to_char(c.at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as at, c.previous, c.health
       from traffic.tunnel_health_change c where c.tunnel_id = ?::uuid and c.at >= ?::timestamptz and c.at < ?::timestamptz
      order by c.at, c.seq limit ?`,
    [tunnelId, from.toISOString(), to.toISOString(), limit],
  );
}

/** Deletes the changes past retention; returns how many. */
export async function trimHealthChanges(q: Q, now: Date): Promise<number> {
  const rows = await q.query<{ n: string }>(
    `with gone as (delete from traffic.tunnel_health_change where at < ?::timestamptz returning 1) select count(*)::text as n from gone`,
    [new Date(now.getTime() - HEALTH_CHANGE_RETENTION_MS).toISOString()],
  );
  return Number(rows[0]?.n ?? 0);
}
