// The fleet simulator's DATAPLANE STAND-IN (bench:fleet, docs/SCALE.md): no kernel work at all. Everything the
// agent's job handling, status op and health checks ask of a dataplane (agent/dataplane/types.ts `Dataplane`, and
// what agent/main.ts startHealth reads) is answered from a Map of the desired tunnels, so hundreds of edges fit in
// one process on this 2-core host and the gateway side is what gets measured. The kernel's own cost per edge is
// bench:agent's and bench:edge's, on the real dataplane in namespaces.
//
// Counters: a share of the tunnels (`busy`) carry traffic, each read moving their counters forward, so every
// status round has real deltas for the gateway's traffic ingest; the rest stay at zero (idle tunnels).
import type { ChangeCounts, Dataplane, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../../agent/dataplane/types.ts';
import { outCounterName } from '../../agent/dataplane/policy.ts';

/** One answered dataplane call, for the simulator's job-latency figures: which op, which tunnels, when (epoch ms). */
export interface StandinCall {
  op: 'apply' | 'remove' | 'reconcile';
  ids: string[];
  at: number;
}

/** Epoch milliseconds with sub-millisecond precision, comparable between processes of one host. */
export const epochMs = (): number => performance.timeOrigin + performance.now();

export class FleetStandinDataplane implements Dataplane {
  readonly tunnels = new Map<string, TunnelSpec>();
  private readonly busy = new Set<string>();
  private reads = 0n;
  /** desiredTunnels()' answer until the set changes: the health scheduler walks it every second. */
  private list: TunnelSpec[] | null = null;

  constructor(
    /** Share of tunnels (0..1) whose counters move; chosen per tunnel by its id, so it is stable across reconciles. */
    private readonly busyShare: number,
    private readonly onCall: (c: StandinCall) => void = () => {},
  ) {}

  private keep(t: TunnelSpec): void {
    this.list = null;
    this.tunnels.set(t.id, t);
    // A stable pick per tunnel: the id's last hex digits as a fraction.
    if (Number.parseInt(t.id.slice(-4), 16) / 0x10000 < this.busyShare) this.busy.add(t.id);
  }

  async apply(t: TunnelSpec): Promise<ChangeCounts> {
    const had = this.tunnels.get(t.id);
    this.keep(t);
    this.onCall({ op: 'apply', ids: [t.id], at: epochMs() });
    const same = had !== undefined && JSON.stringify(had) === JSON.stringify(t);
    return { added: had ? 0 : 1, changed: had && !same ? 1 : 0, removed: 0, unchanged: same ? 1 : 0 };
  }

  async remove(t: TunnelRef): Promise<ChangeCounts> {
    const had = this.tunnels.delete(t.id);
    this.busy.delete(t.id);
    this.list = null;
    this.onCall({ op: 'remove', ids: [t.id], at: epochMs() });
    return { added: 0, changed: 0, removed: had ? 1 : 0, unchanged: 0 };
  }

  async reconcile(ts: TunnelSpec[]): Promise<ReconcileResult> {
    const want = new Set(ts.map((t) => t.id));
    let added = 0;
    let removed = 0;
    for (const id of [...this.tunnels.keys()]) {
      if (!want.has(id)) {
        this.tunnels.delete(id);
        this.busy.delete(id);
        this.list = null;
        removed++;
      }
    }
    for (const t of ts) {
      if (!this.tunnels.has(t.id)) added++;
      this.keep(t);
    }
    this.onCall({ op: 'reconcile', ids: [], at: epochMs() });
    return { added, changed: 0, removed, unchanged: ts.length - added, failed: [] };
  }

  async probe(): Promise<ProbeResult> {
    return { reachable: true, rtt_ms: 1 };
  }

  async has(id: string): Promise<boolean> {
    return this.tunnels.has(id);
  }

  desiredTunnels(): TunnelSpec[] {
    return (this.list ??= [...this.tunnels.values()]);
  }

  /** The named counters the status op reads (agent/health/status.ts): in and out for each busy tunnel. */
  async counters(): Promise<Map<string, { packets: bigint; bytes: bigint }>> {
    this.reads++;
    const out = new Map<string, { packets: bigint; bytes: bigint }>();
    for (const id of this.busy) {
      const t = this.tunnels.get(id);
      if (!t) continue;
      out.set(t.tunnel_name, { packets: this.reads * 1000n, bytes: this.reads * 1_000_000n });
      out.set(outCounterName(t), { packets: this.reads * 900n, bytes: this.reads * 800_000n });
    }
    return out;
  }

  async counterPackets(names: readonly string[]): Promise<Map<string, bigint>> {
    return new Map(names.map((n) => [n, this.reads * 900n]));
  }

  async close(): Promise<void> {}
}
