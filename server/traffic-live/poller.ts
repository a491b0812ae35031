// Live traffic for the `tunnelTraffic` subscription (docs/CONTRACTS.md "Live traffic"): per edge node, one poller
// while at least one subscriber of this replica watches a tunnel on it, asking the agent once a second for every
// watched tunnel of that node in one `traffic` job (chunks of TRAFFIC_MAX_IDS), with `since` the newest second
// already delivered. A new subscriber's tunnel is asked without `since` (its whole window, chunks of
// BACKFILL_IDS_PER_JOB so the answer stays small) and its first event is that backfill. The last subscriber of a
// node leaving stops its poller at once (no further job; one in flight is let finish and its answer dropped).
//
// Each replica polls for its own subscribers: two replicas with watchers of one node each ask it once a second.
// Cost bound (docs/ARCHITECTURE.md "Live traffic"): at most one steady job a second per (replica, node) with
// watchers, whatever the number of watchers and tunnels up to TRAFFIC_MAX_IDS, plus one backfill job per
// BACKFILL_IDS_PER_JOB new tunnels; the subscription caps (graphql/subscriptions.ts) bound the watchers.
import type { Logger } from '../../common/log.ts';
import { LIVE_WINDOW_S, TRAFFIC_MAX_IDS, TRAFFIC_MAX_POINTS, type LivePoint, type TrafficBody, type TrafficResult } from '../../common/traffic-live.ts';
import type { EdgeNode } from '../edge/connections.ts';

/** Tunnels per backfill job: each gets its whole window (TRAFFIC_MAX_POINTS / this = LIVE_WINDOW_S points). */
export const BACKFILL_IDS_PER_JOB = Math.floor(TRAFFIC_MAX_POINTS / LIVE_WINDOW_S);
/** Events a slow subscriber may have waiting; beyond it the oldest live ones are dropped (never the backfill). */
const MAX_QUEUED = 60;

/** One event of a subscription: the backfill first (backfill true, up to LIVE_WINDOW_S points), then the new points. */
export interface LiveEvent {
  tunnelId: string;
  backfill: boolean;
  points: LivePoint[];
}

export interface LiveTrafficOptions {
  /** Op `traffic` of one node (ProvisioningService.nodeTraffic). */
  fetch: (node: EdgeNode, body: TrafficBody) => Promise<TrafficResult>;
  /** What ends a node's subscriptions: an error that will not pass by asking again (the agent lost the feature). */
  isFinal?: (e: unknown) => boolean;
  /** Turns such an error into what the subscribers get. */
  finalError?: (e: unknown) => Error;
  log: Pick<Logger, 'warn' | 'info'>;
  /** Between one job's start and the next (default 1,000 ms). */
  intervalMs?: number;
}

interface Watcher {
  tunnelId: string;
  queue: LiveEvent[];
  wake: (() => void) | null;
  backfilled: boolean;
  closed: boolean;
  error: Error | null;
}

/** A subscription's events; return() ends it at once and frees its poller when it was the node's last. */
export interface LiveWatch extends AsyncIterableIterator<LiveEvent, undefined> {
  next(): Promise<IteratorResult<LiveEvent, undefined>>;
  return(value?: undefined): Promise<IteratorResult<LiveEvent, undefined>>;
}

const secondOf = (iso: string): number => Math.floor(Date.parse(iso) / 1000);

class NodeFeed {
  readonly watchers = new Set<Watcher>();
  /** The newest second delivered per tunnel. */
  private readonly last = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private failing = false;
  /** Jobs this feed sent (tests, /metrics-free diagnostics). */
  jobs = 0;

  constructor(
    readonly node: EdgeNode,
    private readonly o: LiveTrafficOptions,
  ) {}

  start(): void {
    this.schedule(0);
  }

