// Edge nodes and their pools of protected IPs: adding a node, pinning its host key or stopping its
// sales (`node update`), and the operator's read views. docs/CONTRACTS.md "Admin CLI"; docs/NODES.md says why each rule.
import { randomUUID } from 'node:crypto';
import { isUuid } from '../../common/names.ts';
import type { Database, Sql } from '../db/database.ts';
import { TUNNEL_HEALTHS, TUNNEL_STATUSES, type TunnelStatus } from '../db/entities.ts';
import { ApiError } from './errors.ts';
import type { TunnelLinks } from '../../common/tunnel-links.ts';
import { cidrRange, formatIPv4, INNER_POOL, INNER_SLOTS, IpError, isUnicast, parseCidr, parseIPv4, poolAddresses, type Cidr } from './ip.ts';
import { checkStuckReport, type StuckReport } from '../../common/tunnel-status.ts';

export interface AddNode {
  name: string;
  publicIp: string;
  sshHost: string;
  sshPort?: number;
  pool: string;
  hostKey?: string | null;
}

const HOST_KEY_RE = /^SHA256:[A-Za-z0-9+/]{43}=?$/;
function checkHostKey(hostKey: string): void {
  if (!HOST_KEY_RE.test(hostKey)) throw new ApiError('invalid_request', 'host-key must be an OpenSSH SHA256 fingerprint (SHA256:<base64>), as the agent prints it.');
}

const inCidr = (ip: number, c: Cidr) => {
  const { first, last } = cidrRange(c);
  return ip >= first && ip <= last;
};

/** A node's addresses the gateway or the world reaches it at: never sellable, never an origin. */
function ownAddresses(publicIp: string, sshHost: string): { label: string; ip: number }[] {
  const out = [{ label: `its public IP ${publicIp}`, ip: parseIPv4(publicIp)! }];
  // A host name is not resolved here (it may resolve differently later); an address literal is checked.
  const ssh = parseIPv4(sshHost);
  if (ssh !== null) out.push({ label: `its SSH host ${sshHost}`, ip: ssh });
  return out;
}

export async function addNode(db: Database, n: AddNode): Promise<{ node_id: string; pool_size: number }> {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(n.name)) throw new ApiError('invalid_request', 'name must be 1-100 letters, digits, ".", "_" or "-".');
  const publicIp = parseIPv4(n.publicIp);
  if (publicIp === null || !isUnicast(publicIp)) throw new ApiError('invalid_request', `public-ip must be a unicast IPv4 address, got ${JSON.stringify(n.publicIp)}`);
  if (!/^[A-Za-z0-9.:-]{1,255}$/.test(n.sshHost)) throw new ApiError('invalid_request', 'ssh-host must be a host name or address.');
  const port = n.sshPort ?? 52222;
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new ApiError('invalid_request', 'ssh-port must be 1-65535.');
  if (n.hostKey) checkHostKey(n.hostKey);
  let pool: Cidr;
  let addresses: number[];
  try {
    pool = parseCidr(n.pool);
    addresses = poolAddresses(pool);
  } catch (e) {
    if (e instanceof IpError) throw new ApiError('invalid_request', e.message);
    throw e;
  }
  const poolText = `${formatIPv4(pool.base)}/${pool.prefix}`;
  // Never an origin: a buyer given the router's own address would receive its SSH (and all other) traffic.
  for (const own of ownAddresses(n.publicIp, n.sshHost)) {
    if (inCidr(own.ip, pool)) throw new ApiError('invalid_request', `pool ${poolText} contains the node's own address (${own.label}); routed to buyers, it would cut the node off.`);
  }
  const { first, last } = cidrRange(pool);
  const id = randomUUID();
  await db.transaction(async (sql) => {
    // One node add at a time: the overlap checks and the inner-subnet numbering below read, then write.
    // Purchases only read edge_node (ACCESS SHARE), which this mode lets through.
    await sql.query('lock table edge_node in share row exclusive mode');
    if ((await sql.query('select 1 from edge_node where name = ?', [n.name])).length) {
      throw new ApiError('invalid_request', `an edge node named ${n.name} already exists.`);
    }
    await refuseOverlaps(sql, n, poolText, first, last);
    // The pool's inner /30 numbers follow every number in use (IPs', and live tunnels' from before the
    // numbering was global): a contiguous run no other IP or live tunnel has (docs/NODES.md).
    const [next] = await sql.query<{ next: number }>(
      `select greatest(coalesce((select max(inner_index) from protected_ip), -1),
                       coalesce((select max(inner_index) from tunnel where status <> 'deleted'), -1)) + 1 as next`,
    );
    const base = Number(next!.next);
    if (base + addresses.length > INNER_SLOTS) {
      throw new ApiError(
        'invalid_request',
        `the inner pool ${INNER_POOL} has ${Math.max(0, INNER_SLOTS - base)} /30 subnets left, fewer than the ${addresses.length} this pool needs.`,
      );
    }
    await sql.query('insert into edge_node (id, name, public_ip, ssh_host, ssh_port, host_key, inner_pool, pool) values (?, ?, ?, ?, ?, ?, ?, ?)', [
      id, n.name, n.publicIp, n.sshHost, port, n.hostKey ?? null, INNER_POOL, poolText,
    ]);
    // One statement for the whole pool: a /16 is 65k rows.
    await sql.query(
      `insert into protected_ip (ip, node_id, position, inner_index)
       select ip, ?, ord - 1, ? + ord - 1 from json_array_elements_text(?::json) with ordinality as u(ip, ord)`,
      [id, base, JSON.stringify(addresses.map(formatIPv4))],
    );
  });
  return { node_id: id, pool_size: addresses.length };
}

