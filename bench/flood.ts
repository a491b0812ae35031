// Flood benchmark (the attack work's figures, docs/BENCHMARKS.md "Flood"): for each attack vector (closed port,
// spoofed SYN on a SYN-proxied port, over-limit sources, fragments), the flood packets the edge drops per CPU-second,
// against a ceiling measured in the same run: the same flood against an edge whose table is one `drop` rule at the
// agent's earliest hook and priority (prerouting -450). And a legitimate client's TCP throughput (iperf3, through a
// protected IP of another tunnel) during each flood, against without. At a small lab (the two flood targets and the
// legitimate client's tunnel: 3) and at N tunnels (default 10,000). Labs: bench/lib/flood-lab.ts.
//
// The cost of a drop. veth hands a packet to the receiving namespace in the SENDER's context, and this kernel has no
// IRQ time accounting, so without care the edge's work is charged to the generator and cannot be told from the
// generator's own (building packets, the raw socket's send path). Here the edge's links steer their receive work to
// one CPU (RPS: the edge CPU, TG_BENCH_EDGE_CPU, default 0) and the generator is pinned to the other (taskset): every
// hook of the edge then runs in NET_RX softirq on the edge CPU, and that CPU's softirq time in /proc/stat (ticks at
// CONFIG_HZ, read as USER_HZ) over the flood is what the edge spent. Rate = drops counted by the table / those
// seconds. Other work's softirq on the edge CPU in the window is counted too (measured alone at the start and
// printed: the background). Packets the edge CPU could not take in time are dropped by the kernel's backlog before
// any hook: neither counted as drops nor as cost.
//
// The legitimate client. iperf3's client and server are pinned to the edge CPU as well, so the edge's drop work and
// the legitimate path share one CPU as on a real edge, while the generator's own CPU (a stand-in for the attacker's
// machines) takes nothing from them. The flood is the same full-speed flood.
//
// Where a target is missed, one more flood of that vector runs under `perf record -C <edge CPU>` and the row's note
// names the symbols that took the most of the edge CPU (the profile is kept with TG_BENCH_PERF=DIR).
//
//   npm run bench:flood                       (root) 10,000 tunnels, 2,000,000 packets a flood, 5 rounds
//   TG_BENCH_N=2000 TG_BENCH_PACKETS=500000 TG_BENCH_ROUNDS=3   a quicker run (bench:all's sizes)
//   TG_BENCH_VECTORS=closed,syn               a subset of closed, syn, overlimit, frag
//   TG_BENCH_LEGIT_SECONDS=4                  each iperf3 run (0: no legitimate-client figures)
//   TG_BENCH_PERF=DIR                         keep the profiles of missed vectors in DIR/<lab>-<vector>.data
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CeilingLab, OurLab, floodTunnels, type FloodLab } from './lib/flood-lab.ts';
import { VECTORS, meets, median, perCpuSecond, pickVectors, ratio, type Vector } from './lib/flood-vectors.ts';
import { ROOT } from './lib/process.ts';
import { busyTicks, parseProcStat, tickSeconds, ticksDelta, type CpuTicks } from './lib/proc-stat.ts';
import { report } from './lib/report.ts';

const N = Number(process.env.TG_BENCH_N ?? 10_000);
const SMALL = 3;
const PACKETS = Number(process.env.TG_BENCH_PACKETS ?? 2_000_000);
const ROUNDS = Number(process.env.TG_BENCH_ROUNDS ?? 5);
// iperf3 is a Debian package (apt-get install iperf3); without it the legitimate client's figures are left out, said so.
const HAS_IPERF = spawnSync('iperf3', ['--version']).status === 0;
const LEGIT_SECONDS = HAS_IPERF ? Number(process.env.TG_BENCH_LEGIT_SECONDS ?? 4) : 0;
const EDGE_CPU = Number(process.env.TG_BENCH_EDGE_CPU ?? 0);
const GEN_CPU = EDGE_CPU === 0 ? 1 : 0;
const MAX_FLOOD_SECONDS = 60;
const TARGET = 0.8;
const VECS = pickVectors(process.env.TG_BENCH_VECTORS);

if (process.getuid?.() !== 0) {
  console.error('bench/flood.ts needs root (network namespaces)');
  process.exit(2);
}

const cpuNow = (): Map<number, CpuTicks> => parseProcStat(readFileSync('/proc/stat', 'utf8'));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const kpps = (x: number): string => `${(x / 1000).toFixed(0)} kpps`;
const mbit = (x: number): string => `${(x / 1e6).toFixed(0)} Mbit/s`;

