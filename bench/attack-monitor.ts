// Attack detection's cost at scale (docs/CONTRACTS.md "Attacks"; agent/attacks/monitor.ts): N tunnels (default
// 10,000) in the agent's production table in a fresh namespace, loaded by `nft -f` (their counters and elements,
// no links: the monitor reads the table, not the links), then
//   1. the counter read alone (DataplaneHandle.counters: one netlink dump of every named counter, 7 a tunnel),
//      timed TG_BENCH_TICKS times: what the once-a-second tick pays before the detector runs;
//   2. the monitor's tick (read + detector + journal), with an injected clock one second apart, TG_BENCH_TICKS
//      times; CPU a tick is the share of one core the detection takes at one tick a second;
//   3. the detector alone over synthetic counters (no kernel), TG_BENCH_TICKS rounds of N observations;
//   4. the detector's memory with every tunnel's baseline full (600 observations each, counters moving), heap
//      before and after (--expose-gc).
// The baseline measured in the same run is one `status` round's read (the same dump, which the agent already
// makes every 30 s): the tick's ratio to it says what reading once a second adds.
//
//   npm run bench:attack-monitor       (root; TG_BENCH_N=2000 for a quicker run)
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDataplane } from '../agent/dataplane/index.ts';
import { AttackMonitor } from '../agent/attacks/monitor.ts';
import { AttackDetector } from '../agent/attacks/detector.ts';
import { BENCH_EDGE_IP, benchTunnel } from './lib/tunnels.ts';
import { report } from './lib/report.ts';
import { rulesetNftText, tunnelsAddNftText } from '../test/netns/ruleset-text.ts';

const N = Number(process.env.TG_BENCH_N ?? 10_000);
const TICKS = Number(process.env.TG_BENCH_TICKS ?? 20);

if (process.getuid?.() !== 0) {
  console.error('bench/attack-monitor.ts needs root (network namespaces)');
  process.exit(2);
}
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  console.error('run with --expose-gc (npm run bench:attack-monitor does)');
  process.exit(2);
}

