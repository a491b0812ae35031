// Attack detection on the edge (docs/CONTRACTS.md "Attacks"; DESIGN 3.11), pure: fed about once a second per
// tunnel with its cumulative counters and the time they were read, it keeps the tunnel's baseline, decides when
// an attack starts and ends, and keeps the attack's record. No clock, no kernel, no sockets: the caller
// (monitor.ts) reads the counters and says when; tests feed it by hand.
//
// The rule, per tunnel and observation (the interval since the tunnel's previous observation):
// - rate: inbound packets per second (the tunnel's counter, every packet to its protected IP before any drop),
//   and drops per second (its five drop counters together);
// - threshold: the tunnel's `alert_pps` when set, else automatic: 10 x the p95 of its last ten minutes of calm
//   inbound pps (baseline.ts), and never below 5,000;
// - an observation is above when either rate exceeds the threshold. Two observations above in a row start an
//   attack (with the agent's one a second: 2 consecutive seconds); it ends once 60 s have passed since its last
//   observation above. Its record's `started_at` is the start of the first second above, `ended_at` the end of the
//   last: the end is decided 60 s after `ended_at`, and the record says when the flood stopped, not when we knew;
// - calm observations (below the threshold, no attack going on) feed the baseline; nothing else does (see
//   baseline.ts for why).
// The record's totals and peaks cover the seconds from `started_at` to `ended_at`: the quiet tail a closing
// attack waits through is not counted, nor are calm seconds between bursts unless a later burst extends it.
//
// Counters are cumulative and may go down: a counter the dataplane recreated (a reconcile repairing it) restarts
// at 0, and a counter that wraps does the same as far as this module can tell. A value below the previous one
// counts as what it says since the restart (never a negative or huge rate; the gateway's rule for the same
// counters, server/health/ingest.ts). The first observation of a tunnel only sets its reference.
//
// Vector: `top_drop_reason` comes from the drop counters. `protocol` and `ports` come from TunnelCounterSample's
// optional `protocols` and `ports`: the dataplane meters them only while the tunnel is hot (hot(); monitor.ts),
// so they cover an attack from its second observation above on. A record with none says null (not known).
import { randomUUID } from 'node:crypto';
import { DROP_REASONS, type DropReason } from '../../common/tunnel-status.ts';
import { MAX_VECTOR_PORTS, type AttackProtocol, type AttackRecord, type AttackVector } from '../../common/attacks.ts';
import { RateBaseline } from './baseline.ts';

/** The protocols a dataplane meter may count inbound packets by (everything not TCP, UDP or ICMP is `other`). */
export const METERED_PROTOCOLS = ['tcp', 'udp', 'icmp', 'other'] as const;
export type MeteredProtocol = (typeof METERED_PROTOCOLS)[number];
/** At most this many destination ports are kept per attack (a meter supplying more has the rest ignored). */
export const MAX_TRACKED_PORTS = 64;
/** A protocol carrying at least this share of an attack's packets names it; otherwise the vector says `mixed`. */
const DOMINANT_SHARE = 0.8;

/** One tunnel's cumulative counters, as read at one moment. Non-negative integers. */
export interface TunnelCounterSample {
  /** Packets toward the origin (every packet to the protected IP, before any drop). */
  packets_in: number;
  bytes_in: number;
  /** Packets dropped, per reason (docs/CONTRACTS.md "Dataplane"). */
  dropped: Readonly<Record<DropReason, number>>;
  /**
   * Inbound packets per protocol, cumulative since the tunnel was last watched (the dataplane's vector meter:
   * agent/netlink/ruleset.ts VECTOR_SETS). Absent while it is not watched: the next one counts from zero.
   */
  protocols?: Readonly<Partial<Record<MeteredProtocol, number>>>;
  /**
   * Inbound packets per destination port (TCP and UDP), cumulative like `protocols`, for the ports the dataplane's
   * meter holds (at most MAX_TRACKED_PORTS are used). Kept by reference until the tunnel's next observation: the
   * caller hands a new map each time.
   */
  ports?: ReadonlyMap<number, number>;
}

export interface TunnelObservation {
  id: string;
  /** The tunnel's alert_pps (its `policy.alert_pps`); null or absent: the automatic threshold. */
  alertPps?: number | null;
  counters: TunnelCounterSample;
}

export type AttackEventType = 'attack_started' | 'attack_ended';

