// The seam between the agent's job handling (SSH + signed jobs) and the kernel-facing dataplane.
// The shapes it speaks (the `tunnel` body of a job and the result counts) are the wire contract's and live
// in common/tunnel-spec.ts; they are re-exported here so dataplane code (and test/vm) has one import.
import type { ChangeCounts, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../../common/tunnel-spec.ts';

export type { ChangeCounts, ProbeResult, ReconcileResult, TunnelFailure, TunnelRef, TunnelSpec } from '../../common/tunnel-spec.ts';

export interface Dataplane {
  /** Makes this tunnel exist exactly as described; idempotent. */
  apply(tunnel: TunnelSpec): Promise<ChangeCounts>;
  /** Removes it and flushes its conntrack entries; a tunnel that is not there gives removed: 0. */
  remove(tunnel: TunnelRef): Promise<ChangeCounts>;
  /**
   * Brings the node to exactly this desired set without disturbing tunnels that did not change. A tunnel
   * the kernel refuses is reported in `failed` and left as it was; everything else is still applied.
   */
  reconcile(tunnels: TunnelSpec[]): Promise<ReconcileResult>;
  /**
   * Whether traffic from the origin's inner address comes back through the tunnel. `timeoutMs` overrides the
   * dataplane's probe timeout (the health checks use a shorter one: their hysteresis absorbs a lost echo).
   */
  probe(tunnel: TunnelSpec, opts?: { timeoutMs?: number }): Promise<ProbeResult>;
  /** Whether this node currently has the tunnel (for `unknown_tunnel` on probe). */
  has(id: string): Promise<boolean>;
  close(): Promise<void>;
}

export class KernelError extends Error {
  override name = 'KernelError';
}

/** Any failure of operation `op` as a KernelError naming it (the error itself when it is one already), the cause kept. */
export function kernelError(op: string, e: unknown): KernelError {
  if (e instanceof KernelError) return e;
  const text = e instanceof Error ? e.message : String(e);
  const err = new KernelError(`${op}: ${text}`);
  (err as { cause?: unknown }).cause = e;
  return err;
}
