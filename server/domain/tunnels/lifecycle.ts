// The moves a buyer asks for after the purchase (docs/CONTRACTS.md "Tunnel lifecycle"): provision
// (pending/failed -> provisioning, the edge job is queued), activate (provisioned -> active once the
// origin answers) and delete. The edge work itself is provisioning's (EdgeDispatch); this module decides
// which move is allowed and answers with the tunnel and whether its move is settled.
import type { Database, Sql } from '../../db/database.ts';
import type { TunnelStatus } from '../../db/entities.ts';
import type { StatusChange } from '../../provisioning/status-bus.ts';
import type { Principal } from '../../auth/principal.ts';
import { requireWrite } from '../../auth/principal.ts';
import { ApiError } from '../errors.ts';
import type { PricingService } from '../pricing.ts';
import { readTunnel, tunnelView, type TunnelView } from './rows.ts';

/** What the tunnel service needs from provisioning (server/provisioning/service.ts). */
export interface EdgeDispatch {
  readonly bus: {
    publish(id: string, status: TunnelStatus): Promise<void>;
    on(id: string, fn: (c: StatusChange) => void): () => void;
    /** `fn` runs when notices may have been missed (see TunnelStatusBus.onResync). */
    onResync(fn: () => void): () => void;
    start(): Promise<void>;
  };
  readonly transitions: {
    move(id: string, from: readonly TunnelStatus[], to: TunnelStatus): Promise<boolean>;
    /** The same move inside the caller's transaction, its webhook event included (provisioning/transitions.ts). */
    moveIn(sql: Pick<Sql, 'query'>, id: string, from: readonly TunnelStatus[], to: TunnelStatus): Promise<boolean>;
  };
  /** `change` makes the status move and says whether this call moved it (a repeat did not). */
  dispatch(tunnelId: string, nodeId: string, waitingIn: TunnelStatus, change: () => Promise<boolean>): Promise<void>;
  /**
   * The agent's probe of the tunnel, and the origin_revision it was about: null when the edge did not yet hold
   * the tunnel's current origin (provisioning/probes.ts TunnelProbe).
   */
  probe(tunnelId: string): Promise<{ reachable: boolean; rtt_ms?: number; originRevision: number | null }>;
  /** Queues the application of the tunnel's stored spec `revision`; true once the edge holds it (update.ts). */
  applySpec(tunnelId: string, nodeId: string, revision: number): Promise<boolean>;
}

/**
 * The tunnel after a lifecycle call. `settled` is false while it still waits in `provisioning` or
 * `deleting` for the agent (its job keeps retrying); REST answers that 202, a settled move 200.
 */
export interface LifecycleResult {
  tunnel: TunnelView;
  settled: boolean;
}

export interface LifecycleDeps {
  db: Database;
  pricing: PricingService;
  edge: EdgeDispatch;
  adminSshPort: number;
}

/**
 * pending or failed -> provisioning, then the edge job is queued; waits a few seconds for the agent.
 * Settled with the final status when it answered in time, unsettled in `provisioning` while the job
 * keeps retrying. A repeated call on a tunnel still provisioning queues nothing while its job is live
 * and answers the current state; any other status is invalid_state.
 */
export async function provision(deps: LifecycleDeps, principal: Principal, id: string): Promise<LifecycleResult> {
  requireWrite(principal);
  const r = await readTunnel(deps.db, principal, id);
  if (!['pending', 'failed', 'provisioning'].includes(r.status)) {
    throw new ApiError('invalid_state', `Tunnel ${r.id} is ${r.status}; only a pending or failed tunnel can be provisioned.`);
  }
  await deps.edge.dispatch(r.id, r.node_id, 'provisioning', async () => {
    if (r.status === 'provisioning') return false;
    const moved = await deps.edge.transitions.move(r.id, ['pending', 'failed'], 'provisioning');
    if (!moved) {
      // Someone else moved it first (a concurrent provision or delete): answer from what it is now.
      const now = await readTunnel(deps.db, principal, id);
      if (now.status !== 'provisioning') throw new ApiError('invalid_state', `Tunnel ${r.id} is ${now.status}; only a pending or failed tunnel can be provisioned.`);
    }
    return moved;
  });
  return settledUnless(deps, principal, id, 'provisioning');
}

/**
 * provisioned -> active when the agent's probe sees the origin answer through the tunnel. No answer:
 * invalid_state telling the buyer to run the origin script. The agent unreachable: edge_unavailable.
 *
 * Only then may the edge forward to that origin (docs/CONTRACTS.md "Dataplane"): the probe is of one origin
 * (its origin_revision), and the move commits under the tunnel's row lock only if that is still the tunnel's
 * origin, so a PATCH of origin_ip between the probe and the commit (it takes the same lock, update.ts) makes
 * this 409 rather than an active tunnel on an origin nobody probed. The move bumps spec_revision: the spec
 * the edge holds changes (`forwarding` turns on, spec.ts FORWARDING_SQL), and a tunnel job applies it. Settled
 * once the edge did (within EDGE_WAIT_MS); unsettled (REST 202) while that job retries, the tunnel `active`.
 */
