// Health and traffic (docs/CONTRACTS.md "Health and traffic"). The tunnel's
// `health` and `health_checked_at` are entity columns (server/db/entities.ts). Traffic lives in its own
// schema, `traffic`, outside the ORM's view, because it is managed with PostgreSQL's own tools rather
// than as entities: the per-minute and per-hour points are range-partitioned by time, partitions are
// created ahead and dropped whole at retention (server/health/storage.ts), never deleted row by row.
//   traffic.seen    the last counters seen per tunnel (what the next round's deltas are taken against)
//                   and the deltas of its latest minute, not written to traffic.minute yet
//   traffic.minute  1-minute points (kept 48 h), one row per tunnel and minute that carried traffic
//   traffic.hour    1-hour points (kept 90 days), rolled up from the minutes once an hour is over
//   traffic.rollup  how far the minutes were rolled up (one row)
//   traffic.node_poll  each node's last status round: when, and whether it answered (the metric)
// `dropped` is a bigint[] in the order of common/tunnel-status.ts DROP_REASONS, null when nothing was
// dropped (most rows), so an idle counter costs one bit of the null bitmap.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261127100000_health_traffic extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table "tunnel" add "health" text not null default 'unknown', add "health_checked_at" timestamptz null;`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_health_check" check ("health" in ('up', 'down', 'unknown'));`);
    this.addSql(`create schema if not exists traffic;`);
    // pend_*: the deltas of the tunnel's latest minute, added up here (the row is rewritten every round
    // anyway) and written to traffic.minute once, when a round of a later minute comes or the rollup needs
    // it: one insert per tunnel and minute instead of an insert and an update. Half-empty pages
    // (fillfactor 50) let every round's rewrite stay on its page (HOT), so the table does not bloat.
    this.addSql(
      `create table traffic.seen (tunnel_id uuid primary key, packets_in bigint not null, bytes_in bigint not null, packets_out bigint not null, bytes_out bigint not null, dropped bigint[] not null, seen_at timestamptz not null,
        pend_t timestamptz null, pend_pi bigint not null default 0, pend_bi bigint not null default 0, pend_po bigint not null default 0, pend_bo bigint not null default 0, pend_d bigint[] null) with (fillfactor = 50);`,
    );
    for (const t of ['minute', 'hour']) {
      this.addSql(
        `create table traffic.${t} (tunnel_id uuid not null, t timestamptz not null, packets_in bigint not null, bytes_in bigint not null, packets_out bigint not null, bytes_out bigint not null, dropped bigint[] null, primary key (tunnel_id, t)) partition by range (t);`,
      );
    }
    this.addSql(`create table traffic.rollup (id int primary key default 1 check (id = 1), done_through timestamptz not null);`);
    this.addSql(`insert into traffic.rollup (id, done_through) values (1, date_trunc('hour', now()));`);
    this.addSql(`create table traffic.node_poll (node_id uuid primary key, polled_at timestamptz not null, reachable boolean not null, tunnels int not null default 0);`);
    // Element-wise sum of two drop arrays (null = all zero), and the aggregate over it for the rollup.
    this.addSql(`create function traffic.add_drops(a bigint[], b bigint[]) returns bigint[] language sql immutable as $$
      select case when a is null then b when b is null then a
        else array(select coalesce(x, 0) + coalesce(y, 0) from unnest(a, b) as u(x, y)) end $$;`);
    this.addSql(`create aggregate traffic.sum_drops(bigint[]) (sfunc = traffic.add_drops, stype = bigint[]);`);
  }
}
