// The baseline's one-byte log coding and its p95 (agent/attacks/baseline.ts).
import { describe, expect, it } from 'vitest';
import { BASELINE_SAMPLES, RateBaseline, decodeRate, encodeRate } from '../../../agent/attacks/baseline.ts';

describe('rate coding', () => {
  it('every rate from 1 pps to 4 billion comes back within 4.5%; below 1 pps is 0; codes only grow', () => {
    let prev = 0;
    for (let pps = 1; pps < 4e9; pps *= 1.013) {
      const code = encodeRate(pps);
      expect(code).toBeGreaterThanOrEqual(prev);
      expect(code).toBeLessThanOrEqual(255);
      prev = code;
      const back = decodeRate(code);
      expect(Math.abs(back - pps) / pps, `${pps} -> ${code} -> ${back}`).toBeLessThan(0.045);
    }
    for (const v of [0, 0.4, -3, Number.NaN]) expect(encodeRate(v)).toBe(0);
    expect(decodeRate(0)).toBe(0);
    // Beyond the last code: it saturates, it does not wrap.
    expect(encodeRate(1e15)).toBe(255);
  });
});

describe('p95', () => {
  it('nearest rank over the samples held: 1..600 gives 570', () => {
    const b = new RateBaseline();
    expect(b.p95()).toBe(0);
    for (let i = 1; i <= 600; i++) b.add(i);
    expect(Math.abs(b.p95() - 570) / 570).toBeLessThan(0.045);
  });

  it('with few samples the highest counts (rank ceil(0.95 n) of 10 is the 10th)', () => {
    const b = new RateBaseline();
    for (let i = 1; i <= 10; i++) b.add(i * 100);
    expect(Math.abs(b.p95() - 1000) / 1000).toBeLessThan(0.045);
  });

  it('keeps the last 600: older samples leave the window', () => {
    const b = new RateBaseline();
    for (let i = 0; i < 600; i++) b.add(50_000);
    for (let i = 0; i < 600; i++) b.add(10);
    expect(b.samples).toBe(BASELINE_SAMPLES);
    expect(Math.abs(b.p95() - 10) / 10).toBeLessThan(0.045);
  });
});
