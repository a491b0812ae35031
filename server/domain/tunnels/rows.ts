// One tunnel as stored (TunnelRow, read by readTunnel) and as shown (TunnelView: the REST wire shape of
// docs/CONTRACTS.md "REST shapes", which GraphQL maps field for field). Every module of this folder
// reads a tunnel through here.
import { isUuid } from '../../../common/names.ts';
import { Database, type Sql } from '../../db/database.ts';
import type { TunnelStatus } from '../../db/entities.ts';
import type { Health } from '../../../common/tunnel-status.ts';
import type { Principal } from '../../auth/principal.ts';
import { notFound } from '../errors.ts';
import type { Protocol } from '../../../common/tunnel-policy.ts';
import { settingsOf, type TunnelProtection } from './settings.ts';
import { ON_EDGE, SETTINGS_COLUMNS, type SpecSource } from './spec.ts';

/**
 * The key of TunnelView's settingsApplied: a symbol, so it is no part of the REST wire shape (JSON
 * leaves symbol keys out; REST says the same through 200 and 202, docs/CONTRACTS.md "Tunnel settings")
 * while GraphQL's `Tunnel.settingsApplied` reads it from the view it maps.
 */
export const SETTINGS_APPLIED: unique symbol = Symbol('settingsApplied');

export interface TunnelView {
  id: string;
  name: string | null;
  protected_ip: string;
  origin_ip: string;
  /** "*" or the normalised allowlist, e.g. "80-81,443" (docs/CONTRACTS.md "Tunnel settings"). */
  ports: string;
  protocol: Protocol;
  protection: TunnelProtection;
  tunnel_name: string;
  status: TunnelStatus;
  /**
   * From the edge's checks (server/health/, docs/CONTRACTS.md "Health and traffic"): 'unknown' before
   * the first, while its node does not answer, and whenever the tunnel is not on an edge.
   */
  health: Health;
  /** When the edge last checked it (ISO 8601), null before the first check. */
  health_checked_at: string | null;
  admin_ssh_port: number;
  edge_ip: string;
  created_at: string;
  updated_at: string;
  /** Whether the edge has the current settings (settingsApplied below); not serialised (SETTINGS_APPLIED). */
  [SETTINGS_APPLIED]: boolean;
}

/**
 * Whether the edge has the tunnel's current settings (docs/CONTRACTS.md "Tunnel settings"). Provisioned
 * or active: once it applied the stored spec revision (applied_revision >= spec_revision, recorded by
 * provisioning/transitions.ts applied()). Provisioning: false, the edge does not have the tunnel yet (the
 * provision carries the current settings; it becomes true with provisioned, or with the revision applied
 * just after). Pending, failed, deleting, deleted: true, there is nothing on an edge to apply them to (a
 * pending or failed tunnel's next provision carries them).
 */
export function settingsApplied(status: TunnelStatus, specRevision: number, appliedRevision: number): boolean {
  if (status === 'provisioning') return false;
  return ON_EDGE.includes(status) ? appliedRevision >= specRevision : true;
}

/** What the view shows as health: the stored one only while the tunnel is on an edge. */
export function shownHealth(status: TunnelStatus, health: Health): Health {
  return ON_EDGE.includes(status) ? health : 'unknown';
}

export interface TunnelRow extends SpecSource {
  name: string | null;
  status: TunnelStatus;
  health: Health;
  health_checked_at: string | null;
  created_at: string;
  updated_at: string;
  cursor_at: string;
  node_id: string;
  /** The spec revision stored (bumped by a PATCH that reaches the spec), and the one the edge applied. */
  spec_revision: number;
  applied_revision: number;
  /** The revision that last changed origin_ip: what an activation's probe must have been about (lifecycle.ts). */
  origin_revision: number;
}

