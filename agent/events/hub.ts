// The agent's side of the `events` stream (docs/CONTRACTS.md "Events stream"): attack starts and ends (from
// attacks/monitor.ts, on the tick that decides them) and health changes (from health/scheduler.ts, on the check
// that decides them) are encoded once (common/edge-events.ts) and written to every open stream at once; each stream
// also gets a keep-alive line on opening and every KEEPALIVE_MS, so the gateway notices one that died silently.
// No stream open: an event is only in the journal, and the next `status` pull carries it. Channels are the
// SSH server's (ssh/server.ts): this module sees each as a write function.
import { KEEPALIVE_MS, encodeEventLine, type EdgeEvent } from '../../common/edge-events.ts';
import type { AttackEvent } from '../attacks/detector.ts';
import type { Health } from '../../common/tunnel-status.ts';

/** One open stream's writer: false when its channel is gone or too far behind (the writer closes it then; no more lines go to it). */
export type EventWriter = (line: string) => boolean;

export interface EventHubOptions {
  /** Between keep-alives (default KEEPALIVE_MS); tests shorten it. */
  keepaliveMs?: number;
  /** ms since the epoch (default Date.now). */
  now?: () => number;
}

export class EventHub {
  private readonly writers = new Map<EventWriter, NodeJS.Timeout>();
  private readonly now: () => number;
  /** Lines written (all streams), events published, lines a stream refused (it was closed for it). */
  readonly stats = { written: 0, published: 0, refused: 0, invalid: 0 };

  constructor(private readonly o: EventHubOptions = {}) {
    this.now = o.now ?? Date.now;
  }

  /** Streams open now. */
  get streams(): number {
    return this.writers.size;
  }

  /** An attack start or end as the monitor decided it. */
  attack(e: AttackEvent): void {
    this.publish({ type: e.type, attack: e.attack });
  }

  /** A tunnel's health as a check changed it; `checkedAt` in ms since the epoch. */
  health(tunnelId: string, health: Health, checkedAt: number): void {
    if (!Number.isFinite(checkedAt)) {
      this.stats.invalid++;
      return;
    }
    this.publish({ type: 'health_changed', tunnel_id: tunnelId, health, checked_at: new Date(checkedAt).toISOString() });
  }

  /**
   * Never throws: its callers are the attack monitor's tick and a health check, which must go on whatever the
   * stream makes of an event. An event the codec refuses is counted (`stats.invalid`) and left to the pull.
   */
  publish(e: EdgeEvent): void {
    if (this.writers.size === 0) return;
    let line: string;
    try {
      line = encodeEventLine(e);
    } catch {
      this.stats.invalid++;
      return;
    }
    this.stats.published++;
    for (const w of [...this.writers.keys()]) this.write(w, line);
  }

  /** Opens a stream on `write`: a keep-alive at once, then every event and keep-alive until the returned close. */
  subscribe(write: EventWriter): () => void {
    const timer = setInterval(() => this.write(write, this.keepalive()), this.o.keepaliveMs ?? KEEPALIVE_MS);
    timer.unref();
    this.writers.set(write, timer);
    this.write(write, this.keepalive());
    return () => this.unsubscribe(write);
  }

  private keepalive(): string {
    return encodeEventLine({ type: 'keepalive', at: new Date(this.now()).toISOString() });
  }

  private write(w: EventWriter, line: string): boolean {
    if (!this.writers.has(w)) return false;
    if (w(line)) {
      this.stats.written++;
      return true;
    }
    this.stats.refused++;
    this.unsubscribe(w);
    return false;
  }

  private unsubscribe(w: EventWriter): void {
    const t = this.writers.get(w);
    if (t) clearInterval(t);
    this.writers.delete(w);
  }
}
