// Origin changes are limited (docs/CONTRACTS.md "Tunnel settings"): at most ORIGIN_CHANGES_PER_HOUR changes of
// one tunnel's origin_ip in any hour (a sliding window), beyond that 429 rate_limited with Retry-After. A new
// origin gets no traffic before it answered the activate probe (spec.ts FORWARDING_SQL), but each change still
// re-points the GRE link and sends probes there: the limit keeps one tunnel from being swung at address after
// address. Counted in the database under the tunnel's row lock (update.ts store()), so concurrent PATCHes across
// replicas are counted one after another and never get past it together; the clock is injected (tests).
import type { Sql } from '../../db/database.ts';
import { ApiError } from '../errors.ts';

export const ORIGIN_CHANGES_PER_HOUR = 10;
const WINDOW_SECONDS = 3600;

/**
 * Records a change of tunnel `tunnelId`'s origin at `nowMs`, or throws rate_limited with Retry-After: the
 * seconds until the oldest change in the window leaves it. The caller holds the tunnel's row lock, and its
 * transaction commits or rolls back the record with the change itself.
 */
export async function recordOriginChange(sql: Pick<Sql, 'query'>, tunnelId: string, nowMs: number): Promise<void> {
  const now = new Date(nowMs).toISOString();
  // What left the window is of no use any more: the table holds at most an hour of changes per tunnel.
  await sql.query(`delete from tunnel_origin_change where tunnel_id = ? and changed_at <= ?::timestamptz - make_interval(secs => ${WINDOW_SECONDS})`, [tunnelId, now]);
  const [w] = await sql.query<{ n: number; wait: number | null }>(
    `select count(*)::int as n, ceil(extract(epoch from min(changed_at) + make_interval(secs => ${WINDOW_SECONDS}) - ?::timestamptz))::int as wait
       from tunnel_origin_change where tunnel_id = ?`,
    [now, tunnelId],
  );
  if (w!.n >= ORIGIN_CHANGES_PER_HOUR) {
    const wait = Math.max(1, w!.wait ?? 1);
    throw new ApiError(
      'rate_limited',
      `Tunnel ${tunnelId}: its origin_ip changed ${w!.n} times within the last hour, the most allowed (${ORIGIN_CHANGES_PER_HOUR}); retry in ${wait} s.`,
      { 'Retry-After': String(wait) },
    );
  }
  await sql.query('insert into tunnel_origin_change (tunnel_id, changed_at) values (?, ?::timestamptz)', [tunnelId, now]);
}
