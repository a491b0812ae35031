// `npm run bench:oidc`: token-endpoint throughput of the gateway's issuer (oidc-provider on PostgreSQL
// through our adapter) beside a bare oidc-provider with its in-memory adapter configured the same way
// (bench/oidc-memory-server.ts), in the same run. Each server runs in its own process; the load
// generator (bench/lib/load.ts) runs in this one. Two scenarios:
//
// - code exchange: authorization codes are minted before the measurement, the same way on both
//   sides: BENCH_SESSIONS (default 32) browser sessions sign in (the gateway's login and consent
//   pages; the baseline consents at once), then N authorize requests over those sessions in turn, each
//   answered by a redirect carrying a fresh code (same client, scopes and PKCE S256 challenge), so
//   concurrent exchanges spread over 32 grants as different users' would. The measurement exchanges
//   every code exactly once.
// - refresh: one rotation chain per worker; each request presents the refresh token the previous
//   response of that worker returned.
//
// Both scenarios run in rounds of four legs, in-memory, gateway, gateway, in-memory (codes: legs of 200,
// refresh: legs of 1 s), so load from anything else on the machine, steady or drifting, falls on both alike.
//
// Prints rates, p50/p99 latency and the ratio gateway / in-memory, overall and for its lowest round (target
// >= 0.8 on every round). Needs PostgreSQL
// (BENCH_DATABASE_URL, or the local cluster the tests use). BENCH_CODES (default 4000), BENCH_WORKERS
// (default 32) and BENCH_SECONDS (refresh run length, default 8) tune it.
import { randomBytes } from 'node:crypto';
import { dropDatabase } from '../test/helpers/postgres.ts';
import { freePort } from '../test/helpers/ports.ts';
import { authorizeUrl, CookieJar, driveAuthorize, pkce, type Credentials } from '../test/helpers/oidc.ts';
import { createUser } from '../server/domain/accounts.ts';
import { createClient } from '../server/domain/clients.ts';
import { loadSecrets } from '../server/secrets.ts';
import { startTs } from './lib/process.ts';
import { load, merge, type Job, type LoadResult } from './lib/load.ts';
import { createBenchDatabase } from './lib/database.ts';
import { report } from './lib/report.ts';

const CODES = Number(process.env.BENCH_CODES ?? 4000);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 32);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 8);
const WARMUP_CODES = 400;
const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 32);
/** BENCH_CPU_PROF=DIR: both servers write a V8 CPU profile there (summarise with bench/profile-summary.ts). */
const PROF_ARGS = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
/** Gateway / in-memory rate, on every round. */
const TARGET = 0.8;
const REDIRECT_URI = 'http://127.0.0.1:9/bench/callback';
const SCOPE = 'openid profile email';

interface Side {
  name: string;
  issuer: string;
  tokenPath: string;
  basic: string;
  creds: Credentials | null;
  /** One browser session per jar: each has its own grant, as different users' logins would. */
  jars: CookieJar[];
  clientId: string;
}

const basicHeader = (id: string, secret: string) => {
  const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, '+');
  return `Basic ${Buffer.from(`${enc(id)}:${enc(secret)}`).toString('base64')}`;
};

const challenge = pkce();

/** `count` codes over the side's signed-in sessions in turn, `concurrency` authorize requests at a time. */
async function mintCodes(side: Side, count: number, concurrency = 16): Promise<string[]> {
  const codes: string[] = [];
  let started = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (started < count) {
        const jar = side.jars[started++ % side.jars.length]!;
        const url = authorizeUrl(`${side.issuer}/oauth/authorize`, { clientId: side.clientId, redirectUri: REDIRECT_URI, scope: SCOPE, state: randomBytes(8).toString('hex'), challenge: challenge.challenge, method: 'S256' });
        const r = await driveAuthorize(url, side.creds, { jar });
        const code = r.callback?.searchParams.get('code');
        if (!code) throw new Error(`${side.name}: authorize gave no code: ${r.callback?.href ?? `${r.last?.status} ${r.last?.body.slice(0, 300)}`}`);
        codes.push(code);
      }
    }),
  );
  return codes;
}

const tokenJob = (side: Side, form: Record<string, string>): Job => ({
  path: side.tokenPath,
  headers: { 'content-type': 'application/x-www-form-urlencoded', authorization: side.basic, accept: 'application/json' },
  body: new URLSearchParams(form).toString(),
});

function exchangeAll(side: Side, codes: string[]): Promise<LoadResult> {
  let i = 0;
  return load(side.issuer, WORKERS, () => {
    const code = codes[i++];
    return code === undefined ? null : tokenJob(side, { grant_type: 'authorization_code', code, code_verifier: challenge.verifier, redirect_uri: REDIRECT_URI });
  });
}

