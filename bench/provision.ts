// Provision latency: from the REST call to the rules in the kernel. The real gateway process
// (`server/main.ts` on PostgreSQL, its pg-boss worker, warm SSH) drives the real agent process, whose
// dataplane runs in a fresh network namespace with the veth stand-in for GRE (this kernel has no GRE).
// Each sample is one `POST /api/dedicated/{id}/provision` answered 200 `provisioned`, which the gateway
// only sends after the agent reported the link and the map element in place (checked with `nft -j` on
// a sample of them, outside the timing). Beside it, in the same run and namespace: the command line
// doing the same kernel work for one tunnel (`ip -batch` for the link, `nft -f` for the counter and map
// elements), process start included, as an operator's script would pay it.
//
//   npm run bench:provision        (root; a PostgreSQL: BENCH_DATABASE_URL or the local test cluster)
//   TG_BENCH_N=200 (samples), TG_BENCH_WARMUP=5
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { ensureLocalPostgres, withDatabase } from '../test/helpers/postgres.ts';
import { TestEdge } from '../test/helpers/edge.ts';
import { Database } from '../server/db/database.ts';
import { migrate, openOrm } from '../server/db/orm.ts';
import { loadSecrets } from '../server/secrets.ts';
import { createUser } from '../server/domain/accounts.ts';
import { createApiKey } from '../server/auth/api-keys.ts';
import { standinPeerName } from '../agent/dataplane/index.ts';
import { startTs } from './lib/process.ts';
import { report } from './lib/report.ts';

const N = Number(process.env.TG_BENCH_N ?? 200);
const WARMUP = Number(process.env.TG_BENCH_WARMUP ?? 5);

if (process.getuid?.() !== 0) {
  console.error('bench/provision.ts needs root (network namespaces)');
  process.exit(2);
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};
const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
const summary = (xs: number[]) => ({ n: xs.length, p50_ms: +pct(xs, 50).toFixed(2), p90_ms: +pct(xs, 90).toFixed(2), p99_ms: +pct(xs, 99).toFixed(2), max_ms: +Math.max(...xs).toFixed(2) });

