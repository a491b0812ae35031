// Traffic storage at 10,000 tunnels (the most a node holds): how big a day of points is, and how long one
// collection round's ingest takes, on the real schema and code (server/health/ingest.ts, storage.ts).
//
// One node with TG_BENCH_TUNNELS tunnels (default 10,000) answers a `status` every 30 s of simulated
// time; the bench ingests TG_BENCH_MINUTES simulated minutes (default 60, 120 rounds) ending now and
// scales the measured growth of the `traffic` tables to 24 hours (the minute partition of a day holds 24
// such hours; the rollup then writes one hour row per tunnel and hour). Two loads:
//   - busy: every tunnel carries traffic every round (the worst case: a row per tunnel and minute);
//   - typical: TG_BENCH_ACTIVE (default 0.2) of the tunnels carry traffic in a round, the rest are idle
//     (no row: idle minutes are not stored).
// The ceiling, measured in the same run: a plain INSERT of the same minute rows (same JSON in, same
// columns and primary key) into an ordinary table, with nothing else of the ingest (no counters read,
// no upsert, no health, no baseline table): what any per-round write costs at least.
//
//   npm run bench:traffic          (a PostgreSQL: BENCH_DATABASE_URL or the local test cluster)
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { ensureLocalPostgres } from '../test/helpers/postgres.ts';
import { StatusIngest } from '../server/health/ingest.ts';
import { HOUR_MS, MINUTE_MS, TrafficStore } from '../server/health/storage.ts';
import { DROP_REASONS, type StatusResult } from '../common/tunnel-status.ts';
import { createBenchDatabase } from './lib/database.ts';
import { report } from './lib/report.ts';

const TUNNELS = Number(process.env.TG_BENCH_TUNNELS ?? 10_000);
const MINUTES = Number(process.env.TG_BENCH_MINUTES ?? 60);
const ACTIVE = Number(process.env.TG_BENCH_ACTIVE ?? 0.2);
const ROUND_MS = 30_000;

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};
const mb = (bytes: number) => +(bytes / 1024 / 1024).toFixed(1);

async function trafficBytes(raw: pg.Client): Promise<{ minute: number; hour: number; seen: number }> {
  const r = await raw.query<{ parent: string; bytes: string }>(
    `select p.relname as parent, coalesce(sum(pg_total_relation_size(c.oid)), 0)::text as bytes from pg_inherits i
       join pg_class c on c.oid = i.inhrelid join pg_class p on p.oid = i.inhparent join pg_namespace n on n.oid = p.relnamespace
      where n.nspname = 'traffic' group by 1`,
  );
  const by = Object.fromEntries(r.rows.map((x) => [x.parent, Number(x.bytes)]));
  const seen = await raw.query<{ b: string }>(`select pg_total_relation_size('traffic.seen')::text as b`);
  return { minute: by.minute ?? 0, hour: by.hour ?? 0, seen: Number(seen.rows[0]!.b) };
}

/** n_tup_upd / n_tup_hot_upd of the tunnel table and traffic.seen, once the counters stop moving (bounded). */
async function tableWrites(raw: pg.Client): Promise<Record<string, { upd: number; hot_upd: number }>> {
  const read = async () =>
    (await raw.query<{ t: string; upd: string; hot: string }>(
      `select schemaname || '.' || relname as t, n_tup_upd::text as upd, n_tup_hot_upd::text as hot from pg_stat_user_tables
        where (schemaname, relname) in (('public', 'tunnel'), ('traffic', 'seen')) order by 1`,
    )).rows;
  let last = JSON.stringify(await read());
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 200));
    const now = JSON.stringify(await read());
    if (now === last && i >= 5) break;
    last = now;
  }
  return Object.fromEntries((JSON.parse(last) as { t: string; upd: string; hot: string }[]).map((r) => [r.t, { upd: Number(r.upd), hot_upd: Number(r.hot) }]));
}
const stats: Record<string, { upd: number; hot_upd: number }>[] = [];

