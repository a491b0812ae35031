// The agent's record of what it created (docs/CONTRACTS.md "Dataplane": it owns only the links it created, recorded in its
// state), on a journal (housekeeping/journal.ts) replayed at start and compacted when it has grown well
// past the live set, so one apply costs a small appended line (and, for the desired state, an fdatasync),
// not a rewrite of 10,000 records.
import { Journal } from '../housekeeping/journal.ts';
import { OwnedIndex, type OwnedTunnel } from './records.ts';
import { sameSpec } from './spec-compare.ts';
import { checkTunnel, normaliseSpec } from '../../common/tunnel-spec.ts';
import type { TunnelSpec } from './types.ts';

/** `was`: a pending change's earlier specs (records.ts OwnedTunnel.was); a journal without it reads as before. */
type Line = { v: 1; put: TunnelSpec; pending?: true; was?: TunnelSpec[] } | { v: 1; del: string };

export const STATE_FILE = 'dataplane-state.jsonl';
/**
 * The last desired state the gateway gave this node (every applied, removed and reconciled tunnel spec),
 * in the same journal format: what a restart or a reboot restores at start (docs/CONTRACTS.md "Restart and reboot").
 * Kept apart from STATE_FILE, which records what the agent created (a tunnel whose removal failed is
 * still owned there, but no longer desired).
 */
export const DESIRED_FILE = 'desired-state.jsonl';

const putLine = (p: OwnedTunnel): Line => ({ v: 1, put: p.spec, ...(p.pending ? { pending: true as const } : {}), ...(p.was?.length ? { was: p.was } : {}) });

const isSpec = (v: unknown): v is TunnelSpec => typeof v === 'object' && v !== null && typeof (v as { id?: unknown }).id === 'string';

function accept(v: unknown): Line | undefined {
  if (typeof v !== 'object' || v === null) return undefined;
  const l = v as Partial<{ put: unknown; del: unknown; was: unknown }>;
  if (isSpec(l.put)) return v as Line;
  if (typeof l.del === 'string') return v as Line;
  return undefined;
}

/**
 * A put line's record. `was` keeps only whole, valid specs (the contract's own check): a damaged entry there is
 * dropped, never the put, and never reaches the diff.
 */
function recordOf(l: Extract<Line, { put: TunnelSpec }>): OwnedTunnel {
  const listed: unknown = l.was;
  const was = Array.isArray(listed) ? listed.filter((w): w is TunnelSpec => checkTunnel(w, true) === undefined).map(normaliseSpec) : [];
  return { spec: l.put, ...(l.pending ? { pending: true } : {}), ...(was.length ? { was } : {}) };
}

export class StateStore {
  private readonly records = new Map<string, OwnedTunnel>();
  /** The records by name, protected IP and shared object, kept with them (records.ts OwnedIndex). */
  readonly index = new OwnedIndex();

  private constructor(
    private readonly journal: Journal<Line>,
    private readonly durable: boolean,
  ) {}

  /**
   * `durable`: each commit is fdatasynced before it returns (DESIRED_FILE: what the gateway was told is on the
   * node must survive a power cut). STATE_FILE's records describe links and elements, which a crash of the
   * machine takes with it: its commits are written (the page cache keeps them through a crash or kill of the
   * agent, what the intent records are for) and reach the disk with the kernel's writeback or the file's next
   * compaction, so a single-tunnel job pays one fdatasync (DESIRED_FILE's), not three (a job must not grow with the node).
   */
  static open(dir: string, file: string = STATE_FILE, opts: { durable?: boolean } = {}): StateStore {
    // A torn last line (a crash mid-write) is skipped: the operation it described never completed.
    const { journal, lines } = Journal.open(dir, file, accept);
    const store = new StateStore(journal, opts.durable ?? file !== STATE_FILE);
    for (const l of lines) {
      if ('put' in l) store.put(recordOf(l));
      else store.drop(l.del);
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
    for (const p of puts) this.put(p);
    for (const d of dels) this.drop(d);
    if (this.journal.lineCount + puts.length + dels.length > 2 * this.records.size + 1000) {
      this.snapshot();
      return;
    }
    this.journal.append([...puts.map(putLine), ...dels.map((d): Line => ({ v: 1, del: d }))], { durable: this.durable });
  }

  /**
   * Records specs, skipping the unchanged ones (they cost nothing): `dels` 'replace' makes `puts` the whole set
   * (a reconcile), deleting every record it does not name.
   */
  commitSpecs(puts: readonly TunnelSpec[], dels: readonly string[] | 'replace'): void {
    const changed = puts.filter((t) => {
      const had = this.records.get(t.id);
      return !had || !sameSpec(had.spec, t);
    });
    let gone: string[];
    if (dels === 'replace') {
      const keep = new Set(puts.map((t) => t.id));
      gone = [...this.records.keys()].filter((id) => !keep.has(id));
    } else {
      gone = dels.filter((id) => this.records.has(id));
    }
    this.commit(
      changed.map((spec) => ({ spec })),
      gone,
    );
  }

  private put(p: OwnedTunnel): void {
    const had = this.records.get(p.spec.id);
    if (had) this.index.delete(had);
    this.records.set(p.spec.id, p);
    this.index.add(p);
  }

  private drop(id: string): void {
    const had = this.records.get(id);
    if (!had) return;
    this.index.delete(had);
    this.records.delete(id);
  }

  /** Replaces the journal with the live records. */
  snapshot(): void {
    this.journal.rewrite([...this.records.values()].map(putLine));
  }

  close(): void {
    this.journal.close();
  }
}