/**
 * Refuses a pool that overlaps another node's (as a range, or any of its IPs for nodes added before the
 * range was recorded), that holds another node's public or SSH address, or a live tunnel's origin; and
 * a node whose own addresses are another node's protected IPs. Each would make one address both a
 * protected IP and something else of ours (docs/NODES.md).
 */
async function refuseOverlaps(sql: Sql, n: AddNode, poolText: string, first: number, last: number): Promise<void> {
  const [ranged] = await sql.query<{ name: string; pool: string }>(
    `select name, pool from edge_node where pool is not null and pool::cidr && ?::cidr limit 1`,
    [poolText],
  );
  if (ranged) throw new ApiError('invalid_request', `pool ${poolText} overlaps node ${ranged.name}'s pool ${ranged.pool}.`);
  const [clash] = await sql.query<{ ip: string }>(
    `select ip from protected_ip where ip::inet between ?::inet and ?::inet limit 1`,
    [formatIPv4(first), formatIPv4(last)],
  );
  if (clash) throw new ApiError('invalid_request', `${clash.ip} already belongs to another node's pool.`);
  const others = await sql.query<{ name: string; public_ip: string; ssh_host: string }>('select name, public_ip, ssh_host from edge_node');
  for (const o of others) {
    for (const own of ownAddresses(o.public_ip, o.ssh_host)) {
      if (own.ip >= first && own.ip <= last) throw new ApiError('invalid_request', `pool ${poolText} contains node ${o.name}'s address (${own.label}).`);
    }
  }
  const mine = ownAddresses(n.publicIp, n.sshHost).map((a) => formatIPv4(a.ip));
  const [taken] = await sql.query<{ ip: string }>('select ip from protected_ip where ip in (select json_array_elements_text(?::json)) limit 1', [JSON.stringify(mine)]);
  if (taken) throw new ApiError('invalid_request', `${taken.ip} is a protected IP of another node's pool; it cannot be this node's address.`);
  const [origin] = await sql.query<{ origin_ip: string }>(
    `select origin_ip from tunnel where status <> 'deleted' and origin_ip::inet between ?::inet and ?::inet limit 1`,
    [formatIPv4(first), formatIPv4(last)],
  );
  if (origin) throw new ApiError('invalid_request', `pool ${poolText} contains ${origin.origin_ip}, the origin of a live tunnel.`);
}

