// `npm run bench`: the gateway's hot routes against ceilings measured in the same run:
// the reads beside a bare node:http JSON handler, the purchases beside `pgbench -c 50 -M prepared` (TPC-B)
// on the same PostgreSQL. Each server runs in its own process, autocannon in this one. Rounds are
// interleaved (bare, pricing, list, GraphQL, pgbench, purchases; then again), so load from anything else
// on the machine falls on a scenario and its ceiling alike; each target is checked on the median round's
// ratio. After the load, every purchase invariant is checked. Then the scaling curve:
// the list and the purchases with BENCH_CURVE tunnels in the database (seeded with SQL), printed and
// plotted into bench/results/gateway-curve.svg.
//
// Scenarios: GET /api/dedicated/pricing (public); the authenticated list and GraphQL
// `tunnels { id status protectedIp }` with 50 accounts, each its own key (one per connection, so no two
// in-flight requests are the same and nothing can be shared between them); purchases spread over the 50
// accounts; then purchases by one account (its row lock makes them one at a time: reported, no target).
//
// Needs PostgreSQL (BENCH_DATABASE_URL, or the local cluster the tests use) and pgbench
// (BENCH_PGBENCH, default /usr/lib/postgresql/15/bin/pgbench; BENCH_PGBENCH_SCALE, default 10).
// BENCH_SECONDS sets the length of each run (default 8), BENCH_ROUNDS the interleaved rounds (default 3).
// BENCH_ONLY=list (or pricing, graphql, purchase, curve; comma-separated) runs the baseline(s) and those
// only. BENCH_CURVE=1000,10000,100000 the curve's sizes (default those; BENCH_CURVE=none skips it).
// BENCH_CPU_PROF=DIR starts the gateway with --cpu-prof into DIR; `node bench/profile-summary.ts
// DIR/*.cpuprofile` prints where its time went.
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import autocannon from 'autocannon';
import type { Options, Request, Result } from 'autocannon';
import { dropDatabase, withDatabase } from '../test/helpers/postgres.ts';
import { addNode } from '../server/domain/nodes.ts';
import { createUser } from '../server/domain/accounts.ts';
import { createApiKey } from '../server/auth/api-keys.ts';
import { setRate } from '../server/domain/settings.ts';
import { ROOT, startTs } from './lib/process.ts';
import { cpuSinceMs, cpuSnapshot } from './lib/cpu.ts';
import { createBenchDatabase } from './lib/database.ts';
import { report } from './lib/report.ts';
import { lineChart } from './lib/svg.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const CONNECTIONS = 50;
const ACCOUNTS = 50;
/** Tunnels each bench account owns before the runs (its list page is 20 of them, the default limit). */
const OWN_TUNNELS = 20;
const ONLY = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',')) : null;
const wanted = (name: string): boolean => !ONLY || ONLY.has(name);
const PROFILE_DIR = process.env.BENCH_CPU_PROF;
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3));
const PGBENCH = process.env.BENCH_PGBENCH ?? '/usr/lib/postgresql/15/bin/pgbench';
const PGBENCH_SCALE = Number(process.env.BENCH_PGBENCH_SCALE ?? 10);
const CURVE = (process.env.BENCH_CURVE ?? '1000,10000,100000') === 'none' ? [] : (process.env.BENCH_CURVE ?? '1000,10000,100000').split(',').map(Number);
const GRAPHQL_QUERY = JSON.stringify({ query: '{ tunnels { tunnels { id status protectedIp } } }' });

/** Targets: the median round's ratio to its ceiling. */
const TARGETS = { pricing: 0.5, list: 0.2, graphql: 0.08, purchase: 0.35 } as const;

/** Which processes' CPU time a run is charged: the server's own, and its database backends'. */
let cpuSides: { server: () => number[]; database: () => Promise<number[]> } | null = null;
/** 2xx answers to purchases, warm-ups included: the invariants compare them with the tunnels made. */
let purchases2xx = 0;

