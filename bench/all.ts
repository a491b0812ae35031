// `npm run bench:all`: every benchmark, each as a child process, and ONE table of
// what they reported through bench/lib/report.ts: scenario, rate, p99, the ceiling it is compared with
// (measured in the same run), the ratio, the target and pass/miss; then how loaded the machine was
// while each ran (load average before/after, and the share of CPU time that was busy, idle and stolen,
// from /proc/stat): on a shared host a ratio is only as good as the quiet around it.
//
//   npm run bench:all                        every bench, sizes small enough for about 15-20 min here
//   npm run bench:all -- gateway,oidc        a subset (or BENCH_ALL=gateway,oidc)
//   BENCH_FULL=1 npm run bench:all           the issue's full sizes (10,000 tunnels on the agent, the
//                                            edge and the flood labs, 100,000 in the gateway's curve,
//                                            longer runs)
//   BENCH_AGENT_CURVE=1 npm run bench:all    also bench:agent at 1, 1,000 and 10,000 tunnels (the
//                                            agent's scaling curve, plotted into bench/results/; takes
//                                            many minutes at 10,000); `-- agent-curve` runs it alone
//
// Benches: gateway, oidc, provision, traffic, ingest, agent, edge, flood, fleet (provision, agent, edge and flood need root: without
// it they are skipped with a line saying so). Any size variable a bench reads (TG_BENCH_N, BENCH_SECONDS,
// ...) set in the environment wins over the defaults below. BENCH_TIMEOUT_S (default 1800) bounds each
// bench. The exit code is 1 when a target was missed or a bench failed.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './lib/process.ts';
import { parseReports, type BenchRow } from './lib/report.ts';
import { lineChart } from './lib/svg.ts';

const FULL = process.env.BENCH_FULL === '1';
const IS_ROOT = process.getuid?.() === 0;
const TIMEOUT_S = Number(process.env.BENCH_TIMEOUT_S ?? 1800);
export const RESULTS_DIR = join(ROOT, 'bench', 'results');

interface Bench {
  name: string;
  script: string;
  root: boolean;
  /** Sizes for this run: defaults that fit about 15-20 min in all, or the issue's with BENCH_FULL=1. */
  env: Record<string, string>;
  nodeArgs?: string[];
}

const BENCHES: Bench[] = [
  {
    name: 'gateway',
    script: 'bench/gateway.ts',
    root: false,
    env: FULL ? { BENCH_SECONDS: '8', BENCH_ROUNDS: '3', BENCH_CURVE: '1000,10000,100000' } : { BENCH_SECONDS: '5', BENCH_ROUNDS: '3', BENCH_CURVE: '1000,10000,100000' },
  },
  { name: 'oidc', script: 'bench/oidc.ts', root: false, env: FULL ? {} : { BENCH_CODES: '2000', BENCH_SECONDS: '5' } },
  { name: 'provision', script: 'bench/provision.ts', root: true, env: FULL ? {} : { TG_BENCH_N: '50' } },
  { name: 'traffic', script: 'bench/traffic.ts', root: false, env: FULL ? {} : { TG_BENCH_TUNNELS: '2000', TG_BENCH_MINUTES: '20' } },
  { name: 'ingest', script: 'bench/ingest.ts', root: false, env: FULL ? {} : { TG_INGEST_NODES: '100', TG_INGEST_TUNNELS: '1000' } },
  { name: 'agent', script: 'bench/agent.ts', root: true, env: FULL ? {} : { TG_BENCH_N: '2000' } },
  { name: 'edge', script: 'bench/edge.ts', root: true, env: FULL ? {} : { TG_BENCH_N: '2000', TG_BENCH_PACKETS: '300000', TG_BENCH_ROUNDS: '3' } },
  // Four vectors against the ceiling at 3 and N tunnels, then the legitimate client beside each: about 6 min at these sizes.
  {
    name: 'flood',
    script: 'bench/flood.ts',
    root: true,
    env: FULL ? {} : { TG_BENCH_N: '2000', TG_BENCH_PACKETS: '500000', TG_BENCH_ROUNDS: '3', TG_BENCH_LEGIT_SECONDS: '3' },
  },
  // Simulated edges (dataplane stand-in) against two gateway replicas under load: about 6 min at 20 and 100 nodes;
  // the full sizes are the issue's node counts with fewer tunnels each, what this host's memory and cores hold.
  {
    name: 'fleet',
    script: 'bench/fleet.ts',
    root: false,
    env: FULL ? { TG_FLEET_NODES: '100,300,1000', TG_FLEET_TUNNELS: '100', TG_FLEET_SECONDS: '90' } : { TG_FLEET_NODES: '20,100', TG_FLEET_TUNNELS: '100', TG_FLEET_SECONDS: '45' },
  },
];
const AGENT_CURVE = [1, 1000, 10_000];

