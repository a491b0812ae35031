// Health changes marked on the traffic chart's time axis: the tunnel's history, read with the range's
// points (`Tunnel.healthChanges`, docs/CONTRACTS.md "Health history"), and the changes the tunnel page's
// `tunnelStatus` subscription reports after that read, merged into one list. No DOM and no preact:
// unit-tested under Node (test/unit/panel-traffic.test.ts).
//
// The live ones are kept in this module (not in a component) so they outlive a change of range or a
// remount while the panel stays open; the history makes them redundant once it is read again (every
// refresh reads the changes since the last read), so losing them on reload loses nothing.

export type Health = 'UP' | 'DOWN' | 'UNKNOWN';

export interface HealthMark {
  /** When the change happened (history) or the panel learned of it (live), ms since the epoch. */
  at: number;
  from: Health;
  to: Health;
}

/** A change as `Tunnel.healthChanges` answers it (the generated HealthChange type fits this shape). */
export interface ChangeLike {
  at: string;
  previous: Health;
  health: Health;
}

/** Live marks kept per tunnel: a page left open for weeks does not grow without bound. */
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

/** The panel's one store, fed by the tunnel page's own subscription (Tunnel.tsx), read by TrafficSection. */
export const healthMarks = new HealthMarks();

export const markOf = (c: ChangeLike): HealthMark => ({ at: Date.parse(c.at), from: c.previous, to: c.health });

/** The API's cap per request (docs/CONTRACTS.md "Health history"): a full page means there may be more. */
export const HISTORY_PAGE = 1000;
/**
 * Pages read for one range at most. A tunnel that flaps at every collection round changes thousands of
 * times a day, far more than a chart can show apart; a few pages cover any ordinary 90 days, and past
 * them the section says the list stops (HealthHistory.truncatedAt).
 */
export const HISTORY_MAX_PAGES = 5;

export interface HealthHistory {
  /** Oldest first. */
  marks: HealthMark[];
  /** Set when the gateway has more changes after this time than were read. */
  truncatedAt?: number;
}

/**
 * The range's history from its `first` page and as many further pages as needed (at most `maxPages` in
 * all). A full page is followed by asking again from its last `at`; the answer starts again with the
 * changes at that time (all of them, in the order written), so as many as the previous page ended with
 * are skipped. A page that brings nothing new (a thousand changes at one instant) ends the reading too.
 */
export async function readHistory(first: readonly ChangeLike[], more: (fromIso: string) => Promise<readonly ChangeLike[]>, maxPages = HISTORY_MAX_PAGES): Promise<HealthHistory> {
  const changes = [...first];
  let page: readonly ChangeLike[] = first;
  for (let pages = 1; page.length >= HISTORY_PAGE; pages++) {
    const lastAt = page[page.length - 1]!.at;
    if (pages >= maxPages) return { marks: changes.map(markOf), truncatedAt: Date.parse(lastAt) };
    let repeated = 0;
    for (let i = page.length - 1; i >= 0 && page[i]!.at === lastAt; i--) repeated++;
    const next = await more(lastAt);
    const fresh = next.slice(repeated);
    if (next.length >= HISTORY_PAGE && fresh.length === 0) return { marks: changes.map(markOf), truncatedAt: Date.parse(lastAt) };
    changes.push(...fresh);
    page = next;
  }
  return { marks: changes.map(markOf) };
}

const key = (m: HealthMark) => `${m.at}|${m.from}|${m.to}`;

/** `held` history with `fresh` history (a later read that may overlap it) added: each change once, oldest first. */
export function addHistory(held: readonly HealthMark[], fresh: readonly HealthMark[]): HealthMark[] {
  const known = new Set(held.map(key));
  const added = fresh.filter((m) => !known.has(key(m)));
  return added.length ? sortMarks([...held, ...added]) : [...held];
}

/**
 * How far apart a live mark and the history's record of the same change may be. The history's time is
 * the edge's check (or the gateway's collection round, every 30 s), the live one when the message
 * reached this browser, by this browser's clock.
 */
export const LIVE_MATCH_MS = 2 * 60_000;

/**
 * What the chart marks: the history, and the live marks seen since it was last read (`readAt`, this
 * browser's clock when the read was sent: a change before that is in the history, so its live mark
 * would be a second one) or within `gap` (a time the history was not read for: HealthHistory's
 * truncatedAt up to the read), less those the history holds already (the same new health within
 * LIVE_MATCH_MS: a message that arrived after the read was sent, of a change the read found).
 */
export function mergeMarks(history: readonly HealthMark[], live: readonly HealthMark[], readAt: number, gap?: { from: number; to: number }): readonly HealthMark[] {
  const unread = (at: number) => at >= readAt || (gap !== undefined && at > gap.from && at < gap.to);
  const extra = live.filter((m) => unread(m.at) && !history.some((h) => h.to === m.to && Math.abs(h.at - m.at) <= LIVE_MATCH_MS));
  return extra.length ? sortMarks([...history, ...extra]) : history;
}

function sortMarks(marks: HealthMark[]): HealthMark[] {
  // Array.prototype.sort is stable: ties keep the order written.
  return marks.sort((a, b) => a.at - b.at);
}

/** The marks that fall in [fromMs, toMs). */
export function marksWithin(marks: readonly HealthMark[], fromMs: number, toMs: number): HealthMark[] {
  return marks.filter((m) => m.at >= fromMs && m.at < toMs);
}

/**
 * The marks of each of `count` steps of `stepMs` from `fromMs` (the table's rows): one pass over the
 * marks, where filtering them per row would be rows x marks (2,159 x 5,000 on 90 days).
 */
export function marksByStep(marks: readonly HealthMark[], fromMs: number, stepMs: number, count: number): HealthMark[][] {
  const rows = Array.from({ length: count }, (): HealthMark[] => []);
  for (const m of marks) {
    const i = Math.floor((m.at - fromMs) / stepMs);
    if (i >= 0 && i < count) rows[i]!.push(m);
  }
  return rows;
}
