// The last LIVE_WINDOW_S seconds of every tunnel's traffic, one slot a second (docs/CONTRACTS.md "Edge jobs", op
// `traffic`): what a new `tunnelTraffic` subscriber sees at once and what the gateway then asks for every
// second. Fed from the counter reads the attack monitor already makes (agent/attacks/monitor.ts onRead), so
// it costs no kernel read of its own.
//
// A read's deltas (since the tunnel's previous read) are spread evenly over the seconds between the two reads:
// at up to 1,000-2,000 tunnels the monitor reads once a second and each slot is one read; at 10,000 it reads
// every 4-6 s (its pacing) and the slots of those seconds hold the average. A tunnel missing from a read (a
// reconcile recreating its counters) keeps its previous read, so the next one spans both: a tunnel's points
// are always contiguous from its first to its newest. A counter that went down was recreated: what it counts
// now is the delta. The clock going back clears the tunnel's points (they would be out of order).
//
// Memory (docs/ARCHITECTURE.md "Live traffic"): per tunnel four Uint32Array columns (packets and bytes, in and
// out) of LIVE_WINDOW_S slots, 4,800 bytes, plus 72 bytes of the previous read; the five drop reasons' columns
// (6,000 bytes more) only while the window holds a drop, freed LIVE_WINDOW_S seconds after the last. So about
// 5 KB per quiet tunnel (48 MB at 10,000) and 11 KB per dropping one (110 MB were all 10,000 attacked at once).
// A slot saturates at 2^32 - 1: 4.29 Gpps or 4.29 GB/s (34 Gbit/s) per tunnel.
import { DROP_REASONS, type DropReason } from '../../common/drop-reasons.ts';
import { LIVE_WINDOW_S, TRAFFIC_MAX_POINTS, type LivePoint } from '../../common/traffic-live.ts';

/** packets_in, bytes_in, packets_out, bytes_out, then one per drop reason (DROP_REASONS order): a read's values. */
export const RING_FIELDS = 4 + DROP_REASONS.length;
const MAIN = 4;
const DROPS = DROP_REASONS.length;
const U32_MAX = 0xffffffff;

interface TunnelSlots {
  main: Uint32Array;
  /** Allocated at the first drop, freed once the window holds none. */
  drops: Uint32Array | null;
  /** The second of the newest drop (meaningful while drops is set). */
  lastDrop: number;
  prev: Float64Array;
  prevAt: number;
  hasPrev: boolean;
  /** The first and newest seconds with a point; -1 before the first. */
  from: number;
  to: number;
}

export class TrafficRing {
  private readonly tunnels = new Map<string, TunnelSlots>();
  private readonly delta = new Float64Array(RING_FIELDS);

  constructor(readonly windowS: number = LIVE_WINDOW_S) {}

