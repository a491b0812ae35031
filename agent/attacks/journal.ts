// The agent's attack journal (docs/CONTRACTS.md "Attacks"): the recent attack records, which the `status` answer
// carries so the gateway stores them. Pure and in memory; bounded.
//
// What `status` carries: every attack going on, and every record that changed within the report window (default
// 10 minutes: twenty of the gateway's 30 s rounds). The gateway stores records by id (an upsert), so a record
// sent in many rounds is stored once, and a round the gateway lost is made good by the next. A record that
// ended longer ago than the window is dropped: no answer carries it again.
//
// Bound: ended records at most `maxEnded` (default 1,000; the oldest change goes first), and they leave after
// the window anyway; open records are at most one per tunnel (the detector's rule), and a tunnel that leaves the
// edge ends its attack (AttackDetector.retain). So the journal never holds more than maxEnded + tunnels records.
//
// Not kept across an agent restart: an attack going on when the agent stops is not in the next agent's journal,
// and the gateway closes it when an answer that carries `attacks` no longer lists it (server/attacks/ingest.ts).
// A flood that goes on is detected again within seconds by the new agent, as a new attack.
import { MAX_REPORTED_ATTACKS, type AttackRecord } from '../../common/attacks.ts';

export const DEFAULT_REPORT_WINDOW_MS = 10 * 60_000;
export const DEFAULT_MAX_ENDED = 1_000;

interface Entry {
  record: AttackRecord;
  /** When the record last changed (ms since the epoch, the detector's observation time). */
  changedAt: number;
}

export class AttackJournal {
  /** By id, in the order of their last change (a change re-inserts): the oldest first. */
  private readonly entries = new Map<string, Entry>();
  private ended = 0;

  constructor(private readonly opts: { windowMs?: number; maxEnded?: number; maxReported?: number } = {}) {}

  private get windowMs(): number {
    return this.opts.windowMs ?? DEFAULT_REPORT_WINDOW_MS;
  }

  /** Records held now. */
  get size(): number {
    return this.entries.size;
  }

  /** A record that started, changed or ended at `at`. */
  put(record: AttackRecord, at: number): void {
    const had = this.entries.get(record.id);
    if (had) {
      if (had.record.ended_at !== null) this.ended--;
      this.entries.delete(record.id);
    }
    this.entries.set(record.id, { record, changedAt: at });
    if (record.ended_at !== null && ++this.ended > (this.opts.maxEnded ?? DEFAULT_MAX_ENDED)) this.dropOldestEnded();
  }

  /**
   * What a `status` answer carries at `now`: every open record and every one changed within the window, at most
   * MAX_REPORTED_ATTACKS (open ones first, then the latest changed: so an answer that is not full lists every open
   * one, which is what lets the gateway close the others); older ended ones are dropped.
   */
  report(now: number): AttackRecord[] {
    const cutoff = now - this.windowMs;
    const open: AttackRecord[] = [];
    const ended: AttackRecord[] = [];
    for (const [id, e] of this.entries) {
      if (e.record.ended_at !== null && e.changedAt < cutoff) {
        this.entries.delete(id);
        this.ended--;
        continue;
      }
      (e.record.ended_at === null ? open : ended).push(e.record);
    }
    const max = this.opts.maxReported ?? MAX_REPORTED_ATTACKS;
    if (open.length >= max) return open.slice(open.length - max);
    return ended.length > max - open.length ? [...open, ...ended.slice(ended.length - (max - open.length))] : [...open, ...ended];
  }

  private dropOldestEnded(): void {
    for (const [id, e] of this.entries) {
      if (e.record.ended_at === null) continue;
      this.entries.delete(id);
      this.ended--;
      return;
    }
  }
}
