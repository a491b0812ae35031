// Where traffic points live and how they stay cheap (docs/CONTRACTS.md "Health and
// traffic"; tables in migration Migration20261127100000_health_traffic):
//   - 1-minute points in traffic.minute, range-partitioned by day (UTC), kept 48 hours;
//   - 1-hour points in traffic.hour, partitioned by month (UTC), kept 90 days;
//   - a minute with no traffic has no row (the reader fills zeros), so an idle tunnel costs nothing;
//   - a minute's row is inserted once, complete (ingest.ts buffers the latest minute in traffic.seen),
//     never updated, so the partitions hold no dead rows;
//   - partitions are created ahead (today and the next two days, this month and the next) and dropped
//     whole once every point they hold is past retention: no DELETE, no bloat, no vacuum debt;
//   - the hourly rollup sums an hour's minutes into traffic.hour once that hour is over; how far it went
//     is traffic.rollup.done_through. A round that lands in an hour already rolled up (late) adds to the
//     hour too (ingest.ts), under the rollup row's share lock, so the hours stay exact.
//   - the health history (history.ts) is kept as long as the hours; maintain() trims it too, and purges the
//     attacks that ended longer ago (server/attacks/store.ts).
// Every replica may run maintain(); partition DDL races are harmless (already there / already gone).
import type { Database, Sql } from '../db/database.ts';
import { DROP_REASONS, type DropReason } from '../../common/tunnel-status.ts';
import { trimHealthChanges } from './history.ts';
import { purgeAttacks } from '../attacks/store.ts';

export const MINUTE_MS = 60_000;
export const HOUR_MS = 3_600_000;
/** DESIGN 3.9: 1-minute points 48 hours, 1-hour points 90 days. */
const MINUTE_RETENTION_MS = 48 * HOUR_MS;
const HOUR_RETENTION_MS = 90 * 24 * HOUR_MS;
/** An hour is rolled up this long after it ended, so a round that was under way at its end is in. */
const ROLLUP_LAG_MS = 2 * MINUTE_MS;

export type Step = '1m' | '1h';
export const STEPS: readonly Step[] = ['1m', '1h'];
export const STEP_MS: Record<Step, number> = { '1m': MINUTE_MS, '1h': HOUR_MS };
export const RETENTION_MS: Record<Step, number> = { '1m': MINUTE_RETENTION_MS, '1h': HOUR_RETENTION_MS };

/** One point as the API shows it (docs/CONTRACTS.md "Health and traffic"); `in` is toward the origin. */
export interface TrafficPoint {
  t: string;
  bytes_in: number;
  bytes_out: number;
  packets_in: number;
  packets_out: number;
  dropped: Record<DropReason, number>;
}

type Q = Pick<Sql, 'query'>;

const pad = (n: number) => String(n).padStart(2, '0');
const dayName = (d: Date) => `minute_${d.getUTCFullYear()}${pad(d.getUTCMonth() + 1)}${pad(d.getUTCDate())}`;
const monthName = (d: Date) => `hour_${d.getUTCFullYear()}${pad(d.getUTCMonth() + 1)}`;
const dayStart = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()));
const monthStart = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));
const nextMonth = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));

/** The partition of `table` holding time `at`: its name and bounds. */
function partitionOf(table: 'minute' | 'hour', at: Date): { name: string; from: Date; to: Date } {
  if (table === 'minute') {
    const from = dayStart(at);
    return { name: dayName(from), from, to: new Date(from.getTime() + 24 * HOUR_MS) };
  }
  const from = monthStart(at);
  return { name: monthName(from), from, to: nextMonth(from) };
}

function dropsOf(v: unknown): Record<DropReason, number> {
  const arr = Array.isArray(v) ? v : [];
  return Object.fromEntries(DROP_REASONS.map((r, i) => [r, Number(arr[i] ?? 0)])) as Record<DropReason, number>;
}

const isDuplicate = (e: unknown) => ['42P07', '23505', '42710'].includes((e as { code?: string }).code ?? '');
const isMissing = (e: unknown) => ['42P01'].includes((e as { code?: string }).code ?? '');

export class TrafficStore {
  /** Partitions this process knows exist, so a round creates none after the first. */
  private readonly known = new Set<string>();

  constructor(private readonly db: Database) {}

  /** Creates the partition of `table` for `at` unless it is known to exist. */
  async ensurePartition(table: 'minute' | 'hour', at: Date): Promise<void> {
    const p = partitionOf(table, at);
    if (this.known.has(p.name)) return;
    try {
      await this.db.query(`create table if not exists traffic.${p.name} partition of traffic.${table} for values from ('${p.from.toISOString()}') to ('${p.to.toISOString()}')`);
    } catch (e) {
      // Another replica created it between our check and ours.
      if (!isDuplicate(e)) throw e;
    }
    this.known.add(p.name);
  }

