// Health checks on the edge (docs/CONTRACTS.md "Health"; DESIGN 3.7): every tunnel of the desired state (what
// the gateway asked for: its provisioned and active tunnels) is checked through the tunnel once per interval
// (AGENT_HEALTH_INTERVAL_S, default 30 s). `down` after 3 failed checks in a row, `up` after one success,
// `unknown` before the first check.
//
// Spread: each tunnel's check falls at a fixed offset inside the interval (a hash of its id), so 10,000
// tunnels make ~333 checks a second rather than 10,000 at once; at most `concurrency` run at a time.
//
// Evidence of life: before probing, the scheduler asks how many packets the tunnel's `out` counter has
// (replies the edge accepted out of the tunnel toward clients). If it grew since the last check, the origin
// answered someone through the tunnel, over the same return path the probe tests, so that counts as a
// success without a probe: busy tunnels cost one counter read, and the origin sees no probe at all. A tunnel
// with no reply traffic is probed (agent/dataplane/probe.ts). The counters of every tunnel due in a tick are
// read together, in one call (one netlink request of GETs, not a request per check: 10,000 tunnels make 333 checks a second), when
// the tick finds them due; a check then uses the value read for it. A read that fails leaves the tick's
// checks to their probes: an unreadable counter says nothing of the tunnel.
//
// Time comes from an injected clock, and the timer only calls runDue(); tests call runDue() themselves.
import type { ProbeResult, TunnelSpec } from '../dataplane/types.ts';
import type { Health } from '../../common/tunnel-status.ts';

/** Failed checks in a row before a tunnel is `down` (DESIGN 3.7). */
const DOWN_AFTER_FAILURES = 3;

export interface HealthClock {
  /** Milliseconds since the epoch. */
  now(): number;
}

export interface TunnelHealth {
  health: Health;
  /** ms since the epoch of the last check; undefined before the first. */
  checkedAt?: number;
  /** Round-trip time of the last probe that answered. */
  rttMs?: number;
  /** Failed checks in a row. */
  failures: number;
}

/** One check's outcome applied to a tunnel's health: the hysteresis, alone, so tests can drive it directly. */
export function nextHealth(prev: TunnelHealth, ok: boolean, at: number, rttMs?: number): TunnelHealth {
  if (ok) return { health: 'up', checkedAt: at, failures: 0, ...(rttMs !== undefined ? { rttMs } : prev.rttMs !== undefined ? { rttMs: prev.rttMs } : {}) };
  const failures = prev.failures + 1;
  // Before 3 failures a tunnel keeps what it was (up stays up, unknown stays unknown): one lost probe is no outage.
  const health: Health = failures >= DOWN_AFTER_FAILURES ? 'down' : prev.health;
  return { health, checkedAt: at, failures, ...(prev.rttMs !== undefined ? { rttMs: prev.rttMs } : {}) };
}

/** One check as it ended (HealthOptions.onCheck): what the agent's debug log says of each check. */
export interface CheckRecord {
  tunnel_id: string;
  /** The slot this check ran for (ms since the epoch): one interval after the tunnel's previous slot. */
  slot: number;
  ok: boolean;
  /** How it was decided: reply traffic counted since the last check, a probe, or a probe that could not run. */
  by: 'traffic' | 'probe' | 'error';
  /** The tunnel's health and failed checks in a row after this check. */
  health: Health;
  failures: number;
}

export interface HealthOptions {
  /** The tunnels to check: the desired state. Read at every runDue, so a new tunnel joins and a removed one leaves. */
  tunnels: () => readonly TunnelSpec[];
  /** Probes one tunnel through the tunnel. */
  probe: (t: TunnelSpec) => Promise<ProbeResult>;
  /**
   * Packets counted so far by the `out` counter of each of these tunnels (the ones due in a tick), in their
   * order; undefined for one that is unreadable. Optional: without it every check is a probe.
   */
  outPackets?: (ts: readonly TunnelSpec[]) => Promise<readonly (bigint | undefined)[]>;
  intervalMs: number;
  /** Checks running at once. */
  concurrency?: number;
  clock?: HealthClock;
  log?: (event: string, fields?: Record<string, unknown>) => void;
  /** Every check as it ended (the agent logs it at debug): the account of the check rounds that tests count. */
  onCheck?: (c: CheckRecord) => void;
  /** A check that changed a tunnel's health, on that check (the events stream, agent/events/hub.ts); `at` in ms. */
  onChange?: (tunnelId: string, health: Health, at: number) => void;
}

