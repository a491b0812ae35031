// IPv4 pools, CIDRs and the address classes the product cares about. Addresses are uint32 numbers.
import { formatIPv4, parseIPv4 } from '../../common/ipv4.ts';

export class IpError extends Error {
  override name = 'IpError';
}

// The dotted-quad rule is the one both programs share (common/ipv4.ts); the pools, address classes and
// inner subnets below are the gateway's own.
export { formatIPv4, parseIPv4 } from '../../common/ipv4.ts';

export interface Cidr {
  base: number;
  prefix: number;
}

export function parseCidr(text: string): Cidr {
  const m = /^([^/]+)\/(\d{1,2})$/.exec(text.trim());
  const ip = m ? parseIPv4(m[1]!) : null;
  const prefix = m ? Number(m[2]) : NaN;
  if (ip === null || !(prefix >= 0 && prefix <= 32)) throw new IpError(`not an IPv4 CIDR: ${JSON.stringify(text)}`);
  const size = 2 ** (32 - prefix);
  if (ip % size !== 0) throw new IpError(`${text} has host bits set; the network is ${formatIPv4(ip - (ip % size))}/${prefix}`);
  return { base: ip, prefix };
}

const inRange = (ip: number, cidr: string) => {
  const c = parseCidr(cidr);
  const size = 2 ** (32 - c.prefix);
  return ip >= c.base && ip < c.base + size;
};

// IANA special-purpose registry entries that are never a reachable public origin.
const NOT_PUBLIC = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12',
  '192.0.0.0/24', '192.0.2.0/24', '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15',
  '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4',
];
// Even a lab cannot route a tunnel to these.
const NEVER_UNICAST = ['0.0.0.0/8', '127.0.0.0/8', '224.0.0.0/4', '240.0.0.0/4'];

export function isPublicUnicast(ip: number): boolean {
  return !NOT_PUBLIC.some((c) => inRange(ip, c));
}

export function isUnicast(ip: number): boolean {
  return !NEVER_UNICAST.some((c) => inRange(ip, c));
}

/**
 * Usable addresses of a pool. Protected IPs are routed to the edge as /32s, but the network and
 * broadcast addresses of a pool wider than /31 are left out because upstream filters often drop them.
 */
export function poolAddresses(c: Cidr): number[] {
  const size = 2 ** (32 - c.prefix);
  if (size > 65536) throw new IpError(`a pool of /${c.prefix} is too large (at most /16)`);
  const out: number[] = [];
  const [first, last] = size <= 2 ? [0, size - 1] : [1, size - 2];
  for (let i = first; i <= last; i++) out.push(c.base + i);
  return out;
}

/**
 * The one inner pool every node numbers its tunnels' /30s in. The numbers are allocated across nodes
 * (node add gives each protected IP its own), so no two tunnels share an inner subnet: an origin with
 * tunnels on two nodes would otherwise hold one inner address twice, and its policy rule `from <inner
 * ip>` would send one tunnel's replies into the other (docs/NODES.md).
 */
export const INNER_POOL = '100.64.0.0/10';
/** How many /30s the inner pool holds: the most protected IPs all nodes together can have. */
export const INNER_SLOTS = 2 ** (32 - 10) / 4;

/** The first and last address of a CIDR. */
export function cidrRange(c: Cidr): { first: number; last: number } {
  return { first: c.base, last: c.base + 2 ** (32 - c.prefix) - 1 };
}

/** The inner /30 number `index` of a pool: edge end .1, origin end .2. */
export function innerSubnet(pool: Cidr, index: number): { edgeInner: string; originInner: string } {
  const capacity = 2 ** (32 - pool.prefix) / 4;
  if (!Number.isInteger(index) || index < 0 || index >= capacity) {
    throw new IpError(`inner subnet ${index} is outside the ${capacity} /30s of the inner pool`);
  }
  const net = pool.base + index * 4;
  return { edgeInner: `${formatIPv4(net + 1)}/30`, originInner: `${formatIPv4(net + 2)}/30` };
}
