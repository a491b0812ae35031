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

/** Each process's CPU milliseconds now, by pid: the start of a cpuSinceMs() measurement. */
export const cpuSnapshot = (pids: readonly number[]): Map<number, number> => new Map(pids.map((p) => [p, cpuMs(p)]));

/**
 * CPU milliseconds `pids` used since `before`: a process started since counts whole, and one that ended
 * meanwhile counts nothing (its time can no longer be read), where summing totals before and after made
 * a database backend that closed during a run subtract its whole past, and the figure negative.
 */
export function cpuSinceMs(before: ReadonlyMap<number, number>, pids: readonly number[]): number {
  let ms = 0;
  for (const p of pids) {
    const now = cpuMs(p);
    if (now > 0) ms += now - Math.min(now, before.get(p) ?? 0);
  }
  return ms;
}
