// Attack detection wired to the agent's counters (docs/CONTRACTS.md "Attacks"): once a second, one read of the
// table's named counters (the same dump `status` makes: DataplaneHandle.counters), each tunnel of the desired
// state fed to the detector (detector.ts) with its `policy.alert_pps`, changed records into the journal
// (journal.ts), starts and ends logged and handed to `onEvent` (the events stream, agent/events/hub.ts, on the tick that decides them). The reading is
// the caller's (a function); the time comes from an injected clock, and the timer only calls tick(): tests call
// tick() themselves.
//
// A tunnel whose traffic counter or any drop counter is missing from a read (a reconcile recreating it right
// then) is not observed that second: reading it as 0 and then as its full count would look like a burst. It
// keeps its state, and its next observation spans both seconds.
//
// Cost (bench/attack-monitor.ts, `npm run bench:attack-monitor`, root; docs/BENCHMARKS.md "Attack detection"): the
// read is one netlink dump of every named counter, seven per tunnel, and the kernel's side of that dump grows
// faster than the table (it walks the objects again for every part of the answer): about 1.2 s of CPU at 10,000
// tunnels, where the detector's own work is about 20 ms. So the timer paces itself: the next tick comes one
// interval (1 s) after the last, or PACE_FACTOR times the last read's duration if that is longer, which keeps
// the reads to at most a quarter of the agent's time whatever the table's size. Up to about 1,000-2,000 tunnels
// that is one tick a second, the rule exactly as written; at 10,000 it is one every 4-6 s on a quiet 2-core host
// (the read's wall time, so longer on a loaded one), the "2 consecutive seconds" become 2 consecutive
// observations of that length, and an attack is seen within about 10-12 s.
// Vector (`vector` option: the dataplane's kernel/vector.ts): after each tick the protected IPs of the hot tunnels
// (detector.ts hot(): above the threshold in their last observation, or under attack) are made the watched ones,
// whose packets the table then counts by protocol and destination port; the next tick reads those counts with the
// counters and hands them to the detector. A tunnel leaving the watch has its counts deleted, so it starts from
// zero when watched again (the detector is then given none for it, and takes the next ones whole). Nothing is
// read or written for the vector while no tunnel is hot. A watch change is one of the dataplane's operations, so it
// may wait behind a reconcile: a tick does not wait for it (the next tick starts the next change, if any). A failed
// vector read skips that tick's observation of the watched tunnels (like a missing counter); a failed watch is
// retried at the next tick.
// tick() called by hand (tests) runs at once; ticks never overlap: one that finds the previous still running is
// skipped and counted (`stats.skipped`), and the next observation spans the gap.
import { DROP_REASONS } from '../../common/tunnel-status.ts';
import type { AttackRecord } from '../../common/attacks.ts';
import { dropCounterName } from '../dataplane/policy.ts';
import type { TunnelSpec } from '../dataplane/types.ts';
import type { VectorCounts, VectorRead } from '../dataplane/kernel/vector.ts';
import { AttackDetector, type AttackEvent, type DetectorOptions, type MeteredProtocol, type TunnelCounterSample } from './detector.ts';
import { AttackJournal } from './journal.ts';

/** The timer waits at least this many times the last read's duration between ticks (see the top of this file). */
export const PACE_FACTOR = 4;

export interface CounterValue {
  packets: bigint;
  bytes: bigint;
}

export interface AttackMonitorOptions {
  /** The tunnels to watch: the desired state (the set `status` reports). */
  tunnels: () => readonly TunnelSpec[];
  /** Every named counter of the agent's table, in one read. */
  counters: () => Promise<ReadonlyMap<string, CounterValue>>;
  /** ms since the epoch (default Date.now). */
  now?: () => number;
  /** Between ticks on the timer (default 1,000 ms). */
  intervalMs?: number;
  detector?: DetectorOptions;
  journal?: { windowMs?: number; maxEnded?: number; maxReported?: number };
  /** Each start and end, as it is decided. */
  onEvent?: (e: AttackEvent) => void;
  /**
   * Each successful read, with the time it was made and the tunnels observed: the live traffic ring
   * (agent/traffic/feed.ts) takes its points from it rather than reading the kernel again.
   */
  onRead?: (at: number, tunnels: readonly TunnelSpec[], counters: ReadonlyMap<string, CounterValue>) => void;
  log?: { warn(msg: string, fields?: Record<string, unknown>): void; info(msg: string, fields?: Record<string, unknown>): void };
  /**
   * The dataplane's vector meter (DataplaneHandle.vector): the watched protected IPs' counts, and the choice of
   * which are watched (`clean`: also delete the counts of every IP not watched). Absent: records' protocol and
   * ports say null.
   */
  vector?: { read(): Promise<VectorRead>; watch(ips: ReadonlySet<string>, clean: boolean): Promise<void> };
}