interface Entry {
  id: string;
  spec: TunnelSpec;
  /** What a check depends on (linkKey): a change of it forgets what was learnt. */
  key: string;
  due: number;
  running: boolean;
  /** The runDue pass that last met it in the desired state (the others are removed). */
  seen: number;
  lastOut?: bigint;
  /** The `out` counter as read when the tick found this check due (undefined: not read, or unreadable). */
  out?: bigint;
  state: TunnelHealth;
}

const linkKey = (t: TunnelSpec): string => `${t.tunnel_name}|${t.edge_ip}|${t.origin_ip}|${t.origin_inner}`;

/** FNV-1a of the id: a stable offset inside the interval, so a tunnel keeps its slot across restarts. */
function slot(id: string, intervalMs: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 0x01000193) >>> 0;
  return h % intervalMs;
}

export class HealthScheduler {
  private readonly entries = new Map<string, Entry>();
  private readonly clock: HealthClock;
  private readonly concurrency: number;
  private timer: NodeJS.Timeout | undefined;
  private running = 0;
  private queue: Entry[] = [];
  /** Counter reads under way (each for one tick's due checks, which are queued once it answers). */
  private reading = 0;
  /** Bumped by stop(): a counter read that answers after it queues nothing. */
  private epoch = 0;
  private drainWaiters: (() => void)[] = [];
  private pass = 0;
  /** Checks done, probes sent, and checks that counted reply traffic instead (for the benchmark and the log). */
  readonly stats = { checks: 0, probes: 0, byTraffic: 0 };

  constructor(private readonly o: HealthOptions) {
    this.clock = o.clock ?? { now: () => Date.now() };
    this.concurrency = Math.max(1, o.concurrency ?? 16);
  }

  /** A tunnel's health as last decided; `unknown` (never checked) for one the scheduler has not met. */
  get(id: string): TunnelHealth {
    return this.entries.get(id)?.state ?? { health: 'unknown', failures: 0 };
  }

