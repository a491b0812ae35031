// PATCH /api/dedicated/{id} and GraphQL updateTunnel (docs/CONTRACTS.md "Tunnel settings"): name,
// origin_ip, ports, protocol and protection of a tunnel after its purchase. One transaction under the
// tunnel's row lock merges the change into the stored row, so concurrent changes of different fields
// all survive and the last one committed wins a field both set. A change the edge must see (anything
// but the name) bumps the stored spec's revision and, on a tunnel that is on its edge, goes there like a
// provision: a tunnel job applies the stored spec (provisioning's applySpec; one live job per tunnel).
import type { Database } from '../../db/database.ts';
import type { Principal } from '../../auth/principal.ts';
import { requireWrite } from '../../auth/principal.ts';
import { ApiError } from '../errors.ts';
import { isGreKeyCollision, pickGreKey, type GreKeySource } from '../gre-keys.ts';
import { refuseOurAddress, type TunnelUpdate } from './input.ts';
import type { EdgeDispatch, LifecycleResult } from './lifecycle.ts';
import { readTunnel, tunnelView, type TunnelRow } from './rows.ts';
import { recordOriginChange } from './origin-changes.ts';
import { applyChange, sameSettings, settingsOf, settingsValues } from './settings.ts';
import { ON_EDGE } from './spec.ts';

export interface UpdateDeps {
  db: Database;
  edge: EdgeDispatch;
  adminSshPort: number;
  greKeys?: GreKeySource;
  /** Milliseconds now, for the limit on origin changes (origin-changes.ts); tests move it themselves. */
  clock: () => number;
}

/**
 * Stores the change and answers the tunnel. Settled (REST 200) when nothing had to reach an edge (a
 * pending or failed tunnel: the next provision carries the change; a name; no change at all) or the
 * edge applied it within the wait; unsettled (202) while its job retries. Deleted or deleting:
 * invalid_state. A new origin_ip is checked as at purchase and gets a GRE key free for the new (node,
 * origin) pair (server/domain/gre-keys.ts), and counts against the tunnel's origin changes (at most 10 an
 * hour, else rate_limited: origin-changes.ts). The edge forwards nothing to the new origin from the first spec
 * that names it (spec.ts FORWARDING_SQL); an active tunnel moves back to provisioned once its edge applied it
 * (provisioning/transitions.ts applied()), and forwards again only after an activation probed the new origin.
 */
export async function update(deps: UpdateDeps, principal: Principal, id: string, change: TunnelUpdate): Promise<LifecycleResult> {
  requireWrite(principal);
  let stored: { row: TunnelRow; revision: number | null };
  try {
    stored = await store(deps, principal, id, change);
  } catch (e) {
    // Two changes onto one origin drew the same key unseen by each other (2^-32): once more, as a purchase does.
    if (!isGreKeyCollision(e)) throw e;
    stored = await store(deps, principal, id, change);
  }
  const { row, revision } = stored;
  if (revision === null || !ON_EDGE.includes(row.status)) return { tunnel: tunnelView(row, deps.adminSshPort), settled: true };
  const settled = await deps.edge.applySpec(row.id, row.node_id, revision);
  return { tunnel: tunnelView(await readTunnel(deps.db, principal, id), deps.adminSshPort), settled };
}

/** The change merged into the locked row; `revision` is the new spec revision, null when the spec did not change. */
function store(deps: UpdateDeps, principal: Principal, id: string, change: TunnelUpdate): Promise<{ row: TunnelRow; revision: number | null }> {
  return deps.db.transaction(async (sql) => {
    const r = await readTunnel(sql, principal, id, true);
    if (r.status === 'deleted' || r.status === 'deleting') throw new ApiError('invalid_state', `Tunnel ${r.id} is ${r.status}; its settings can no longer change.`);
    const before = settingsOf(r);
    const after = applyChange(before, change);
    const name = change.name !== undefined ? change.name : r.name;
    const origin = change.originIp ?? r.origin_ip;
    const originMoved = origin !== r.origin_ip;
    const specChanged = originMoved || !sameSettings(before, after);
    if (!specChanged && name === r.name) return { row: r, revision: null };
    let greKey = r.gre_key;
    if (originMoved) {
      await refuseOurAddress(sql, origin);
      await recordOriginChange(sql, r.id, deps.clock());
      greKey = String(await pickGreKey(sql, r.node_id, origin, deps.greKeys));
    }
    // In SET, spec_revision is the old value: origin_revision becomes the new revision.
    const [u] = await sql.query<{ spec_revision: number }>(
      `update tunnel set name = ?, origin_ip = ?, gre_key = ?, ports = ?, protocol = ?, syn_proxy = ?, source_pps_limit = ?, drop_fragments = ?, max_flows = ?, alert_pps = ?,
              spec_revision = spec_revision + ?, origin_revision = case when ?::boolean then spec_revision + 1 else origin_revision end, updated_at = now()
        where id = ? returning spec_revision`,
      [name, origin, greKey, ...settingsValues(after), specChanged ? 1 : 0, originMoved, r.id],
    );
    return { row: await readTunnel(sql, principal, id), revision: specChanged ? u!.spec_revision : null };
  });
}
