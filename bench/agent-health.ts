// Health checks and the status op at scale: N tunnels (default 10,000) on the agent's production
// dataplane in a fresh namespace, each with an origin that answers (the veth stand-in's far end moved into an
// origin namespace, with the origin's policy route `from <origin inner> lookup <table>`, as the origin script
// sets up), then the agent's health scheduler (agent/main.ts startHealth, real timer, real probe) runs for
// TG_BENCH_INTERVALS intervals of AGENT_HEALTH_INTERVAL_S (default 2 x 30 s). Reported: CPU time of this
// process (it is the agent: the same dataplane and scheduler) per interval as a % of one core, heap and RSS
// after each interval (growth), the checks done, and one `status` round's time and JSON size.
//
// This kernel has no GRE: the links are veth pairs (the dataplane's 'veth-standin'), so a probe's cost here is
// the agent's (socket, send, poll, receive) plus a veth hop, not GRE encapsulation.
//
//   npm run bench:agent-health     (root; TG_BENCH_N=2000 for a quicker run; TG_BENCH_ORIGINS=0: status round only)
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDataplane, standinPeerName } from '../agent/dataplane/index.ts';
import { startHealth } from '../agent/main.ts';
import { releaseMemory } from '../agent/housekeeping/memory.ts';
import { BENCH_EDGE_IP, benchTunnel } from './lib/tunnels.ts';
import { rulesetNftText, tunnelsAddNftText } from '../test/netns/ruleset-text.ts';

const N = Number(process.env.TG_BENCH_N ?? 10_000);
const INTERVAL_S = Number(process.env.TG_BENCH_INTERVAL_S ?? 30);
const INTERVALS = Number(process.env.TG_BENCH_INTERVALS ?? 2);
/** TG_BENCH_ORIGINS=0: no origins (their policy rules take minutes to add at 10,000): the status round alone. */
const ORIGINS = process.env.TG_BENCH_ORIGINS !== '0';
/**
 * TG_BENCH_ORIGINS=silent: the links, but no origin behind them, so every probe fails after its whole timeout:
 * what failing probes cost, and how long the libuv threadpool (fs, dns, crypto) makes others wait meanwhile.
 */
const SILENT = process.env.TG_BENCH_ORIGINS === 'silent';
/**
 * Origins per origin namespace (TG_BENCH_ORIGINS_PER_NS, default 500; 10,000 tunnels: 20 namespaces). Each
 * origin's policy route is an `ip rule`, and the kernel walks a namespace's rules in order, twice per probe
 * (the echo's source check and the reply's route). A veth delivers inside the sender's system call, so that
 * walk is billed to the agent: with all 10,000 origins in one namespace it was ~45% of the agent's CPU (perf,
 * fib_rules_lookup, measured here), a cost that grows with the origins sharing a namespace, where a real origin has
 * its one rule on its own host. At 500 a namespace the walk is a twentieth of that.
 */
const ORIGINS_PER_NS = Math.max(1, Number(process.env.TG_BENCH_ORIGINS_PER_NS ?? 500));

if (process.getuid?.() !== 0) {
  console.error('bench/agent-health.ts needs root (network namespaces)');
  process.exit(2);
}

const nsName = (tag: string): string => `tg-hb-${tag}-${randomBytes(3).toString('hex')}`;
const edgeNs = nsName('e');
const originNss = Array.from({ length: Math.max(1, Math.ceil(N / ORIGINS_PER_NS)) }, () => nsName('o'));
/** The origin namespace of tunnel i (0-based). */
const originNsOf = (i: number): string => originNss[Math.floor(i / ORIGINS_PER_NS)]!;
const inNs = (ns: string, ...args: string[]): string => execFileSync('ip', ['netns', 'exec', ns, ...args], { encoding: 'utf8', maxBuffer: 1 << 30 });
/** `ip -batch` in a namespace: one process for thousands of commands. */
function ipBatch(ns: string, lines: string[]): void {
  const f = join(tmpdir(), `${ns}.ip`);
  writeFileSync(f, `${lines.join('\n')}\n`);
  try {
    inNs(ns, 'ip', '-batch', f);
  } finally {
    rmSync(f, { force: true });
  }
}
const ms = (t: number): string => `${(performance.now() - t).toFixed(0)} ms`;

