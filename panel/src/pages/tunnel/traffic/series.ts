// The pure parts of the traffic chart: which range asks for what (from, to, step), the points of an
// answer laid on that range's grid as chart series, drops stacked by reason, totals, and bytes and
// packets in words. No DOM and no preact here, so test/unit/panel-traffic.test.ts runs it under Node.
//
// The API's rules (docs/CONTRACTS.md "Health and traffic"): one point per step from `from` rounded down
// to the step up to `to` (excluded), zeros where nothing moved; 1-minute points are kept 48 hours and
// 1-hour points 90 days; at most 10,000 points per answer; `to` at most now plus one step.
import { inDecimalUnits } from '../../../app/decimal-units.ts';

export type Step = '1m' | '1h';
export type RangeKey = '1h' | '48h' | '7d' | '90d';

export const MINUTE_MS = 60_000;
export const HOUR_MS = 60 * MINUTE_MS;
export const STEP_MS: Record<Step, number> = { '1m': MINUTE_MS, '1h': HOUR_MS };

/**
 * The ranges the control offers, each the last `points` steps up to and including the current one.
 * The two that reach back as far as the API keeps (48 h of minutes, 90 days of hours) are one step
 * short: with every step it would start at the very edge of retention by this browser's clock, and a
 * clock a few seconds behind the gateway's would then be refused as outside retention.
 */
export const RANGES: Record<RangeKey, { step: Step; points: number }> = {
  '1h': { step: '1m', points: 60 },
  '48h': { step: '1m', points: 48 * 60 - 1 },
  '7d': { step: '1h', points: 7 * 24 },
  '90d': { step: '1h', points: 90 * 24 - 1 },
};
export const RANGE_KEYS = Object.keys(RANGES) as RangeKey[];

export interface RangeQuery {
  /** ISO times and step as the API takes them. */
  from: string;
  to: string;
  step: Step;
  /** The same bounds in milliseconds; `to` excluded. */
  fromMs: number;
  toMs: number;
  stepMs: number;
}

/** The query of a range at `now`: `to` is the end of the current (partial) step, so the latest point shows. */
export function rangeQuery(range: RangeKey, now: number): RangeQuery {
  const { step, points } = RANGES[range];
  const stepMs = STEP_MS[step];
  const toMs = Math.floor(now / stepMs) * stepMs + stepMs;
  const fromMs = toMs - points * stepMs;
  return { from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString(), step, fromMs, toMs, stepMs };
}

/**
 * What a periodic refresh asks for: the last two steps of the range at `now` (the current step grows,
 * and a collection round that lands late still adds to the step before it). Merged with mergePoints.
 */
export function refreshQuery(range: RangeKey, now: number): RangeQuery {
  const q = rangeQuery(range, now);
  const fromMs = q.toMs - 2 * q.stepMs;
  return { ...q, from: new Date(fromMs).toISOString(), fromMs };
}

export const DROP_REASONS = ['notAllowed', 'rateLimited', 'spoofed', 'fragment', 'invalid'] as const;
export type DropReason = (typeof DROP_REASONS)[number];

/** A point as the GraphQL answer carries it (the generated TrafficPoint type fits this shape). */
export interface PointLike {
  t: string;
  bytesIn: number;
  bytesOut: number;
  packetsIn: number;
  packetsOut: number;
  dropped: Record<DropReason, number>;
}

/**
 * The points a chart shows after a refresh: `fresh` replaces the points of the same time in `held`,
 * points older than `fromMs` (slid out of the range) are left out; oldest first.
 */
export function mergePoints(held: readonly PointLike[], fresh: readonly PointLike[], fromMs: number): PointLike[] {
  const byTime = new Map<number, PointLike>();
  for (const p of [...held, ...fresh]) {
    const t = Date.parse(p.t);
    if (t >= fromMs) byTime.set(t, p);
  }
  return [...byTime.entries()].sort((a, b) => a[0] - b[0]).map(([, p]) => p);
}