/** Aggregate CPU time counters (USER_HZ ticks) of the whole machine. */
interface CpuTimes {
  total: number;
  idle: number;
  steal: number;
}
function cpuTimes(): CpuTimes {
  // cpu  user nice system idle iowait irq softirq steal guest guest_nice (guest time is inside user)
  const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  return { total: f.reduce((a, b) => a + b, 0), idle: f[3]! + f[4]!, steal: f[7]! };
}
const loadAvg = (): number => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);

interface Load {
  load1Before: number;
  load1After: number;
  /** Shares of all CPU time while the bench ran, in %. */
  busy: number;
  idle: number;
  steal: number;
  seconds: number;
}

interface Outcome {
  name: string;
  rows: BenchRow[];
  status: 'ran' | 'failed' | 'skipped';
  why?: string;
  load?: Load;
}

async function runBench(b: Bench, extraEnv: Record<string, string> = {}, label = b.name): Promise<Outcome> {
  if (b.root && !IS_ROOT) return { name: label, rows: [], status: 'skipped', why: 'needs root (network namespaces)' };
  // The caller's own settings win over this run's defaults.
  const env = { ...process.env, ...b.env, ...extraEnv };
  for (const k of Object.keys(b.env)) if (process.env[k] !== undefined) env[k] = process.env[k];
  const load1Before = loadAvg();
  const c0 = cpuTimes();
  const t0 = performance.now();
  process.stderr.write(`\n=== ${label}: ${b.script} ${Object.entries({ ...b.env, ...extraEnv }).map(([k, v]) => `${k}=${env[k] ?? v}`).join(' ')}\n`);
  const child = spawn(process.execPath, [...(b.nodeArgs ?? []), '--enable-source-maps', '--import', './loader/register.mjs', b.script], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const echo = (d: Buffer) => process.stderr.write(d.toString().replace(/^(?=.)/gm, `  [${label}] `));
  child.stdout.on('data', (d: Buffer) => {
    out += d;
    echo(d);
  });
  child.stderr.on('data', echo);
  // A bench that hangs is stopped (this child only: it was started here) and counted as failed.
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    child.kill('SIGTERM');
  }, TIMEOUT_S * 1000);
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  clearTimeout(timer);
  const c1 = cpuTimes();
  const total = Math.max(1, c1.total - c0.total);
  const load: Load = {
    load1Before,
    load1After: loadAvg(),
    busy: (100 * (total - (c1.idle - c0.idle) - (c1.steal - c0.steal))) / total,
    idle: (100 * (c1.idle - c0.idle)) / total,
    steal: (100 * (c1.steal - c0.steal)) / total,
    seconds: (performance.now() - t0) / 1000,
  };
  const rows = parseReports(out);
  if (code !== 0 || timedOut) return { name: label, rows, status: 'failed', why: timedOut ? `timed out after ${TIMEOUT_S} s` : `exit code ${code}`, load };
  return { name: label, rows, status: 'ran', load };
}

const fmtNum = (v: number | null | undefined, digits = 0): string => (v === null || v === undefined || Number.isNaN(v) ? '-' : v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }));