export interface AttackEvent {
  type: AttackEventType;
  /** The record as it is at the event (ended_at set for attack_ended). */
  attack: AttackRecord;
}

export interface DetectorOptions {
  /** The attack id (a UUID); default crypto.randomUUID. */
  newId?: () => string;
  /** The automatic threshold's floor in pps (default 5,000). */
  floorPps?: number;
  /** The automatic threshold's multiple of the baseline's p95 (default 10). */
  factor?: number;
  /** Observations above in a row that start an attack (default 2). */
  startAfter?: number;
  /** Time since the last observation above after which an attack has ended, ms (default 60,000). */
  endAfterMs?: number;
}

export const DEFAULT_FLOOR_PPS = 5_000;
export const DEFAULT_FACTOR = 10;
export const DEFAULT_START_AFTER = 2;
export const DEFAULT_END_AFTER_MS = 60_000;

const SPOOFED = DROP_REASONS.indexOf('spoofed');

/** What one observation added: counts and the rates over its interval. */
interface Delta {
  packets: number;
  dropped: number[];
  protocols: number[] | null;
  ports: Map<number, number> | null;
  pps: number;
  bps: number;
}

/** Counts and peaks added up over some observations. */
class Tally {
  packets = 0;
  readonly dropped = DROP_REASONS.map(() => 0);
  protocols: number[] | null = null;
  ports: Map<number, number> | null = null;
  peakPps = 0;
  peakBps = 0;

  add(d: Delta): void {
    this.packets += d.packets;
    for (let i = 0; i < d.dropped.length; i++) this.dropped[i]! += d.dropped[i]!;
    if (d.protocols) {
      this.protocols ??= METERED_PROTOCOLS.map(() => 0);
      for (let i = 0; i < d.protocols.length; i++) this.protocols[i]! += d.protocols[i]!;
    }
    if (d.ports) this.addPorts(d.ports);
    if (d.pps > this.peakPps) this.peakPps = d.pps;
    if (d.bps > this.peakBps) this.peakBps = d.bps;
  }

  merge(o: Tally): void {
    this.packets += o.packets;
    for (let i = 0; i < o.dropped.length; i++) this.dropped[i]! += o.dropped[i]!;
    if (o.protocols) {
      this.protocols ??= METERED_PROTOCOLS.map(() => 0);
      for (let i = 0; i < o.protocols.length; i++) this.protocols[i]! += o.protocols[i]!;
    }
    if (o.ports) this.addPorts(o.ports);
    if (o.peakPps > this.peakPps) this.peakPps = o.peakPps;
    if (o.peakBps > this.peakBps) this.peakBps = o.peakBps;
  }

  /** Ports beyond MAX_TRACKED_PORTS are not kept: the memory of an attack stays bounded whatever a meter sends. */
  private addPorts(ports: ReadonlyMap<number, number>): void {
    const mine = (this.ports ??= new Map());
    for (const [port, n] of ports) {
      const had = mine.get(port);
      if (had !== undefined) mine.set(port, had + n);
      else if (mine.size < MAX_TRACKED_PORTS) mine.set(port, n);
    }
  }
}

interface OpenAttack {
  id: string;
  startedAt: number;
  /** The end of the latest observation above: the attack's end if none follows within endAfterMs. */
  lastAboveAt: number;
  /** From the start to lastAboveAt. */
  counted: Tally;
  /** Observations since lastAboveAt: counted only if another observation above follows. */
  pending: Tally;
}

/**
 * What the detector keeps of one tunnel: its previous observation's counters (overwritten in place each second:
 * no allocation per observation, at 10,000 tunnels a second), its baseline, and the run or attack under way.
 */
class TunnelState {
  lastAt: number;
  lastPackets: number;
  lastBytes: number;
  readonly lastDropped: number[];
  lastProtocols: Readonly<Partial<Record<MeteredProtocol, number>>> | undefined;
  lastPorts: ReadonlyMap<number, number> | undefined;
  readonly baseline = new RateBaseline();
  /** Observations above in a row before an attack started, their start and what they carried. */
  run = 0;
  runStart = 0;
  runTally: Tally | null = null;
  attack: OpenAttack | null = null;

  constructor(at: number, c: TunnelCounterSample) {
    this.lastAt = at;
    this.lastPackets = c.packets_in;
    this.lastBytes = c.bytes_in;
    this.lastDropped = DROP_REASONS.map((r) => c.dropped[r]);
    this.lastProtocols = c.protocols;
    this.lastPorts = c.ports;
  }