  /** The partitions a round at `at` may write: its minute's day and its hour's month. */
  async ensureFor(at: Date): Promise<void> {
    await this.ensurePartition('minute', at);
    await this.ensurePartition('hour', at);
  }

  /**
   * Partitions ahead (today and two more days, this month and the next), whole partitions past
   * retention dropped, the hours that are over rolled up, deleted tunnels' baselines forgotten, health
   * changes past retention deleted (history.ts). Returns what was dropped and trimmed and how far the
   * rollup went.
   */
  async maintain(now = new Date()): Promise<{ dropped: string[]; rolledThrough: Date; healthChangesTrimmed: number; attacksPurged: number }> {
    for (let d = 0; d < 3; d++) await this.ensurePartition('minute', new Date(now.getTime() + d * 24 * HOUR_MS));
    await this.ensurePartition('hour', now);
    await this.ensurePartition('hour', nextMonth(now));
    const rolledThrough = await this.rollup(now);
    const dropped = await this.dropExpired(now);
    // The baselines of deleted tunnels (their points age out with their partitions). Their last check
    // time goes back to the tunnel row, once per tunnel, so `health_checked_at` stays what it was
    // (server/domain/tunnels/rows.ts HEALTH_CHECKED_AT_SQL; docs/CONTRACTS.md "Health and traffic").
    await this.db.query(
      `with gone as (delete from traffic.seen s where not exists (select 1 from tunnel t where t.id = s.tunnel_id and t.status <> 'deleted') returning tunnel_id, checked_at)
       update tunnel t set health_checked_at = gone.checked_at from gone where t.id = gone.tunnel_id and gone.checked_at is not null`,
    );
    const healthChangesTrimmed = await trimHealthChanges(this.db, now);
    // Attacks that ended more than 90 days ago (server/attacks/store.ts; docs/CONTRACTS.md "Attacks").
    const attacksPurged = await purgeAttacks(this.db, now);
    return { dropped, rolledThrough, healthChangesTrimmed, attacksPurged };
  }

  /** Drops every partition whose upper bound is older than its table's retention. */
  async dropExpired(now = new Date()): Promise<string[]> {
    const parts = await this.db.query<{ name: string; parent: string }>(
      `select c.relname as name, p.relname as parent from pg_inherits i join pg_class c on c.oid = i.inhrelid join pg_class p on p.oid = i.inhparent
        join pg_namespace n on n.oid = p.relnamespace where n.nspname = 'traffic' and p.relname in ('minute', 'hour')`,
    );
    const dropped: string[] = [];
    for (const { name, parent } of parts) {
      const m = /^(minute|hour)_(\d{4})(\d{2})(\d{2})?$/.exec(name);
      if (!m) continue;
      const start = new Date(Date.UTC(Number(m[2]), Number(m[3]) - 1, m[4] ? Number(m[4]) : 1));
      const end = parent === 'minute' ? new Date(start.getTime() + 24 * HOUR_MS) : nextMonth(start);
      const retention = parent === 'minute' ? MINUTE_RETENTION_MS : HOUR_RETENTION_MS;
      if (end.getTime() > now.getTime() - retention) continue;
      try {
        await this.db.query(`drop table if exists traffic.${name}`);
      } catch (e) {
        if (!isMissing(e)) throw e;
      }
      this.known.delete(name);
      dropped.push(name);
    }
    return dropped;
  }

