// The agent's record of what it created (docs/CONTRACTS.md "Dataplane": it owns only the links it created, recorded in its
// state), on a journal (housekeeping/journal.ts) replayed at start and compacted when it has grown well
// past the live set, so one apply costs one small appended line and an fdatasync, not a rewrite of
// 10,000 records.
import { Journal } from '../housekeeping/journal.ts';
import type { OwnedTunnel } from './diff.ts';
import type { TunnelSpec } from './types.ts';

type Line = { v: 1; put: TunnelSpec; pending?: true } | { v: 1; del: string };

export const STATE_FILE = 'dataplane-state.jsonl';
/**
 * The last desired state the gateway gave this node (every applied, removed and reconciled tunnel spec),
 * in the same journal format: what a restart or a reboot restores at start (docs/CONTRACTS.md "Restart and reboot").
 * Kept apart from STATE_FILE, which records what the agent created (a tunnel whose removal failed is
 * still owned there, but no longer desired).
 */
export const DESIRED_FILE = 'desired-state.jsonl';

const putLine = (p: OwnedTunnel): Line => (p.pending ? { v: 1, put: p.spec, pending: true } : { v: 1, put: p.spec });

function accept(v: unknown): Line | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const l = v as Partial<{ put: TunnelSpec; del: string }>;
  if (typeof l.put === 'object' && l.put !== null && typeof l.put.id === 'string') return v as Line;
  if (typeof l.del === 'string') return v as Line;
  return undefined;
}

export class StateStore {
  private readonly records = new Map<string, OwnedTunnel>();

  private constructor(private readonly journal: Journal<Line>) {}

  static open(dir: string, file: string = STATE_FILE): StateStore {
    // A torn last line (a crash mid-write) is skipped: the operation it described never completed.
    const { journal, lines } = Journal.open(dir, file, accept);
    const store = new StateStore(journal);
    for (const l of lines) {
      if ('put' in l) store.records.set(l.put.id, l.pending ? { spec: l.put, pending: true } : { spec: l.put });
      else store.records.delete(l.del);
    }
    return store;
  }

  get path(): string {
    return this.journal.path;
  }

  get tunnels(): ReadonlyMap<string, OwnedTunnel> {
    return this.records;
  }

  /** Records puts and deletes durably, in one write. */
  commit(puts: readonly OwnedTunnel[], dels: readonly string[]): void {
    if (puts.length === 0 && dels.length === 0) return;
    for (const p of puts) this.records.set(p.spec.id, p);
    for (const d of dels) this.records.delete(d);
    if (this.journal.lineCount + puts.length + dels.length > 2 * this.records.size + 1000) {
      this.snapshot();
      return;
    }
    this.journal.append([...puts.map(putLine), ...dels.map((d): Line => ({ v: 1, del: d }))]);
  }

  /** Replaces the journal with the live records. */
  snapshot(): void {
    this.journal.rewrite([...this.records.values()].map(putLine));
  }

  close(): void {
    this.journal.close();
  }
}