  /** This observation becomes the previous one. */
  remember(at: number, c: TunnelCounterSample): void {
    this.lastAt = at;
    this.lastPackets = c.packets_in;
    this.lastBytes = c.bytes_in;
    for (let i = 0; i < DROP_REASONS.length; i++) this.lastDropped[i] = c.dropped[DROP_REASONS[i]!];
    this.lastProtocols = c.protocols;
    this.lastPorts = c.ports;
  }
}

/** A counter's increase since the previous read; a decrease means it restarted, and what it says now is what it counted since. */
const increase = (prev: number, cur: number): number => (cur >= prev ? cur - prev : cur);

const iso = (ms: number): string => new Date(ms).toISOString();

function deltaOf(prev: TunnelState, c: TunnelCounterSample, dtMs: number): Delta {
  const packets = increase(prev.lastPackets, c.packets_in);
  const bytes = increase(prev.lastBytes, c.bytes_in);
  const dropped = DROP_REASONS.map((r, i) => increase(prev.lastDropped[i]!, c.dropped[r]));
  let protocols: number[] | null = null;
  if (c.protocols) protocols = METERED_PROTOCOLS.map((p) => increase(prev.lastProtocols?.[p] ?? 0, c.protocols![p] ?? 0));
  let ports: Map<number, number> | null = null;
  if (c.ports) {
    ports = new Map();
    let n = 0;
    for (const [port, v] of c.ports) {
      if (n++ >= MAX_TRACKED_PORTS) break;
      const d = increase(prev.lastPorts?.get(port) ?? 0, v);
      if (d > 0) ports.set(port, d);
    }
  }
  const perSecond = 1000 / dtMs;
  return { packets, dropped, protocols, ports, pps: packets * perSecond, bps: bytes * 8 * perSecond };
}

function vectorOf(t: Tally): AttackVector {
  let top: DropReason | null = null;
  let most = 0;
  DROP_REASONS.forEach((r, i) => {
    if (t.dropped[i]! > most) {
      most = t.dropped[i]!;
      top = r;
    }
  });
  let protocol: AttackProtocol | null = null;
  if (t.protocols) {
    const total = t.protocols.reduce((a, b) => a + b, 0);
    const best = t.protocols.reduce((b, v, i) => (v > t.protocols![b]! ? i : b), 0);
    protocol = total === 0 ? null : t.protocols[best]! >= DOMINANT_SHARE * total ? METERED_PROTOCOLS[best]! : 'mixed';
  }
  const ports = t.ports
    ? [...t.ports]
        .filter(([, n]) => n > 0)
        .sort((a, b) => b[1] - a[1] || a[0] - b[0])
        .slice(0, MAX_VECTOR_PORTS)
        .map(([p]) => p)
    : null;
  return { protocol, ports, top_drop_reason: top };
}

export class AttackDetector {
  private readonly tunnels = new Map<string, TunnelState>();
  private readonly newId: () => string;
  private readonly floorPps: number;
  private readonly factor: number;
  private readonly startAfter: number;
  private readonly endAfterMs: number;

  constructor(opts: DetectorOptions = {}) {
    this.newId = opts.newId ?? randomUUID;
    this.floorPps = opts.floorPps ?? DEFAULT_FLOOR_PPS;
    this.factor = opts.factor ?? DEFAULT_FACTOR;
    this.startAfter = Math.max(1, opts.startAfter ?? DEFAULT_START_AFTER);
    this.endAfterMs = opts.endAfterMs ?? DEFAULT_END_AFTER_MS;
  }

  /** Tunnels it keeps state for. */
  get size(): number {
    return this.tunnels.size;
  }

  /** The samples in a tunnel's baseline (tests, diagnostics); undefined for a tunnel it does not know. */
  baselineSamples(id: string): number | undefined {
    return this.tunnels.get(id)?.baseline.samples;
  }

  /**
   * The threshold in force for a tunnel now, in pps: its alert_pps, or the automatic one from its baseline;
   * undefined for a tunnel it does not know.
   */
  threshold(id: string, alertPps: number | null = null): number | undefined {
    const s = this.tunnels.get(id);
    if (!s) return undefined;
    return alertPps ?? Math.max(this.floorPps, this.factor * s.baseline.p95());
  }

