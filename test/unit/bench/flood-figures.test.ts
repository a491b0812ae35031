// bench:flood's pure parts (docs/BENCHMARKS.md "Flood"): the /proc/stat reading its cost per drop rests on, the
// vector list it takes from TG_BENCH_VECTORS, and the median and ratio arithmetic of its rows.
import { describe, expect, it } from 'vitest';
import { meets, median, perCpuSecond, pickVectors, ratio, VECTORS } from '../../../bench/lib/flood-vectors.ts';
import { busyTicks, parseProcStat, tickSeconds, ticksDelta } from '../../../bench/lib/proc-stat.ts';

const STAT = [
  'cpu  5028517 80496 906321 1021067 10747 0 75747 57168 0 0',
  'cpu0 2512347 42525 442237 525657 3162 0 36734 27449 0 0',
  'cpu1 2516170 37970 464083 495410 7585 0 39013 29719 0 0',
  'intr 123 4 5',
  'ctxt 999',
].join('\n');

describe('/proc/stat per CPU', () => {
  it('reads each cpuN line by number and the sum under -1, ignoring the other lines', () => {
    const s = parseProcStat(STAT);
    expect([...s.keys()]).toEqual([-1, 0, 1]);
    expect(s.get(0)).toEqual({ user: 2512347, nice: 42525, system: 442237, idle: 525657, iowait: 3162, irq: 0, softirq: 36734, steal: 27449 });
    expect(s.get(-1)!.softirq).toBe(75747);
  });

  it('answers the softirq and busy ticks between two readings, and ticks as seconds at USER_HZ', () => {
    const before = parseProcStat(STAT).get(0)!;
    const after = { ...before, user: before.user + 10, softirq: before.softirq + 150, idle: before.idle + 40, steal: before.steal + 7 };
    const d = ticksDelta(before, after);
    expect(d.softirq).toBe(150);
    // Idle and stolen time are not busy: the edge CPU ran nothing of its own then.
    expect(busyTicks(d)).toBe(160);
    expect(tickSeconds(d.softirq)).toBe(1.5);
  });

  it('refuses a malformed cpu line rather than counting it as zero', () => {
    expect(() => parseProcStat('cpu0 1 2 x 4 5 6 7 8')).toThrow(/malformed/);
  });
});

describe('vectors and figures', () => {
  it('takes every vector by default and a named subset in the table order; an unknown name is refused', () => {
    expect(pickVectors(undefined).map((v) => v.name)).toEqual(['closed', 'syn', 'overlimit', 'frag']);
    expect(pickVectors('frag, closed').map((v) => v.name)).toEqual(['closed', 'frag']);
    expect(() => pickVectors('closed,smurf')).toThrow(/unknown vector smurf/);
  });

  it('floods the spoofed SYNs from many sources and the over-limit flood from a few, the rest from one', () => {
    const by = Object.fromEntries(VECTORS.map((v) => [v.name, v]));
    expect(by.syn!.sources).toBeGreaterThan(1000);
    expect(by.overlimit!.sources).toBe(16);
    expect([by.closed!.sources, by.frag!.sources]).toEqual([1, 1]);
  });

  it('takes medians (the upper of an even count), rates per CPU-second and ratios, NaN where there is nothing to divide by', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(3);
    expect(median([])).toBeNaN();
    expect(perCpuSecond(1_000_000, 0.5)).toBe(2_000_000);
    expect(perCpuSecond(10, 0)).toBeNaN();
    expect(ratio(800, 1000)).toBe(0.8);
    expect(ratio(1, 0)).toBeNaN();
  });

  it('meets an "at least" target at the bound itself, never with NaN', () => {
    expect(meets(0.8, 0.8)).toBe(true);
    expect(meets(0.799, 0.8)).toBe(false);
    expect(meets(NaN, 0.8)).toBe(false);
  });
});