export class AttackMonitor {
  readonly detector: AttackDetector;
  readonly journal: AttackJournal;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | undefined;
  private started = false;
  private pacedLogged = false;
  private running: Promise<void> | null = null;
  private readFailedLogged = false;
  /** The protected IPs the table watches (as of the last watch that succeeded); null before the first. */
  private watched: Set<string> | null = null;
  /** The watch change under way: it waits in the dataplane's queue (behind a reconcile, say), never in a tick. */
  private watching: Promise<void> | null = null;
  private vectorFailedLogged = false;
  /**
   * Ticks run, ticks skipped because the previous one still ran, failed counter reads, the last tick's read in ms,
   * and the time the timer waits between ticks now (its interval, or longer when reads are slow).
   */
  readonly stats = { ticks: 0, skipped: 0, readFailures: 0, lastReadMs: 0, pacedMs: 0 };

  constructor(private readonly o: AttackMonitorOptions) {
    this.detector = new AttackDetector(o.detector);
    this.journal = new AttackJournal(o.journal);
    this.now = o.now ?? Date.now;
  }

  /** Ticks on a timer, each one pace() after the previous one's start. */
  start(): void {
    if (this.started) return;
    this.started = true;
    const loop = (): void => {
      const t0 = performance.now();
      void this.tick().then(() => {
        if (!this.started) return;
        this.timer = setTimeout(loop, Math.max(0, this.pace() - (performance.now() - t0)));
        this.timer.unref();
      });
    };
    this.timer = setTimeout(loop, this.o.intervalMs ?? 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.started = false;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
    await this.watching;
  }

  /** The watch change under way, if any (tests wait for it as a tick of the timer would come after it). */
  settled(): Promise<void> {
    return this.watching ?? Promise.resolve();
  }

  /** From one tick's start to the next: the interval, or PACE_FACTOR times the last read when that is longer. */
  pace(): number {
    const interval = this.o.intervalMs ?? 1000;
    const paced = Math.max(interval, Math.ceil(this.stats.lastReadMs * PACE_FACTOR));
    this.stats.pacedMs = paced;
    if (paced > interval && !this.pacedLogged) {
      this.pacedLogged = true;
      this.o.log?.info('attack detection observes less often than its interval: the counter read is slow (it grows with the tunnels)', {
        read_ms: Math.round(this.stats.lastReadMs),
        every_ms: paced,
        interval_ms: interval,
      });
    }
    return paced;
  }

  /** The records a `status` answer carries now (journal.ts). */
  report(): AttackRecord[] {
    return this.journal.report(this.now());
  }

  /** One observation of every tunnel; a tick while the previous one runs is skipped. Never throws. */
  tick(): Promise<void> {
    if (this.running) {
      this.stats.skipped++;
      return this.running;
    }
    this.running = this.observe().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async observe(): Promise<void> {
    const t0 = performance.now();
    let counters: ReadonlyMap<string, CounterValue>;
    try {
      counters = await this.o.counters();
    } catch (e) {
      this.stats.readFailures++;
      // Once until a read succeeds again: a kernel that refuses every second would otherwise fill the log.
      if (!this.readFailedLogged) this.o.log?.warn('attack detection could not read the counters; it resumes at the next read that succeeds', { err: e instanceof Error ? e.message : String(e) });
      this.readFailedLogged = true;
      return;
    }
    this.readFailedLogged = false;
    this.stats.lastReadMs = performance.now() - t0;
    this.stats.ticks++;
    // The time the counters were read: after the read, which is when the kernel answered.
    const at = this.now();
    // What the table watched when the counters were read (a change finishing during the reads counts from the next).
    const watchedNow = this.watched;
    let vector: ReadonlyMap<string, VectorCounts> | undefined;
    let vectorRead = true;
    if (this.o.vector && watchedNow?.size) {
      try {
        const read = await this.o.vector.read();
        vector = read.counts;
        // The table lost watched IPs (rebuilt after `nft flush ruleset`): the next watch change puts them back.
        if (!this.watching && this.watched === watchedNow && [...watchedNow].some((ip) => !read.watched.has(ip))) this.watched = read.watched;
      } catch (e) {
        vectorRead = false;
        this.vectorFailed('attack detection could not read the vector meter; the watched tunnels wait for the next read', e);
      }
    }
    const ids = new Set<string>();
    const tunnels = this.o.tunnels();
    if (this.o.onRead) {
      try {
        this.o.onRead(at, tunnels, counters);
      } catch (e) {
        this.o.log?.warn('live traffic could not take a counter read', { err: e instanceof Error ? e.message : String(e) });
      }
    }
    for (const t of tunnels) {
      ids.add(t.id);
      const watched = watchedNow?.has(t.protected_ip) ?? false;
      if (watched && !vectorRead) continue;
      const sample = sampleOf(t, counters, watched ? (vector?.get(t.protected_ip) ?? NO_COUNTS) : undefined);
      if (!sample) continue;
      const r = this.detector.observe(at, { id: t.id, alertPps: t.policy?.alert_pps ?? null, counters: sample });
      if (!r) continue;
      this.journal.put(r.record, at);
      if (r.event) this.emit(r.event);
    }
    for (const e of this.detector.retain(ids)) {
      this.journal.put(e.attack, at);
      this.emit(e);
    }
    if (this.o.vector && !this.watching) {
      this.watching = this.watch(tunnels).finally(() => {
        this.watching = null;
      });
    }
  }

  /** Watches the hot tunnels' protected IPs (see the top of this file); nothing while none is hot or was. */
  private async watch(tunnels: readonly TunnelSpec[]): Promise<void> {
    const hot = new Set<string>();
    for (const t of tunnels) if (this.detector.hot(t.id)) hot.add(t.protected_ip);
    const was = this.watched;
    // The first watch cleans whatever an earlier process left; after that, only when an IP leaves.
    const left = was === null || [...was].some((ip) => !hot.has(ip));
    if (hot.size === 0 && was !== null && was.size === 0) return;
    if (!left && was !== null && hot.size === was.size) return;
    try {
      await this.o.vector!.watch(hot, left);
      this.watched = hot;
      this.vectorFailedLogged = false;
    } catch (e) {
      this.vectorFailed('attack detection could not change the watched tunnels; it retries at the next tick', e);
    }
  }

  private vectorFailed(msg: string, e: unknown): void {
    if (!this.vectorFailedLogged) this.o.log?.warn(msg, { err: e instanceof Error ? e.message : String(e) });
    this.vectorFailedLogged = true;
  }

  private emit(e: AttackEvent): void {
    const a = e.attack;
    this.o.log?.warn(e.type === 'attack_started' ? 'attack started' : 'attack ended', {
      attack_id: a.id,
      tunnel_id: a.tunnel_id,
      started_at: a.started_at,
      ...(a.ended_at ? { ended_at: a.ended_at } : {}),
      peak_pps: a.peak_pps,
      peak_bps: a.peak_bps,
      packets_dropped: a.packets_dropped,
      top_drop_reason: a.vector.top_drop_reason,
    });
    this.o.onEvent?.(e);
  }
}

const NO_COUNTS: VectorCounts = { protocols: new Map(), ports: new Map() };
const PROTOCOL_NAMES: ReadonlyMap<number, MeteredProtocol> = new Map([
  [1, 'icmp'],
  [6, 'tcp'],
  [17, 'udp'],
]);

/** A tunnel's counters from one read (with its vector's counts when it is watched); undefined when any counter is missing from it. */
function sampleOf(t: TunnelSpec, counters: ReadonlyMap<string, CounterValue>, vector: VectorCounts | undefined): TunnelCounterSample | undefined {
  const cin = counters.get(t.tunnel_name);
  if (!cin) return undefined;
  const dropped = {} as Record<(typeof DROP_REASONS)[number], number>;
  for (const r of DROP_REASONS) {
    const c = counters.get(dropCounterName(t, r));
    if (!c) return undefined;
    dropped[r] = Number(c.packets);
  }
  if (!vector) return { packets_in: Number(cin.packets), bytes_in: Number(cin.bytes), dropped };
  const protocols: Partial<Record<MeteredProtocol, number>> = {};
  for (const [proto, n] of vector.protocols) {
    const name = PROTOCOL_NAMES.get(proto) ?? 'other';
    protocols[name] = (protocols[name] ?? 0) + n;
  }
  return { packets_in: Number(cin.packets), bytes_in: Number(cin.bytes), dropped, protocols, ports: new Map(vector.ports) };
}