export interface NodeView {
  node_id: string;
  name: string;
  public_ip: string;
  ssh_host: string;
  ssh_port: number;
  /** The pinned agent host-key fingerprint (not a secret), or null: then the node is never contacted. */
  host_key: string | null;
  sellable: boolean;
  /** Whether purchases take IPs from it now: sellable, with a pinned host key, and not unable to carry tunnels. */
  selling: boolean;
  /**
   * Whether its agent can make the tunnels' links (docs/CONTRACTS.md "Tunnel links"): false when it said
   * it cannot (a kernel without GRE: every tunnel job would fail), null when it has not said (never
   * contacted since, or an agent from before the report); `tunnel_links` has the kind and the reason.
   */
  can_carry_tunnels: boolean | null;
  /** What the agent last reported, and since when; null before any report. */
  tunnel_links: { kind: string; usable: boolean | null; reason: string | null; since: string } | null;
  pool: string | null;
  pool_size: number;
  free: number;
  /** Its tunnels by status, every status present (0 when none), deleted ones included. */
  tunnels: Record<TunnelStatus, number>;
  /** Its live (not deleted) tunnels by health: up, down or unknown (docs/CONTRACTS.md "Health and traffic"). */
  health: Record<(typeof TUNNEL_HEALTHS)[number], number>;
  /**
   * The gateway's last status round with the node (traffic.node_poll, server/health/collector.ts): when,
   * and whether the agent answered; null when never polled. The operator's "when did we last reach it".
   */
  last_poll: { at: string; reachable: boolean } | null;
  /**
   * The operation the agent's watchdog had given up as stuck at the last status round ({op, step, since}: op `status`
   * `agent.stuck`, docs/CONTRACTS.md "Health and traffic"), or null: none, or the agent did not answer.
   */
  stuck: StuckReport | null;
  created_at: string;
}

/** A node as the query reads it: the view's own columns as they are, counts as PostgreSQL's bigint text. */
type NodeRow = Pick<NodeView, 'name' | 'public_ip' | 'ssh_host' | 'ssh_port' | 'host_key' | 'sellable' | 'pool' | 'created_at'> & {
  tunnel_links_kind: string | null;
  tunnel_links_usable: boolean | null;
  tunnel_links_reason: string | null;
  tunnel_links_since: string | null;
  id: string;
  pool_size: string;
  free: string;
  tunnels: Record<string, number> | null;
  health: Record<string, number>;
  polled_at: string | null;
  reachable: boolean | null;
  stuck: unknown;
  cursor_at: string;
};

const NODE_SELECT = `select n.id, n.name, n.public_ip, n.ssh_host, n.ssh_port, n.host_key, n.sellable, n.pool,
    n.tunnel_links_kind, n.tunnel_links_usable, n.tunnel_links_reason,
    to_char(n.tunnel_links_since at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as tunnel_links_since,
    (select count(*) from protected_ip p where p.node_id = n.id) as pool_size,
    (select count(*) from protected_ip p where p.node_id = n.id and p.tunnel_id is null) as free,
    (select json_object_agg(s.status, s.c) from (select t.status, count(*)::int as c from tunnel t where t.node_id = n.id group by t.status) s) as tunnels,
    (select json_build_object('up', count(*) filter (where t.health = 'up'), 'down', count(*) filter (where t.health = 'down'),
       'unknown', count(*) filter (where t.health = 'unknown')) from tunnel t where t.node_id = n.id and t.status <> 'deleted') as health,
    to_char(np.polled_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as polled_at, np.reachable, np.stuck,
    to_char(n.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at,
    to_json(n.created_at) #>> '{}' as cursor_at
  from edge_node n left join traffic.node_poll np on np.node_id = n.id`;

/** The stored report as the node view shows it: exactly {op, step, since}, or null (none, or not one). */
function stuckOf(v: unknown): StuckReport | null {
  const o = typeof v === 'string' ? (JSON.parse(v) as unknown) : v;
  if (o === null || o === undefined || checkStuckReport(o)) return null;
  const s = o as StuckReport;
  return { op: s.op, step: s.step, since: s.since };
}

function nodeView(r: NodeRow): NodeView {
  return {
    node_id: r.id,
    name: r.name,
    public_ip: r.public_ip,
    ssh_host: r.ssh_host,
    ssh_port: r.ssh_port,
    host_key: r.host_key,
    sellable: r.sellable,
    selling: r.sellable && r.host_key !== null && r.tunnel_links_usable !== false,
    can_carry_tunnels: r.tunnel_links_usable,
    tunnel_links:
      r.tunnel_links_kind === null || r.tunnel_links_since === null
        ? null
        : { kind: r.tunnel_links_kind, usable: r.tunnel_links_usable, reason: r.tunnel_links_reason, since: r.tunnel_links_since },
    pool: r.pool,
    pool_size: Number(r.pool_size),
    free: Number(r.free),
    tunnels: Object.fromEntries(TUNNEL_STATUSES.map((st) => [st, Number(r.tunnels?.[st] ?? 0)])) as NodeView['tunnels'],
    health: Object.fromEntries(TUNNEL_HEALTHS.map((h) => [h, Number(r.health[h] ?? 0)])) as NodeView['health'],
    last_poll: r.polled_at === null ? null : { at: r.polled_at, reachable: r.reachable === true },
    stuck: stuckOf(r.stuck),
    created_at: r.created_at,
  };
}

