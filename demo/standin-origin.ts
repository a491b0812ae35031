// The far end of a tunnel on a kernel without GRE: the dataplane's veth stand-in (docs/CONTRACTS.md
// "Dataplane") leaves its peer in the edge's namespace; moved into an origin namespace, it becomes the
// origin's tunnel link, point-to-point like GRE (no ARP, one MAC on both ends, so every frame is "for us"
// on the other side). The demo's origin and the kernel tests' origins are built this way.
import { standinPeerName } from '../agent/dataplane/index.ts';
import type { Netns } from './netns.ts';

/** What the origin's end needs to know of a tunnel: its link's name and the origin's inner address (with prefix). */
export interface OriginEnd {
  tunnel_name: string;
  origin_inner: string;
}

/**
 * Moves `t`'s stand-in peer from `edge` into `origin`, named like the edge's end, up, with the origin's inner
 * address: what `ip link add ... type gre` and the origin script's address step do on a real origin.
 */
export function moveStandinPeer(edge: Pick<Netns, 'run' | 'ipJson'>, origin: Pick<Netns, 'run' | 'name'>, t: OriginEnd & { mtu?: number }): void {
  const peer = standinPeerName(t.tunnel_name);
  const mac = edge.ipJson<{ address: string }[]>('link', 'show', 'dev', t.tunnel_name)[0]!.address;
  edge.run('ip', 'link', 'set', 'dev', t.tunnel_name, 'arp', 'off');
  edge.run('ip', 'link', 'set', 'dev', peer, 'address', mac, 'arp', 'off', 'netns', origin.name);
  origin.run('ip', 'link', 'set', 'dev', peer, 'name', t.tunnel_name);
  if (t.mtu !== undefined) origin.run('ip', 'link', 'set', 'dev', t.tunnel_name, 'mtu', String(t.mtu));
  origin.run('ip', 'link', 'set', 'dev', t.tunnel_name, 'up');
  origin.run('ip', 'addr', 'replace', t.origin_inner, 'dev', t.tunnel_name);
}

/** moveStandinPeer, and the origin's default route into the tunnel (an origin with one tunnel and nothing else). */
export function attachStandinOrigin(edge: Pick<Netns, 'run' | 'ipJson'>, origin: Pick<Netns, 'run' | 'name'>, t: OriginEnd): void {
  moveStandinPeer(edge, origin, t);
  origin.run('ip', 'route', 'add', 'default', 'dev', t.tunnel_name);
}

/**
 * moveStandinPeer, and the origin script's routing (server/domain/origin-script/origin.sh): what leaves from
 * the inner address goes back into this tunnel, by its own table, so the edge's probe (sent from outside the
 * inner subnet) is answered through the tunnel, and an origin can hold many tunnels at once.
 */
export function attachStandinOriginRouted(edge: Pick<Netns, 'run' | 'ipJson'>, origin: Pick<Netns, 'run' | 'name'>, t: OriginEnd & { mtu?: number }, table: number): void {
  moveStandinPeer(edge, origin, t);
  const innerIp = t.origin_inner.split('/')[0]!;
  origin.run('ip', 'route', 'replace', 'default', 'dev', t.tunnel_name, 'table', String(table));
  origin.run('ip', 'rule', 'add', 'from', innerIp, 'lookup', String(table));
}
