// What the agent is doing with the kernel, and the watchdog over it (docs/CONTRACTS.md "Agent watchdog",
// AGENT_WATCHDOG_S). An edge that stops answering stops every tenant's jobs on it, whatever the kernel does, so:
//
//  - Each dataplane operation runs as a track (run()): its step (named by the dataplane: "nftables commit") and
//    the netlink requests it has in flight (named by the netlink layer, through its observer). Progress is a step
//    begun, a request settled, or a datagram of a dump's or a batch's answer. A track without progress for the
//    watchdog's time is stuck: it is logged
//    (`watchdog.stuck`, naming the operation, the step and the request), its caller gets an error naming the step
//    (the job answers kernel_error), nothing more of it may reach the kernel (its next request is refused), and the
//    dataplane's queue goes on to the next operation, which reads the kernel back and repairs what was left (the
//    desired state was recorded before the change). The status op reports it (`agent.stuck`) until it settles.
//  - What it cannot recover from, it ends the process for (exit code 70), so systemd restarts the agent and the
//    restore at start brings the dataplane back: a stuck operation that has still not settled UNSETTLED_FACTOR
//    watchdog times after it was given up, or a kernel call on a worker thread that the kernel has held a watchdog
//    time past its deadline (a thread of libuv's pool lost for good: observer.ts offThreadOverdue).
//  - The event loop itself can be held by a synchronous kernel call (the fast path of socket.ts, an fsync): then
//    no timer of this thread runs. A worker thread (watchdog-thread.ts) watches a heartbeat this thread writes
//    into shared memory, with the name of the synchronous call being made, and kills the process when the
//    heartbeat stops for the watchdog's time, or when a stop (SIGTERM) has not ended it within its bound.
import { AsyncLocalStorage } from 'node:async_hooks';
import { observeNetlink, offThreadOverdue, type NetlinkObserver } from '../netlink/observer.ts';

/** An operation without progress, as the status op reports it (common/tunnel-status.ts `agent.stuck`). */
export interface StuckOperation {
  op: string;
  step: string;
  /** When it last made progress (ISO 8601). */
  since: string;
  /** The netlink request it waits on, when it waits on one. */
  call?: string;
}

/** What a stuck operation's caller gets: its step did not finish within the watchdog's time. */
export class OperationStuck extends Error {
  override name = 'OperationStuck';
}

export interface ActivityOptions {
  /** No progress for this long: the operation is stuck (AGENT_WATCHDOG_S). */
  stuckAfterMs: number;
  /** Milliseconds now (tests drive their own). */
  now?: () => number;
  log?: (event: string, fields: Record<string, unknown>) => void;
  /** What cannot be recovered from: the agent exits (main.ts) so systemd restarts it. */
  onUnrecoverable?: (why: string) => void;
  /** false: no timer, the caller calls check() (tests with their own clock). */
  timer?: boolean;
}

interface Track {
  op: string;
  step: string;
  lastProgress: number;
  /** Requests in flight, oldest first (a Set keeps insertion order). */
  calls: Set<{ what: string }>;
  abandonedAt?: number;
  abandon: (e: Error) => void;
}

// Shared with the watchdog thread (watchdog-thread.ts reads the same layout).
/** Int32 slots: the heartbeat counter, 1 while a synchronous kernel call runs, the two texts' lengths, the stop bound (s). */
export const SLOT = { beat: 0, inCall: 1, callLen: 2, opLen: 3, stopS: 4 } as const;
export const CALL_TEXT = { offset: 64, size: 256 } as const;
export const OP_TEXT = { offset: 320, size: 256 } as const;
const SHARED_BYTES = 576;

const DEFAULT_STUCK_AFTER_MS = 60_000;
/**
 * A stuck operation may still settle once given up (its request times out, the kernel answers late, its next
 * request is refused): it has this many watchdog times to, before the agent restarts. Long enough that the status
 * op can be asked and report it meanwhile; short enough that a wedge ends within minutes.
 */
export const UNSETTLED_FACTOR = 3;

export class Activity {
  private readonly als = new AsyncLocalStorage<Track>();
  private readonly tracks = new Set<Track>();
  private opts: ActivityOptions = { stuckAfterMs: DEFAULT_STUCK_AFTER_MS };
  private timer: NodeJS.Timeout | undefined;
  private unrecoverable = false;
  /** What the watchdog thread reads (SLOT, CALL_TEXT, OP_TEXT). */
  readonly shared = new SharedArrayBuffer(SHARED_BYTES);
  private readonly slots = new Int32Array(this.shared, 0, 8);
  private readonly bytes = new Uint8Array(this.shared);
  private lastCallText: string | undefined;
  private readonly encoder = new TextEncoder();

  /** The netlink layer's observer: names the requests of the current track, refuses those of an abandoned one. */
  readonly observer: NetlinkObserver = {
    request: (what) => {
      const t = this.als.getStore();
      if (!t) return undefined;
      if (t.abandonedAt !== undefined) return new OperationStuck(`${t.op} was given up as stuck; "${what}" was not sent`);
      const call = { what };
      t.calls.add(call);
      t.lastProgress = this.now();
      return {
        progress: () => void (t.lastProgress = this.now()),
        settled: () => {
          t.calls.delete(call);
          t.lastProgress = this.now();
        },
      };
    },
    enter: (what) => this.enter(what),
    leave: () => this.leave(),
  };

