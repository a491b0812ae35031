// The SIMULATED EDGE's dataplane: for a demo on a machine where the real one cannot run (not root, not
// Linux), the agent's own SSH server and job handling (agent/main.ts startAgent) over this in-memory stand-in,
// which touches no kernel. It keeps the tunnels the gateway sent, answers the probe of a tunnel it has as
// reachable (a simulated origin, always up), and counts no traffic (no packet ever passes). Everything it
// does is logged as the simulated edge's, so nobody takes it for a router.
import type { ChangeCounts, Dataplane, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../agent/dataplane/index.ts';
import type { Logger } from '../common/log.ts';

const counts = (c: Partial<ChangeCounts>): ChangeCounts => ({ added: 0, changed: 0, removed: 0, unchanged: 0, ...c });

export class SimulatedDataplane implements Dataplane {
  private readonly tunnels = new Map<string, TunnelSpec>();

  constructor(private readonly log: Logger) {}

  async apply(t: TunnelSpec): Promise<ChangeCounts> {
    const had = this.tunnels.get(t.id);
    this.tunnels.set(t.id, t);
    this.log.info('simulated edge: tunnel applied (no kernel work)', { tunnel_id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip });
    if (!had) return counts({ added: 1 });
    return JSON.stringify(had) === JSON.stringify(t) ? counts({ unchanged: 1 }) : counts({ changed: 1 });
  }

  async remove(t: TunnelRef): Promise<ChangeCounts> {
    const had = this.tunnels.delete(t.id);
    this.log.info('simulated edge: tunnel removed (no kernel work)', { tunnel_id: t.id, tunnel_name: t.tunnel_name });
    return counts({ removed: had ? 1 : 0 });
  }

  async reconcile(ts: TunnelSpec[]): Promise<ReconcileResult> {
    const result = { ...counts({}), failed: [] };
    const wanted = new Set(ts.map((t) => t.id));
    for (const id of [...this.tunnels.keys()]) {
      if (wanted.has(id)) continue;
      this.tunnels.delete(id);
      result.removed++;
    }
    for (const t of ts) {
      const c = await this.apply(t);
      result.added += c.added;
      result.changed += c.changed;
      result.unchanged += c.unchanged;
    }
    this.log.info('simulated edge: reconciled (no kernel work)', { tunnels: ts.length });
    return result;
  }

  /** The simulated origin answers every tunnel the simulated edge has. */
  async probe(t: TunnelSpec): Promise<ProbeResult> {
    const reachable = this.tunnels.has(t.id);
    this.log.info('simulated edge: probe answered by the simulated origin', { tunnel_id: t.id, reachable });
    return reachable ? { reachable, rtt_ms: 0 } : { reachable };
  }

  async has(id: string): Promise<boolean> {
    return this.tunnels.has(id);
  }

  async close(): Promise<void> {}

  /** For the health checks and the status op (agent/main.ts startHealth). */
  desiredTunnels(): TunnelSpec[] {
    return [...this.tunnels.values()];
  }

  /** No packet passes a simulated edge: every counter reads as missing (0). */
  async counters(): Promise<Map<string, { packets: bigint; bytes: bigint }>> {
    return new Map();
  }

  async counterPackets(): Promise<Map<string, bigint>> {
    return new Map();
  }
}