async function run(label: string, active: number, adminUrl: string) {
  const { admin, dbName, url, db } = await createBenchDatabase('tg_bench_traffic', adminUrl);
  const raw = new pg.Client({ connectionString: url });
  await raw.connect();
  try {
    // One account, one node, TUNNELS active tunnels on it (rows as purchases leave them).
    const account = randomUUID();
    const node = randomUUID();
    await raw.query(`insert into account (id, balance_usd) values ($1, 0)`, [account]);
    await raw.query(`insert into edge_node (id, name, public_ip, ssh_host, host_key) values ($1, 'bench', '192.0.2.1', '127.0.0.1', 'SHA256:bench')`, [node]);
    await raw.query(
      `insert into tunnel (id, account_id, node_id, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub)
       select gen_random_uuid(), $1, $2, '10.' || (i / 65536) || '.' || ((i / 256) % 256) || '.' || (i % 256), '8.8.8.8', 'tg-' || lpad(i::text, 10, '0'), i, i + 1, 'active', 1, 90
         from generate_series(1, $3::int) as i`,
      [account, node, TUNNELS],
    );
    const ids = (await raw.query<{ id: string }>('select id from tunnel order by inner_index')).rows.map((r) => r.id);
    const noop = { healthChangedAll: async () => {} };
    const bus = { publish: async () => {} };
    const store = new TrafficStore(db);
    const ingest = new StatusIngest(db, store, noop, bus);
    // Counters per tunnel, advanced by each round's traffic.
    const c = ids.map(() => ({ pi: 0, bi: 0, po: 0, bo: 0, d: 0 }));
    const start = Math.floor((Date.now() - MINUTES * MINUTE_MS) / HOUR_MS) * HOUR_MS;
    await raw.query('update traffic.rollup set done_through = $1', [new Date(start)]);
    await store.maintain(new Date(start));
    const before = await trafficBytes(raw);
    const rounds = (MINUTES * MINUTE_MS) / ROUND_MS;
    const roundMs: number[] = [];
    let carried = 0;
    const statusAt = (at: number): StatusResult => ({
      agent: { version: 'bench', uptime_s: 1, tunnels: ids.length },
      tunnels: ids.map((id, i) => {
        const k = c[i]!;
        if (Math.random() < active) {
          const p = 1 + Math.floor(Math.random() * 5000);
          k.pi += p;
          k.bi += p * 900;
          k.po += p;
          k.bo += p * 700;
          if (Math.random() < 0.05) k.d += 1;
        }
        return {
          id,
          health: 'up' as const,
          checked_at: new Date(at - 1000).toISOString(),
          counters: { packets_in: k.pi, bytes_in: k.bi, packets_out: k.po, bytes_out: k.bo, dropped: Object.fromEntries(DROP_REASONS.map((r, j) => [r, j === 0 ? k.d : 0])) as Record<(typeof DROP_REASONS)[number], number> },
        };
      }),
    });
    // Round 0 is every tunnel's first sighting (baseline), then the measured rounds.
    await ingest.ingestStatus(node, statusAt(start), new Date(start));
    // Which tunnel rows the measured rounds rewrite: health stays 'up', only the check time moves, so a
    // rewritten row is a write the round did not need (server/health/ingest.ts writes health changes only).
    await raw.query('create temp table tunnel_xmin as select id, xmin::text as x from tunnel');
    for (let r = 1; r <= rounds; r++) {
      const at = start + r * ROUND_MS - 1;
      const s = statusAt(at);
      const t0 = performance.now();
      const out = await ingest.ingestStatus(node, s, new Date(at));
      roundMs.push(performance.now() - t0);
      carried += out.carried;
    }
    const rewritten = Number(
      (await raw.query<{ n: string }>('select count(*)::text as n from tunnel t join tunnel_xmin m on m.id = t.id where t.xmin::text <> m.x')).rows[0]!.n,
    );
    const rolledThrough = await store.rollup(new Date(start + MINUTES * MINUTE_MS + 3 * MINUTE_MS));
    const after = await trafficBytes(raw);
    const minuteRows = Number((await raw.query<{ n: string }>('select count(*)::text as n from traffic.minute')).rows[0]!.n);
    const hourRows = Number((await raw.query<{ n: string }>('select count(*)::text as n from traffic.hour')).rows[0]!.n);

    // The ceiling: the same minute rows of one round, plainly inserted into an ordinary table.
    await raw.query(`create table plain_minute (tunnel_id uuid not null, t timestamptz not null, packets_in bigint not null, bytes_in bigint not null,
      packets_out bigint not null, bytes_out bigint not null, dropped bigint[] null, primary key (tunnel_id, t))`);
    const plainMs: number[] = [];
    const perRound = Math.round(ids.length * active);
    for (let r = 0; r < 20; r++) {
      const json = JSON.stringify(ids.slice(0, perRound).map((id) => ({ id, pi: 10, bi: 9000, po: 10, bo: 7000, d: null })));
      const t = new Date(start + r * MINUTE_MS).toISOString();
      const t0 = performance.now();
      await db.transaction((sql) =>
        sql.query(
          `insert into plain_minute select id, ?::timestamptz, pi, bi, po, bo, d from jsonb_to_recordset(?::jsonb) as x(id uuid, pi bigint, bi bigint, po bigint, bo bigint, d bigint[])`,
          [t, json],
        ),
      );
      plainMs.push(performance.now() - t0);
    }
    const grewMinute = after.minute - before.minute;
    const grewHour = after.hour - before.hour;
    const scale = (24 * 60) / MINUTES;
    const round = pct(roundMs, 50);
    const plain = pct(plainMs, 50);
    return {
      load: label,
      tunnels: ids.length,
      active_share: active,
      simulated_minutes: MINUTES,
      rounds,
      minute_rows: minuteRows,
      minute_rows_per_tunnel_hour: +(minuteRows / ids.length / (MINUTES / 60)).toFixed(1),
      hour_rows: hourRows,
      rolled_through: rolledThrough.toISOString(),
      minute_mb_per_day: mb(grewMinute * scale),
      hour_mb_per_day: mb(grewHour * scale),
      minute_mb_kept_48h: mb(grewMinute * scale * 2),
      hour_mb_kept_90d: mb(grewHour * scale * 90),
      baseline_table_mb: mb(after.seen),
      tunnel_rows_rewritten_by_measured_rounds: rewritten,
      round_ingest_p50_ms: +round.toFixed(1),
      round_ingest_p90_ms: +pct(roundMs, 90).toFixed(1),
      plain_insert_same_rows_p50_ms: +plain.toFixed(1),
      ingest_over_plain_insert: +(round / plain).toFixed(2),
    };
  } finally {
    await db.close();
    // Row writes per table from PostgreSQL's own counters (flushed by the pool's backends as they exit).
    stats.push(await tableWrites(raw));
    await raw.end();
    await admin.query(`drop database ${dbName} with (force)`);
    await admin.end();
  }
}

async function main(): Promise<void> {
  const adminUrl = process.env.BENCH_DATABASE_URL ?? ensureLocalPostgres();
  const results = [await run('busy (every tunnel carries traffic every round)', 1, adminUrl), await run(`typical (${ACTIVE * 100}% of tunnels carry traffic in a round)`, ACTIVE, adminUrl)];
  // Row updates over the whole run (round 0 included: its first sighting sets every tunnel's health).
  const writes = results.map((r, i) => ({ load: r.load, rounds_after_round_0: r.rounds, table_updates: stats[i] }));
  console.log(JSON.stringify({ bench: 'traffic', results, writes }, null, 2));
  // No ratio target for collection (it is listed only in the table): the time of one round's ingest against a plain insert of its rows.
  for (const r of results) {
    report({ scenario: `collection round ingest p50, ${r.load.split(' ')[0]}, ${r.tunnels} tunnels`, rate: r.round_ingest_p50_ms, unit: 'ms', ceiling: 'plain INSERT of the same rows (p50 ms)', ceiling_rate: r.plain_insert_same_rows_p50_ms, ratio: r.ingest_over_plain_insert, target: null, pass: null });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
