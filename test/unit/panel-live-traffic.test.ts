// The panel's live graph keeps what the tunnelTraffic subscription sent (panel/src/pages/tunnel/traffic/live.ts):
// the backfill replaces, later points append, 5 minutes at most; drops are the sum of their reasons.
import { describe, expect, it } from 'vitest';
import { LIVE_WINDOW_S, droppedOf, mergeLive, type LivePoint } from '../../panel/src/pages/tunnel/traffic/live.ts';

const S0 = Date.UTC(2026, 10, 29, 2, 0, 0);
const pt = (s: number, ppsIn = 1): LivePoint => ({
  t: new Date(S0 + s * 1000).toISOString(),
  ppsIn,
  bpsIn: ppsIn * 800,
  ppsOut: 0,
  bpsOut: 0,
  dropped: { notAllowed: 1, rateLimited: 2, spoofed: 0, invalid: 0, fragment: 3 },
});

describe('mergeLive', () => {
  it('replaces on a backfill, appends after it, keeps the last 5 minutes', () => {
    const back = Array.from({ length: LIVE_WINDOW_S }, (_, i) => pt(i));
    let shown = mergeLive([pt(-50)], true, back);
    expect(shown).toEqual(back);
    shown = mergeLive(shown, false, [pt(LIVE_WINDOW_S), pt(LIVE_WINDOW_S + 1)]);
    expect(shown).toHaveLength(LIVE_WINDOW_S);
    expect(shown[0]!.t).toBe(pt(2).t);
    expect(shown.at(-1)!.t).toBe(pt(LIVE_WINDOW_S + 1).t);
    expect(droppedOf(shown[0]!)).toBe(6);
  });
});
