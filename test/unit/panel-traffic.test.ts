// The traffic chart's pure parts (panel/src/pages/tunnel/traffic/series.ts, healthMarks.ts): what each
// range asks the API for, points laid on the range's grid, drops stacked, totals, merging a refresh,
// bytes and packets in words, and the health marks (history read in pages, merged with the live ones).
// The chart itself is drawn by uPlot in a browser.
import { describe, expect, it } from 'vitest';
import {
  HISTORY_PAGE,
  HealthMarks,
  LIVE_MATCH_MS,
  addHistory,
  marksByStep,
  marksWithin,
  mergeMarks,
  readHistory,
  type ChangeLike,
  type Health,
  type HealthMark,
} from '../../panel/src/pages/tunnel/traffic/healthMarks.ts';
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

/** `n` alternating changes from `startMs`, `everyMs` apart (UP -> DOWN first), as the API answers them. */
function changes(n: number, startMs: number, everyMs: number): ChangeLike[] {
  return Array.from({ length: n }, (_, i) => ({
    at: new Date(startMs + i * everyMs).toISOString(),
    previous: (i % 2 ? 'DOWN' : 'UP') as Health,
    health: (i % 2 ? 'UP' : 'DOWN') as Health,
  }));
}

/** A stand-in for the gateway's paging rule (docs/CONTRACTS.md "Health history"): from <= at, the oldest 1,000. */
function pager(all: readonly ChangeLike[]) {
  const asked: string[] = [];
  const more = async (from: string) => {
    asked.push(from);
    return all.filter((c) => Date.parse(c.at) >= Date.parse(from)).slice(0, HISTORY_PAGE);
  };
  return { asked, more };
}

describe('health history in pages', () => {
  const start = Date.parse('2026-09-01T00:00:00Z');

  it('a page under the cap is the whole history, asked for nothing more', async () => {
    const all = changes(3, start, 60_000);
    const p = pager(all);
    const h = await readHistory(all, p.more);
    expect(h.marks).toEqual([
      { at: start, from: 'UP', to: 'DOWN' },
      { at: start + 60_000, from: 'DOWN', to: 'UP' },
      { at: start + 120_000, from: 'UP', to: 'DOWN' },
    ]);
    expect(h.truncatedAt).toBeUndefined();
    expect(p.asked).toEqual([]);
  });

  it('a full page asks again from its last time and skips the changes at that time it already has', async () => {
    // 2,500 changes, with the 1,000th and 1,001st at the same millisecond (a page boundary inside a tie).
    const all = changes(2500, start, 1000);
    all[1000] = { ...all[1000]!, at: all[999]!.at };
    const p = pager(all);
    const h = await readHistory(all.slice(0, HISTORY_PAGE), p.more);
    // Each later page starts again at the previous page's last time: 999..1998, then 1998..2499.
    expect(p.asked).toEqual([all[999]!.at, all[1998]!.at]);
    expect(h.marks).toHaveLength(2500);
    expect(h.marks.map((m) => m.to)).toEqual(all.map((c) => c.health));
    expect(h.truncatedAt).toBeUndefined();
  });

  it('stops after the pages allowed and says where the list stops', async () => {
    const all = changes(4500, start, 1000);
    const p = pager(all);
    const h = await readHistory(all.slice(0, HISTORY_PAGE), p.more, 3);
    expect(p.asked).toHaveLength(2);
    // 1,000, then 999 new of each page after (each repeats the previous page's last change).
    expect(h.marks).toHaveLength(2998);
    expect(h.marks.map((m) => m.at)).toEqual(all.slice(0, 2998).map((c) => Date.parse(c.at)));
    expect(h.truncatedAt).toBe(Date.parse(all[2997]!.at));
  });

  it('a full page all at one instant cannot be read past: it stops there, truncated, instead of asking forever', async () => {
    const all = changes(1500, start, 0);
    const p = pager(all);
    const h = await readHistory(all.slice(0, HISTORY_PAGE), p.more);
    expect(p.asked).toEqual([all[0]!.at]);
    expect(h.marks).toHaveLength(1000);
    expect(h.truncatedAt).toBe(start);
  });

  it('a later read adds only what the held history lacks, in order', () => {
    const a: HealthMark = { at: 1000, from: 'UP', to: 'DOWN' };
    const b: HealthMark = { at: 2000, from: 'DOWN', to: 'UP' };
    const c: HealthMark = { at: 1500, from: 'DOWN', to: 'UNKNOWN' };
    expect(addHistory([a, b], [b, c])).toEqual([a, c, b]);
    expect(addHistory([a], [a])).toEqual([a]);
  });
});

describe('history merged with live marks', () => {
  const readAt = Date.parse('2026-11-28T12:00:00Z');
  const history: HealthMark[] = [
    { at: readAt - 3_600_000, from: 'UP', to: 'DOWN' },
    { at: readAt - 30_000, from: 'DOWN', to: 'UP' },
  ];

  it('a live mark seen before the read is the history’s already, whatever its time', () => {
    const live: HealthMark[] = [{ at: readAt - 3_500_000, from: 'UP', to: 'DOWN' }];
    expect(mergeMarks(history, live, readAt)).toEqual(history);
  });

  it('a live mark of the same health as a change the read found, within the match window, is that change once', () => {
    // The message of the change at readAt - 30 s arrived after the read was sent.
    const live: HealthMark[] = [{ at: readAt + 5_000, from: 'DOWN', to: 'UP' }];
    expect(mergeMarks(history, live, readAt)).toEqual(history);
  });

  it('live marks after the read are added in time order; a different health or one out of the window is a mark of its own', () => {
    const later: HealthMark = { at: readAt + 60_000, from: 'UP', to: 'UNKNOWN' };
    const far: HealthMark = { at: readAt - 30_000 + LIVE_MATCH_MS + 1, from: 'UNKNOWN', to: 'UP' };
    const merged = mergeMarks(history, [later, far], readAt);
    expect(merged).toEqual([...history, later, far]);
  });

  it('a live mark in the time a truncated history was not read for is kept, even before the read', () => {
    const inGap: HealthMark = { at: readAt - 600_000, from: 'UP', to: 'UNKNOWN' };
    const beforeGap: HealthMark = { at: readAt - 7_200_000, from: 'UP', to: 'UNKNOWN' };
    const gap = { from: readAt - 3_600_000, to: readAt };
    expect(mergeMarks(history, [beforeGap, inGap], readAt, gap)).toEqual([history[0], inGap, history[1]]);
    expect(mergeMarks(history, [inGap], readAt)).toEqual(history);
  });

  it('the history alone is handed back as it is (no new array for the chart to redraw)', () => {
    expect(mergeMarks(history, [], readAt)).toBe(history);
  });

  it('the table gets each step’s marks, in one pass', () => {
    const marks: HealthMark[] = [
      { at: 0, from: 'UP', to: 'DOWN' },
      { at: 59_999, from: 'DOWN', to: 'UP' },
      { at: 120_000, from: 'UP', to: 'UNKNOWN' },
      { at: 180_000, from: 'UNKNOWN', to: 'UP' },
      { at: -1, from: 'UP', to: 'DOWN' },
    ];
    const rows = marksByStep(marks, 0, 60_000, 3);
    expect(rows.map((r) => r.map((m) => m.at))).toEqual([[0, 59_999], [], [120_000]]);
    expect(rows.map((r, i) => r.length === marksWithin(marks, i * 60_000, (i + 1) * 60_000).length)).toEqual([true, true, true]);
  });
});
