// `npm run bench`: the gateway's hot routes beside a bare node:http JSON handler, in the same run,
// each server in its own process and autocannon in this one. Prints requests/s, p99 latency and the
// ratio to the baseline, then checks the purchase invariants held under load.
//
// Needs PostgreSQL (BENCH_DATABASE_URL, or the local cluster the tests use). BENCH_SECONDS sets the
// length of each run (default 8), BENCH_ROUNDS how many times the baseline and the read scenarios
// run, interleaved (default 1; the table shows each one's median). BENCH_ONLY=list (or pricing, purchase; comma-separated) runs the
// baseline and those scenarios only. BENCH_CPU_PROF=DIR starts the gateway with --cpu-prof into DIR;
// `node bench/profile-summary.ts DIR/*.cpuprofile` prints where its time went.
import pg from 'pg';
import autocannon from 'autocannon';
import type { Result } from 'autocannon';
import { dropDatabase } from '../test/helpers/postgres.ts';
import { addNode } from '../server/domain/nodes.ts';
import { createUser } from '../server/domain/accounts.ts';
import { createApiKey } from '../server/auth/api-keys.ts';
import { setRate } from '../server/domain/settings.ts';
import { startTs } from './lib/process.ts';
import { totalCpuMs } from './lib/cpu.ts';
import { createBenchDatabase } from './lib/database.ts';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const CONNECTIONS = 50;
const ONLY = process.env.BENCH_ONLY ? new Set(process.env.BENCH_ONLY.split(',')) : null;
const wanted = (name: string): boolean => !ONLY || ONLY.has(name);
const PROFILE_DIR = process.env.BENCH_CPU_PROF;
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 1));

let warmup2xx = 0;
/** Which processes' CPU time a run is charged: the server's own, and its database backends'. */
let cpuSides: { server: () => number[]; database: () => Promise<number[]> } | null = null;

async function run(name: string, opts: Parameters<typeof autocannon>[0], sides = cpuSides): Promise<Result> {
  // One second of warm-up (JIT, pool connections), then the measured run.
  warmup2xx = (await autocannon({ ...opts, duration: 1, connections: CONNECTIONS }))['2xx'];
  const serverPids = sides?.server() ?? [];
  const dbPids = (await sides?.database()) ?? [];
  const before = [totalCpuMs(serverPids), totalCpuMs(dbPids)];
  const r = await autocannon({ ...opts, duration: SECONDS, connections: CONNECTIONS });
  const perReq = (ms: number) => ((ms * 1000) / Math.max(1, r.requests.total)).toFixed(0);
  const cost = sides ? `, CPU per request: server ${perReq(totalCpuMs(serverPids) - before[0]!)} µs, database ${perReq(totalCpuMs(dbPids) - before[1]!)} µs` : '';
  process.stderr.write(`  ${name}: ${Math.round(r.requests.average)} req/s, p99 ${r.latency.p99} ms, non-2xx ${r.non2xx}, errors ${r.errors}${cost}\n`);
  return r;
}