  /**
   * Sums the minutes of every hour that ended at least ROLLUP_LAG_MS ago and is not rolled up yet into
   * traffic.hour, and moves done_through; one transaction, holding the rollup row (ingest.ts takes it
   * shared, so no round writes a minute into an hour while it is being rolled up).
   */
  async rollup(now = new Date()): Promise<Date> {
    const target = new Date(Math.floor((now.getTime() - ROLLUP_LAG_MS) / HOUR_MS) * HOUR_MS);
    return this.db.transaction(async (sql) => {
      const [r] = await sql.query<{ done_through: Date | string }>('select done_through from traffic.rollup where id = 1 for update');
      const done = new Date(r!.done_through);
      if (target <= done) return done;
      // Minutes still buffered in traffic.seen (ingest.ts) that fall before the target are written first.
      await sql.query(
        `insert into traffic.minute (tunnel_id, t, packets_in, bytes_in, packets_out, bytes_out, dropped)
         select tunnel_id, pend_t, pend_pi, pend_bi, pend_po, pend_bo, pend_d from traffic.seen where pend_t < ?
         on conflict (tunnel_id, t) do update set packets_in = minute.packets_in + excluded.packets_in, bytes_in = minute.bytes_in + excluded.bytes_in,
           packets_out = minute.packets_out + excluded.packets_out, bytes_out = minute.bytes_out + excluded.bytes_out,
           dropped = traffic.add_drops(minute.dropped, excluded.dropped)`,
        [target.toISOString()],
      );
      await sql.query(`update traffic.seen set pend_t = null, pend_pi = 0, pend_bi = 0, pend_po = 0, pend_bo = 0, pend_d = null where pend_t < ?`, [target.toISOString()]);
      await sql.query(
        `insert into traffic.hour (tunnel_id, t, packets_in, bytes_in, packets_out, bytes_out, dropped)
         select tunnel_id, date_trunc('hour', t), sum(packets_in), sum(bytes_in), sum(packets_out), sum(bytes_out), traffic.sum_drops(dropped)
           from traffic.minute where t >= ? and t < ? group by 1, 2
         on conflict (tunnel_id, t) do update set packets_in = hour.packets_in + excluded.packets_in, bytes_in = hour.bytes_in + excluded.bytes_in,
           packets_out = hour.packets_out + excluded.packets_out, bytes_out = hour.bytes_out + excluded.bytes_out,
           dropped = traffic.add_drops(hour.dropped, excluded.dropped)`,
        [done.toISOString(), target.toISOString()],
      );
      await sql.query('update traffic.rollup set done_through = ? where id = 1', [target.toISOString()]);
      return target;
    });
  }

  /**
   * The points of one tunnel from `from` (rounded down to the step) up to `to` (excluded), one per
   * step, zeros where nothing was carried, oldest first. Hours not rolled up yet are summed from the
   * minutes, so the current hour shows too.
   */
  async points(q: Q, tunnelId: string, from: Date, to: Date, step: Step): Promise<TrafficPoint[]> {
    const ms = STEP_MS[step];
    const start = new Date(Math.floor(from.getTime() / ms) * ms);
    if (to <= start) return [];
    const last = new Date(Math.ceil(to.getTime() / ms) * ms - ms);
    // The minutes: those written, and the tunnel's latest one still buffered in traffic.seen (ingest.ts).
    const minutes = `select t, packets_in, bytes_in, packets_out, bytes_out, dropped from traffic.minute where tunnel_id = ?::uuid
        union all select pend_t, pend_pi, pend_bi, pend_po, pend_bo, pend_d from traffic.seen where tunnel_id = ?::uuid and pend_t is not null`;
    const source =
      step === '1m'
        ? `select * from (${minutes}) m where t >= ?::timestamptz and t <= ?::timestamptz`
        : `select t, packets_in, bytes_in, packets_out, bytes_out, dropped from traffic.hour
             where tunnel_id = ?::uuid and t >= ?::timestamptz and t <= ?::timestamptz and t < (select done_through from traffic.rollup where id = 1)
           union all
           select date_trunc('hour', t), sum(packets_in), sum(bytes_in), sum(packets_out), sum(bytes_out), traffic.sum_drops(dropped) from (${minutes}) m
             where t >= greatest(?::timestamptz, (select done_through from traffic.rollup where id = 1)) and t < ?::timestamptz + interval '1 hour'
             group by 1`;
    const params =
      step === '1m'
        ? [tunnelId, tunnelId, start.toISOString(), last.toISOString()]
        : [tunnelId, start.toISOString(), last.toISOString(), tunnelId, tunnelId, start.toISOString(), last.toISOString()];
    const rows = await q.query<{ t: string; packets_in: string; bytes_in: string; packets_out: string; bytes_out: string; dropped: unknown }>(
      `with s as (${source})
       select to_char(g.t at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') as t,
              coalesce(sum(s.packets_in), 0)::text as packets_in, coalesce(sum(s.bytes_in), 0)::text as bytes_in,
              coalesce(sum(s.packets_out), 0)::text as packets_out, coalesce(sum(s.bytes_out), 0)::text as bytes_out,
              traffic.sum_drops(s.dropped) as dropped
         from generate_series(?::timestamptz, ?::timestamptz, ?::interval) as g(t) left join s on s.t = g.t
        group by g.t order by g.t`,
      [...params, start.toISOString(), last.toISOString(), step === '1m' ? '1 minute' : '1 hour'],
    );
    return rows.map((r) => ({
      t: r.t,
      bytes_in: Number(r.bytes_in),
      bytes_out: Number(r.bytes_out),
      packets_in: Number(r.packets_in),
      packets_out: Number(r.packets_out),
      dropped: dropsOf(r.dropped),
    }));
  }
}