/** One refresh token per worker: a code per worker, exchanged by that worker, starts its chain. */
async function startChains(side: Side): Promise<string[]> {
  const codes = await mintCodes(side, WORKERS);
  const current: string[] = [];
  await load(side.issuer, WORKERS, (w, prev) => {
    if (prev) {
      current[w] = String(prev.body.refresh_token);
      return null;
    }
    return tokenJob(side, { grant_type: 'authorization_code', code: codes[w]!, code_verifier: challenge.verifier, redirect_uri: REDIRECT_URI });
  });
  if (current.length !== WORKERS || current.some((t) => !t?.startsWith('rt_'))) throw new Error(`${side.name}: no refresh token for every worker`);
  return current;
}

/** Refreshes along every chain for `seconds`; `current` is advanced in place for the next round. */
function runChains(side: Side, current: string[], seconds: number): Promise<LoadResult> {
  return load(
    side.issuer,
    WORKERS,
    (w, prev) => {
      if (prev) {
        if (prev.status !== 200) return null; // a broken chain stops its worker; counted as failed
        current[w] = String(prev.body.refresh_token);
      }
      return tokenJob(side, { grant_type: 'refresh_token', refresh_token: current[w]! });
    },
    { seconds },
  );
}

/**
 * `rounds` rounds, each of four legs in the order in-memory, gateway, gateway, in-memory (ABBA): a load
 * that rises or falls steadily through a round weighs on both sides alike, where "in-memory first, then
 * gateway" counted every rise against the gateway. A round's ratio is the gateway's two legs merged
 * over the in-memory side's two.
 */
async function abbaRounds(rounds: number, leg: (side: 'memory' | 'gateway') => Promise<LoadResult>): Promise<{ memory: LoadResult[]; gateway: LoadResult[]; perRound: number[] }> {
  const out = { memory: [] as LoadResult[], gateway: [] as LoadResult[], perRound: [] as number[] };
  for (let round = 0; round < rounds; round++) {
    const legs: Record<'memory' | 'gateway', LoadResult[]> = { memory: [], gateway: [] };
    for (const side of ['memory', 'gateway', 'gateway', 'memory'] as const) legs[side].push(await leg(side));
    out.memory.push(...legs.memory);
    out.gateway.push(...legs.gateway);
    out.perRound.push(merge(legs.gateway).rate / merge(legs.memory).rate);
  }
  return out;
}

const fmt = (r: LoadResult) => `${Math.round(r.rate)} /s | ${r.p50.toFixed(1)} | ${r.p99.toFixed(1)}`;

