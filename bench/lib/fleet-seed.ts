// The fleet's nodes and standing tunnels, written as `node add` and a bulk seed would (docs/SCALE.md).
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { addNode } from '../../server/domain/nodes.ts';
import { tunnelNameFor } from '../../server/domain/tunnels/naming.ts';
import { loadOrCreateHostKey } from '../../agent/ssh/keys.ts';
import { type BenchDatabase } from './database.ts';

/** Pool prefix for a node: room for its standing tunnels and its share of the load's purchases. */
export function poolPrefix(perNode: number): number {
  let prefix = 30;
  while (2 ** (32 - prefix) - 2 < perNode && prefix > 16) prefix--;
  return prefix;
}
export const ipOf = (n: number): string => `${(n >>> 24) & 255}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;

export const usedPorts = new Set<number>();
/**
 * A loopback port for an edge, below the kernel's ephemeral range (32768 and up here): a port from that range
 * (test/helpers/ports.ts) is free when asked but may be taken by any outgoing connection (the gateways' own to
 * PostgreSQL and the edges) before the edge process listens on it, which hundreds of edges made happen.
 */
export async function edgePort(): Promise<number> {
  for (;;) {
    const port = 10_000 + Math.floor(Math.random() * 22_000);
    if (usedPorts.has(port)) continue;
    const free = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (free) {
      usedPorts.add(port);
      return port;
    }
  }
}

export interface FleetNode {
  id: string;
  port: number;
  stateDir: string;
  edgeIp: string;
}

export async function registerNodes(b: BenchDatabase, n: number, perNode: number, dirs: string[]): Promise<FleetNode[]> {
  const prefix = poolPrefix(perNode);
  const size = 2 ** (32 - prefix);
  const nodes: FleetNode[] = [];
  for (let i = 0; i < n; i++) {
    const stateDir = mkdtempSync(join(tmpdir(), 'tg-fleet-edge-'));
    dirs.push(stateDir);
    const hostKey = await loadOrCreateHostKey(stateDir);
    const port = await edgePort();
    // Edge addresses in 172.16.0.0/12, pools in 10.0.0.0/8 (a block of `size` per node): none overlaps another.
    const edgeIp = ipOf((172 << 24) | (16 << 16) | (i + 1));
    const pool = `${ipOf((10 << 24) + i * size)}/${prefix}`;
    const { node_id } = await addNode(b.db, { name: `fleet-${i}`, publicIp: edgeIp, sshHost: '127.0.0.1', sshPort: port, hostKey: hostKey.fingerprint, pool });
    nodes.push({ id: node_id, port, stateDir, edgeIp });
  }
  return nodes;
}

/** The standing tunnels: `perNode` on every node, written as `provisioned` with their protected IPs taken. */
export async function seedTunnels(raw: pg.Client, accountId: string, nodes: FleetNode[], perNode: number): Promise<void> {
  if (perNode === 0) return;
  let k = 0;
  for (const node of nodes) {
    const ips = (await raw.query<{ ip: string; inner_index: number }>('select ip, inner_index from protected_ip where node_id = $1 order by position limit $2', [node.id, perNode])).rows;
    const rows = ips.map((p) => {
      const id = randomUUID();
      k++;
      // Origins: distinct public addresses outside every pool and edge address.
      return { id, ip: p.ip, ix: p.inner_index, name: tunnelNameFor(id), origin: ipOf((100 << 24) + 0x10000 + k), key: 1 + (k % 2_000_000_000) };
    });
    await raw.query(
      `with r as (select * from json_to_recordset($3::json) as x(id uuid, ip text, ix int, name text, origin text, key bigint)),
            taken as (update protected_ip p set tunnel_id = r.id from r where p.ip = r.ip)
       insert into tunnel (id, account_id, node_id, name, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub)
       select r.id, $1, $2, 'fleet', r.ip, r.origin, r.name, r.ix, r.key, 'provisioned', 0, 0 from r`,
      [accountId, node.id, JSON.stringify(rows)],
    );
  }
}

