// The traffic chart's pure parts (panel/src/pages/tunnel/traffic/series.ts, healthMarks.ts): what each
// range asks the API for, points laid on the range's grid, drops stacked, totals, merging a refresh,
// bytes and packets in words, and the live health marks. The chart itself is drawn by uPlot in a browser.
import { describe, expect, it } from 'vitest';
import { HealthMarks, marksWithin } from '../../panel/src/pages/tunnel/traffic/healthMarks.ts';
import {
  buildSeries,
  formatBytes,
  formatPackets,
  mergePoints,
  rangeQuery,
  refreshQuery,
  stack,
  totals,
  RANGE_KEYS,
  type NumberFormat,
  type PointLike,
} from '../../panel/src/pages/tunnel/traffic/series.ts';

const NOW = Date.parse('2026-11-28T12:34:56.789Z');
const ENGLISH: NumberFormat = (n, digits) => new Intl.NumberFormat('en', digits === undefined ? {} : { minimumFractionDigits: digits, maximumFractionDigits: digits }).format(n);
const RUSSIAN: NumberFormat = (n, digits) => new Intl.NumberFormat('ru', digits === undefined ? {} : { minimumFractionDigits: digits, maximumFractionDigits: digits }).format(n);
const UNITS = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];

function point(t: string, n = 1): PointLike {
  return { t, bytesIn: 100 * n, bytesOut: 10 * n, packetsIn: 2 * n, packetsOut: n, dropped: { notAllowed: n, rateLimited: 2 * n, spoofed: 0, fragment: 3 * n, invalid: 0 } };
}

describe('range -> from, to, step', () => {
  it('the last hour is 60 minutes ending with the current, partial minute', () => {
    const q = rangeQuery('1h', NOW);
    expect(q).toMatchObject({ step: '1m', from: '2026-11-28T11:35:00.000Z', to: '2026-11-28T12:35:00.000Z', stepMs: 60_000 });
    expect((q.toMs - q.fromMs) / q.stepMs).toBe(60);
  });

  it('7 days are 168 hours ending with the current hour', () => {
    const q = rangeQuery('7d', NOW);
    expect(q).toMatchObject({ step: '1h', from: '2026-11-21T13:00:00.000Z', to: '2026-11-28T13:00:00.000Z' });
  });

  it('the ranges as long as retention start one step inside it, so a clock up to a step behind the gateway is not refused', () => {
    for (const [range, retention, stepMs] of [
      ['48h', 48 * 3600_000, 60_000],
      ['90d', 90 * 24 * 3600_000, 3600_000],
    ] as const) {
      const q = rangeQuery(range, NOW);
      // Checked the way the gateway does (server/health/index.ts), with its clock a step minus 1 ms ahead.
      const gatewayNow = NOW + stepMs - 1;
      expect(q.fromMs).toBeGreaterThanOrEqual(gatewayNow - retention);
      expect((q.toMs - q.fromMs) / q.stepMs).toBe(retention / stepMs - 1);
    }
  });

  it('every range stays within the API limits: at most 10,000 points, to at most now plus one step, on step boundaries', () => {
    for (const range of RANGE_KEYS) {
      for (const now of [NOW, Date.parse('2026-11-28T12:00:00.000Z'), Date.parse('2026-11-28T12:59:59.999Z')]) {
        const q = rangeQuery(range, now);
        expect(Math.ceil(q.toMs / q.stepMs) - Math.floor(q.fromMs / q.stepMs)).toBeLessThanOrEqual(10_000);
        expect(q.toMs).toBeGreaterThan(now);
        expect(q.toMs).toBeLessThanOrEqual(now + q.stepMs);
        expect(q.fromMs % q.stepMs).toBe(0);
        expect(new Date(q.from).getTime()).toBe(q.fromMs);
      }
    }
  });

  it('a refresh asks for the last two steps of the same range', () => {
    const q = refreshQuery('48h', NOW);
    expect(q).toMatchObject({ step: '1m', from: '2026-11-28T12:33:00.000Z', to: '2026-11-28T12:35:00.000Z' });
  });
});

