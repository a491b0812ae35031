// The agent's live traffic ring (agent/traffic/ring.ts): per-second points from counter reads, spread over the
// seconds between reads, bounded to its window and to the answer's point budget; and the feed from one read of
// the table's named counters (agent/traffic/feed.ts). Times are injected: no clock is read.
import { describe, expect, it } from 'vitest';
import { TrafficRing } from '../../../agent/traffic/ring.ts';
import { feedRing } from '../../../agent/traffic/feed.ts';
import { DROP_REASONS } from '../../../common/drop-reasons.ts';
import { LIVE_WINDOW_S, TRAFFIC_MAX_POINTS, checkTrafficResult } from '../../../common/traffic-live.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';

const ID = '6f1c9e64-2f4e-4c1b-9a57-0d7c3b1e2a10';
const T0 = 1_764_381_600_000; // a whole second, ms
/** packets_in, bytes_in, packets_out, bytes_out, then the five drop reasons. */
const raw = (pin: number, bin: number, pout = 0, bout = 0, drops: number[] = [0, 0, 0, 0, 0]) => [pin, bin, pout, bout, ...drops];

describe('TrafficRing', () => {
  it('turns reads a second apart into one point a second, bits from bytes', () => {
    const ring = new TrafficRing();
    ring.observe(T0, ID, raw(0, 0));
    ring.observe(T0 + 1000, ID, raw(10, 1000, 5, 500));
    ring.observe(T0 + 2000, ID, raw(30, 3000, 5, 500, [0, 7, 0, 0, 0]));
    expect(ring.points(ID)).toEqual([
      { t: new Date(T0 + 1000).toISOString(), pps_in: 10, bps_in: 8000, pps_out: 5, bps_out: 4000, dropped: {} },
      { t: new Date(T0 + 2000).toISOString(), pps_in: 20, bps_in: 16000, pps_out: 0, bps_out: 0, dropped: { rate_limited: 7 } },
    ]);
    expect(ring.points(ID, (T0 + 1000) / 1000).map((p) => p.t)).toEqual([new Date(T0 + 2000).toISOString()]);
    expect(checkTrafficResult(ring.answer([ID]))).toBeUndefined();
  });

  it('spreads a read that spans a gap over its seconds, adding up to the counters exactly', () => {
    const ring = new TrafficRing();
    ring.observe(T0, ID, raw(0, 0));
    // The next read is 4 s later (a paced monitor, or a read the tunnel missed): 10 packets over 4 seconds.
    ring.observe(T0 + 4000, ID, raw(10, 1001));
    const pts = ring.points(ID);
    expect(pts.map((p) => p.t)).toEqual([1, 2, 3, 4].map((s) => new Date(T0 + s * 1000).toISOString()));
    expect(pts.reduce((n, p) => n + p.pps_in, 0)).toBe(10);
    expect(pts.reduce((n, p) => n + p.bps_in, 0)).toBe(8008);
    expect(Math.max(...pts.map((p) => p.pps_in)) - Math.min(...pts.map((p) => p.pps_in))).toBeLessThanOrEqual(1);
  });

  it('adds two reads within one second to that second', () => {
    const ring = new TrafficRing();
    ring.observe(T0, ID, raw(0, 0));
    ring.observe(T0 + 1100, ID, raw(3, 30));
    ring.observe(T0 + 1900, ID, raw(5, 50));
    expect(ring.points(ID)).toEqual([expect.objectContaining({ t: new Date(T0 + 1000).toISOString(), pps_in: 5, bps_in: 400 })]);
  });

  it('wraps: keeps the last window only, the newest slots over the oldest', () => {
    const ring = new TrafficRing(10);
    ring.observe(T0, ID, raw(0, 0));
    for (let s = 1; s <= 25; s++) ring.observe(T0 + s * 1000, ID, raw((s * (s + 1)) / 2, 0));
    const pts = ring.points(ID);
    expect(pts.map((p) => p.pps_in)).toEqual([16, 17, 18, 19, 20, 21, 22, 23, 24, 25]);
    expect(pts[0]!.t).toBe(new Date(T0 + 16_000).toISOString());
    // A gap longer than the window: only its last seconds are kept, at the gap's average rate.
    ring.observe(T0 + 125_000, ID, raw(325 + 1000, 0));
    const after = ring.points(ID);
    expect(after).toHaveLength(10);
    expect(after.every((p) => p.pps_in === 10)).toBe(true);
    expect(after.at(-1)!.t).toBe(new Date(T0 + 125_000).toISOString());
  });

  it('reads a counter that went down (recreated) as counting from zero, and starts over when the clock goes back', () => {
    const ring = new TrafficRing();
    ring.observe(T0, ID, raw(100, 0));
    ring.observe(T0 + 1000, ID, raw(4, 0));
    expect(ring.points(ID).map((p) => p.pps_in)).toEqual([4]);
    ring.observe(T0 - 5000, ID, raw(10, 0));
    expect(ring.points(ID)).toEqual([]);
  });

  it('bounds its memory: drop columns only while the window holds a drop; forgets removed tunnels', () => {
    const ring = new TrafficRing();
    ring.observe(T0, ID, raw(0, 0));
    ring.observe(T0 + 1000, ID, raw(1, 1));
    const quiet = ring.bytes();
    // Four Uint32 columns of the window, and the previous read.
    expect(quiet).toBe(4 * 4 * LIVE_WINDOW_S + 8 * (4 + DROP_REASONS.length));
    ring.observe(T0 + 2000, ID, raw(2, 2, 0, 0, [1, 0, 0, 0, 0]));
    expect(ring.bytes()).toBe(quiet + 4 * DROP_REASONS.length * LIVE_WINDOW_S);
    ring.observe(T0 + (2 + LIVE_WINDOW_S) * 1000, ID, raw(3, 3, 0, 0, [1, 0, 0, 0, 0]));
    expect(ring.bytes()).toBe(quiet);
    ring.retain(new Set());
    expect(ring.size).toBe(0);
    expect(ring.points(ID)).toEqual([]);
  });

  it('answers each id at most its share of the point budget, its newest points', () => {
    const ring = new TrafficRing();
    const ids = Array.from({ length: 20 }, (_, i) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`);
    for (const id of ids) ring.observe(T0, id, raw(0, 0));
    for (const id of ids) ring.observe(T0 + LIVE_WINDOW_S * 1000, id, raw(LIVE_WINDOW_S, 0));
    const one = ring.answer(ids.slice(0, 1));
    expect(one.tunnels[0]!.points).toHaveLength(LIVE_WINDOW_S);
    const all = ring.answer(ids);
    const share = Math.floor(TRAFFIC_MAX_POINTS / ids.length);
    expect(all.tunnels.map((t) => t.points.length)).toEqual(ids.map(() => share));
    expect(all.tunnels[0]!.points.at(-1)!.t).toBe(new Date(T0 + LIVE_WINDOW_S * 1000).toISOString());
    expect(ring.answer(['00000000-0000-4000-8000-999999999999']).tunnels).toEqual([{ id: '00000000-0000-4000-8000-999999999999', points: [] }]);
  });
});

describe('feedRing', () => {
  const t = { id: ID, tunnel_name: 'tg-a' } as TunnelSpec;
  const counters = (pin: number, dropsPresent = true) =>
    new Map<string, { packets: bigint; bytes: bigint }>([
      ['tg-a', { packets: BigInt(pin), bytes: BigInt(pin * 100) }],
      ['tg-a.out', { packets: 1n, bytes: 2n }],
      ...(dropsPresent ? DROP_REASONS.map((r) => [`tg-a.${r}`, { packets: 0n, bytes: 0n }] as [string, { packets: bigint; bytes: bigint }]) : []),
    ]);

  it('feeds each desired tunnel from its named counters, skips one missing a counter, forgets the undesired', () => {
    const ring = new TrafficRing();
    feedRing(ring, T0, [t], counters(0));
    feedRing(ring, T0 + 1000, [t], counters(5, false));
    expect(ring.points(ID)).toEqual([]);
    feedRing(ring, T0 + 2000, [t], counters(9));
    // The read without its drop counters was skipped: the next one spans both seconds.
    expect(ring.points(ID).map((p) => p.pps_in)).toEqual([4, 5]);
    feedRing(ring, T0 + 3000, [], counters(9));
    expect(ring.size).toBe(0);
  });
});