export interface TrafficSeries {
  /** Start of each step, in Unix seconds (uPlot's time scale). */
  x: number[];
  bytesIn: number[];
  bytesOut: number[];
  packetsIn: number[];
  packetsOut: number[];
  /** Packets dropped per step, by reason. */
  drops: Record<DropReason, number[]>;
}

/**
 * The points laid on the grid of `q` (one slot per step from `fromMs` to `toMs`): a step the answer does
 * not carry is 0 (the API answers zeros where nothing moved, so that is what it means), a point off the
 * grid is ignored (after the range slid, or not on a step boundary).
 */
export function buildSeries(points: readonly PointLike[], q: Pick<RangeQuery, 'fromMs' | 'toMs' | 'stepMs'>): TrafficSeries {
  const n = Math.max(0, Math.round((q.toMs - q.fromMs) / q.stepMs));
  const zeros = () => new Array<number>(n).fill(0);
  const s: TrafficSeries = {
    x: Array.from({ length: n }, (_, i) => (q.fromMs + i * q.stepMs) / 1000),
    bytesIn: zeros(),
    bytesOut: zeros(),
    packetsIn: zeros(),
    packetsOut: zeros(),
    drops: { notAllowed: zeros(), rateLimited: zeros(), spoofed: zeros(), fragment: zeros(), invalid: zeros() },
  };
  for (const p of points) {
    const offset = Date.parse(p.t) - q.fromMs;
    if (offset < 0 || offset % q.stepMs !== 0) continue;
    const i = offset / q.stepMs;
    if (i >= n) continue;
    s.bytesIn[i] = p.bytesIn;
    s.bytesOut[i] = p.bytesOut;
    s.packetsIn[i] = p.packetsIn;
    s.packetsOut[i] = p.packetsOut;
    for (const r of DROP_REASONS) s.drops[r][i] = p.dropped[r];
  }
  return s;
}

/**
 * Running sums of `layers` (bottom first): result[k][i] is layers[0][i] + ... + layers[k][i], the top
 * edge of layer k in a stacked chart.
 */
export function stack(layers: readonly (readonly number[])[]): number[][] {
  const out: number[][] = [];
  let below: readonly number[] | undefined;
  for (const layer of layers) {
    const sums = layer.map((v, i) => v + (below?.[i] ?? 0));
    out.push(sums);
    below = sums;
  }
  return out;
}

export interface TrafficTotals {
  bytesIn: number;
  bytesOut: number;
  packetsIn: number;
  packetsOut: number;
  dropped: number;
  drops: Record<DropReason, number>;
}

const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);

export function totals(s: TrafficSeries): TrafficTotals {
  const drops = Object.fromEntries(DROP_REASONS.map((r) => [r, sum(s.drops[r])])) as Record<DropReason, number>;
  return {
    bytesIn: sum(s.bytesIn),
    bytesOut: sum(s.bytesOut),
    packetsIn: sum(s.packetsIn),
    packetsOut: sum(s.packetsOut),
    dropped: sum(Object.values(drops)),
    drops,
  };
}

/** Formats a number in the reader's language with `digits` decimals (i18n's formatNumber). */
export type NumberFormat = (n: number, digits?: number) => string;

/**
 * Bytes in the largest decimal unit that keeps the value at 1 or more (1 KB = 1000 B: traffic and link
 * speeds are counted in decimal units), with one decimal under 10 and none above. `units` names B, KB,
 * MB, GB, TB, PB in the reader's language.
 */
export const formatBytes = (n: number, format: NumberFormat, units: readonly string[]): string => inDecimalUnits(n, format, units);

/** Packets as a whole number in the reader's language (grouped: 1,234,567 or 1 234 567). */
export function formatPackets(n: number, format: NumberFormat): string {
  return format(Math.round(n), 0);
}