async function main(): Promise<void> {
  const adminUrl = process.env.BENCH_DATABASE_URL ?? ensureLocalPostgres();
  const dbName = `tg_bench_prov_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${dbName}`);
  const url = withDatabase(adminUrl, dbName);
  const db = new Database(await openOrm({ databaseUrl: url, dataDir: '' }));
  await migrate(db.orm);
  // The gateway process reads the same stored secrets.
  const { secrets } = await loadSecrets(db, {});
  const edge = await TestEdge.create(db, secrets, '198.18.0.0/23');
  const user = await createUser(db, { email: 'bench@example.test', name: 'Bench', password: 'bench password', balanceUsd: '100000' });
  const key = (await createApiKey(db, user.account_id, user.user_id, 'write')).key;
  const env = { DATABASE_URL: url, PORT: '0', ACCESS_LOG: 'false', LOG_LEVEL: 'warn', RATE_LIMIT_PER_MINUTE: '100000000', RATE_LIMIT_BURST: '100000000', EDGE_WAIT_MS: '10000' };
  const gw = await startTs('server/main.ts', { ...env, LOG_LEVEL: 'info' });
  const dir = mkdtempSync(join(tmpdir(), 'tg-bench-prov-'));
  try {
    await edge.start();
    const api = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(gw.url + path, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      return { status: res.status, body: (await res.json()) as { tunnel: { id: string; status: string; protected_ip: string; tunnel_name: string } } };
    };
    const samples: number[] = [];
    console.log(`provision latency: ${N} provisions (+${WARMUP} warm-up) through gateway -> pg-boss -> SSH -> agent -> kernel (veth stand-in for GRE)`);
    for (let i = 0; i < WARMUP + N; i++) {
      const bought = await api('POST', '/api/dedicated', { name: `b${i}`, origin_ip: '8.8.4.4' });
      if (bought.status !== 201) throw new Error(`purchase ${i}: ${bought.status} ${JSON.stringify(bought.body)}`);
      const t = bought.body.tunnel;
      const start = performance.now();
      const p = await api('POST', `/api/dedicated/${t.id}/provision`);
      const ms = performance.now() - start;
      if (p.status !== 200 || p.body.tunnel.status !== 'provisioned') throw new Error(`provision ${i}: ${p.status} ${JSON.stringify(p.body)}`);
      if (i >= WARMUP) samples.push(ms);
      // Proof, outside the timing, that 200 means the tunnel is in the kernel: its link and its counter-map
      // element, and no DNAT yet (the edge forwards only once an activation probed the origin: docs/CONTRACTS.md "Dataplane").
      if (i % 20 === 0) {
        const counters = edge.netns.run('nft', 'list', 'map', 'ip', 'tunnelgate', 'tunnel_counters');
        if (!counters.includes(t.protected_ip) || !edge.links().includes(t.tunnel_name) || edge.mapElements().includes(t.protected_ip)) {
          throw new Error(`provision ${i} answered 200 but ${t.protected_ip} / ${t.tunnel_name} is not in the kernel as a provisioned tunnel`);
        }
      }
    }

    // The command line doing the same kernel work, one tunnel per run, in the same namespace.
    const cli: number[] = [];
    const timed = (cmd: string, ...args: string[]) => {
      const t0 = performance.now();
      const r = spawnSync('ip', ['netns', 'exec', edge.netns.name, cmd, ...args], { encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
      return performance.now() - t0;
    };
    for (let i = 0; i < N; i++) {
      const name = `tg-cli${i}`;
      const ip = `198.19.${i >> 8}.${i & 255}`;
      const inner = 4 * (1000 + i);
      const edgeInner = `100.64.${inner >> 8}.${(inner & 255) + 1}/30`;
      const originInner = `100.64.${inner >> 8}.${(inner & 255) + 2}`;
      writeFileSync(join(dir, 'add.ip'), [`link add ${name} type veth peer name ${standinPeerName(name)}`, `link set ${name} mtu 1476`, `addr add ${edgeInner} dev ${name}`, `link set ${name} up`].join('\n') + '\n');
      writeFileSync(
        join(dir, 'add.nft'),
        [`add counter ip tunnelgate ${name}`, `add element ip tunnelgate protected { ${ip} : ${originInner} }`, `add element ip tunnelgate tunnel_counters { ${ip} : "${name}" }`].join('\n') + '\n',
      );
      cli.push(timed('ip', '-batch', join(dir, 'add.ip')) + timed('nft', '-f', join(dir, 'add.nft')));
    }
    const ours = summary(samples);
    const base = summary(cli);
    console.log(`gateway provision (API call -> 200 provisioned): p50 ${fmt(ours.p50_ms)}  p90 ${fmt(ours.p90_ms)}  p99 ${fmt(ours.p99_ms)}  max ${fmt(ours.max_ms)}`);
    console.log(`command line (ip -batch + nft -f, one tunnel): p50 ${fmt(base.p50_ms)}  p90 ${fmt(base.p90_ms)}  p99 ${fmt(base.p99_ms)}  max ${fmt(base.max_ms)}`);
    console.log(`target p50 < 200 ms: ${ours.p50_ms < 200 ? 'met' : 'MISSED'}; ratio p50 ours/cli ${(ours.p50_ms / base.p50_ms).toFixed(2)}`);
    console.log(JSON.stringify({ provision: ours, cli_baseline: base, link: 'veth-standin' }));
    report({ scenario: `provision latency p50 (${N} provisions)`, rate: ours.p50_ms, unit: 'ms', p99_ms: ours.p99_ms, ceiling: 'ip -batch + nft -f, one tunnel (p50 ms)', ceiling_rate: base.p50_ms, ratio: ours.p50_ms / base.p50_ms, target: 'p50 < 200 ms', pass: ours.p50_ms < 200 });
  } finally {
    await gw.stop();
    await edge.close();
    await db.close();
    await admin.query(`drop database if exists ${dbName} with (force)`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