const ns = `tg-am-${randomBytes(3).toString('hex')}`;
const inNs = (...args: string[]): string => execFileSync('ip', ['netns', 'exec', ns, ...args], { encoding: 'utf8', maxBuffer: 1 << 30 });
const cpuMs = (c: NodeJS.CpuUsage): number => (c.user + c.system) / 1000;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const memTunnels = Array.from({ length: N }, (_, i) => benchTunnel(i + 1).id);
const zeros = { not_allowed: 0, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 };
gc();
const heap0 = process.memoryUsage().heapUsed;
const ext0 = process.memoryUsage().external;
const full = new AttackDetector();
for (let r = 0; r <= 600; r++) for (let i = 0; i < N; i++) full.observe(r * 1000, { id: memTunnels[i]!, counters: { packets_in: r * (100 + i), bytes_in: r * 50_000, dropped: zeros } });
gc();
const heap = process.memoryUsage().heapUsed - heap0;
const buffers = process.memoryUsage().external - ext0;
console.log(`detector memory, ${full.size} tunnels with full baselines: heap +${(heap / 2 ** 20).toFixed(1)} MiB, external +${(buffers / 2 ** 20).toFixed(1)} MiB (${((heap + buffers) / N).toFixed(0)} B a tunnel)`);
const stateDir = mkdtempSync(join(tmpdir(), 'tg-attack-bench-'));
execFileSync('ip', ['netns', 'add', ns]);
try {
  inNs('ip', 'link', 'set', 'lo', 'up');
  inNs('ip', 'addr', 'add', `${BENCH_EDGE_IP}/32`, 'dev', 'lo');
  const tunnels = Array.from({ length: N }, (_, i) => benchTunnel(i + 1));
  const f = join(tmpdir(), `${ns}.nft`);
  writeFileSync(f, `${rulesetNftText({ table: 'tunnelgate', ifnamePrefix: 'tg-' })}\n${tunnelsAddNftText('tunnelgate', tunnels).join('\n')}\n`);
  try {
    inNs('nft', '-f', f);
  } finally {
    rmSync(f, { force: true });
  }
  const dp = await createDataplane({ edgeIp: BENCH_EDGE_IP, nftTable: 'tunnelgate', stateDir, netns: ns, linkKind: 'veth-standin' });
  try {
    // 1. The read alone (warm once first: the socket, the JIT).
    await dp.counters();
    const readWall: number[] = [];
    const readCpu: number[] = [];
    let counted = 0;
    for (let k = 0; k < TICKS; k++) {
      const c0 = process.cpuUsage();
      const w0 = performance.now();
      counted = (await dp.counters()).size;
      readWall.push(performance.now() - w0);
      readCpu.push(cpuMs(process.cpuUsage(c0)));
    }
    console.log(`counter read: ${counted} counters, median ${median(readWall).toFixed(1)} ms wall, ${median(readCpu).toFixed(1)} ms CPU (${TICKS} reads)`);

    // 2. The monitor's tick over the real read, one injected second apart.
    let now = Date.now();
    const monitor = new AttackMonitor({ tunnels: () => tunnels, counters: () => dp.counters(), now: () => now });
    await monitor.tick();
    const tickWall: number[] = [];
    const tickCpu: number[] = [];
    for (let k = 0; k < TICKS; k++) {
      now += 1000;
      const c0 = process.cpuUsage();
      const w0 = performance.now();
      await monitor.tick();
      tickWall.push(performance.now() - w0);
      tickCpu.push(cpuMs(process.cpuUsage(c0)));
    }
    const tickMs = median(tickCpu);
    console.log(`monitor tick: median ${median(tickWall).toFixed(1)} ms wall, ${tickMs.toFixed(1)} ms CPU = ${(tickMs / 10).toFixed(1)}% of one core at one tick a second (${TICKS} ticks)`);
    // What the timer does with reads this slow (monitor.ts pace): one tick every `paced` ms.
    monitor.stats.lastReadMs = median(readWall);
    const paced = monitor.pace();
    console.log(`paced: one tick every ${paced} ms, so about ${((tickMs / paced) * 100).toFixed(1)}% of one core`);

    // 3. The detector alone: N observations a round over counters that move.
    const det = new AttackDetector();
    const round = (r: number) => {
      for (let i = 0; i < N; i++) det.observe(r * 1000, { id: tunnels[i]!.id, counters: { packets_in: r * (100 + i), bytes_in: r * (100 + i) * 500, dropped: zeros } });
    };
    round(0);
    const detCpu: number[] = [];
    for (let r = 1; r <= TICKS; r++) {
      const c0 = process.cpuUsage();
      round(r);
      detCpu.push(cpuMs(process.cpuUsage(c0)));
    }
    console.log(`detector alone: median ${median(detCpu).toFixed(1)} ms CPU a round of ${N} observations`);

    const statusReadMs = median(readCpu);
    report({
      scenario: `attack detection tick, ${N} tunnels (CPU ms a tick)`,
      rate: Number(tickMs.toFixed(1)),
      unit: 'ms CPU',
      ceiling: 'one counter dump (the status round already makes one every 30 s)',
      ceiling_rate: Number(statusReadMs.toFixed(1)),
      ratio: Number((tickMs / statusReadMs).toFixed(2)),
      target: null,
      pass: null,
      note: `${(tickMs / 10).toFixed(1)}% of one core at a tick a second; paced to one every ${paced} ms; detector alone ${median(detCpu).toFixed(1)} ms; memory ${((heap + buffers) / N).toFixed(0)} B a tunnel`,
    });
  } finally {
    await dp.close();
  }
} finally {
  try {
    execFileSync('ip', ['netns', 'del', ns]);
  } catch {
    // already gone
  }
  rmSync(stateDir, { recursive: true, force: true });
}
