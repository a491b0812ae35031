// Health changes this page has seen live, per tunnel: the marks on the traffic chart's time axis.
//
// The API keeps no history of health changes the panel can read (docs/CONTRACTS.md "Health and
// traffic": `Tunnel.health` and `healthCheckedAt` are the state now; `tunnel.health_changed` goes only
// to the account's webhooks), so the chart marks what the `tunnelStatus` subscription reported while
// the panel was open. Kept in this module (not in a component) so the marks outlive a change of range
// or a remount while the panel stays open; gone on reload. No DOM and no preact: unit-tested under Node.

export type Health = 'UP' | 'DOWN' | 'UNKNOWN';

export interface HealthMark {
  /** When the panel learned of the change (ms since the epoch). */
  at: number;
  from: Health;
  to: Health;
}

/** Marks kept per tunnel: a page left open for weeks does not grow without bound. */
const MAX_MARKS = 500;

interface Seen {
  last: Health;
  marks: HealthMark[];
}

export class HealthMarks {
  private readonly seen = new Map<string, Seen>();
  private readonly listeners = new Set<(tunnelId: string) => void>();

  /**
   * The health `tunnelId` has now, as a subscription message says. The first report only sets what
   * the page knows (the subscription answers the current state first, which is no change); each later
   * one that differs is a mark at `at`.
   */
  observe(tunnelId: string, health: Health, at: number): void {
    const s = this.seen.get(tunnelId);
    if (!s) {
      this.seen.set(tunnelId, { last: health, marks: [] });
      return;
    }
    if (s.last === health) return;
    s.marks = [...s.marks, { at, from: s.last, to: health }].slice(-MAX_MARKS);
    s.last = health;
    for (const l of this.listeners) l(tunnelId);
  }

  /** The changes seen for `tunnelId`, oldest first (the same array until the next change). */
  of(tunnelId: string): readonly HealthMark[] {
    return this.seen.get(tunnelId)?.marks ?? [];
  }

  /** Calls `listener` with the tunnel's id after each new mark; returns the unsubscribe. */
  listen(listener: (tunnelId: string) => void): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }
}

/** The panel's one store: the tunnel page may feed it from its own subscription (`observe`). */
export const healthMarks = new HealthMarks();

/** The marks that fall in [fromMs, toMs). */
export function marksWithin(marks: readonly HealthMark[], fromMs: number, toMs: number): HealthMark[] {
  return marks.filter((m) => m.at >= fromMs && m.at < toMs);
}