  /** Stopped: its last watcher left, or the agent answered what asking again will not change. */
  get done(): boolean {
    return this.stopped;
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.run(), ms);
    this.timer.unref();
  }

  private async run(): Promise<void> {
    const t0 = performance.now();
    try {
      await this.tick();
      if (this.failing) this.o.log.info('live traffic: the node answers again', { node_id: this.node.id });
      this.failing = false;
    } catch (e) {
      if (this.o.isFinal?.(e)) {
        const err = this.o.finalError ? this.o.finalError(e) : (e as Error);
        for (const w of this.watchers) {
          w.error = err;
          w.wake?.();
        }
        // Done: a new subscriber of this node gets a new feed (its own answer), never this dead one's silence.
        this.stop();
        return;
      }
      // Once per failing streak: a node down for an hour would otherwise log a line a second.
      if (!this.failing) this.o.log.warn('live traffic: the node did not answer; asking again every second', { node_id: this.node.id, err: (e as Error).message });
      this.failing = true;
    }
    this.schedule(Math.max(0, (this.o.intervalMs ?? 1000) - (performance.now() - t0)));
  }

  private async tick(): Promise<void> {
    const fresh = new Set<string>();
    const steady = new Set<string>();
    for (const w of this.watchers) (w.backfilled && this.last.has(w.tunnelId) ? steady : fresh).add(w.tunnelId);
    for (const id of fresh) steady.delete(id);
    for (const [id] of this.last) if (![...this.watchers].some((w) => w.tunnelId === id)) this.last.delete(id);
    const backfill = [...fresh];
    for (let i = 0; i < backfill.length && !this.stopped; i += BACKFILL_IDS_PER_JOB) {
      this.deliver(await this.ask({ ids: backfill.slice(i, i + BACKFILL_IDS_PER_JOB) }), true);
    }
    const ids = [...steady];
    for (let i = 0; i < ids.length && !this.stopped; i += TRAFFIC_MAX_IDS) {
      const chunk = ids.slice(i, i + TRAFFIC_MAX_IDS);
      const since = Math.min(...chunk.map((id) => this.last.get(id)!));
      this.deliver(await this.ask({ ids: chunk, since: new Date(since * 1000).toISOString() }), false);
    }
  }

  private ask(body: TrafficBody): Promise<TrafficResult> {
    this.jobs++;
    return this.o.fetch(this.node, body);
  }

  /** Hands each watcher what it has not seen: its backfill (a backfill answer), then the points after the last delivered. */
  private deliver(r: TrafficResult, backfill: boolean): void {
    if (this.stopped) return;
    for (const t of r.tunnels) {
      const id = t.id.toLowerCase();
      const last = this.last.get(id);
      const fresh = last === undefined ? t.points : t.points.filter((p) => secondOf(p.t) > last);
      for (const w of this.watchers) {
        if (w.tunnelId !== id || w.closed) continue;
        if (!w.backfilled) {
          // Only a backfill answer holds the whole window: a watcher that came during a steady job waits for the next.
          if (!backfill) continue;
          w.backfilled = true;
          push(w, { tunnelId: id, backfill: true, points: t.points });
        } else if (fresh.length > 0) {
          push(w, { tunnelId: id, backfill: false, points: fresh });
        }
      }
      const newest = t.points.at(-1);
      if (newest) this.last.set(id, Math.max(last ?? 0, secondOf(newest.t)));
      else if (backfill && last === undefined) this.last.set(id, Math.floor(Date.now() / 1000) - LIVE_WINDOW_S);
    }
  }
}

function push(w: Watcher, e: LiveEvent): void {
  w.queue.push(e);
  if (w.queue.length > MAX_QUEUED) {
    const i = w.queue.findIndex((q) => !q.backfill);
    if (i >= 0) w.queue.splice(i, 1);
  }
  w.wake?.();
}

export class LiveTraffic {
  private readonly feeds = new Map<string, NodeFeed>();

  constructor(private readonly o: LiveTrafficOptions) {}

  /** Follows `tunnelId` on `node`: the first event is its backfill, then its new points about once a second. */
  watch(node: EdgeNode, tunnelId: string): LiveWatch {
    let feed = this.feeds.get(node.id);
    if (!feed || feed.done) {
      feed = new NodeFeed(node, this.o);
      this.feeds.set(node.id, feed);
      feed.start();
    }
    const f = feed;
    const w: Watcher = { tunnelId: tunnelId.toLowerCase(), queue: [], wake: null, backfilled: false, closed: false, error: null };
    f.watchers.add(w);
    const close = (): void => {
      if (w.closed) return;
      w.closed = true;
      w.wake?.();
      f.watchers.delete(w);
      if (f.watchers.size === 0) {
        f.stop();
        if (this.feeds.get(node.id) === f) this.feeds.delete(node.id);
      }
    };
    const it: LiveWatch = {
      next: async () => {
        for (;;) {
          if (w.closed) return { done: true, value: undefined };
          const e = w.queue.shift();
          if (e) return { done: false, value: e };
          if (w.error) {
            const err = w.error;
            close();
            throw err;
          }
          await new Promise<void>((r) => (w.wake = r));
          w.wake = null;
        }
      },
      return: async () => {
        close();
        return { done: true, value: undefined };
      },
      throw: async (e?: unknown) => {
        close();
        throw e;
      },
      [Symbol.asyncIterator]: () => it,
    };
    return it;
  }

  /** Nodes this replica polls now, with the jobs each poller sent (tests). */
  polling(): Map<string, number> {
    return new Map([...this.feeds].map(([id, f]) => [id, f.jobs]));
  }

  /** Stops every poller (the process is stopping); their subscriptions end. */
  stop(): void {
    for (const f of this.feeds.values()) {
      f.stop();
      for (const w of f.watchers) {
        w.closed = true;
        w.wake?.();
      }
    }
    this.feeds.clear();
  }
}
