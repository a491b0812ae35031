// The health changes an edge pushes on its events stream, gathered per node and written a batch at a time
// (docs/SCALE.md "What breaks first"): after any start an edge's checks decide every tunnel's first health within
// one interval, so a node pushes one change per tunnel at once; written one tunnel per transaction that is one
// commit, one WAL flush and one held row per tunnel, and at 100 nodes x 100 tunnels PostgreSQL spent its time
// waiting on those flushes and locks. Here a node's changes wait up to `windowMs` (or until `maxBatch` of them)
// and go to the database in one write (StatusIngest.writePushed, one transaction).
//
// Order is kept: a node's batches are written one after another, in the order the changes were handed over, and a
// batch holds at most one change per tunnel (a second change of the same tunnel closes the batch and opens the
// next), so a tunnel that flaps up, down, up within the window still writes each change, in order, as before.
// Each push's promise settles when its batch has committed: true if it changed the tunnel.
import type { Health } from '../../common/tunnel-status.ts';

/** One pushed change: tunnel `tunnelId` found `health` by the agent's check at `checkedAt`. */
export interface PushedHealth {
  tunnelId: string;
  health: Health;
  checkedAt: Date;
}

export interface PushBatchOptions {
  /** Writes one batch of node `nodeId` (one transaction); returns the ids of the tunnels it changed. */
  write: (nodeId: string, batch: PushedHealth[]) => Promise<Set<string>>;
  /** How long the first change of a batch waits for more (default 250 ms). */
  windowMs?: number;
  /** A batch this big is written at once (default 500). */
  maxBatch?: number;
}

interface Waiting {
  change: PushedHealth;
  resolve: (changed: boolean) => void;
  reject: (e: unknown) => void;
}

interface NodeBatches {
  open: Waiting[];
  tunnels: Set<string>;
  timer: NodeJS.Timeout | null;
  /** The node's last batch written or being written: the next waits for it. */
  tail: Promise<void>;
}

export class PushBatcher {
  private readonly nodes = new Map<string, NodeBatches>();

  constructor(private readonly o: PushBatchOptions) {}

  /**
   * Hands over one change of node `nodeId`. It joins the node's open batch at once (before this returns), so
   * changes handed over one after another are written in that order, whether or not the caller awaits each.
   */
  push(nodeId: string, change: PushedHealth): Promise<boolean> {
    let n = this.nodes.get(nodeId);
    if (!n) this.nodes.set(nodeId, (n = { open: [], tunnels: new Set(), timer: null, tail: Promise.resolve() }));
    const id = change.tunnelId.toLowerCase();
    if (n.tunnels.has(id)) this.seal(nodeId, n);
    const p = new Promise<boolean>((resolve, reject) => n.open.push({ change: { ...change, tunnelId: id }, resolve, reject }));
    n.tunnels.add(id);
    if (n.open.length >= (this.o.maxBatch ?? 500)) this.seal(nodeId, n);
    else n.timer ??= setTimeout(() => this.seal(nodeId, n), this.o.windowMs ?? 250);
    return p;
  }

  /** Writes every open batch now and waits for every write under way (the gateway's stop). */
  async drain(): Promise<void> {
    const tails: Promise<void>[] = [];
    for (const [nodeId, n] of this.nodes) {
      this.seal(nodeId, n);
      tails.push(n.tail);
    }
    await Promise.all(tails);
  }

  /** Closes node `nodeId`'s open batch: it is written after the node's batches before it. */
  private seal(nodeId: string, n: NodeBatches): void {
    if (n.timer) clearTimeout(n.timer);
    n.timer = null;
    if (n.open.length === 0) return;
    const batch = n.open;
    n.open = [];
    n.tunnels = new Set();
    const tail: Promise<void> = n.tail.then(async () => {
      try {
        const written = await this.o.write(nodeId, batch.map((w) => w.change));
        for (const w of batch) w.resolve(written.has(w.change.tunnelId));
      } catch (e) {
        for (const w of batch) w.reject(e);
      } finally {
        // Nothing more of this node waiting: its entry goes (nodes come and go).
        if (n.tail === tail && n.open.length === 0 && this.nodes.get(nodeId) === n) this.nodes.delete(nodeId);
      }
    });
    n.tail = tail;
  }
}
