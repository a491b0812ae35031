// Edge nodes and their pools of protected IPs.
import { randomUUID } from 'node:crypto';
import type { Database } from '../db/database.ts';
import { ApiError } from './errors.ts';
import { formatIPv4, IpError, parseCidr, parseIPv4, poolAddresses } from './ip.ts';

export interface AddNode {
  name: string;
  publicIp: string;
  sshHost: string;
  sshPort?: number;
  pool: string;
  hostKey?: string | null;
  innerPool?: string;
}

export async function addNode(db: Database, n: AddNode): Promise<{ node_id: string; pool_size: number }> {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(n.name)) throw new ApiError('invalid_request', 'name must be 1-100 letters, digits, ".", "_" or "-".');
  if (parseIPv4(n.publicIp) === null) throw new ApiError('invalid_request', `public-ip must be an IPv4 address, got ${JSON.stringify(n.publicIp)}`);
  if (!/^[A-Za-z0-9.:-]{1,255}$/.test(n.sshHost)) throw new ApiError('invalid_request', 'ssh-host must be a host name or address.');
  const port = n.sshPort ?? 52222;
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new ApiError('invalid_request', 'ssh-port must be 1-65535.');
  if (n.hostKey && !/^SHA256:[A-Za-z0-9+/]{43}=?$/.test(n.hostKey)) {
    throw new ApiError('invalid_request', 'host-key must be an OpenSSH SHA256 fingerprint (SHA256:<base64>).');
  }
  let addresses: number[];
  let innerPool: string;
  try {
    addresses = poolAddresses(parseCidr(n.pool));
    innerPool = n.innerPool ?? '100.64.0.0/10';
    const inner = parseCidr(innerPool);
    if (2 ** (32 - inner.prefix) / 4 < addresses.length) throw new IpError(`inner pool ${innerPool} is too small for ${addresses.length} tunnels`);
  } catch (e) {
    if (e instanceof IpError) throw new ApiError('invalid_request', e.message);
    throw e;
  }
  const id = randomUUID();
  await db.transaction(async (sql) => {
    if ((await sql.query('select 1 from edge_node where name = ?', [n.name])).length) {
      throw new ApiError('invalid_request', `an edge node named ${n.name} already exists.`);
    }
    const clash = await sql.query<{ ip: string }>('select ip from protected_ip where ip in (select json_array_elements_text(?::json)) limit 1', [JSON.stringify(addresses.map(formatIPv4))]);
    if (clash[0]) throw new ApiError('invalid_request', `${clash[0].ip} already belongs to another node's pool.`);
    await sql.query('insert into edge_node (id, name, public_ip, ssh_host, ssh_port, host_key, inner_pool) values (?, ?, ?, ?, ?, ?, ?)', [
      id, n.name, n.publicIp, n.sshHost, port, n.hostKey ?? null, innerPool,
    ]);
    // One statement for the whole pool: a /16 is 65k rows.
    await sql.query(
      `insert into protected_ip (ip, node_id, inner_index)
       select ip, ?, ord - 1 from json_array_elements_text(?::json) with ordinality as u(ip, ord)`,
      [id, JSON.stringify(addresses.map(formatIPv4))],
    );
  });
  return { node_id: id, pool_size: addresses.length };
}
