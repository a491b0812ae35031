// One `events` stream per node (docs/CONTRACTS.md "Events stream"; DESIGN 3.11): for every node the gateway may
// contact, whose agent's hello lists the feature `events`, this keeps one signed `events` job open on the node's
// warm connection, decodes its lines (common/edge-events.ts) and hands each event, in the order the agent wrote
// them, to `apply` (server/events/apply.ts: the same ingestion the pull uses). A stream that ends (the agent
// restarted, the connection dropped, the silence watchdog closed it, the job was refused) is opened again after a
// backoff, doubling from `backoffMs` to `maxBackoffMs` and back to the start once a stream stayed up. An agent
// without the feature is never sent the op: it is asked again (its hello, which costs no job) every `refreshMs`,
// as an upgrade brings a new connection and a new hello. The 30 s pull goes on beside it: it reconciles whatever a
// stream missed, so nothing here is retried or acknowledged.
import type { Logger } from '../../common/log.ts';
import { STREAM_SILENCE_MS, decodeEventLine, type EdgeEvent } from '../../common/edge-events.ts';
import type { EdgeNode } from '../edge/connections.ts';
import type { LineChannel, LineChannelOptions } from '../edge/line-channel.ts';

export interface EventStreamsOptions {
  /** The nodes to stream (provisioning/edge-state.ts: contactable, with a pinned host key). */
  nodes: () => Promise<EdgeNode[]>;
  /** Opens one node's stream; null when its agent does not take the op (ProvisioningService.openEvents). */
  open: (node: EdgeNode, o: LineChannelOptions) => Promise<LineChannel | null>;
  /**
   * One decoded event of node `nodeId` (keep-alives are not passed on). A health change is not waited for before
   * the next event is handed over, so it must be taken in before apply's first await (the ingest keeps the order).
   */
  apply: (nodeId: string, e: EdgeEvent) => Promise<void>;
  log: Logger;
  /** How often the node list is read again and an agent without the feature asked again (default 30 s). */
  refreshMs?: number;
  /** First wait before a stream is opened again (default 1 s). */
  backoffMs?: number;
  /** Longest wait before a stream is opened again (default 30 s). */
  maxBackoffMs?: number;
  /** A stream with nothing on it for this long is closed and opened again (default STREAM_SILENCE_MS). */
  silenceMs?: number;
}

/** Where a node's stream stands (tests, diagnostics). */
export type StreamState = 'opening' | 'open' | 'unsupported' | 'waiting';

interface NodeLoop {
  node: EdgeNode;
  state: StreamState;
  channel: LineChannel | null;
  /** Set when the node left the list (or the streams stop): the loop ends. */
  gone: boolean;
  wake: (() => void) | null;
}

export class EventStreams {
  private readonly loops = new Map<string, NodeLoop>();
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private refreshing: Promise<void> | null = null;
  /** Streams opened, streams ended, events applied, lines refused, events whose ingestion failed, asks answered "no events op". */
  readonly stats = { opened: 0, ended: 0, events: 0, refusedLines: 0, applyFailures: 0, unsupported: 0 };