describe('series from points', () => {
  const q = rangeQuery('1h', NOW);

  it('lays points on the grid of the range, in Unix seconds, with zeros for the steps the answer lacks', () => {
    const s = buildSeries([point('2026-11-28T11:35:00Z', 1), point('2026-11-28T12:34:00Z', 5)], q);
    expect(s.x).toHaveLength(60);
    expect(s.x[0]).toBe(Date.parse('2026-11-28T11:35:00Z') / 1000);
    expect(s.x[59]).toBe(Date.parse('2026-11-28T12:34:00Z') / 1000);
    expect(s.bytesIn[0]).toBe(100);
    expect(s.bytesIn[59]).toBe(500);
    expect(s.packetsOut[59]).toBe(5);
    expect(s.drops.fragment[59]).toBe(15);
    expect(s.bytesIn.slice(1, 59).every((v) => v === 0)).toBe(true);
  });

  it('ignores points before the range, at or after its end, and off the step boundaries', () => {
    const s = buildSeries([point('2026-11-28T11:34:00Z'), point('2026-11-28T12:35:00Z'), point('2026-11-28T12:00:30Z')], q);
    expect(s.bytesIn.every((v) => v === 0)).toBe(true);
  });

  it('stacks layers bottom first: each is the running sum of those below and itself', () => {
    expect(
      stack([
        [1, 0, 2],
        [3, 1, 0],
        [0, 5, 1],
      ]),
    ).toEqual([
      [1, 0, 2],
      [4, 1, 2],
      [4, 6, 3],
    ]);
    expect(stack([])).toEqual([]);
  });

  it('totals the range, drops by reason and in all', () => {
    const s = buildSeries([point('2026-11-28T11:40:00Z', 1), point('2026-11-28T12:00:00Z', 2)], q);
    expect(totals(s)).toEqual({
      bytesIn: 300,
      bytesOut: 30,
      packetsIn: 6,
      packetsOut: 3,
      dropped: 18,
      drops: { notAllowed: 3, rateLimited: 6, spoofed: 0, fragment: 9, invalid: 0 },
    });
  });

  it('merges a refresh: fresh points replace held ones of the same time, points slid out of the range go', () => {
    const held = [point('2026-11-28T11:34:00Z', 1), point('2026-11-28T12:33:00Z', 1), point('2026-11-28T12:34:00Z', 1)];
    const fresh = [point('2026-11-28T12:34:00Z', 7), point('2026-11-28T12:35:00Z', 8)];
    const merged = mergePoints(held, fresh, Date.parse('2026-11-28T11:36:00Z'));
    expect(merged.map((p) => [p.t, p.bytesIn])).toEqual([
      ['2026-11-28T12:33:00Z', 100],
      ['2026-11-28T12:34:00Z', 700],
      ['2026-11-28T12:35:00Z', 800],
    ]);
  });
});

describe('units', () => {
  it('bytes in decimal units, one decimal under 10, never "1000" of a unit', () => {
    expect(formatBytes(0, ENGLISH, UNITS)).toBe('0\u00a0B');
    expect(formatBytes(999, ENGLISH, UNITS)).toBe('999\u00a0B');
    expect(formatBytes(1000, ENGLISH, UNITS)).toBe('1.0\u00a0KB');
    expect(formatBytes(1540, ENGLISH, UNITS)).toBe('1.5\u00a0KB');
    expect(formatBytes(9_960, ENGLISH, UNITS)).toBe('10\u00a0KB');
    expect(formatBytes(999_600, ENGLISH, UNITS)).toBe('1.0\u00a0MB');
    expect(formatBytes(123_456_789, ENGLISH, UNITS)).toBe('123\u00a0MB');
    expect(formatBytes(4.2e9, ENGLISH, UNITS)).toBe('4.2\u00a0GB');
    expect(formatBytes(7e18, ENGLISH, UNITS)).toBe('7,000\u00a0PB');
  });

  it('bytes and packets follow the language: a decimal comma and grouping in Russian', () => {
    expect(formatBytes(1540, RUSSIAN, ['Б', 'КБ', 'МБ', 'ГБ', 'ТБ', 'ПБ'])).toBe('1,5\u00a0КБ');
    expect(formatPackets(1234567.4, ENGLISH)).toBe('1,234,567');
    expect(formatPackets(1234567, RUSSIAN)).toBe('1\u00a0234\u00a0567');
  });
});

describe('health marks seen live', () => {
  it('the first report is the state now, not a change; each later different one is a mark', () => {
    const store = new HealthMarks();
    const heard: string[] = [];
    store.listen((id) => heard.push(id));
    store.observe('t1', 'UP', 1000);
    store.observe('t1', 'UP', 2000);
    store.observe('t1', 'DOWN', 3000);
    store.observe('t2', 'UNKNOWN', 3500);
    store.observe('t1', 'UP', 4000);
    expect(store.of('t1')).toEqual([
      { at: 3000, from: 'UP', to: 'DOWN' },
      { at: 4000, from: 'DOWN', to: 'UP' },
    ]);
    expect(store.of('t2')).toEqual([]);
    expect(store.of('nope')).toEqual([]);
    expect(heard).toEqual(['t1', 't1']);
    expect(marksWithin(store.of('t1'), 3001, 5000)).toEqual([{ at: 4000, from: 'DOWN', to: 'UP' }]);
  });

  it('keeps at most 500 marks per tunnel, the newest', () => {
    const store = new HealthMarks();
    store.observe('t', 'UP', 0);
    for (let i = 1; i <= 600; i++) store.observe('t', i % 2 ? 'DOWN' : 'UP', i);
    expect(store.of('t')).toHaveLength(500);
    expect(store.of('t')[0]!.at).toBe(101);
  });
});