  /** One read of one tunnel at `atMs` (ms since the epoch): `raw` its RING_FIELDS counter values. */
  observe(atMs: number, id: string, raw: ArrayLike<number>): void {
    let r = this.tunnels.get(id);
    if (!r) {
      r = { main: new Uint32Array(MAIN * this.windowS), drops: null, lastDrop: -1, prev: new Float64Array(RING_FIELDS), prevAt: 0, hasPrev: false, from: -1, to: -1 };
      this.tunnels.set(id, r);
    }
    const s1 = Math.floor(atMs / 1000);
    if (!r.hasPrev || atMs < r.prevAt) {
      // The first read is the baseline; a clock gone back starts the tunnel over.
      if (r.hasPrev) {
        r.from = r.to = -1;
        r.drops = null;
      }
      r.prev.set(raw);
      r.prevAt = atMs;
      r.hasPrev = true;
      return;
    }
    const s0 = Math.floor(r.prevAt / 1000);
    let anyDrop = false;
    for (let i = 0; i < RING_FIELDS; i++) {
      const v = raw[i]!;
      const p = r.prev[i]!;
      this.delta[i] = v >= p ? v - p : v;
      if (i >= MAIN && this.delta[i]! > 0) anyDrop = true;
    }
    r.prev.set(raw);
    r.prevAt = atMs;
    if (anyDrop) {
      r.drops ??= new Uint32Array(DROPS * this.windowS);
      r.lastDrop = s1;
    } else if (r.drops && s1 - r.lastDrop >= this.windowS) {
      r.drops = null;
    }
    // Two reads within one second add to that second; otherwise the seconds after the previous read's share it.
    const first = s1 === s0 ? s1 : s0 + 1;
    const k = s1 - first + 1;
    for (let s = Math.max(first, s1 - this.windowS + 1); s <= s1; s++) {
      const slot = s % this.windowS;
      if (s > r.to) {
        r.main.fill(0, slot * MAIN, slot * MAIN + MAIN);
        r.drops?.fill(0, slot * DROPS, slot * DROPS + DROPS);
      }
      // This second's share of each delta: the differences of floor(d * j / k), which add up to d exactly.
      const j = s - first + 1;
      for (let i = 0; i < RING_FIELDS; i++) {
        const d = this.delta[i]!;
        if (d === 0) continue;
        const share = Math.floor((d * j) / k) - Math.floor((d * (j - 1)) / k);
        if (i < MAIN) r.main[slot * MAIN + i] = Math.min(U32_MAX, r.main[slot * MAIN + i]! + share);
        else if (r.drops) r.drops[slot * DROPS + i - MAIN] = Math.min(U32_MAX, r.drops[slot * DROPS + i - MAIN]! + share);
      }
    }
    if (r.from < 0) r.from = first;
    r.to = Math.max(r.to, s1);
  }

  /** Forgets every tunnel not in `ids` (removed from the desired state): a tunnel that comes back starts over. */
  retain(ids: ReadonlySet<string>): void {
    for (const id of this.tunnels.keys()) if (!ids.has(id)) this.tunnels.delete(id);
  }

  /**
   * The points of `id` after second `since` (absent: the whole window), oldest first, at most `max` of them (the
   * newest); an empty list for a tunnel it does not know.
   */
  points(id: string, sinceS?: number, max: number = this.windowS): LivePoint[] {
    const r = this.tunnels.get(id);
    if (!r || r.to < 0) return [];
    let lo = Math.max(r.from, r.to - this.windowS + 1, r.to - max + 1);
    if (sinceS !== undefined) lo = Math.max(lo, Math.floor(sinceS) + 1);
    const out: LivePoint[] = [];
    for (let s = lo; s <= r.to; s++) {
      const slot = s % this.windowS;
      const m = slot * MAIN;
      const dropped: LivePoint['dropped'] = {};
      if (r.drops) {
        for (let i = 0; i < DROPS; i++) {
          const n = r.drops[slot * DROPS + i]!;
          if (n > 0) dropped[DROP_REASONS[i] as DropReason] = n;
        }
      }
      out.push({ t: new Date(s * 1000).toISOString(), pps_in: r.main[m]!, bps_in: r.main[m + 1]! * 8, pps_out: r.main[m + 2]!, bps_out: r.main[m + 3]! * 8, dropped });
    }
    return out;
  }

  /** The answer of op `traffic` for `ids` (each id at most min(window, TRAFFIC_MAX_POINTS / ids) points, its newest). */
  answer(ids: readonly string[], sinceS?: number): { window_s: number; tunnels: { id: string; points: LivePoint[] }[] } {
    const max = Math.min(this.windowS, Math.floor(TRAFFIC_MAX_POINTS / Math.max(1, ids.length)));
    return { window_s: this.windowS, tunnels: ids.map((id) => ({ id, points: this.points(id, sinceS, max) })) };
  }

  /** Tunnels kept. */
  get size(): number {
    return this.tunnels.size;
  }

  /** The bytes its typed arrays hold (what docs/ARCHITECTURE.md "Live traffic" counts). */
  bytes(): number {
    let n = 0;
    for (const r of this.tunnels.values()) n += r.main.byteLength + r.prev.byteLength + (r.drops?.byteLength ?? 0);
    return n;
  }
}