export async function activate(deps: LifecycleDeps, principal: Principal, id: string): Promise<LifecycleResult> {
  requireWrite(principal);
  const r = await readTunnel(deps.db, principal, id);
  if (r.status !== 'provisioned') {
    throw new ApiError(
      'invalid_state',
      r.status === 'active' ? `Tunnel ${r.id} is already active.` : `Tunnel ${r.id} is ${r.status}; only a provisioned tunnel can be activated (provision it first).`,
    );
  }
  if (r.applied_revision < r.origin_revision) {
    throw new ApiError('invalid_state', `Tunnel ${r.id}: the edge is still moving the tunnel to its new origin ${r.origin_ip}; activate again in a few seconds.`);
  }
  const probe = await deps.edge.probe(r.id);
  if (probe.originRevision !== r.origin_revision) throw originChanged(r.id);
  if (!probe.reachable) {
    throw new ApiError(
      'invalid_state',
      `Tunnel ${r.id}: the origin ${r.origin_ip} did not answer through the tunnel. Run the origin script (GET /api/dedicated/${r.id}/setup, scripts.origin) on the origin server as root, then activate again.`,
    );
  }
  const { moved, revision } = await deps.db.transaction(async (sql) => {
    const now = await readTunnel(sql, principal, id, true);
    // The same origin as probed, or a PATCH moved it meanwhile: checked first, whatever the status now.
    if (now.origin_revision !== probe.originRevision) throw originChanged(r.id);
    if (now.status === 'active') return { moved: false, revision: now.spec_revision };
    if (!(await deps.edge.transitions.moveIn(sql, r.id, ['provisioned'], 'active'))) {
      throw new ApiError('invalid_state', `Tunnel ${r.id} is ${now.status}; only a provisioned tunnel can be activated.`);
    }
    const [u] = await sql.query<{ spec_revision: number }>('update tunnel set spec_revision = spec_revision + 1 where id = ? returning spec_revision', [r.id]);
    return { moved: true, revision: u!.spec_revision };
  });
  if (moved) await deps.edge.bus.publish(r.id, 'active');
  const settled = await deps.edge.applySpec(r.id, r.node_id, revision);
  const now = await readTunnel(deps.db, principal, id);
  return { tunnel: tunnelView(now, deps.adminSshPort), settled };
}

/** 409 for an activation whose probe was of another origin than the tunnel's now (a PATCH of origin_ip meanwhile). */
function originChanged(id: string): ApiError {
  return new ApiError(
    'invalid_state',
    `Tunnel ${id}: its origin changed during activation, so the probe was not of the tunnel's origin now. Run the origin script (GET /api/dedicated/${id}/setup) on the new origin, then activate again.`,
  );
}

/**
 * A tunnel that never reached the edge (pending) is deleted at once and its IP returns to the pool.
 * Any other live tunnel goes to `deleting` and the agent removes it; the IP returns to the pool only
 * once the agent confirmed (settled `deleted` in time, else unsettled `deleting`). The purchase is
 * one-time and not refunded.
 */
export async function remove(deps: LifecycleDeps, principal: Principal, id: string): Promise<LifecycleResult> {
  requireWrite(principal);
  const immediate = await deps.db.transaction(async (sql) => {
    const r = await readTunnel(sql, principal, id, true);
    if (r.status === 'deleted') throw new ApiError('invalid_state', `Tunnel ${r.id} is already deleted.`);
    if (r.status !== 'pending') return { row: r, done: false };
    await deps.edge.transitions.moveIn(sql, r.id, ['pending'], 'deleted');
    await sql.query('update protected_ip set tunnel_id = null where tunnel_id = ?', [r.id]);
    return { row: await readTunnel(sql, principal, id), done: true };
  });
  if (immediate.done) {
    deps.pricing.invalidate();
    await deps.edge.bus.publish(immediate.row.id, 'deleted');
    return { tunnel: tunnelView(immediate.row, deps.adminSshPort), settled: true };
  }
  const r = immediate.row;
  await deps.edge.dispatch(r.id, r.node_id, 'deleting', async () => {
    if (r.status === 'deleting') return false;
    const moved = await deps.edge.transitions.move(r.id, ['provisioning', 'provisioned', 'active', 'failed'], 'deleting');
    if (!moved) {
      const now = await readTunnel(deps.db, principal, id);
      if (now.status !== 'deleting') throw new ApiError('invalid_state', `Tunnel ${r.id} is ${now.status}; try again.`);
    }
    return moved;
  });
  return settledUnless(deps, principal, id, 'deleting');
}

/** The tunnel now: unsettled while it is still in `waiting` (the job keeps retrying), settled otherwise. */
async function settledUnless(deps: LifecycleDeps, principal: Principal, id: string, waiting: TunnelStatus): Promise<LifecycleResult> {
  const now = await readTunnel(deps.db, principal, id);
  return { tunnel: tunnelView(now, deps.adminSshPort), settled: now.status !== waiting };
}