interface Run {
  rate: number;
  p99: number;
  result: Result | null;
}

async function run(name: string, opts: Options, sides = cpuSides, countPurchases = false): Promise<Run> {
  // One second of warm-up (JIT, pool connections), then the measured run.
  const warm = await autocannon({ ...opts, duration: 1, connections: CONNECTIONS });
  const serverPids = sides?.server() ?? [];
  const before = { server: cpuSnapshot(serverPids), database: cpuSnapshot((await sides?.database()) ?? []) };
  const r = await autocannon({ ...opts, duration: SECONDS, connections: CONNECTIONS });
  if (countPurchases) purchases2xx += warm['2xx'] + r['2xx'];
  const perReq = (ms: number) => ((ms * 1000) / Math.max(1, r.requests.total)).toFixed(0);
  const cost = sides
    ? `, CPU per request: server ${perReq(cpuSinceMs(before.server, serverPids))} µs, database ${perReq(cpuSinceMs(before.database, (await sides.database()) ?? []))} µs`
    : '';
  process.stderr.write(`  ${name}: ${Math.round(r.requests.average)} req/s, p99 ${r.latency.p99} ms, non-2xx ${r.non2xx}, errors ${r.errors}${cost}\n`);
  if (r.non2xx || r.errors) throw new Error(`${name}: ${r.non2xx} non-2xx answers, ${r.errors} errors (${JSON.stringify(r.statusCodeStats ?? {})})`);
  return { rate: r.requests.average, p99: r.latency.p99, result: r };
}

/**
 * One request template whose every connection sticks to one of `keys` (connection i gets key i mod n):
 * concurrent requests then come from different accounts, as 50 different customers' would.
 */
function perConnectionKey(keys: readonly string[], req: Request): Options['requests'] {
  let next = 0;
  return [
    {
      ...req,
      setupRequest: (r, context) => {
        context.key ??= keys[next++ % keys.length];
        return { ...r, headers: { ...r.headers, authorization: `Bearer ${String(context.key)}` } };
      },
    },
  ];
}

/** TPC-B by `pgbench -c 50 -M prepared` on its own database of the same PostgreSQL, for SECONDS. */
function pgbench(url: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const p = spawn(PGBENCH, ['-c', String(CONNECTIONS), '-j', '2', '-M', 'prepared', '-T', String(SECONDS), '-n', url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d));
    p.stderr.on('data', (d: Buffer) => (out += d));
    p.once('error', reject);
    p.once('exit', (code) => {
      const tps = /tps = ([\d.]+) \(without initial connection time\)/.exec(out);
      const lat = /latency average = ([\d.]+) ms/.exec(out);
      if (code !== 0 || !tps) return reject(new Error(`pgbench exited ${code}:\n${out}`));
      process.stderr.write(`  pgbench -c ${CONNECTIONS} -M prepared (TPC-B, scale ${PGBENCH_SCALE}): ${Math.round(Number(tps[1]))} tps, latency average ${lat?.[1] ?? '?'} ms\n`);
      // pgbench prints no p99 without per-transaction logs; its average latency stands in the table.
      resolve({ rate: Number(tps[1]), p99: NaN, result: null });
    });
  });
}