  /** Starts the timer: runDue every `tickMs` (default 1 s, or less for short intervals). */
  start(tickMs = Math.min(1000, Math.max(10, Math.floor(this.o.intervalMs / 30)))): void {
    if (this.timer) return;
    this.runDue();
    this.timer = setInterval(() => this.runDue(), tickMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.epoch++;
    this.queue = [];
    await this.drained();
  }

  /** Resolves when no check is queued or running. */
  drained(): Promise<void> {
    return this.idle() ? Promise.resolve() : new Promise((r) => this.drainWaiters.push(r));
  }

  private idle(): boolean {
    return this.running === 0 && this.queue.length === 0 && this.reading === 0;
  }

  /**
   * Syncs with the desired state and starts every check that is due (at most `concurrency` at once, the rest
   * queued). Resolves when the checks it started, and those queued behind them, are done.
   */
  runDue(): Promise<void> {
    const now = this.clock.now();
    // Every tick walks the whole desired state (10,000 tunnels every second at the scale): no per-tunnel
    // allocation for a tunnel that did not change (the same spec object), and a pass number rather than a Set
    // of ids to find the removed ones.
    const pass = ++this.pass;
    for (const t of this.o.tunnels()) {
      const e = this.entries.get(t.id);
      if (!e) {
        // First met: due at its slot within the coming interval.
        const base = now - (now % this.o.intervalMs);
        let due = base + slot(t.id, this.o.intervalMs);
        if (due < now) due += this.o.intervalMs;
        this.entries.set(t.id, { id: t.id, spec: t, key: linkKey(t), due, running: false, seen: pass, state: { health: 'unknown', failures: 0 } });
      } else if (e.spec === t) {
        e.seen = pass;
      } else {
        e.seen = pass;
        const key = linkKey(t);
        // A changed tunnel (new origin, new link): what was learnt of the old one says nothing of the new.
        if (key !== e.key) {
          e.key = key;
          e.state = { health: 'unknown', failures: 0 };
          e.lastOut = undefined;
        }
        e.spec = t;
      }
    }
    for (const [id, e] of this.entries) if (e.seen !== pass) this.entries.delete(id);
    const due: Entry[] = [];
    for (const e of this.entries.values()) {
      if (e.running || e.due > now) continue;
      e.running = true;
      e.out = undefined;
      due.push(e);
    }
    if (due.length > 0 && this.o.outPackets) {
      this.reading++;
      const epoch = this.epoch;
      void this.readOut(due).finally(() => {
        this.reading--;
        this.enqueue(epoch === this.epoch ? due : []);
      });
    } else this.enqueue(due);
    return this.drained();
  }

  /** The `out` counters of a tick's due checks, in one call. */
  private async readOut(due: Entry[]): Promise<void> {
    try {
      const out = await this.o.outPackets!(due.map((e) => e.spec));
      due.forEach((e, i) => {
        e.out = out[i];
      });
    } catch (err) {
      this.o.log?.('health counters unreadable; the checks probe', { tunnels: due.length, err: err instanceof Error ? err.message : String(err) });
    }
  }

  private enqueue(due: Entry[]): void {
    for (const e of due) this.queue.push(e);
    this.pump();
    this.wakeDrained();
  }

  private wakeDrained(): void {
    if (this.idle()) for (const w of this.drainWaiters.splice(0)) w();
  }

  private pump(): void {
    while (this.running < this.concurrency && this.queue.length > 0) {
      const e = this.queue.shift()!;
      this.running++;
      void this.check(e).finally(() => {
        this.running--;
        this.pump();
        this.wakeDrained();
      });
    }
  }

  private async check(e: Entry): Promise<void> {
    const spec = e.spec;
    const key = e.key;
    const slotAt = e.due;
    let ok = false;
    let by: CheckRecord['by'] = 'error';
    let rtt: number | undefined;
    try {
      const out = e.out;
      if (out !== undefined && e.lastOut !== undefined && out > e.lastOut) {
        ok = true;
        by = 'traffic';
        this.stats.byTraffic++;
      } else {
        this.stats.probes++;
        const r = await this.o.probe(spec);
        by = 'probe';
        ok = r.reachable;
        rtt = r.reachable ? r.rtt_ms : undefined;
      }
      if (out !== undefined) e.lastOut = out;
    } catch (err) {
      // A probe that could not run (the link is gone) is a failed check: the tunnel does not carry traffic.
      this.o.log?.('health check failed to run', { tunnel_id: spec.id, err: err instanceof Error ? err.message : String(err) });
    }
    this.stats.checks++;
    const at = this.clock.now();
    const before = e.state.health;
    // The tunnel may have been removed or replaced while its check ran: record nothing then.
    if (this.entries.get(e.id) !== e || e.key !== key) {
      e.running = false;
      return;
    }
    e.state = nextHealth(e.state, ok, at, rtt);
    if (e.state.health !== before) {
      this.o.log?.('tunnel health changed', { tunnel_id: e.id, from: before, to: e.state.health });
      this.o.onChange?.(e.id, e.state.health, at);
    }
    this.o.onCheck?.({ tunnel_id: e.id, slot: slotAt, ok, by, health: e.state.health, failures: e.state.failures });
    // The next slot: one interval after this one (not after the check ended), so checks do not drift.
    e.due += this.o.intervalMs;
    if (e.due <= at) e.due += Math.ceil((at - e.due + 1) / this.o.intervalMs) * this.o.intervalMs;
    e.running = false;
  }
}