function compile(dir: string): string {
  const bin = join(dir, 'raw-flood');
  const r = spawnSync('cc', ['-O2', '-o', bin, join(ROOT, 'bench/lib/raw-flood.c')], { encoding: 'utf8' });
  if (r.error || r.status !== 0) throw new Error(`bench:flood needs a C compiler (cc) for its generator: ${r.error?.message ?? r.stderr}`);
  return bin;
}

/** Waits until the lab's counter for `v` stops moving: the edge CPU's backlog drained after the generator ended. */
async function settled(lab: FloodLab, v: Vector): Promise<number> {
  let last = await lab.dropped(v);
  for (let i = 0; i < 50; i++) {
    await sleep(30);
    const now = await lab.dropped(v);
    if (now === last) return now;
    last = now;
  }
  return last;
}

interface Measured {
  dropped: number;
  sent: number;
  /** The edge CPU's softirq seconds in the window, and its busy seconds. */
  edgeSoftirq: number;
  edgeBusy: number;
  /** The whole machine's busy seconds less the generator's own CPU time: the other way to count, printed beside. */
  machineLessGen: number;
  rate: number;
}

/** One flood of `v` at `lab`, measured. `wrap`: a command in front of the generator (perf record). */
async function measure(lab: FloodLab, bin: string, v: Vector, count = PACKETS, wrap: string[] = []): Promise<Measured> {
  const d0 = await lab.dropped(v);
  const c0 = cpuNow();
  const f = lab.flood(bin, v, count, MAX_FLOOD_SECONDS, wrap);
  const d1 = await settled(lab, v);
  const c1 = cpuNow();
  const edge = ticksDelta(c0.get(EDGE_CPU)!, c1.get(EDGE_CPU)!);
  const all = ticksDelta(c0.get(-1)!, c1.get(-1)!);
  const dropped = d1 - d0;
  const edgeSoftirq = tickSeconds(edge.softirq);
  return { dropped, sent: f.sent, edgeSoftirq, edgeBusy: tickSeconds(busyTicks(edge)), machineLessGen: tickSeconds(busyTicks(all)) - f.genCpuNs / 1e9, rate: perCpuSecond(dropped, edgeSoftirq) };
}

/** The edge CPU's softirq share while nothing of ours runs: other work's, counted in every window too. */
async function background(seconds: number): Promise<number> {
  const c0 = cpuNow();
  await sleep(seconds * 1000);
  const c1 = cpuNow();
  const d = ticksDelta(c0.get(EDGE_CPU)!, c1.get(EDGE_CPU)!);
  return d.softirq / (busyTicks(d) + d.idle + d.iowait + d.steal || 1);
}

/** The top symbols of a profile of the edge CPU, as "12.3% sym" strings. */
function topSymbols(data: string, n: number): string[] {
  const r = spawnSync('perf', ['report', '-i', data, '--no-children', '--sort', 'symbol', '--stdio', '-q', '--percent-limit', '1'], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) return [`perf report failed: ${r.stderr.trim().split('\n')[0]}`];
  return r.stdout
    .split('\n')
    .map((l) => /^\s*([\d.]+)%\s+\[[^\]]*\]\s+(\S.*)$/.exec(l))
    .filter((m): m is RegExpExecArray => m !== null)
    .slice(0, n)
    // perf pads the symbol column and ends it with the source columns' dashes.
    .map((m) => `${m[1]}% ${m[2]!.replace(/(\s+-)+\s*$/, '').trim()}`);
}

/** One more flood under `perf record` on the edge CPU: where the edge's cycles went. */
async function profile(lab: FloodLab, bin: string, v: Vector, dir: string): Promise<string[]> {
  if (spawnSync('perf', ['--version']).status !== 0) return ['perf not available'];
  const data = join(dir, `${lab.label}-${v.name}.data`);
  await measure(lab, bin, v, PACKETS, ['perf', 'record', '-q', '-C', String(EDGE_CPU), '-o', data, '--']);
  // Every sample of the edge CPU, other work's on it included (the share of each symbol is of them all).
  return topSymbols(data, 8);
}

/**
 * Packets the edge CPU's backlog turned away so far (/proc/net/softnet_stat, one line per CPU, its second field): RPS
 * queues every packet of the edge's links there, and a full queue drops the legitimate client's with the flood's.
 */
function backlogDrops(): number {
  const line = readFileSync('/proc/net/softnet_stat', 'utf8').split('\n')[EDGE_CPU] ?? '';
  return parseInt(line.trim().split(/\s+/)[1] ?? '0', 16);
}