// Times are formatted by PostgreSQL (ISO 8601, UTC, milliseconds) so the hot paths parse no dates;
// `cursor_at` keeps the full microsecond value for pagination.
const ISO = `'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'`;
/**
 * `health_checked_at` of tunnel `t` (a timestamptz): the agent's last check of it, docs/CONTRACTS.md
 * "Health and traffic". A collection round keeps it in the tunnel's traffic.seen row, which it rewrites
 * anyway, so unchanged health writes no tunnel row (server/health/ingest.ts); the tunnel column holds the
 * value from before that row had one, and a deleted tunnel's last one (server/health/storage.ts). A round by
 * change (docs/CONTRACTS.md "Status by change") leaves out the tunnels that did not change, and their check time
 * alone is no change: for a tunnel on the edge with a known health it is at least the node's `checked_floor`, the
 * oldest check of all the node's tunnels in the last answer.
 */
export const HEALTH_CHECKED_AT_SQL = `coalesce(greatest((select s.checked_at from traffic.seen s where s.tunnel_id = t.id),
  case when t.health <> 'unknown' and t.status in (${ON_EDGE.map((s) => `'${s}'`).join(', ')}) then (select c.checked_floor from traffic.node_cursor c where c.node_id = t.node_id) end), t.health_checked_at)`;

/** A tunnel row's columns as TunnelRow reads them, from `t` (tunnel) and `n` (its edge_node); the purchase reads them from its insert. */
export const TUNNEL_COLUMNS = `t.id, t.name, t.protected_ip, t.origin_ip, t.tunnel_name, t.status, t.inner_index, t.gre_key::text as gre_key,
  to_char(t.created_at at time zone 'UTC', ${ISO}) as created_at, to_char(t.updated_at at time zone 'UTC', ${ISO}) as updated_at,
  to_json(t.created_at) #>> '{}' as cursor_at, n.public_ip as edge_ip, n.inner_pool, t.node_id,
  ${SETTINGS_COLUMNS}, t.spec_revision, t.applied_revision, t.origin_revision, t.health,
  to_char(${HEALTH_CHECKED_AT_SQL} at time zone 'UTC', ${ISO}) as health_checked_at`;

export function tunnelView(r: TunnelRow, adminSshPort: number): TunnelView {
  return {
    id: r.id,
    name: r.name,
    protected_ip: r.protected_ip,
    origin_ip: r.origin_ip,
    ...settingsOf(r),
    tunnel_name: r.tunnel_name,
    status: r.status,
    health: shownHealth(r.status, r.health),
    health_checked_at: r.health_checked_at,
    admin_ssh_port: adminSshPort,
    edge_ip: r.edge_ip,
    created_at: r.created_at,
    updated_at: r.updated_at,
    [SETTINGS_APPLIED]: settingsApplied(r.status, r.spec_revision, r.applied_revision),
  };
}

/** The caller's tunnel `id`, or not_found (another account's tunnel is indistinguishable from a missing one). */
export async function readTunnel(sql: Pick<Sql, 'query'> | Database, principal: Principal, id: string, lock = false): Promise<TunnelRow> {
  if (!isUuid(id)) throw notFound();
  const text = `select ${TUNNEL_COLUMNS} from tunnel t join edge_node n on n.id = t.node_id
      where t.id = ? and t.account_id = ?${lock ? ' for update of t' : ''}`;
  const params = [id.toLowerCase(), principal.accountId];
  // Plain reads outside a transaction take the prepared-statement path.
  const rows = sql instanceof Database && !lock ? await sql.hot<TunnelRow>('tunnel_get', text, params) : await sql.query<TunnelRow>(text, params);
  if (!rows[0]) throw notFound();
  return rows[0];
}

/** One tunnel by id whoever owns it, with its account: what the gateway reports on its own (webhook events, server/webhooks/events.ts). */
export async function readTunnelOfAnyAccount(sql: Pick<Sql, 'query'>, id: string): Promise<{ accountId: string; row: TunnelRow } | null> {
  const [r] = await sql.query<TunnelRow & { account_id: string }>(
    `select ${TUNNEL_COLUMNS}, t.account_id from tunnel t join edge_node n on n.id = t.node_id where t.id = ?`,
    [id],
  );
  if (!r) return null;
  const { account_id, ...row } = r;
  return { accountId: account_id, row };
}
