// Per-CPU time from /proc/stat, for bench:flood's cost per dropped packet (docs/BENCHMARKS.md "Flood"): the edge's
// receive work runs in softirq context on the CPU its upstream link steers packets to, and this kernel charges
// softirq time by the tick (no IRQ time accounting), so that CPU's softirq column over a flood is the edge's cost.
// Pure parsing and arithmetic here; the reading is one readFileSync in the caller.

/** USER_HZ: /proc/stat counts in these ticks per second on Linux. */
export const USER_HZ = 100;

/** One CPU's counters, in USER_HZ ticks (proc(5) order). */
export interface CpuTicks {
  user: number;
  nice: number;
  system: number;
  idle: number;
  iowait: number;
  irq: number;
  softirq: number;
  steal: number;
}

const FIELDS = ['user', 'nice', 'system', 'idle', 'iowait', 'irq', 'softirq', 'steal'] as const;

/** The `cpuN` lines of /proc/stat's text, by CPU number ("cpu" alone, the sum, under key -1). */
export function parseProcStat(text: string): Map<number, CpuTicks> {
  const out = new Map<number, CpuTicks>();
  for (const line of text.split('\n')) {
    const m = /^cpu(\d*)\s+(.*)$/.exec(line);
    if (!m) continue;
    const nums = m[2]!.trim().split(/\s+/).map(Number);
    if (nums.length < FIELDS.length || nums.some((n) => !Number.isFinite(n))) throw new Error(`/proc/stat: malformed line "${line}"`);
    const t = Object.fromEntries(FIELDS.map((f, i) => [f, nums[i]!])) as unknown as CpuTicks;
    out.set(m[1] === '' ? -1 : Number(m[1]), t);
  }
  return out;
}

/** after - before, field by field. */
export function ticksDelta(before: CpuTicks, after: CpuTicks): CpuTicks {
  return Object.fromEntries(FIELDS.map((f) => [f, after[f] - before[f]])) as unknown as CpuTicks;
}

/** Busy ticks: everything but idle, iowait and steal (time the CPU ran something, softirq included). */
export const busyTicks = (t: CpuTicks): number => t.user + t.nice + t.system + t.irq + t.softirq;

/** Ticks as seconds. */
export const tickSeconds = (ticks: number): number => ticks / USER_HZ;