function checkId(id: string): string {
  if (!isUuid(id)) throw new ApiError('invalid_request', `id must be a node id (a UUID) as node add printed it, got ${JSON.stringify(String(id).slice(0, 64))}.`);
  return id.toLowerCase();
}

export async function showNode(db: Database, id: string): Promise<NodeView> {
  const [row] = await db.query<NodeRow>(`${NODE_SELECT} where n.id = ?`, [checkId(id)]);
  if (!row) throw new ApiError('not_found', `no edge node with id ${id}.`);
  return nodeView(row);
}

/** Oldest first, `limit` at a time; the cursor is opaque. */
export async function listNodes(db: Database, opts: { limit?: number; cursor?: string | null } = {}): Promise<{ items: NodeView[]; next_cursor: string | null }> {
  const limit = opts.limit ?? 50;
  const params: unknown[] = [];
  let where = '';
  if (opts.cursor) {
    let after: unknown;
    try {
      after = JSON.parse(Buffer.from(opts.cursor, 'base64url').toString('utf8'));
    } catch {
      after = null;
    }
    if (!Array.isArray(after) || typeof after[0] !== 'string' || Number.isNaN(Date.parse(after[0])) || typeof after[1] !== 'string' || !isUuid(after[1])) {
      throw new ApiError('invalid_request', 'cursor is not one node list printed.');
    }
    where = ' where (n.created_at, n.id) > (?::timestamptz, ?::uuid)';
    params.push(after[0], after[1]);
  }
  params.push(limit + 1);
  const rows = await db.query<NodeRow>(`${NODE_SELECT}${where} order by n.created_at, n.id limit ?`, params);
  const last = rows.length > limit ? rows[limit - 1] : undefined;
  return {
    items: rows.slice(0, limit).map(nodeView),
    next_cursor: last ? Buffer.from(JSON.stringify([last.cursor_at, last.id])).toString('base64url') : null,
  };
}

export interface UpdateNode {
  id: string;
  hostKey?: string;
  sellable?: boolean;
}

/**
 * Pins (or replaces) a node's agent host key and/or starts or stops its sales. Purchases take IPs only
 * from nodes that are sellable and have a pinned key (docs/NODES.md): an IP on a node the gateway never
 * contacts could never be provisioned.
 */
export async function updateNode(db: Database, u: UpdateNode): Promise<{ node_id: string; sellable: boolean; host_key: string | null }> {
  const id = checkId(u.id);
  if (u.hostKey === undefined && u.sellable === undefined) throw new ApiError('invalid_request', 'give --host-key, --sellable or both.');
  if (u.hostKey !== undefined) checkHostKey(u.hostKey);
  const [row] = await db.query<{ id: string; sellable: boolean; host_key: string | null }>(
    `update edge_node set host_key = coalesce(?, host_key), sellable = coalesce(?, sellable) where id = ? returning id, sellable, host_key`,
    [u.hostKey ?? null, u.sellable ?? null, id],
  );
  if (!row) throw new ApiError('not_found', `no edge node with id ${u.id}.`);
  return { node_id: row.id, sellable: row.sellable, host_key: row.host_key };
}

/** The longest reason kept (edge_node.tunnel_links_reason): an agent's words, not an unbounded field. */
const REASON_MAX = 500;

/**
 * Records what a node's agent said of its tunnel links (hello or status; null: it said nothing, an agent
 * from before the report). Written only when it differs from what is recorded, so a status round every
 * few seconds costs a read-only statement; returns whether it changed (the caller then drops its cached
 * stock: pricing counts only nodes that can carry tunnels).
 */
export async function recordTunnelLinks(db: Pick<Database, 'query'>, nodeId: string, links: TunnelLinks | null): Promise<boolean> {
  const kind = links?.kind.slice(0, 32) ?? null;
  const usable = links ? links.usable : null;
  const reason = links?.reason?.slice(0, REASON_MAX) ?? null;
  const rows = await db.query<{ id: string }>(
    `update edge_node set tunnel_links_kind = ?, tunnel_links_usable = ?, tunnel_links_reason = ?, tunnel_links_since = now()
      where id = ? and (tunnel_links_kind, tunnel_links_usable, tunnel_links_reason) is distinct from (?::varchar, ?::boolean, ?::varchar)
      returning id`,
    [kind, usable, reason, nodeId, kind, usable, reason],
  );
  return rows.length > 0;
}
