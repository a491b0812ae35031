// CPU time spent by given processes (user + system, from /proc/PID/stat), so a benchmark can report
// the cost of one request on each side (server, database backends) as well as the throughput, which a
// machine shared with other work moves around far more than it moves the cost.
import { readFileSync } from 'node:fs';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** CPU milliseconds used so far by `pid` (0 when it is gone). */
export function cpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may contain spaces: it ends at the last ')'.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

export const totalCpuMs = (pids: readonly number[]): number => pids.reduce((s, p) => s + cpuMs(p), 0);