  constructor(private readonly o: EventStreamsOptions) {}

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      this.refreshing ??= this.refresh()
        .catch((e: unknown) => this.o.log.warn('events streams: could not read the nodes', { err: (e as Error).message }))
        .finally(() => (this.refreshing = null));
    };
    tick();
    this.timer = setInterval(tick, this.o.refreshMs ?? 30_000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.refreshing;
    for (const l of this.loops.values()) this.end(l, 'the gateway is stopping');
    this.loops.clear();
  }

  /** Where node `nodeId`'s stream stands; undefined for a node not streamed. */
  state(nodeId: string): StreamState | undefined {
    return this.loops.get(nodeId)?.state;
  }

  /** Closes node `nodeId`'s open stream (it is opened again after the backoff); tests cut it with this. */
  cut(nodeId: string): boolean {
    const ch = this.loops.get(nodeId)?.channel;
    ch?.close('cut by request');
    return ch !== undefined && ch !== null;
  }

  private async refresh(): Promise<void> {
    const nodes = await this.o.nodes();
    const ids = new Set(nodes.map((n) => n.id));
    for (const [id, l] of this.loops) {
      if (!ids.has(id)) {
        this.end(l, 'the node is no longer contactable');
        this.loops.delete(id);
      }
    }
    for (const n of nodes) {
      const l = this.loops.get(n.id);
      if (l) {
        l.node = n;
        // An agent without the feature is asked again now; a waiting stream keeps its backoff.
        if (l.state === 'unsupported') l.wake?.();
        continue;
      }
      const loop: NodeLoop = { node: n, state: 'opening', channel: null, gone: false, wake: null };
      this.loops.set(n.id, loop);
      void this.run(loop);
    }
  }

  private end(l: NodeLoop, why: string): void {
    l.gone = true;
    l.channel?.close(why);
    l.wake?.();
  }

  /** Waits `ms` or until woken (a refresh, the node gone, stop). */
  private sleep(l: NodeLoop, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      t.unref();
      function done() {
        clearTimeout(t);
        l.wake = null;
        resolve();
      }
      l.wake = done;
    });
  }

  private async run(l: NodeLoop): Promise<void> {
    const base = this.o.backoffMs ?? 1000;
    const max = this.o.maxBackoffMs ?? 30_000;
    let backoff = base;
    let unsupportedLogged = false;
    while (!l.gone && !this.stopped) {
      const nodeId = l.node.id;
      l.state = 'opening';
      // In the agent's order: an attack's end is never stored before its start.
      let queue = Promise.resolve();
      // Health changes handed over and not yet committed (they do not hold the queue).
      const held = new Set<Promise<void>>();
      let events = 0;
      const onLine = (line: string) => {
        const d = decodeEventLine(line);
        if (!d.ok) {
          this.stats.refusedLines++;
          this.o.log.warn(d.refused ? 'events stream refused by the agent' : 'events stream: line refused', { node_id: nodeId, reason: d.reason, ...(d.refused ? { code: d.refused } : {}) });
          return;
        }
        if (d.event.type === 'keepalive') return;
        events++;
        const e = d.event;
        const apply = () =>
          this.o.apply(nodeId, e).then(
            () => void this.stats.events++,
            (err: unknown) => {
              // The pull brings it again within its interval: logged, not retried here.
              this.stats.applyFailures++;
              this.o.log.warn('events stream: an event could not be stored; the next status pull brings it', { node_id: nodeId, type: e.type, err: (err as Error).message });
            },
          );
        if (e.type === 'health_changed') {
          // Handed over in line order but not waited for: the ingest gathers a node's health changes into one
          // write (server/health/push-batch.ts, docs/SCALE.md "What breaks first"), which needs the next change
          // before the last one committed. It keeps their order itself (a change joins its batch when handed over).
          queue = queue.then(() => {
            const p = apply();
            held.add(p);
            void p.finally(() => held.delete(p));
          });
        } else queue = queue.then(apply);
      };
      let channel: LineChannel | null;
      try {
        channel = await this.o.open(l.node, { silenceMs: this.o.silenceMs ?? STREAM_SILENCE_MS, onLine });
      } catch (e) {
        this.o.log.warn('events stream could not be opened; trying again', { node_id: nodeId, err: (e as Error).message, retry_ms: backoff });
        l.state = 'waiting';
        await this.sleep(l, backoff);
        backoff = Math.min(max, backoff * 2);
        continue;
      }
      if (channel === null) {
        this.stats.unsupported++;
        if (!unsupportedLogged) this.o.log.info('edge agent has no events stream: its events come with the status pull', { node_id: nodeId });
        unsupportedLogged = true;
        l.state = 'unsupported';
        await this.sleep(l, this.o.refreshMs ?? 30_000);
        continue;
      }
      unsupportedLogged = false;
      this.stats.opened++;
      l.channel = channel;
      l.state = 'open';
      const opened = performance.now();
      this.o.log.info('events stream opened', { node_id: nodeId });
      if (l.gone || this.stopped) channel.close('the gateway is stopping');
      const why = await channel.closed;
      l.channel = null;
      await queue;
      await Promise.all(held);
      this.stats.ended++;
      // A stream that stayed up a while (or carried events) was healthy: the next one starts from the first backoff.
      if (events > 0 || performance.now() - opened > max) backoff = base;
      this.o.log.info('events stream ended', { node_id: nodeId, why, events, retry_ms: backoff });
      if (l.gone || this.stopped) break;
      l.state = 'waiting';
      await this.sleep(l, backoff);
      backoff = Math.min(max, backoff * 2);
    }
  }
}
