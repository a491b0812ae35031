// The seam between the agent's job handling (SSH + signed jobs) and the kernel-facing dataplane.
// Shapes follow DESIGN.md "Edge jobs": the `tunnel` body of a job and the result counts.

export interface TunnelSpec {
  id: string;
  tunnel_name: string;
  protected_ip: string;
  origin_ip: string;
  edge_ip: string;
  /** Edge end of the inner subnet with its prefix, e.g. "100.64.0.1/30". */
  edge_inner: string;
  /** Origin end of the inner subnet with its prefix, e.g. "100.64.0.2/30". */
  origin_inner: string;
  mtu: number;
  gre_key?: number;
}

/** What a `remove` job needs at least. */
export type TunnelRef = Pick<TunnelSpec, 'id' | 'tunnel_name' | 'protected_ip'>;

/** Every result carries all four keys (DESIGN.md "Exact rules"). */
export interface ChangeCounts {
  added: number;
  changed: number;
  removed: number;
  unchanged: number;
}

/**
 * One tunnel a reconcile could not apply (issue 8 item 3): the rest of the node's set was applied anyway.
 * The shape is the job contract's (agent/jobs/contract.ts, schema/job.schema.json): the gateway marks that
 * tunnel alone.
 */
export interface TunnelFailure {
  id: string;
  error: 'kernel_error';
  error_description: string;
}

/** A reconcile's result: the counts of what it applied, and every tunnel it could not (possibly none). */
export interface ReconcileResult extends ChangeCounts {
  failed: TunnelFailure[];
}

export interface ProbeResult {
  reachable: boolean;
  rtt_ms?: number;
}

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
  /** Whether traffic from the origin's inner address comes back through the tunnel. */
  probe(tunnel: TunnelSpec): Promise<ProbeResult>;
  /** Whether this node currently has the tunnel (for `unknown_tunnel` on probe). */
  has(id: string): Promise<boolean>;
  close(): Promise<void>;
}

export class KernelError extends Error {
  override name = 'KernelError';
}