const stateDir = mkdtempSync(join(tmpdir(), 'tg-health-bench-'));
execFileSync('ip', ['netns', 'add', edgeNs]);
for (const ns of originNss) execFileSync('ip', ['netns', 'add', ns]);
let cleanup = (): void => undefined;
try {
  inNs(edgeNs, 'ip', 'link', 'set', 'lo', 'up');
  inNs(edgeNs, 'ip', 'addr', 'add', `${BENCH_EDGE_IP}/32`, 'dev', 'lo');
  for (const ns of originNss) inNs(ns, 'ip', 'link', 'set', 'lo', 'up');
  const tunnels = Array.from({ length: N }, (_, i) => benchTunnel(i + 1));
  let t = performance.now();
  if (!ORIGINS) {
    // The status round reads the table, not the links: load the table with every tunnel's elements and seven
    // counters through `nft -f` (test/netns/ruleset-text.ts, the table's text twin) and make no links, so
    // 10,000 tunnels set up in seconds and leave no 20,000 veths for the kernel to tear down.
    const f = join(tmpdir(), `${edgeNs}.nft`);
    writeFileSync(f, `${rulesetNftText({ table: 'tunnelgate', ifnamePrefix: 'tg-' })}\n${tunnelsAddNftText('tunnelgate', tunnels).join('\n')}\n`);
    try {
      inNs(edgeNs, 'nft', '-f', f);
    } finally {
      rmSync(f, { force: true });
    }
  }
  const dp = await createDataplane({ edgeIp: BENCH_EDGE_IP, nftTable: 'tunnelgate', stateDir, netns: edgeNs, linkKind: 'veth-standin' });
  if (ORIGINS) {
    const r = await dp.reconcile(tunnels);
    console.log(`set-up: ${N} tunnels applied (${r.added} added, ${r.failed.length} failed) in ${ms(t)}`);
  } else console.log(`set-up: ${N} tunnels' elements and counters loaded by nft -f (table ${dp.table}) in ${ms(t)}`);
  t = performance.now();
  if (SILENT) {
    // No origin, but still no ARP on the edge ends: every failing probe would leave an unresolved entry in
    // the kernel's neighbour table, which is one table for every namespace of the host (gc_thresh3, 1,024
    // by default); past it, ARP fails in every other namespace too (tests running beside the bench included).
    ipBatch(edgeNs, tunnels.map((x) => `link set dev ${x.tunnel_name} arp off`));
  }
  if (ORIGINS && !SILENT) {
    // Each far end into the origin namespace: its inner address, up, and the origin's policy route back into it.
    // Point-to-point like GRE: no ARP on either end (with ARP, thousands of veths overflow the kernel's
    // neighbour table, gc_thresh3, and tunnels look down for a reason GRE does not have); the far end takes
    // the edge end's MAC, so frames addressed to it are accepted (as test/netns/edge-protection.test.ts does).
    const macs = new Map((JSON.parse(inNs(edgeNs, 'ip', '-j', 'link', 'show')) as { ifname: string; address: string }[]).map((l) => [l.ifname, l.address]));
    ipBatch(
      edgeNs,
      tunnels.flatMap((x, i) => [`link set dev ${x.tunnel_name} arp off`, `link set dev ${standinPeerName(x.tunnel_name)} address ${macs.get(x.tunnel_name)} arp off netns ${originNsOf(i)}`]),
    );
    originNss.forEach((ns, k) =>
      ipBatch(
        ns,
        tunnels.slice(k * ORIGINS_PER_NS, (k + 1) * ORIGINS_PER_NS).flatMap((x, j) => {
          const peer = standinPeerName(x.tunnel_name);
          const table = 1000 + k * ORIGINS_PER_NS + j;
          return [`addr add ${x.origin_inner} dev ${peer}`, `link set dev ${peer} up`, `route add default dev ${peer} table ${table}`, `rule add from ${x.origin_inner.split('/')[0]} lookup ${table}`];
        }),
      ),
    );
    console.log(`set-up: ${N} origins answering through their tunnel (${originNss.length} origin namespaces of at most ${ORIGINS_PER_NS}) in ${ms(t)}`);
  }
  cleanup = () => void dp.close();

  // One status round before the checks (every tunnel unknown) and one after, timed, with the JSON's size.
  const health = startHealth(ORIGINS ? dp : { desiredTunnels: () => tunnels, probe: (x, o) => dp.probe(x, o), counters: () => dp.counters(), counterPackets: (ns) => dp.counterPackets(ns) }, { intervalS: INTERVAL_S, timer: false });
  const statusRound = async (label: string): Promise<void> => {
    const s0 = performance.now();
    const cpu0 = process.cpuUsage();
    const result = await health.status();
    const line = JSON.stringify({ ok: true, jti: '00000000-0000-4000-8000-000000000000', op: 'status', result });
    const cpu = process.cpuUsage(cpu0);
    const byHealth: Record<string, number> = {};
    for (const x of result.tunnels) byHealth[x.health] = (byHealth[x.health] ?? 0) + 1;
    console.log(`status round (${label}): ${(performance.now() - s0).toFixed(0)} ms wall, ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms CPU, ${result.tunnels.length} tunnels, result line ${(line.length / 1024).toFixed(0)} KiB; health ${JSON.stringify(byHealth)}`);
  };
  await statusRound('before checks');

  // The checks, on the real timer, over whole intervals.
  releaseMemory();
  const mem0 = process.memoryUsage();
  console.log(`before checks: heap ${(mem0.heapUsed / 2 ** 20).toFixed(1)} MiB, rss ${(mem0.rss / 2 ** 20).toFixed(1)} MiB`);
  if (ORIGINS) health.scheduler.start();
  for (let k = 1; k <= (ORIGINS ? INTERVALS : 0); k++) {
    const cpu0 = process.cpuUsage();
    const w0 = performance.now();
    const checks0 = health.scheduler.stats.checks;
    // With silent origins, the threadpool's latency meanwhile: an fs.stat (a threadpool job) one after the
    // other through the interval. Not otherwise: its own CPU would count in the checks' figure.
    const pool: number[] = [];
    let sampling = SILENT;
    const sampler = (async () => {
      while (sampling) {
        const p0 = performance.now();
        await stat(stateDir);
        pool.push(performance.now() - p0);
        await new Promise((res) => setTimeout(res, 20));
      }
    })();
    await new Promise((res) => setTimeout(res, INTERVAL_S * 1000));
    sampling = false;
    await sampler;
    pool.sort((a, b) => a - b);
    if (SILENT)
      console.log(`interval ${k}: threadpool latency (fs.stat) p50 ${pool[Math.floor(pool.length / 2)]!.toFixed(1)} ms, p99 ${pool[Math.floor(pool.length * 0.99)]!.toFixed(1)} ms, max ${pool.at(-1)!.toFixed(1)} ms (${pool.length} samples)`);
    const cpu = process.cpuUsage(cpu0);
    const wall = performance.now() - w0;
    const rssBefore = process.memoryUsage.rss();
    // What the agent's housekeeping does when idle (housekeeping/memory.ts): a full collection and malloc_trim.
    // RSS before it counts freed native memory glibc still holds; after it, what is really kept.
    releaseMemory();
    const m = process.memoryUsage();
    const pct = ((cpu.user + cpu.system) / 1000 / wall) * 100;
    const checks = health.scheduler.stats.checks - checks0;
    // The whole process's CPU over the interval divided by its checks (so idle costs count against them), and
    // that per-check cost at the scale: 10,000 tunnels each checked once per 30 s, 333 checks a second.
    const perCheckMs = (cpu.user + cpu.system) / 1000 / Math.max(1, checks);
    console.log(
      `interval ${k}: ${checks} checks in ${(wall / 1000).toFixed(1)} s, CPU ${((cpu.user + cpu.system) / 1000).toFixed(0)} ms = ${pct.toFixed(2)}% of one core, ${perCheckMs.toFixed(3)} ms per check (user ${(cpu.user / 1000 / Math.max(1, checks)).toFixed(3)}, system ${(cpu.system / 1000 / Math.max(1, checks)).toFixed(3)}) = ${((perCheckMs * 10_000) / 300).toFixed(1)}% of one core at 10,000 tunnels / 30 s; heap ${(m.heapUsed / 2 ** 20).toFixed(1)} MiB, external ${(m.external / 2 ** 20).toFixed(1)} MiB, rss ${(rssBefore / 2 ** 20).toFixed(1)} MiB, after release ${(m.rss / 2 ** 20).toFixed(1)} MiB`,
    );
  }
  await health.stop();
  console.log(`checks: ${JSON.stringify(health.scheduler.stats)}`);
  await statusRound('after checks');
} finally {
  cleanup();
  for (const ns of [edgeNs, ...originNss]) {
    try {
      execFileSync('ip', ['netns', 'del', ns]);
    } catch {
      // already gone
    }
  }
  rmSync(stateDir, { recursive: true, force: true });
}