async function main(): Promise<void> {
  const { admin, dbName, url, db } = await createBenchDatabase('tg_bench');
  process.stderr.write('seeding: a /16 pool, one account, 50 tunnels to list\n');
  // A pinned host key: purchases skip nodes without one (no agent runs here; nothing is provisioned).
  await addNode(db, { name: 'bench-edge', publicIp: '192.0.2.1', sshHost: '127.0.0.1', pool: '198.18.0.0/16', hostKey: `SHA256:${'B'.repeat(43)}` });
  await setRate(db, '90');
  const user = await createUser(db, { email: 'bench@example.test', name: 'Bench', password: 'bench password', balanceUsd: '1000000' });
  const writeKey = (await createApiKey(db, user.account_id, user.user_id, 'write')).key;
  const readKey = (await createApiKey(db, user.account_id, user.user_id, 'read')).key;

  const bare = await startTs('bench/bare-server.ts', {});
  const gw = await startTs('server/main.ts', {
    DATABASE_URL: url, PORT: '0', ACCESS_LOG: 'false', RATE_LIMIT_PER_MINUTE: '100000000', RATE_LIMIT_BURST: '100000000',
  }, PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []);
  const backends = async (): Promise<number[]> => {
    const { rows } = await admin.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()', [dbName]);
    return rows.map((r) => r.pid);
  };
  cpuSides = { server: () => [gw.proc.pid!], database: backends };
  try {
    for (let i = 0; i < 50; i++) {
      const res = await fetch(`${gw.url}/api/dedicated`, { method: 'POST', headers: { authorization: `Bearer ${writeKey}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: `list-${i}`, origin_ip: '8.8.4.4' }) });
      if (res.status !== 201) throw new Error(`seeding purchase failed: ${res.status} ${await res.text()}`);
    }
    process.stderr.write(`running ${SECONDS} s per scenario, ${CONNECTIONS} connections\n`);
    // BENCH_ROUNDS > 1 interleaves the baseline with the read scenarios and keeps each one's median
    // round: on a machine shared with other work the load moves between runs, and ratios of adjacent
    // runs are steadier than one long run each.
    const rounds: { baseline: Result; pricing: Result | null; list: Result | null }[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      if (ROUNDS > 1) process.stderr.write(`round ${i + 1} of ${ROUNDS}\n`);
      rounds.push({
        baseline: await run('bare node:http', { url: `${bare.url}/` }, { server: () => [bare.proc.pid!], database: async () => [] }),
        pricing: wanted('pricing') ? await run('GET /api/dedicated/pricing', { url: `${gw.url}/api/dedicated/pricing` }) : null,
        list: wanted('list') ? await run('GET /api/dedicated (svc_ key, 20 tunnels)', { url: `${gw.url}/api/dedicated`, headers: { authorization: `Bearer ${readKey}` } }) : null,
      });
    }
    const median = (rs: Result[]): Result => [...rs].sort((a, b) => a.requests.average - b.requests.average)[Math.floor((rs.length - 1) / 2)]!;
    const baseline = median(rounds.map((r) => r.baseline));
    const pricing = wanted('pricing') ? median(rounds.map((r) => r.pricing!)) : null;
    const list = wanted('list') ? median(rounds.map((r) => r.list!)) : null;
    if (ROUNDS > 1) {
      for (const key of ['pricing', 'list'] as const) {
        if (!wanted(key)) continue;
        const per = rounds.map((r) => (r[key]!.requests.average / r.baseline.requests.average).toFixed(3));
        process.stderr.write(`  ${key}: ratio per round ${per.join(', ')}\n`);
      }
    }
    const purchase = wanted('purchase')
      ? await run('POST /api/dedicated (one account)', {
          url: `${gw.url}/api/dedicated`,
          method: 'POST',
          headers: { authorization: `Bearer ${writeKey}`, 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'bench', origin_ip: '8.8.4.4' }),
        })
      : null;

    // Invariants after the load: one tunnel per 201, every IP sold once, ledger = balance, balance >= 0.
    const check = new pg.Client({ connectionString: url });
    await check.connect();
    const { rows: [inv] } = await check.query(`
      select (select count(*) from tunnel)::int as tunnels,
             (select count(*) from protected_ip where tunnel_id is not null)::int as ips_taken,
             (select count(distinct protected_ip) from tunnel where status <> 'deleted')::int as distinct_ips,
             (select balance_usd from account where id = $1) as balance,
             (select sum(amount_usd) from ledger_entry where account_id = $1)::numeric(14,2) as ledger,
             (select count(*) from ledger_entry where kind = 'purchase')::int as purchase_rows`, [user.account_id]);
    await check.end();
    const created2xx = purchase ? purchase['2xx'] + warmup2xx + 50 : 50;
    const invariants = {
      // autocannon stops counting with requests still in flight, which the gateway completes.
      tunnels_match_201s: inv.tunnels >= created2xx && inv.tunnels - created2xx <= 2 * CONNECTIONS,
      ips_sold_once: inv.ips_taken === inv.tunnels && inv.distinct_ips === inv.tunnels,
      ledger_equals_balance: inv.ledger === inv.balance,
      one_ledger_row_per_purchase: inv.purchase_rows === inv.tunnels,
      balance_not_negative: Number(inv.balance) >= 0,
    };

    const ratio = (r: Result) => r.requests.average / baseline.requests.average;
    const rows: [string, Result | null, (r: Result) => boolean, string][] = [
      ['bare node:http (baseline)', baseline, () => true, '-'],
      ['GET /api/dedicated/pricing', pricing, (r) => ratio(r) >= 0.35, '>= 0.35'],
      ['GET /api/dedicated (authenticated list)', list, (r) => ratio(r) >= 0.1, '>= 0.10'],
      ['POST /api/dedicated (purchase)', purchase, (r) => r.requests.average >= 500, '>= 500 req/s'],
    ];
    console.log(`\n| scenario | req/s | p99 ms | ratio to bare | target |\n|---|---|---|---|---|`);
    let ok = Object.values(invariants).every(Boolean);
    for (const [name, r, met, target] of rows) {
      if (!r) continue;
      ok &&= met(r);
      console.log(`| ${name} | ${Math.round(r.requests.average)} | ${r.latency.p99} | ${ratio(r).toFixed(3)} | ${target} |`);
    }
    if (purchase) console.log(`\npurchase: ${purchase['2xx']} created in ${SECONDS} s, non-2xx ${purchase.non2xx}; invariants: ${JSON.stringify(invariants)}`);
    console.log(ok ? (ONLY ? `targets met (only ${[...ONLY].join(', ')} run)` : 'all targets met') : 'TARGETS MISSED');
    if (!Object.values(invariants).every(Boolean)) process.exitCode = 1;
  } finally {
    await gw.stop();
    await bare.stop();
    await db.close();
    await dropDatabase(admin, dbName);
    await admin.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
