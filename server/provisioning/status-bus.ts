// Tunnel status changes, from whichever replica made them, to whoever waits in this one: the REST and
// GraphQL handlers that wait a few seconds for the agent, and graphql-ws subscriptions. Carried by
// PostgreSQL NOTIFY through Database.listen (delivered at once in this process, by LISTEN in the
// others). A notice is only a hint: waiters re-read the tunnel row before they answer. Notices sent
// while this replica's LISTEN connection was down are lost: the bus then tells its long-lived watchers
// to re-read (onResync), so a subscription never sits on a status that changed unannounced.
import { EventEmitter } from 'node:events';
import type { Database } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import type { Health } from '../../common/tunnel-status.ts';

const STATUS_CHANNEL = 'tunnel_status';

export interface StatusChange {
  id: string;
  status: TunnelStatus;
  /** Set when the notice is about a health change (server/health/ingest.ts): the new health. */
  health?: Health;
  /**
   * Set when the notice is about an attack on the tunnel that started or ended (server/attacks/ingest.ts): which
   * attack, and which of the two. A replica hears its own notices twice (at once, and again by LISTEN), so
   * watchers remember which they sent (AttackNotices).
   */
  attack?: AttackNotice;
}

export interface AttackNotice {
  id: string;
  kind: 'started' | 'ended';
}

/**
 * The attack notices a watcher has sent on, so a notice heard twice (or again after a resync) is sent once. Keeps
 * the latest `max` (a watcher lives as long as its subscription; attacks on one tunnel are few).
 */
export class AttackNotices {
  private readonly seen = new Set<string>();
  constructor(private readonly max = 256) {}

  /** Whether `a` is news to this watcher (and from now on it is not). */
  fresh(a: AttackNotice | undefined): boolean {
    if (!a) return false;
    const key = `${a.id}:${a.kind}`;
    if (this.seen.has(key)) return false;
    this.seen.add(key);
    if (this.seen.size > this.max) this.seen.delete(this.seen.values().next().value!);
    return true;
  }
}

/** The event the bus raises when notices may have been missed (ids are UUIDs, so it cannot clash). */
const RESYNC = 'resync';

export class TunnelStatusBus {
  private readonly events = new EventEmitter();
  private started: Promise<void> | null = null;

  constructor(private readonly db: Database) {
    this.events.setMaxListeners(0);
  }

  /** Starts listening (idempotent). */
  start(): Promise<void> {
    this.started ??= this.db.listen(STATUS_CHANNEL, (payload) => {
      try {
        const c = JSON.parse(payload) as StatusChange;
        if (typeof c.id === 'string' && typeof c.status === 'string') this.events.emit(c.id, c);
      } catch {
        // Not ours; ignore.
      }
    }, () => this.events.emit(RESYNC));
    return this.started;
  }

  /** Tells every replica that tunnel `id` is now `status` (and, after a health change, `health`; after an attack started or ended, which). */
  async publish(id: string, status: TunnelStatus, health?: Health, attack?: AttackNotice): Promise<void> {
    await this.db.notify(STATUS_CHANNEL, JSON.stringify({ id, status, ...(health ? { health } : {}), ...(attack ? { attack } : {}) } satisfies StatusChange));
  }

  /** Calls `fn` for each change of tunnel `id`; returns the unsubscribe function. */
  on(id: string, fn: (c: StatusChange) => void): () => void {
    this.events.on(id, fn);
    return () => this.events.off(id, fn);
  }

  /** Listeners held right now, of every tunnel and of resyncs: what a finished watcher must give back (tests, leak checks). */
  listenerCount(): number {
    let n = 0;
    for (const name of this.events.eventNames()) n += this.events.listenerCount(name);
    return n;
  }

  /**
   * Calls `fn` whenever notices may have been missed (the LISTEN connection was lost, or is listening
   * again after a gap): whoever relies on them should re-read. Returns the unsubscribe function.
   */
  onResync(fn: () => void): () => void {
    this.events.on(RESYNC, fn);
    return () => this.events.off(RESYNC, fn);
  }

  /**
   * Runs `start`, then re-reads with `check` after it, after every notice about `id` (or a resync) and at
   * least every `recheckMs`, until `check` says true (resolves true) or `ms` passed (false). Subscribed
   * before `start` runs, so a notice that `start` causes cannot come first.
   */
  async until(id: string, check: () => Promise<boolean>, ms: number, start: () => Promise<void>, recheckMs = ms): Promise<boolean> {
    let poked = false;
    let wake = () => {};
    const poke = () => {
      poked = true;
      wake();
    };
    const off = this.on(id, poke);
    const offResync = this.onResync(poke);
    const deadline = Date.now() + ms;
    try {
      await start();
      for (;;) {
        poked = false;
        if (await check()) return true;
        const left = deadline - Date.now();
        if (left <= 0) return false;
        // A notice during check() is not lost: `poked` is set and the loop reads again at once.
        if (!poked) {
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, Math.min(left, recheckMs));
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
        }
        wake = () => {};
      }
    } finally {
      off();
      offResync();
    }
  }

  /**
   * Resolves with the first status of `id` that `done` accepts, or null after `ms`. Subscribe with
   * this *before* causing the change, or the notice can come first.
   */
  waiter(id: string, done: (s: TunnelStatus) => boolean, ms: number): { promise: Promise<TunnelStatus | null>; cancel(): void } {
    let off = () => {};
    let timer: NodeJS.Timeout | undefined;
    let resolveFn: (s: TunnelStatus | null) => void = () => {};
    const promise = new Promise<TunnelStatus | null>((resolve) => {
      resolveFn = resolve;
      timer = setTimeout(() => resolve(null), ms);
      off = this.on(id, (c) => {
        if (done(c.status)) resolve(c.status);
      });
    }).finally(() => {
      clearTimeout(timer);
      off();
    });
    return { promise, cancel: () => resolveFn(null) };
  }
}