function pgbenchInit(url: string): Promise<void> {
  const r = spawn(PGBENCH, ['-i', '-q', '-s', String(PGBENCH_SCALE), url], { stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  r.stderr.on('data', (d: Buffer) => (err += d));
  return new Promise<void>((resolve, reject) => {
    r.once('error', reject);
    r.once('exit', (c) => (c === 0 ? resolve() : reject(new Error(`pgbench -i failed: ${err}`))));
  });
}

/**
 * Tunnels made with SQL, not purchases (fast: 100,000 in seconds): `n` live tunnels of `accountId` on
 * `nodeId`, each holding an IP of the node's pool taken from the far end (purchases take the near end),
 * to origins of their own, so the GRE keys and IPs stay unique as the constraints require.
 */
async function seedTunnels(db: pg.Client, nodeIds: readonly string[], accountId: string, n: number, name: string): Promise<void> {
  for (const nodeId of nodeIds) {
    if (n <= 0) return;
    const made = await seedOnNode(db, nodeId, accountId, n, name);
    n -= made;
  }
  if (n > 0) throw new Error(`the bench's pools are full: ${n} tunnels not seeded`);
}

async function seedOnNode(db: pg.Client, nodeId: string, accountId: string, n: number, name: string): Promise<number> {
  const r = await db.query(
    `with picked as (
       -- Locked, so an IP that a purchase still in flight (autocannon stops counting before the gateway
       -- answers them all) took after this statement's snapshot is re-checked and left out.
       select ip, inner_index, position from protected_ip where node_id = $1 and tunnel_id is null order by position desc limit $3 for update skip locked
     ), ins as (
       insert into tunnel (id, account_id, node_id, name, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub)
       select gen_random_uuid(), $2, $1, $4, ip, '11.' || (position >> 16) || '.' || ((position >> 8) & 255) || '.' || (position & 255),
              'f' || replace(ip, '.', 'x'), inner_index, 1 + position, 'active', 1.11, 100
         from picked
       returning id, protected_ip
     )
     update protected_ip p set tunnel_id = ins.id from ins where p.ip = ins.protected_ip`,
    [nodeId, accountId, n, name],
  );
  return r.rowCount ?? 0;
}

async function main(): Promise<void> {
  const { admin, dbName, url, db } = await createBenchDatabase('tg_bench');
  const raw = new pg.Client({ connectionString: url });
  await raw.connect();
  const pgbDb = `${dbName}_pgbench`;
  process.stderr.write(`seeding: three /16 pools, ${ACCOUNTS} accounts with ${OWN_TUNNELS} tunnels each, pgbench scale ${PGBENCH_SCALE}\n`);
  // A pinned host key: purchases skip nodes without one (no agent runs here; nothing is provisioned).
  // Three /16 pools (a node's largest) hold the curve's 100,000 tunnels beside the purchases.
  const nodes: string[] = [];
  for (const [i, pool] of ['198.18.0.0/16', '198.19.0.0/16', '198.20.0.0/16'].entries()) {
    nodes.push((await addNode(db, { name: `bench-edge-${i}`, publicIp: `192.0.2.${i + 1}`, sshHost: '127.0.0.1', pool, hostKey: `SHA256:${'B'.repeat(43)}` })).node_id);
  }
  await setRate(db, '90');
  const accounts: { accountId: string; readKey: string; writeKey: string }[] = [];
  for (let i = 0; i < ACCOUNTS; i++) {
    const user = await createUser(db, { email: `bench${i}@example.test`, name: `Bench ${i}`, password: 'bench password', balanceUsd: '1000000' });
    accounts.push({
      accountId: user.account_id,
      readKey: (await createApiKey(db, user.account_id, user.user_id, 'read')).key,
      writeKey: (await createApiKey(db, user.account_id, user.user_id, 'write')).key,
    });
    await seedTunnels(raw, nodes, user.account_id, OWN_TUNNELS, 'seed');
  }
  const filler = await createUser(db, { email: 'filler@example.test', name: 'Filler', password: 'bench password', balanceUsd: '0' });
  await admin.query(`create database ${pgbDb}`);
  const pgbUrl = withDatabase(url, pgbDb);
  if (wanted('purchase')) await pgbenchInit(pgbUrl);

  const bare = await startTs('bench/bare-server.ts', {});
  const gw = await startTs('server/main.ts', {
    DATABASE_URL: url, PORT: '0', ACCESS_LOG: 'false', RATE_LIMIT_PER_MINUTE: '100000000', RATE_LIMIT_BURST: '100000000',
  }, PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []);
  const backends = async (): Promise<number[]> => {
    const { rows } = await admin.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()', [dbName]);
    return rows.map((r) => r.pid);
  };
  cpuSides = { server: () => [gw.proc.pid!], database: backends };
  const readKeys = accounts.map((a) => a.readKey);
  const writeKeys = accounts.map((a) => a.writeKey);
  const scenario = {
    pricing: () => run('GET /api/dedicated/pricing', { url: `${gw.url}/api/dedicated/pricing` }),
    list: () => run(`GET /api/dedicated (${ACCOUNTS} accounts, ${OWN_TUNNELS} tunnels each)`, { url: gw.url, requests: perConnectionKey(readKeys, { method: 'GET', path: '/api/dedicated' }) }),
    graphql: () =>
      run(`GraphQL tunnels { id status protectedIp } (${ACCOUNTS} accounts)`, {
        url: gw.url,
        requests: perConnectionKey(readKeys, { method: 'POST', path: '/graphql', headers: { 'content-type': 'application/json' }, body: GRAPHQL_QUERY }),
      }),
    purchase: () =>
      run(`POST /api/dedicated (${ACCOUNTS} accounts)`, {
        url: gw.url,
        requests: perConnectionKey(writeKeys, { method: 'POST', path: '/api/dedicated', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'p', origin_ip: '8.8.4.4' }) }),
      }, cpuSides, true),
  };
  const reads = (['pricing', 'list', 'graphql'] as const).filter(wanted);
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
  let ok = true;
  try {
    process.stderr.write(`running ${SECONDS} s per scenario, ${CONNECTIONS} connections, ${ROUNDS} interleaved rounds\n`);
    const rounds: { bare: Run | null; pgbench: Run | null; runs: Partial<Record<keyof typeof scenario, Run>> }[] = [];
    for (let i = 0; i < ROUNDS && (reads.length || wanted('purchase')); i++) {
      process.stderr.write(`round ${i + 1} of ${ROUNDS}\n`);
      const r: (typeof rounds)[number] = { bare: null, pgbench: null, runs: {} };
      if (reads.length) {
        r.bare = await run('bare node:http', { url: `${bare.url}/` }, { server: () => [bare.proc.pid!], database: async () => [] });
        for (const k of reads) r.runs[k] = await scenario[k]();
      }
      if (wanted('purchase')) {
        r.pgbench = await pgbench(pgbUrl);
        r.runs.purchase = await scenario.purchase();
      }
      rounds.push(r);
    }

    console.log(`\n| scenario | req/s | p99 ms | ceiling | ceiling rate | ratio (median round) | per round | target |\n|---|---|---|---|---|---|---|---|`);
    const names = { pricing: 'GET /api/dedicated/pricing', list: `authenticated list, ${ACCOUNTS} accounts`, graphql: `GraphQL tunnels { id status protectedIp }, ${ACCOUNTS} accounts`, purchase: `purchase, ${ACCOUNTS} accounts` };
    for (const k of [...reads, ...(wanted('purchase') ? (['purchase'] as const) : [])]) {
      const ceilingOf = (r: (typeof rounds)[number]) => (k === 'purchase' ? r.pgbench! : r.bare!);
      const ratios = rounds.map((r) => r.runs[k]!.rate / ceilingOf(r).rate);
      const mid = median(ratios);
      const at = rounds[ratios.indexOf(mid)]!;
      const met = mid >= TARGETS[k];
      ok &&= met;
      const ceiling = k === 'purchase' ? `pgbench -c ${CONNECTIONS} -M prepared (TPC-B, scale ${PGBENCH_SCALE}), tps` : 'bare node:http';
      console.log(`| ${names[k]} | ${Math.round(at.runs[k]!.rate)} | ${at.runs[k]!.p99} | ${ceiling} | ${Math.round(ceilingOf(at).rate)} | ${mid.toFixed(3)} | ${ratios.map((x) => x.toFixed(3)).join(', ')} | >= ${TARGETS[k]} |`);
      report({
        scenario: names[k], rate: at.runs[k]!.rate, unit: 'req/s', p99_ms: at.runs[k]!.p99, ceiling: k === 'purchase' ? `pgbench -c 50 -M prepared, scale ${PGBENCH_SCALE} (tps)` : 'bare node:http',
        ceiling_rate: ceilingOf(at).rate, ratio: mid, target: `>= ${TARGETS[k]}`, pass: met, note: `median of ${ratios.length} rounds: ${ratios.map((x) => x.toFixed(2)).join(', ')}`,
      });
    }

    if (wanted('purchase')) {
      const one = await run('POST /api/dedicated (one account)', {
        url: `${gw.url}/api/dedicated`, method: 'POST', headers: { authorization: `Bearer ${writeKeys[0]}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'p', origin_ip: '8.8.4.4' }),
      }, cpuSides, true);
      const pgb = median(rounds.map((r) => r.pgbench!.rate));
      console.log(`| purchase, one account (its row lock: one at a time) | ${Math.round(one.rate)} | ${one.p99} | pgbench (median round) | ${Math.round(pgb)} | ${(one.rate / pgb).toFixed(3)} | | reported |`);
      report({ scenario: 'purchase, one account', rate: one.rate, unit: 'req/s', p99_ms: one.p99, ceiling: 'pgbench (median round, tps)', ceiling_rate: pgb, ratio: one.rate / pgb, target: null, pass: null, note: "one account's purchases run one at a time (its row lock)" });
    }

    const curve: { n: number; list: number; purchase: number; bare: number }[] = [];
    if (wanted('curve') && CURVE.length) {
      process.stderr.write(`scaling curve: list and purchases at ${CURVE.join(', ')} tunnels in the database\n`);
      for (const n of CURVE) {
        const { rows: [c] } = await raw.query<{ n: number }>(`select count(*)::int as n from tunnel`);
        if (c!.n < n) await seedTunnels(raw, nodes, filler.account_id, n - c!.n, 'filler');
        await raw.query('vacuum analyze tunnel, protected_ip');
        const b = await run('bare node:http', { url: `${bare.url}/` }, { server: () => [bare.proc.pid!], database: async () => [] });
        const list = await scenario.list();
        const buy = await scenario.purchase();
        const { rows: [after] } = await raw.query<{ n: number }>(`select count(*)::int as n from tunnel`);
        process.stderr.write(`  at ${n} tunnels (${after!.n} after the purchases): list ${Math.round(list.rate)} req/s, purchase ${Math.round(buy.rate)} req/s, bare ${Math.round(b.rate)} req/s\n`);
        curve.push({ n, list: list.rate, purchase: buy.rate, bare: b.rate });
      }
      console.log(`\nscaling curve (${ACCOUNTS} accounts; bare node:http measured beside each point)\n\n| tunnels in the database | list req/s | list / bare | purchases req/s | bare req/s |\n|---|---|---|---|---|`);
      for (const p of curve) console.log(`| ${p.n.toLocaleString('en-US')} | ${Math.round(p.list)} | ${(p.list / p.bare).toFixed(3)} | ${Math.round(p.purchase)} | ${Math.round(p.bare)} |`);
      const first = curve[0]!;
      const last = curve[curve.length - 1]!;
      for (const [k, label] of [['list', 'authenticated list'], ['purchase', 'purchase']] as const) {
        // Flat is the goal: the rate at the largest size against the smallest (no target number in the issue).
        report({ scenario: `${label} at ${last.n.toLocaleString('en-US')} tunnels vs ${first.n.toLocaleString('en-US')}`, rate: last[k], unit: 'req/s', ceiling: `same at ${first.n.toLocaleString('en-US')} tunnels`, ceiling_rate: first[k], ratio: last[k] / first[k], target: null, pass: null, note: 'curve: bench/results/gateway-curve.svg' });
      }
      mkdirSync(join(ROOT, 'bench', 'results'), { recursive: true });
      writeFileSync(
        join(ROOT, 'bench', 'results', 'gateway-curve.svg'),
        lineChart({
          title: `gateway: requests/s by tunnels in the database (${ACCOUNTS} accounts, ${SECONDS} s per point)`,
          xLabel: 'tunnels in the database (log scale)',
          yLabel: 'requests/s',
          series: [
            { name: 'authenticated list', points: curve.map((p) => ({ x: p.n, y: p.list })) },
            { name: 'purchases', points: curve.map((p) => ({ x: p.n, y: p.purchase })) },
            { name: 'bare node:http / 10', points: curve.map((p) => ({ x: p.n, y: p.bare / 10 })) },
          ],
        }),
      );
      console.log('plot: bench/results/gateway-curve.svg');
    }

    // Invariants after all the load, read with plain SQL: one tunnel per 201, every IP sold once, GRE keys
    // unique per (node, origin), for every account ledger = balance and one ledger row per purchase,
    // balance >= 0.
    const { rows: [inv] } = await raw.query(`
      select (select count(*) from tunnel where name = 'p')::int as purchased,
             (select count(*) from tunnel where status <> 'deleted')::int as live,
             (select count(*) from protected_ip where tunnel_id is not null)::int as ips_taken,
             (select count(*) from protected_ip p join tunnel t on t.id = p.tunnel_id and t.protected_ip = p.ip and t.status <> 'deleted')::int as ips_matched,
             (select count(*) from (select 1 from tunnel where status <> 'deleted' group by node_id, origin_ip, gre_key having count(*) > 1) k)::int as gre_clashes,
             (select count(*) from account a where a.balance_usd <> (select coalesce(sum(amount_usd), 0) from ledger_entry l where l.account_id = a.id))::int as ledger_mismatches,
             (select count(*) from account a where (select count(*) from ledger_entry l where l.account_id = a.id and l.kind = 'purchase')
                                                 <> (select count(*) from tunnel t where t.account_id = a.id and t.name = 'p'))::int as purchase_row_mismatches,
             (select count(*) from account where balance_usd < 0)::int as negative_balances`);
    const invariants = {
      // autocannon stops counting with requests still in flight, which the gateway completes.
      tunnels_match_201s: inv.purchased >= purchases2xx && inv.purchased - purchases2xx <= 2 * CONNECTIONS * (2 * ROUNDS + CURVE.length + 1),
      ips_sold_once: inv.ips_taken === inv.live && inv.ips_matched === inv.live,
      gre_keys_unique_per_pair: inv.gre_clashes === 0,
      ledger_equals_balance: inv.ledger_mismatches === 0,
      one_ledger_row_per_purchase: inv.purchase_row_mismatches === 0,
      balance_not_negative: inv.negative_balances === 0,
    };
    const held = Object.values(invariants).every(Boolean);
    console.log(`\npurchases: ${inv.purchased} tunnels bought (${purchases2xx} 201s counted); invariants: ${JSON.stringify(invariants)}`);
    report({ scenario: 'purchase invariants after the load', rate: inv.purchased, unit: 'tunnels', ceiling: null, ratio: null, target: 'all hold', pass: held, note: held ? undefined : JSON.stringify(invariants) });
    ok &&= held;
    console.log(ok ? (ONLY ? `targets met (only ${[...ONLY].join(', ')} run)` : 'all targets met') : 'TARGETS MISSED');
    if (!held) process.exitCode = 1;
  } finally {
    await gw.stop();
    await bare.stop();
    await raw.end();
    await db.close();
    await dropDatabase(admin, dbName);
    await dropDatabase(admin, pgbDb);
    await admin.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
