// Shape checks on a tunnel before anything touches the kernel (the job layer checks the wire format; this
// guards the kernel-facing invariants: interface names, prefixes, one inner subnet).
import { ipv4ToBytes, parseCidr } from '../netlink/attrs.ts';
import type { TunnelRef, TunnelSpec } from './types.ts';

const IFNAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,14}$/;

export class InvalidTunnel extends Error {
  override name = 'InvalidTunnel';
}

function ip(what: string, v: unknown): void {
  try {
    if (typeof v !== 'string') throw new RangeError('not a string');
    ipv4ToBytes(v);
  } catch {
    throw new InvalidTunnel(`${what} is not an IPv4 address: ${String(v)}`);
  }
}

const toInt = (a: string): number => ipv4ToBytes(a).readUInt32BE(0);

export function validateRef(t: TunnelRef, linkPrefix: string): void {
  if (typeof t.id !== 'string' || t.id === '') throw new InvalidTunnel('tunnel id missing');
  if (typeof t.tunnel_name !== 'string' || !IFNAME.test(t.tunnel_name)) throw new InvalidTunnel(`tunnel_name is not a usable interface name: ${String(t.tunnel_name)}`);
  if (!t.tunnel_name.startsWith(linkPrefix)) throw new InvalidTunnel(`tunnel_name ${t.tunnel_name} does not start with the agent's link prefix ${linkPrefix}`);
  ip('protected_ip', t.protected_ip);
}

export function validateSpec(t: TunnelSpec, linkPrefix: string): void {
  validateRef(t, linkPrefix);
  ip('origin_ip', t.origin_ip);
  ip('edge_ip', t.edge_ip);
  let e: { address: string; prefixLen: number };
  let o: { address: string; prefixLen: number };
  try {
    e = parseCidr(t.edge_inner);
    o = parseCidr(t.origin_inner);
  } catch {
    throw new InvalidTunnel(`edge_inner/origin_inner must be a.b.c.d/len: ${t.edge_inner}, ${t.origin_inner}`);
  }
  if (!t.edge_inner.includes('/') || e.prefixLen !== o.prefixLen || e.prefixLen < 8 || e.prefixLen > 31) throw new InvalidTunnel(`edge_inner and origin_inner need one prefix length between /8 and /31: ${t.edge_inner}, ${t.origin_inner}`);
  const mask = e.prefixLen === 0 ? 0 : (0xffffffff << (32 - e.prefixLen)) >>> 0;
  if (((toInt(e.address) & mask) >>> 0) !== ((toInt(o.address) & mask) >>> 0) || e.address === o.address) throw new InvalidTunnel(`edge_inner ${t.edge_inner} and origin_inner ${t.origin_inner} are not two ends of one subnet`);
  if (!Number.isInteger(t.mtu) || t.mtu < 576 || t.mtu > 9000) throw new InvalidTunnel(`mtu out of range: ${t.mtu}`);
  if (t.gre_key !== undefined && t.gre_key !== null && (!Number.isInteger(t.gre_key) || t.gre_key < 0 || t.gre_key > 0xffffffff)) throw new InvalidTunnel(`gre_key out of range: ${t.gre_key}`);
}

/** The spec as stored and compared: a null gre_key (JSON) is no key. */
export function normalise(t: TunnelSpec): TunnelSpec {
  const out: TunnelSpec = { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, origin_ip: t.origin_ip, edge_ip: t.edge_ip, edge_inner: t.edge_inner, origin_inner: t.origin_inner, mtu: t.mtu };
  if (t.gre_key !== undefined && t.gre_key !== null) out.gre_key = t.gre_key;
  return out;
}
