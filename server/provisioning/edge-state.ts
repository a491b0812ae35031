// What the edge should hold, read from the database: one tunnel as a job body, a node's address and
// pinned host key, and a node's whole desired set (for `reconcile`). Pure reads; no transitions here.
import type { Database } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import type { TunnelSpec } from '../../common/tunnel-spec.ts';
import { FORWARDING_SQL, ON_EDGE, SETTINGS_COLUMNS, tunnelSpecOf, type SpecSource } from '../domain/tunnels/spec.ts';
import type { EdgeNode } from '../edge/connections.ts';

export { ON_EDGE } from '../domain/tunnels/spec.ts';

export interface EdgeTunnel {
  spec: TunnelSpec;
  status: TunnelStatus;
  accountId: string;
  node: EdgeNode | null;
  nodeId: string;
  /** The stored spec's revision and the one the edge last applied (server/db/entities.ts). */
  specRevision: number;
  appliedRevision: number;
  /** The revision that last changed origin_ip: an activation's probe is of this origin only once appliedRevision reaches it. */
  originRevision: number;
}

interface Row extends SpecSource {
  account_id: string;
  status: TunnelStatus;
  node_id: string;
  spec_revision: number;
  applied_revision: number;
  origin_revision: number;
  forwarding: boolean;
  ssh_host: string;
  ssh_port: number;
  host_key: string | null;
}

const COLUMNS = `t.id, t.account_id, t.status, t.tunnel_name, t.protected_ip, t.origin_ip, t.inner_index, t.gre_key::text as gre_key,
  t.node_id, n.public_ip as edge_ip, n.inner_pool, n.ssh_host, n.ssh_port, n.host_key, ${SETTINGS_COLUMNS}, t.spec_revision, t.applied_revision,
  t.origin_revision, ${FORWARDING_SQL} as forwarding`;

/**
 * The tunnel as the edge job carries it: THE spec (tunnelSpecOf), with `forwarding: false` while its origin has
 * not answered the activate probe (spec.ts FORWARDING_SQL); left out when on, as a default policy is, so such a
 * spec is the same as before version 3.
 */
function edgeSpecOf(r: Row): TunnelSpec {
  const spec = tunnelSpecOf(r);
  if (!r.forwarding) spec.forwarding = false;
  return spec;
}

function nodeOf(r: Pick<Row, 'node_id' | 'ssh_host' | 'ssh_port' | 'host_key'>): EdgeNode | null {
  // A node without a pinned host key is never contacted: anyone could answer in its name.
  if (!r.host_key) return null;
  return { id: r.node_id, host: r.ssh_host, port: r.ssh_port, hostKeyFingerprint: r.host_key };
}

export async function edgeTunnel(db: Database, tunnelId: string): Promise<EdgeTunnel | null> {
  const [r] = await db.query<Row>(`select ${COLUMNS} from tunnel t join edge_node n on n.id = t.node_id where t.id = ?`, [tunnelId]);
  if (!r) return null;
  return {
    spec: edgeSpecOf(r),
    status: r.status,
    accountId: r.account_id,
    node: nodeOf(r),
    nodeId: r.node_id,
    specRevision: r.spec_revision,
    appliedRevision: r.applied_revision,
    originRevision: r.origin_revision,
  };
}

/** A node's address and pinned host key; null when there is no such node or it has no host key. */
export async function edgeNode(db: Database, nodeId: string): Promise<EdgeNode | null> {
  const [r] = await db.query<Pick<Row, 'node_id' | 'ssh_host' | 'ssh_port' | 'host_key'>>(
    'select n.id as node_id, n.ssh_host, n.ssh_port, n.host_key from edge_node n where n.id = ?',
    [nodeId],
  );
  return r ? nodeOf(r) : null;
}

/** Ids of every node the gateway may contact (a pinned host key): the periodic reconcile's round. */
export async function contactableNodes(db: Database): Promise<string[]> {
  const rows = await db.query<{ id: string }>('select id from edge_node where host_key is not null order by id');
  return rows.map((r) => r.id);
}

/** Every tunnel node `nodeId` should carry right now. */
export async function desiredSet(db: Database, nodeId: string): Promise<TunnelSpec[]> {
  const rows = await db.query<Row>(
    `select ${COLUMNS} from tunnel t join edge_node n on n.id = t.node_id
      where t.node_id = ? and t.status in (${ON_EDGE.map(() => '?').join(', ')}) order by t.inner_index`,
    [nodeId, ...ON_EDGE],
  );
  return rows.map(edgeSpecOf);
}
