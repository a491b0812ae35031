// The live graph's points (LiveTraffic.tsx): the subscription's events merged into the last 5 minutes.
import type { TunnelTrafficLiveSubscription } from '../../../graphql/generated.ts';

export type LivePoint = TunnelTrafficLiveSubscription['tunnelTraffic']['points'][number];

/** What the graph shows: 5 minutes of seconds, the backfill the gateway sends first (docs/CONTRACTS.md "Live traffic"). */
export const LIVE_WINDOW_S = 300;

export const droppedOf = (p: LivePoint): number => p.dropped.notAllowed + p.dropped.rateLimited + p.dropped.spoofed + p.dropped.invalid + p.dropped.fragment;

/**
 * The backfill replaces what was shown (a resubscription after a dropped socket starts over); later points are
 * appended; only the last LIVE_WINDOW_S seconds are kept.
 */
export function mergeLive(before: LivePoint[], backfill: boolean, points: LivePoint[]): LivePoint[] {
  const all = backfill ? points : [...before, ...points];
  return all.slice(Math.max(0, all.length - LIVE_WINDOW_S));
}