async function main(): Promise<void> {
  const { admin, dbName, url, db } = await createBenchDatabase('tg_bench_oidc');
  const email = 'bench@example.test';
  const password = 'bench password long enough';
  await createUser(db, { email, name: 'Bench', password, balanceUsd: '0' });
  const { secrets } = await loadSecrets(db, {});
  const client = await createClient(db, secrets.secretEncryptionKey, { name: 'Bench client', redirectUris: [REDIRECT_URI] });

  const gwPort = await freePort();
  const memPort = await freePort();
  const gwUrl = `http://127.0.0.1:${gwPort}`;
  const gw = await startTs('server/main.ts', {
    DATABASE_URL: url, PORT: String(gwPort), PUBLIC_URL: gwUrl, ISSUER_URL: gwUrl, ACCESS_LOG: 'false',
    RATE_LIMIT_PER_MINUTE: '100000000', RATE_LIMIT_BURST: '100000000',
  }, PROF_ARGS);
  // The gateway's error log lines, shown when a request failed (a 500 says nothing by itself).
  const gatewayErrors: string[] = [];
  const collect = (d: Buffer) => {
    for (const line of d.toString('utf8').split('\n')) if (line.includes('"level":"error"') && gatewayErrors.length < 5) gatewayErrors.push(line.slice(0, 1500));
  };
  gw.proc.stdout!.on('data', collect);
  gw.proc.stderr!.on('data', collect);
  const mem = await startTs('bench/oidc-memory-server.ts', {
    BENCH_CLIENT_ID: client.client_id, BENCH_CLIENT_SECRET: client.client_secret, BENCH_REDIRECT_URI: REDIRECT_URI,
    BENCH_ACCESS_TOKEN_KEY: secrets.accessTokenKey.toString('base64url'), BENCH_PORT: String(memPort),
  }, process.env.BENCH_CPU_PROF_MEMORY ? PROF_ARGS : []);
  try {
    const discover = async (issuer: string) => {
      const d = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as { issuer: string; token_endpoint: string };
      if (d.issuer !== issuer) throw new Error(`discovery at ${issuer} names issuer ${d.issuer}`);
      return new URL(d.token_endpoint).pathname;
    };
    const basic = basicHeader(client.client_id, client.client_secret);
    const gateway: Side = { name: 'gateway (PostgreSQL)', issuer: gwUrl, tokenPath: await discover(gwUrl), basic, creds: { email, password }, jars: Array.from({ length: SESSIONS }, () => new CookieJar()), clientId: client.client_id };
    const memory: Side = { name: 'oidc-provider (in-memory)', issuer: mem.url, tokenPath: await discover(mem.url), basic, creds: null, jars: Array.from({ length: SESSIONS }, () => new CookieJar()), clientId: client.client_id };

    /** Each scenario's merged runs, and the ratio of each round (the target holds on every round). */
    const results: Record<string, { gateway: LoadResult; memory: LoadResult; perRound: number[] }> = {};
    // Codes are minted and exchanged in rounds of BATCH: oidc-provider's in-memory adapter is an LRU of
    // 1000 entries, so thousands of codes minted ahead would be evicted before their exchange. Only
    // the exchanges are timed; each round is ABBA (abbaRounds), so drift hits both sides alike.
    const BATCH = 400;
    process.stderr.write(`code exchange: ${CODES} codes per side in ABBA rounds of ${BATCH} per side (legs of ${BATCH / 2}), ${WORKERS} workers (after ${WARMUP_CODES} warm-up exchanges)\n`);
    for (const side of [memory, gateway]) {
      // Sign in on every session first (one code each, one at a time), then warm up.
      const first = await mintCodes(side, SESSIONS, 1);
      const warm = await exchangeAll(side, [...first, ...(await mintCodes(side, WARMUP_CODES - SESSIONS))]);
      if (warm.failed) throw new Error(`${side.name}: warm-up exchanges failed: ${JSON.stringify(warm.failures)}`);
    }
    const runs = await abbaRounds(Math.ceil(CODES / BATCH), async (key) => {
      const side = key === 'memory' ? memory : gateway;
      return exchangeAll(side, await mintCodes(side, BATCH / 2));
    });
    const ex = { memory: merge(runs.memory), gateway: merge(runs.gateway) };
    for (const [key, side] of [['memory', memory], ['gateway', gateway]] as const) {
      process.stderr.write(`  ${side.name}: ${fmt(ex[key])} ms, failed ${ex[key].failed}\n`);
    }
    results['code exchange'] = { ...ex, perRound: runs.perRound };
    const ROUND_SECONDS = 2;
    process.stderr.write(`refresh: ${WORKERS} rotation chains per side, ${SECONDS} s per side in ABBA rounds of ${ROUND_SECONDS} s per side\n`);
    const chains = { memory: await startChains(memory), gateway: await startChains(gateway) };
    const refreshRuns = await abbaRounds(Math.max(1, Math.round(SECONDS / ROUND_SECONDS)), (key) =>
      runChains(key === 'memory' ? memory : gateway, chains[key], ROUND_SECONDS / 2),
    );
    const rf = { memory: merge(refreshRuns.memory), gateway: merge(refreshRuns.gateway) };
    for (const [key, side] of [['memory', memory], ['gateway', gateway]] as const) {
      process.stderr.write(`  ${side.name}: ${fmt(rf[key])} ms, failed ${rf[key].failed}\n`);
    }
    results['refresh (rotation)'] = { ...rf, perRound: refreshRuns.perRound };

    console.log('\n| scenario | gateway (PostgreSQL) | p50 ms | p99 ms | oidc-provider (in-memory) | p50 ms | p99 ms | ratio | lowest round | target |\n|---|---|---|---|---|---|---|---|---|---|');
    let ok = true;
    for (const [name, r] of Object.entries(results)) {
      const ratio = r.gateway.rate / r.memory.rate;
      const lowest = Math.min(...r.perRound);
      const clean = r.gateway.failed === 0 && r.memory.failed === 0;
      const met = lowest >= TARGET && clean;
      ok &&= met;
      console.log(`| ${name} | ${fmt(r.gateway)} | ${fmt(r.memory)} | ${ratio.toFixed(2)} | ${lowest.toFixed(2)} | >= ${TARGET.toFixed(2)} every round${clean ? '' : ` (FAILED REQUESTS: gateway ${JSON.stringify(r.gateway.failures)}, memory ${JSON.stringify(r.memory.failures)})`} |`);
      process.stderr.write(`  ${name}: ratio per round ${r.perRound.map((x) => x.toFixed(2)).join(', ')}\n`);
      report({
        scenario: `token endpoint, ${name}`, rate: r.gateway.rate, unit: 'req/s', p99_ms: r.gateway.p99, ceiling: 'in-memory oidc-provider', ceiling_rate: r.memory.rate,
        ratio: lowest, target: `>= ${TARGET} every round`, pass: met, note: `lowest of ${r.perRound.length} rounds; overall ${ratio.toFixed(2)}`,
      });
    }
    console.log(ok ? 'all targets met' : 'TARGETS MISSED');
    if (Object.values(results).some((r) => r.gateway.failed || r.memory.failed)) process.exitCode = 1;
  } finally {
    if (gatewayErrors.length) process.stderr.write(`gateway errors:\n${gatewayErrors.join('\n')}\n`);
    await gw.stop();
    await mem.stop();
    await db.close();
    await dropDatabase(admin, dbName);
    await admin.end();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
