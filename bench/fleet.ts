// The fleet simulator (docs/SCALE.md): N edges speaking the real agent's protocol end to end against two real
// gateway replicas on one PostgreSQL, while a load of purchases, provisions, settings changes and deletes runs.
//
// - Edges: the agent's own code (ssh2 server, jose job verification, replay cache, status op, events stream;
//   bench/lib/fleet-edges.ts) over a DATAPLANE STAND-IN (bench/lib/fleet-standin-dataplane.ts: no kernel work),
//   TG_FLEET_EDGES_PER_PROCESS of them per Node process, each on its own loopback port with its own host key
//   and state directory. Each node is registered as `node add` does it (server/domain/nodes.ts addNode: pool,
//   host key pinned, SSH host and port), with a pool of its own, so purchases spread over the nodes (a purchase
//   takes the free IP of lowest position across all nodes).
// - The fleet's standing tunnels (TG_FLEET_TUNNELS per node) are written straight into a fresh database
//   (tunnel rows `provisioned` with their protected IPs taken, no ledger rows: a bulk seed, not purchases; the
//   purchases measured are the load's) and reach the edges through the gateways' own reconcile on connect.
// - Gateways: `server/main.ts` twice (DATABASE_URL on the local PostgreSQL, a fresh database per size), each
//   with the edge worker, status collection (EDGE_STATUS_SECONDS), traffic ingest, reconcile loop and webhook
//   sender; a timing probe (bench/lib/fleet-probe.ts, loaded with --import) reads the collector's rounds and the
//   ingest's times without changing them.
// - Load: TG_FLEET_CLIENTS loops over REST with a svc_ write key, for TG_FLEET_SECONDS: buy, provision, change
//   settings (PATCH ports), delete; a webhook endpoint of the account counts deliveries.
//
// Figures per size: job latency p50/p99 from the API call to the agent's answer (the stand-in's answer time at the
// edge, epoch ms on this host), status round time, ingest time per round, PostgreSQL backends' CPU (from /proc
// of this database's backends), rows written per second (pg_stat_database deltas) against pgbench's TPC-B rows
// per second in the same run, gateway CPU and RSS per replica, webhooks per second.
//
//   npm run bench:fleet                                   20 and 100 nodes x 100 tunnels, 60 s of load each
//   TG_FLEET_NODES=300,1000 TG_FLEET_TUNNELS=100 npm run bench:fleet
//   TG_FLEET_SECONDS, TG_FLEET_CLIENTS (4), TG_FLEET_STATUS_SECONDS (10), TG_FLEET_RECONCILE_SECONDS (30),
//   TG_FLEET_BUSY (share of tunnels carrying traffic, 0.1), TG_FLEET_EDGES_PER_PROCESS (50), TG_FLEET_PGBENCH=0 (skip
//   the ceiling), TG_FLEET_WEBHOOK=0 (no webhook on the account), TG_FLEET_JSON=file (the figures as JSON, for the smoke test)
import { type ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { addNode } from '../server/domain/nodes.ts';
import { loadSecrets } from '../server/secrets.ts';
import { createUser } from '../server/domain/accounts.ts';
import { createApiKey } from '../server/auth/api-keys.ts';
import { ensureLocalPostgres } from '../test/helpers/postgres.ts';
import { createBenchDatabase } from './lib/database.ts';
import { cpuMs, cpuSinceMs, cpuSnapshot } from './lib/cpu.ts';
import { report } from './lib/report.ts';
import { EdgeAnswers, startEdgeProcess } from './lib/fleet-edge-processes.ts';
import { rssBytes, startGateway, STOP_BOUND_MS, webhookCounter, type Gateway } from './lib/fleet-gateways.ts';
import { apiOn, runLoad } from './lib/fleet-load.ts';
import { backendPids, pgbenchRowsPerSecond, writesOf } from './lib/fleet-postgres.ts';
import { registerNodes, seedTunnels, type FleetNode } from './lib/fleet-seed.ts';

const num = (name: string, dflt: number): number => {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got ${JSON.stringify(v)}`);
  return n;
};
const SIZES = (process.env.TG_FLEET_NODES ?? '20,100').split(',').map((s) => Number(s.trim())).filter((n) => Number.isInteger(n) && n > 0);
const TUNNELS = num('TG_FLEET_TUNNELS', 100);
const SECONDS = num('TG_FLEET_SECONDS', 60);
const CLIENTS = Math.max(1, num('TG_FLEET_CLIENTS', 4));
const STATUS_S = Math.max(1, num('TG_FLEET_STATUS_SECONDS', 10));
const RECONCILE_S = Math.max(10, num('TG_FLEET_RECONCILE_SECONDS', 30));
/** A directory for each gateway's own log (its stdout, JSON lines), kept after the run; default none. */
const LOG_DIR = process.env.TG_FLEET_LOG_DIR;
const BUSY = Math.min(1, num('TG_FLEET_BUSY', 0.1));
const PER_PROCESS = Math.max(1, num('TG_FLEET_EDGES_PER_PROCESS', 50));
const WITH_PGBENCH = process.env.TG_FLEET_PGBENCH !== '0';
/** TG_FLEET_WEBHOOK=0: no webhook on the account (to tell the webhook outbox's share of the cost from the rest). */
const WITH_WEBHOOK = process.env.TG_FLEET_WEBHOOK !== '0';
/** Bounds against a stuck run (a hang fails the bench, naming what it waited for), never expectations. */
const CONVERGE_BOUND_MS = num('TG_FLEET_CONVERGE_BOUND_S', 600) * 1000;

const pct = (xs: readonly number[], p: number): number => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};
const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));


// ---------------------------------------------------------------- one size

export interface FleetFigures {
  nodes: number;
  tunnels_per_node: number;
  edge_processes: number;
  converge_s: number;
  load_s: number;
  purchases: number;
  jobs: number;
  unanswered: number;
  refused: Record<string, number>;
  job_ms: { p50: number; p99: number; n: number };
  job_ms_by_kind: Record<string, { p50: number; p99: number; n: number }>;
  status_round_ms: { p50: number; max: number; n: number } | null;
  status_ops: number;
  ingest_per_node_ms: { p50: number; p99: number; n: number } | null;
  ingest_per_round_ms: number | null;
  pg_cpu_pct: number;
  rows_written_per_s: number;
  pgbench_rows_per_s: number | null;
  gateways: { cpu_pct: number; rss_mb: number }[];
  webhooks_per_s: number;
  webhooks: number;
  edge_rss_mb: number;
  probes_missing: string[];
  /** The host's 1-minute load average at the start and end of the load: this 2-core host is shared. */
  load1: [number, number];
  /** Busy backends of this database by what they waited on (wait_event_type:wait_event, or cpu), summed over 1 s samples. */
  pg_waits: Record<string, number>;
}
const loadAvg = (): number => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

async function runSize(n: number, adminUrl: string, pgbenchRows: number | null): Promise<FleetFigures> {
  const dirs: string[] = [];
  const edgeProcs: ChildProcess[] = [];
  const gateways: Gateway[] = [];
  const b = await createBenchDatabase('tg_bench_fleet', adminUrl);
  const raw = new pg.Client({ connectionString: b.url });
  await raw.connect();
  const hooks = await webhookCounter();
  try {
    const { secrets } = await loadSecrets(b.db, {});
    const user = await createUser(b.db, { email: 'fleet@example.test', name: 'Fleet', password: 'fleet bench password', balanceUsd: '100000000' });
    const key = (await createApiKey(b.db, user.account_id, user.user_id, 'write')).key;
    // Room on each node for its standing tunnels and its share of the purchases (a few a second for the run).
    const perNodePool = TUNNELS + Math.ceil((SECONDS * CLIENTS * 4) / n) + 4;
    const t0 = Date.now();
    const nodes = await registerNodes(b, n, perNodePool, dirs);
    await seedTunnels(raw, user.account_id, nodes, TUNNELS);
    console.error(`  ${n} nodes registered, ${n * TUNNELS} standing tunnels written (${((Date.now() - t0) / 1000).toFixed(1)} s)`);

    const answers = new EdgeAnswers();
    const keys = { authorizedKey: secrets.gatewaySshKey.publicKey, jobKey: JSON.stringify(secrets.jobSigningKey.publicJwk), busyShare: BUSY, healthIntervalS: 30 };
    const groups: FleetNode[][] = [];
    for (let i = 0; i < nodes.length; i += PER_PROCESS) groups.push(nodes.slice(i, i + PER_PROCESS));
    const t1 = Date.now();
    for (const [g, group] of groups.entries()) {
      const file = join(dirs[0]!, `edges-${g}.json`);
      writeFileSync(file, JSON.stringify({ ...keys, edges: group.map((x) => ({ nodeId: x.id, port: x.port, stateDir: x.stateDir, edgeIp: x.edgeIp })) }));
      edgeProcs.push(await startEdgeProcess(file, answers));
    }
    console.error(`  ${n} edges listening in ${edgeProcs.length} processes (${((Date.now() - t1) / 1000).toFixed(1)} s)`);

    const env = {
      DATABASE_URL: b.url,
      HOST: '127.0.0.1',
      PORT: '0',
      LOG_LEVEL: 'info',
      ACCESS_LOG: 'false',
      RATE_LIMIT_PER_MINUTE: '100000000',
      RATE_LIMIT_BURST: '100000000',
      EDGE_WORKER: 'true',
      WEBHOOK_WORKER: 'true',
      EDGE_WAIT_MS: '10000',
      EDGE_STATUS_SECONDS: String(STATUS_S),
      EDGE_RECONCILE_SECONDS: String(RECONCILE_S),
      ALLOW_PRIVATE_WEBHOOKS: 'true',
    };
    const t2 = Date.now();
    if (LOG_DIR) mkdirSync(LOG_DIR, { recursive: true });
    const logOf = (r: string) => (LOG_DIR ? join(LOG_DIR, `gateway-${n}-${r}.log`) : undefined);
    gateways.push(await startGateway(env, logOf('a')), await startGateway(env, logOf('b')));
    const apis = gateways.map((g) => apiOn(g.url, key));
    if (WITH_WEBHOOK) {
      const hook = await apis[0]!('POST', '/api/webhooks', { url: hooks.url });
      if (hook.status !== 201) throw new Error(`webhook create answered ${hook.status}: ${JSON.stringify(hook.body)}`);
    }
    // Converged: every node got its reconcile (the gateways reconcile a node when its connection comes up).
    while (answers.reconciled.size < n) {
      if (Date.now() - t2 > CONVERGE_BOUND_MS) throw new Error(`only ${answers.reconciled.size} of ${n} nodes reconciled within ${CONVERGE_BOUND_MS / 1000} s`);
      await sleep(250);
    }
    const convergeS = (Date.now() - t2) / 1000;
    console.error(`  gateways up, every node reconciled (${convergeS.toFixed(1)} s); load for ${SECONDS} s with ${CLIENTS} clients`);

    // The measured window: the load's seconds and the wait for its last answers.
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    const pids0 = await backendPids(admin, b.dbName);
    const pgCpu0 = cpuSnapshot(pids0);
    const gwCpu0 = gateways.map((g) => cpuMs(g.proc.pid!));
    const writes0 = await writesOf(admin, b.dbName);
    const hooks0 = hooks.count();
    const statusFrom = answers.statusOps.length;
    const probeFrom = gateways.map((g) => g.probes.length);
    const w0 = Date.now();
    const load1Before = loadAvg();
    const rss: number[][] = gateways.map(() => []);
    // What this database's busy backends wait on, sampled each second: where time goes when CPU does not explain it.
    const waits: Record<string, number> = {};
    let sampling = false;
    const sampler = setInterval(() => {
      gateways.forEach((g, i) => rss[i]!.push(rssBytes(g.proc.pid!)));
      if (sampling) return;
      sampling = true;
      void admin
        .query<{ w: string; n: number }>(
          `select coalesce(wait_event_type || ':' || wait_event, 'cpu') as w, count(*)::int as n from pg_stat_activity
            where datname = $1 and state = 'active' and pid <> pg_backend_pid() group by 1`,
          [b.dbName],
        )
        .then((r) => r.rows.forEach((x) => (waits[x.w] = (waits[x.w] ?? 0) + x.n)))
        .catch(() => {})
        .finally(() => (sampling = false));
    }, 1000);
    const load = await runLoad(apis, answers, SECONDS, CLIENTS);
    clearInterval(sampler);
    const windowMs = Date.now() - w0;
    // The pgstat counters reach pg_stat_database within a second of a transaction's end.
    await sleep(1500);
    const pids1 = await backendPids(admin, b.dbName);
    const pgCpuMs = cpuSinceMs(pgCpu0, [...new Set([...pids0, ...pids1])]);
    const gwCpu = gateways.map((g, i) => cpuMs(g.proc.pid!) - gwCpu0[i]!);
    const writes = (await writesOf(admin, b.dbName)) - writes0;
    const hooksN = hooks.count() - hooks0;

    const all = [...load.latencies.provision, ...load.latencies.patch, ...load.latencies.delete];
    const stat = (xs: number[]) => ({ p50: +pct(xs, 50).toFixed(1), p99: +pct(xs, 99).toFixed(1), n: xs.length });
    const probes = gateways.flatMap((g, i) => g.probes.slice(probeFrom[i]));
    const missing = [...new Set(gateways.flatMap((g) => g.probes.filter((p) => p.probe === 'missing').map((p) => p.what!)))];
    await admin.end();
    const rounds = probes.filter((p) => p.probe === 'round' && (p.polled ?? 0) > 0).map((p) => p.ms!);
    const ingests = probes.filter((p) => p.probe === 'ingest').map((p) => p.ms!);
    const statusOps = answers.statusOps.slice(statusFrom);
    // Rounds in the window: each node is polled once per interval (by one replica or the other).
    const roundsInWindow = Math.max(1, statusOps.length / n);
    const edgeRss = edgeProcs.reduce((a, p) => a + rssBytes(p.pid!), 0);
    return {
      nodes: n,
      tunnels_per_node: TUNNELS,
      edge_processes: edgeProcs.length,
      converge_s: +convergeS.toFixed(1),
      load_s: +(windowMs / 1000).toFixed(1),
      purchases: load.purchases,
      jobs: load.jobs,
      unanswered: load.unanswered,
      refused: load.refused,
      job_ms: stat(all),
      job_ms_by_kind: { provision: stat(load.latencies.provision), patch: stat(load.latencies.patch), delete: stat(load.latencies.delete) },
      status_round_ms: rounds.length ? { p50: +pct(rounds, 50).toFixed(0), max: +Math.max(...rounds).toFixed(0), n: rounds.length } : null,
      status_ops: statusOps.length,
      ingest_per_node_ms: ingests.length ? stat(ingests) : null,
      ingest_per_round_ms: ingests.length ? +(sum(ingests) / roundsInWindow).toFixed(0) : null,
      pg_cpu_pct: +((100 * pgCpuMs) / windowMs).toFixed(1),
      rows_written_per_s: +((writes * 1000) / windowMs).toFixed(0),
      pgbench_rows_per_s: pgbenchRows === null ? null : +pgbenchRows.toFixed(0),
      gateways: gateways.map((_, i) => ({ cpu_pct: +((100 * gwCpu[i]!) / windowMs).toFixed(1), rss_mb: +(Math.max(0, ...rss[i]!) / 2 ** 20).toFixed(0) })),
      webhooks_per_s: +((hooksN * 1000) / windowMs).toFixed(2),
      webhooks: hooksN,
      edge_rss_mb: +(edgeRss / 2 ** 20).toFixed(0),
      probes_missing: missing,
      load1: [load1Before, loadAvg()],
      pg_waits: Object.fromEntries(Object.entries(waits).sort((a, b) => b[1] - a[1]).slice(0, 8)),
    };
  } finally {
    const stops = await Promise.all(gateways.map((g) => g.stop()));
    if (stops.some((x) => x === null)) console.error(`  a gateway did not stop within ${STOP_BOUND_MS / 1000} s of SIGTERM (its status round was still under way) and was killed`);
    await Promise.all(
      edgeProcs.map(
        (p) =>
          new Promise<void>((r) => {
            if (p.exitCode !== null || p.signalCode !== null) return r();
            p.once('exit', () => r());
            p.kill('SIGTERM');
          }),
      ),
    );
    await hooks.close();
    await raw.end();
    await b.db.close();
    await b.admin.query(`drop database if exists ${b.dbName} with (force)`);
    await b.admin.end();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------- report

function table(rows: FleetFigures[]): string {
  const f = (v: number | null | undefined, d = 0) => (v === null || v === undefined || Number.isNaN(v) ? '-' : v.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d }));
  const lines = [
    '| nodes x tunnels | job p50 / p99 ms (jobs) | status round p50 / max ms | ingest per round ms (per node p50 / p99) | PostgreSQL CPU % | rows written/s (pgbench TPC-B rows/s, ratio) | gateway CPU % / RSS MB per replica | webhooks/s | edges RSS MB | all reconciled s | host load 1 min |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const ratio = r.pgbench_rows_per_s ? (r.rows_written_per_s / r.pgbench_rows_per_s).toFixed(3) : '-';
    lines.push(
      `| ${f(r.nodes)} x ${f(r.tunnels_per_node)} | ${f(r.job_ms.p50, 1)} / ${f(r.job_ms.p99, 1)} (${r.job_ms.n}${r.unanswered ? `, ${r.unanswered} unanswered` : ''}) | ${r.status_round_ms ? `${f(r.status_round_ms.p50)} / ${f(r.status_round_ms.max)}` : 'not measured'} | ${r.ingest_per_round_ms === null ? 'not measured' : `${f(r.ingest_per_round_ms)} (${f(r.ingest_per_node_ms!.p50, 1)} / ${f(r.ingest_per_node_ms!.p99, 1)})`} | ${f(r.pg_cpu_pct, 1)} | ${f(r.rows_written_per_s)} (${f(r.pgbench_rows_per_s)}, ${ratio}) | ${r.gateways.map((g) => `${f(g.cpu_pct, 1)} / ${f(g.rss_mb)}`).join('; ')} | ${f(r.webhooks_per_s, 2)} | ${f(r.edge_rss_mb)} | ${f(r.converge_s, 1)} | ${r.load1[0].toFixed(1)} -> ${r.load1[1].toFixed(1)} |`,
    );
  }
  return lines.join('\n');
}

async function main(): Promise<void> {
  if (SIZES.length === 0) throw new Error('TG_FLEET_NODES names no size (e.g. 20,100)');
  const adminUrl = process.env.BENCH_DATABASE_URL ?? ensureLocalPostgres();
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const pgbenchRows = WITH_PGBENCH ? await pgbenchRowsPerSecond(adminUrl, admin) : null;
  await admin.end();
  if (pgbenchRows !== null) console.error(`ceiling: pgbench TPC-B, 8 clients, 10 s: ${Math.round(pgbenchRows)} rows written/s`);
  const results: FleetFigures[] = [];
  for (const n of SIZES) {
    console.error(`\nfleet: ${n} nodes x ${TUNNELS} tunnels, 2 gateway replicas, status every ${STATUS_S} s, reconcile every ${RECONCILE_S} s, ${BUSY * 100}% busy tunnels`);
    const r = await runSize(n, adminUrl, pgbenchRows);
    results.push(r);
    console.error(JSON.stringify(r));
    const label = `${n} nodes x ${TUNNELS} tunnels`;
    report({ scenario: `fleet ${label}: job latency p50 (API call -> agent answer; ${r.job_ms.n} jobs, ${r.unanswered} unanswered)`, rate: r.job_ms.p50, unit: 'ms', p99_ms: r.job_ms.p99, ceiling: null, ratio: null, target: null, pass: null });
    if (r.status_round_ms) report({ scenario: `fleet ${label}: status round (one replica's, p50; p99 column = max)`, rate: r.status_round_ms.p50, unit: 'ms', p99_ms: r.status_round_ms.max, ceiling: null, ratio: null, target: `< ${STATUS_S * 1000} ms (the interval)`, pass: r.status_round_ms.max < STATUS_S * 1000 });
    if (r.ingest_per_round_ms !== null) report({ scenario: `fleet ${label}: traffic ingest per round (all nodes; p99 column = one node's p99)`, rate: r.ingest_per_round_ms, unit: 'ms', p99_ms: r.ingest_per_node_ms!.p99, ceiling: null, ratio: null, target: null, pass: null });
    report({
      scenario: `fleet ${label}: PostgreSQL rows written (its backends' CPU ${r.pg_cpu_pct}%)`,
      rate: r.rows_written_per_s,
      unit: 'rows/s',
      ceiling: r.pgbench_rows_per_s === null ? null : 'pgbench TPC-B rows written/s (8 clients)',
      ceiling_rate: r.pgbench_rows_per_s,
      ratio: r.pgbench_rows_per_s ? r.rows_written_per_s / r.pgbench_rows_per_s : null,
      target: null,
      pass: null,
    });
    report({ scenario: `fleet ${label}: gateway CPU % per replica (RSS ${r.gateways.map((g) => `${g.rss_mb} MB`).join(', ')})`, rate: Math.max(...r.gateways.map((g) => g.cpu_pct)), unit: '% of a core', ceiling: null, ratio: null, target: null, pass: null });
    report({ scenario: `fleet ${label}: webhooks delivered`, rate: r.webhooks_per_s, unit: '/s', ceiling: null, ratio: null, target: null, pass: null });
  }
  console.log(`\nbench:fleet (2 gateway replicas, status every ${STATUS_S} s, ${CLIENTS} load clients for ${SECONDS} s, ${BUSY * 100}% busy tunnels, edges: dataplane stand-in)\n`);
  console.log(table(results));
  if (process.env.TG_FLEET_JSON) writeFileSync(process.env.TG_FLEET_JSON, JSON.stringify(results, null, 2));
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