/** One iperf3 run, alone or beside a flood of `v`; also the edge CPU's split over the run and its backlog's drops. */
async function legitRun(lab: OurLab, bin: string, v: Vector | null): Promise<{ bps: number; softirq: number; user: number; system: number; backlog: number }> {
  const c0 = cpuNow();
  const b0 = backlogDrops();
  let bps: number;
  if (v) {
    const gen = lab.floodInBackground(bin, v, 1_000_000_000, LEGIT_SECONDS + 2);
    await sleep(300);
    try {
      bps = await lab.iperfRun(LEGIT_SECONDS);
    } finally {
      await new Promise((r) => (gen.exitCode !== null ? r(null) : gen.once('exit', r)));
    }
  } else {
    bps = await lab.iperfRun(LEGIT_SECONDS);
  }
  const d = ticksDelta(c0.get(EDGE_CPU)!, cpuNow().get(EDGE_CPU)!);
  const total = busyTicks(d) + d.idle + d.iowait + d.steal || 1;
  return { bps, softirq: d.softirq / total, user: (d.user + d.nice) / total, system: d.system / total, backlog: backlogDrops() - b0 };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'tg-flood-bin-'));
  const perfDir = process.env.TG_BENCH_PERF ?? join(dir, 'perf');
  mkdirSync(perfDir, { recursive: true });
  const labs: FloodLab[] = [];
  try {
    const bin = compile(dir);
    const small = floodTunnels(SMALL);
    console.log(`flood benchmark: ${PACKETS} packets a flood, ${ROUNDS} rounds; vectors ${VECS.map((v) => v.name).join(', ')}; labs at ${SMALL} and ${N} tunnels (veth stand-ins for GRE); edge CPU ${EDGE_CPU}, generator CPU ${GEN_CPU}`);
    if (!HAS_IPERF) console.log('iperf3 is not installed (apt-get install iperf3): no legitimate-client figures this run');
    const bg = await background(2);
    console.log(`background: ${(bg * 100).toFixed(1)}% of the edge CPU in softirq with nothing of ours running`);

    const ceiling = new CeilingLab(EDGE_CPU, GEN_CPU, { proxied: small.proxied.protected_ip, limited: small.limited.protected_ip });
    labs.push(ceiling);
    const ours: OurLab[] = [];
    for (const [label, n] of [[`${SMALL} tunnels`, SMALL], [`${N} tunnels`, N]] as const) {
      const lab = new OurLab(label, EDGE_CPU, GEN_CPU);
      labs.push(lab);
      ours.push(lab);
      const t0 = performance.now();
      await lab.build(n);
      console.log(`set-up: ${label} applied in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    for (const lab of labs) await lab.waitForPath(bin, VECTORS[0]!);
    for (const lab of ours) if (LEGIT_SECONDS > 0) await lab.startIperf();
    // A warm-up flood each: the first packets build the meter's elements and the SYN proxy's state.
    for (const lab of labs) for (const v of VECS) await measure(lab, bin, v, Math.min(PACKETS, 200_000));

    // Drops per CPU-second, rounds interleaved (ceiling, small, large for each vector) so a noisy host's moments fall
    // on all alike; ratios are taken within each round too.
    const rates = new Map<string, number[]>();
    const roundRatios = new Map<string, number[]>();
    const push = (m: Map<string, number[]>, k: string, x: number) => m.set(k, [...(m.get(k) ?? []), x]);
    for (let r = 0; r < ROUNDS; r++) {
      for (const v of VECS) {
        const c = await measure(ceiling, bin, v);
        push(rates, `ceiling/${v.name}`, c.rate);
        console.log(`round ${r + 1} ${v.name.padEnd(9)} ceiling     ${kpps(c.rate)} per edge CPU-second (${c.dropped} of ${c.sent} dropped, ${c.edgeSoftirq.toFixed(2)} s softirq, ${c.edgeBusy.toFixed(2)} s busy; machine less generator ${c.machineLessGen.toFixed(2)} s)`);
        for (const lab of ours) {
          const m = await measure(lab, bin, v);
          push(rates, `${lab.label}/${v.name}`, m.rate);
          push(roundRatios, `${lab.label}/${v.name}`, ratio(m.rate, c.rate));
          const inv = v.name === 'syn' ? `, invalid ${await lab.invalid()}` : '';
          console.log(`round ${r + 1} ${v.name.padEnd(9)} ${lab.label.padEnd(11)} ${kpps(m.rate)} per edge CPU-second (${m.dropped} of ${m.sent} dropped, ${m.edgeSoftirq.toFixed(2)} s softirq, ${m.edgeBusy.toFixed(2)} s busy; machine less generator ${m.machineLessGen.toFixed(2)} s${inv}); ${ratio(m.rate, c.rate).toFixed(3)}x the ceiling`);
        }
      }
    }

    // The legitimate client: unflooded, then beside each vector's flood, rounds interleaved.
    const legit = new Map<string, number[]>();
    const legitRatios = new Map<string, number[]>();
    const legitSplit = new Map<string, string>();
    if (LEGIT_SECONDS > 0) {
      for (let r = 0; r < ROUNDS; r++) {
        for (const lab of ours) {
          const base = await legitRun(lab, bin, null);
          push(legit, `${lab.label}/none`, base.bps);
          for (const v of VECS) {
            const f = await legitRun(lab, bin, v);
            push(legit, `${lab.label}/${v.name}`, f.bps);
            push(legitRatios, `${lab.label}/${v.name}`, f.bps / base.bps);
            const split = `edge CPU ${(f.softirq * 100).toFixed(0)}% softirq (the edge: drops and forwarding), ${(f.system * 100).toFixed(0)}% system, ${(f.user * 100).toFixed(0)}% user (iperf3); its backlog turned away ${f.backlog} packets (${base.backlog} unflooded)`;
            legitSplit.set(`${lab.label}/${v.name}`, split);
            console.log(`round ${r + 1} legit ${lab.label.padEnd(11)} ${mbit(base.bps)} alone, ${mbit(f.bps)} beside the ${v.name} flood (${(f.bps / base.bps).toFixed(3)}x; ${split})`);
          }
        }
      }
    }

    console.log('');
    const summary: Record<string, unknown> = { n: N, small: SMALL, packets_per_flood: PACKETS, rounds: ROUNDS, edge_cpu_background_softirq: +bg.toFixed(4) };
    for (const v of VECS) {
      const cm = median(rates.get(`ceiling/${v.name}`)!);
      for (const lab of ours) {
        const key = `${lab.label}/${v.name}`;
        const m = median(rates.get(key)!);
        const rm = ratio(m, cm);
        const rr = median(roundRatios.get(key)!);
        const pass = meets(rm, TARGET);
        let note = `${ROUNDS} rounds, ${PACKETS} packets a flood; median of per-round ratios ${rr.toFixed(3)}`;
        if (!pass) {
          const top = await profile(lab, bin, v, perfDir);
          note += `; edge CPU (perf) ${top.join(', ')}`;
          console.log(`${v.name} at ${lab.label} misses ${TARGET}: where the edge CPU went: ${top.join('; ')}`);
        }
        summary[`${key}`] = { pps_per_cpu_s: Math.round(m), ceiling: Math.round(cm), ratio: +rm.toFixed(3), median_round_ratio: +rr.toFixed(3) };
        console.log(`${v.name.padEnd(9)} ${lab.label.padEnd(11)} ${kpps(m)} per edge CPU-second vs ceiling ${kpps(cm)}: ${rm.toFixed(3)}x (per-round median ${rr.toFixed(3)}x; target >= ${TARGET})`);
        report({ scenario: `flood drops: ${v.title}, ${lab.label}`, rate: m, unit: 'drops/CPU s', ceiling: 'one drop rule at prerouting -450', ceiling_rate: cm, ratio: rm, target: `>= ${TARGET}`, pass, note });
      }
    }
    if (LEGIT_SECONDS > 0) {
      for (const lab of ours) {
        const base = median(legit.get(`${lab.label}/none`)!);
        for (const v of VECS) {
          const key = `${lab.label}/${v.name}`;
          const f = median(legit.get(key)!);
          const rm = f / base;
          const rr = median(legitRatios.get(key)!);
          const pass = meets(rm, TARGET);
          let note = `iperf3 TCP ${LEGIT_SECONDS} s, ${ROUNDS} rounds; median of per-round ratios ${rr.toFixed(3)}`;
          if (!pass) note += `; ${legitSplit.get(key)}`;
          summary[`legit ${key}`] = { bps: Math.round(f), unflooded_bps: Math.round(base), ratio: +rm.toFixed(3), median_round_ratio: +rr.toFixed(3) };
          console.log(`legit     ${lab.label.padEnd(11)} ${mbit(f)} beside the ${v.name} flood vs ${mbit(base)} alone: ${rm.toFixed(3)}x (per-round median ${rr.toFixed(3)}x; target >= ${TARGET})`);
          report({ scenario: `legitimate client during the flood: ${v.title}, ${lab.label}`, rate: f / 1e6, unit: 'Mbit/s', ceiling: 'the same client unflooded', ceiling_rate: base / 1e6, ratio: rm, target: `>= ${TARGET}`, pass, note });
        }
      }
    }
    console.log(JSON.stringify(summary));
  } finally {
    for (const lab of labs) await lab.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