  configure(opts: ActivityOptions): void {
    this.opts = opts;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    this.unrecoverable = false;
    if (opts.timer !== false) {
      // A quarter of the watchdog's time, at most a second: a stuck operation is seen within 1.25 times it.
      this.timer = setInterval(() => this.check(), Math.max(10, Math.min(1000, opts.stuckAfterMs / 4)));
      this.timer.unref();
    }
  }

  /** Stops the timer (the process is ending, or a test is done). */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  get stuckAfterMs(): number {
    return this.opts.stuckAfterMs;
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }

  /**
   * Runs `fn` as a tracked operation. It rejects with OperationStuck when the operation makes no progress for the
   * watchdog's time (fn itself may never settle: it is left, and what it asks of the kernel from then on is refused).
   */
  run<T>(op: string, fn: () => Promise<T>): Promise<T> {
    let abandon!: (e: Error) => void;
    const given = new Promise<never>((_, reject) => (abandon = reject));
    const t: Track = { op, step: 'start', lastProgress: this.now(), calls: new Set(), abandon };
    this.tracks.add(t);
    this.writeText(OP_TEXT, SLOT.opLen, `${op}: start`);
    const running = this.als.run(t, fn);
    void running.then(
      () => this.tracks.delete(t),
      () => this.tracks.delete(t),
    );
    return Promise.race([running, given]);
  }

  /** The current operation began `name` (progress). Outside an operation: nothing. */
  step(name: string): void {
    const t = this.als.getStore();
    if (!t) return;
    t.step = name;
    t.lastProgress = this.now();
    this.writeText(OP_TEXT, SLOT.opLen, `${t.op}: ${name}`);
  }

  /** The current operation's name (apply, remove, reconcile), if any. */
  currentOp(): string | undefined {
    return this.als.getStore()?.op;
  }

  /** Whether the current operation was given up as stuck (what it still does is refused). */
  givenUp(): boolean {
    return this.als.getStore()?.abandonedAt !== undefined;
  }

  /** The first operation given up as stuck that has not settled yet. */
  stuck(): StuckOperation | undefined {
    for (const t of this.tracks) {
      if (t.abandonedAt === undefined) continue;
      const call = t.calls.values().next().value?.what;
      return { op: t.op, step: t.step, since: new Date(t.lastProgress).toISOString(), ...(call ? { call } : {}) };
    }
    return undefined;
  }

  /** One look at every operation (the timer's; tests call it with their clock). */
  check(): void {
    const now = this.now();
    const limit = this.opts.stuckAfterMs;
    for (const t of this.tracks) {
      if (t.abandonedAt === undefined) {
        if (now - t.lastProgress < limit) continue;
        t.abandonedAt = now;
        const call = t.calls.values().next().value?.what;
        const s = Math.round(limit / 1000);
        this.opts.log?.('watchdog.stuck', { op: t.op, step: t.step, ...(call ? { netlink_request: call } : {}), since: new Date(t.lastProgress).toISOString(), stuck_s: s });
        t.abandon(new OperationStuck(`${t.step} did not finish within ${s} s${call ? ` (waiting on the kernel for: ${call})` : ''}`));
      } else if (now - t.abandonedAt >= UNSETTLED_FACTOR * limit) {
        this.giveUp(`${t.op} stuck in ${t.step} did not settle within ${Math.round((UNSETTLED_FACTOR * limit) / 1000)} s after it was given up`, { op: t.op, step: t.step });
        return;
      }
    }
    for (const c of offThreadOverdue()) {
      if (now - c.since >= limit) {
        this.giveUp(`a kernel call on a worker thread did not return within ${Math.round(limit / 1000)} s after its deadline`, { netlink_request: c.what });
        return;
      }
    }
  }

  private giveUp(why: string, fields: Record<string, unknown>): void {
    if (this.unrecoverable) return;
    this.unrecoverable = true;
    this.opts.log?.('watchdog.unrecoverable', { reason: why, ...fields });
    this.opts.onUnrecoverable?.(why);
  }

  /** The event loop's heartbeat, for the watchdog thread. */
  beat(): void {
    Atomics.add(this.slots, SLOT.beat, 1);
  }

  /** Tells the watchdog thread the process is stopping: it must have ended within `seconds`. */
  stopping(seconds: number): void {
    Atomics.store(this.slots, SLOT.stopS, Math.max(1, Math.ceil(seconds)));
  }

  /** A synchronous kernel call is being made for `what` (named for the watchdog thread: no timer here runs meanwhile). */
  enter(what: string): void {
    // Encoded only when it changes: a dump's datagrams are many receives of one request.
    if (what !== this.lastCallText) {
      this.lastCallText = what;
      this.writeText(CALL_TEXT, SLOT.callLen, what);
    }
    Atomics.store(this.slots, SLOT.inCall, 1);
  }

  leave(): void {
    Atomics.store(this.slots, SLOT.inCall, 0);
  }

  /** Runs a synchronous kernel call (an fsync) named for the watchdog thread. */
  syscall<T>(what: string, fn: () => T): T {
    this.enter(what);
    try {
      return fn();
    } finally {
      this.leave();
    }
  }

  private writeText(where: { offset: number; size: number }, lenSlot: number, text: string): void {
    const { written } = this.encoder.encodeInto(text, this.bytes.subarray(where.offset, where.offset + where.size));
    Atomics.store(this.slots, lenSlot, written);
  }
}

/** The process's one tracker: the netlink layer reports to it from the start. */
export const activity = new Activity();
observeNetlink(activity.observer);

export { DEFAULT_STUCK_AFTER_MS };