  /**
   * Whether a tunnel's vector is worth metering now: its last observation was above the threshold (an attack may
   * be starting) or an attack of it goes on (monitor.ts watches such tunnels' protected IPs).
   */
  hot(id: string): boolean {
    const s = this.tunnels.get(id);
    return s !== undefined && (s.run > 0 || s.attack !== null);
  }

  /** Every attack going on, as records. */
  open(): AttackRecord[] {
    const out: AttackRecord[] = [];
    for (const [id, s] of this.tunnels) if (s.attack) out.push(this.recordOf(id, s.attack, false));
    return out;
  }

  /**
   * One observation of one tunnel, its counters read at `at` (ms since the epoch). Returns the record when the
   * tunnel's attack started, changed or ended with it (`event` set for a start or an end), else undefined. An
   * observation not later than the tunnel's previous one is ignored.
   */
  observe(at: number, o: TunnelObservation): { event?: AttackEvent; record: AttackRecord } | undefined {
    const c = o.counters;
    const s = this.tunnels.get(o.id);
    if (!s) {
      this.tunnels.set(o.id, new TunnelState(at, c));
      return undefined;
    }
    const prevAt = s.lastAt;
    if (!(at > prevAt)) return undefined;
    const d = deltaOf(s, c, at - prevAt);
    s.remember(at, c);
    const dps = (d.dropped.reduce((a, b) => a + b, 0) * 1000) / (at - prevAt);
    const above = this.isAbove(s, Math.max(d.pps, dps), o.alertPps ?? null);

    const a = s.attack;
    if (a) {
      a.pending.add(d);
      if (above) {
        a.counted.merge(a.pending);
        a.pending = new Tally();
        a.lastAboveAt = at;
        return { record: this.recordOf(o.id, a, false) };
      }
      if (at - a.lastAboveAt >= this.endAfterMs) {
        s.attack = null;
        const record = this.recordOf(o.id, a, true);
        return { event: { type: 'attack_ended', attack: record }, record };
      }
      return undefined;
    }
    if (!above) {
      s.run = 0;
      s.runTally = null;
      s.baseline.add(d.pps);
      return undefined;
    }
    if (s.run === 0) {
      s.runStart = prevAt;
      s.runTally = new Tally();
    }
    s.run++;
    s.runTally!.add(d);
    if (s.run < this.startAfter) return undefined;
    const started: OpenAttack = { id: this.newId(), startedAt: s.runStart, lastAboveAt: at, counted: s.runTally!, pending: new Tally() };
    s.attack = started;
    s.run = 0;
    s.runTally = null;
    const record = this.recordOf(o.id, started, false);
    return { event: { type: 'attack_started', attack: record }, record };
  }

  /**
   * Keeps only the tunnels in `ids` (the agent's desired set): the others are forgotten, and an attack one of
   * them had ends at its last second above (the tunnel left this edge). Returns those ends.
   */
  retain(ids: ReadonlySet<string>): AttackEvent[] {
    const events: AttackEvent[] = [];
    for (const [id, s] of this.tunnels) {
      if (ids.has(id)) continue;
      this.tunnels.delete(id);
      if (s.attack) events.push({ type: 'attack_ended', attack: this.recordOf(id, s.attack, true) });
    }
    return events;
  }

  private isAbove(s: TunnelState, rate: number, alertPps: number | null): boolean {
    if (alertPps !== null) return rate > alertPps;
    // Below the floor nothing is above, whatever the baseline: its p95 is read only past it.
    if (!(rate > this.floorPps)) return false;
    return rate > this.factor * s.baseline.p95();
  }

  private recordOf(tunnelId: string, a: OpenAttack, ended: boolean): AttackRecord {
    const t = a.counted;
    const dropped = t.dropped.reduce((x, y) => x + y, 0);
    // Spoofed packets come from the tunnel's origin side, so they are not among the packets toward the origin.
    const droppedInbound = dropped - t.dropped[SPOOFED]!;
    return {
      id: a.id,
      tunnel_id: tunnelId,
      started_at: iso(a.startedAt),
      ended_at: ended ? iso(a.lastAboveAt) : null,
      peak_pps: Math.round(t.peakPps),
      peak_bps: Math.round(t.peakBps),
      vector: vectorOf(t),
      packets_dropped: dropped,
      packets_passed: Math.max(0, t.packets - droppedInbound),
    };
  }
}