function printTable(outcomes: Outcome[]): boolean {
  let ok = true;
  const lines = ['| bench | scenario | rate | p99 ms | ceiling (same run) | ratio | target | result |', '|---|---|---|---|---|---|---|---|'];
  for (const o of outcomes) {
    if (o.status === 'skipped') {
      lines.push(`| ${o.name} | skipped: ${o.why} | | | | | | |`);
      continue;
    }
    if (o.status === 'failed') {
      ok = false;
      lines.push(`| ${o.name} | FAILED: ${o.why} (rows below are what it reported before) | | | | | | FAIL |`);
    }
    for (const r of o.rows) {
      if (r.pass === false) ok = false;
      const ceiling = r.ceiling === null ? '-' : `${r.ceiling}${r.ceiling_rate ? `: ${fmtNum(r.ceiling_rate, r.ceiling_rate < 100 ? 1 : 0)}` : ''}`;
      const result = r.pass === null ? 'reported' : r.pass ? 'pass' : 'MISS';
      lines.push(
        `| ${o.name} | ${r.scenario}${r.note ? ` (${r.note})` : ''} | ${fmtNum(r.rate, r.rate < 100 ? 1 : 0)} ${r.unit} | ${fmtNum(r.p99_ms, 1)} | ${ceiling} | ${r.ratio === null ? '-' : r.ratio.toFixed(3)} | ${r.target ?? '-'} | ${result} |`,
      );
    }
  }
  lines.push('', 'machine load while each bench ran (this 2-core host is shared: other work runs beside it):', '', '| bench | seconds | load avg 1 min before -> after | CPU busy % | idle % | steal % |', '|---|---|---|---|---|---|');
  for (const o of outcomes) {
    if (!o.load) continue;
    const l = o.load;
    lines.push(`| ${o.name} | ${l.seconds.toFixed(0)} | ${l.load1Before.toFixed(2)} -> ${l.load1After.toFixed(2)} | ${l.busy.toFixed(1)} | ${l.idle.toFixed(1)} | ${l.steal.toFixed(1)} |`);
  }
  console.log(lines.join('\n'));
  return ok;
}

/** The agent's curve (apply and one job at 1, 1,000, 10,000 tunnels), from bench:agent's rows at each size. */
function agentCurve(runs: { n: number; rows: BenchRow[] }[]): void {
  const pick = (rows: BenchRow[], prefix: string) => rows.find((r) => r.scenario.startsWith(prefix));
  const apply = runs.map(({ n, rows }) => ({ x: n, y: (pick(rows, 'apply')?.rate ?? NaN) / n }));
  const job = runs.map(({ n, rows }) => ({ x: n, y: pick(rows, 'one-tunnel job')?.rate ?? NaN }));
  console.log('\nagent scaling curve (per-tunnel apply time, one job p50):');
  for (let i = 0; i < runs.length; i++) console.log(`  ${String(runs[i]!.n).padStart(6)} tunnels: apply ${apply[i]!.y.toFixed(3)} ms per tunnel, one job ${job[i]!.y.toFixed(1)} ms`);
  const svg = lineChart({
    title: 'edge agent: apply per tunnel and one job, by tunnels on the edge',
    xLabel: 'tunnels on the agent (log scale)',
    yLabel: 'ms',
    series: [
      { name: 'apply, ms per tunnel', points: apply.filter((p) => Number.isFinite(p.y)) },
      { name: 'one-tunnel job p50, ms', points: job.filter((p) => Number.isFinite(p.y)) },
    ],
  });
  mkdirSync(RESULTS_DIR, { recursive: true });
  writeFileSync(join(RESULTS_DIR, 'agent-curve.svg'), svg);
  console.log(`  plot: bench/results/agent-curve.svg`);
}

async function main(): Promise<void> {
  const asked = (process.argv[2] ?? process.env.BENCH_ALL ?? '').split(',').filter(Boolean);
  const unknown = asked.filter((n) => n !== 'agent-curve' && !BENCHES.some((b) => b.name === n));
  if (unknown.length) {
    console.error(`unknown bench ${unknown.join(', ')}; known: ${BENCHES.map((b) => b.name).join(', ')}, agent-curve`);
    process.exit(2);
  }
  const chosen = asked.length ? BENCHES.filter((b) => asked.includes(b.name)) : BENCHES;
  const curve = process.env.BENCH_AGENT_CURVE === '1' || asked.includes('agent-curve');
  const started = new Date();
  const outcomes: Outcome[] = [];
  for (const b of chosen) outcomes.push(await runBench(b));
  if (curve) {
    const agent = BENCHES.find((b) => b.name === 'agent')!;
    const runs: { n: number; rows: BenchRow[] }[] = [];
    for (const n of AGENT_CURVE) {
      const o = await runBench(agent, { TG_BENCH_N: String(n), TG_BENCH_JOBS: String(Math.min(50, Math.max(1, n))) }, `agent@${n}`);
      outcomes.push(o);
      if (o.status === 'ran') runs.push({ n, rows: o.rows });
    }
    if (runs.length) agentCurve(runs);
  }
  console.log(`\nnpm run bench:all, ${started.toISOString()} to ${new Date().toISOString()}${FULL ? ' (BENCH_FULL=1: the issue sizes)' : ' (default sizes; BENCH_FULL=1 for the issue sizes)'}\n`);
  const ok = printTable(outcomes);
  console.log(ok ? '\nall targets met' : '\nTARGETS MISSED (or a bench failed)');
  if (!ok) process.exitCode = 1;
}

await main();
