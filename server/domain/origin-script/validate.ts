// The buyer-side values of an origin script, checked strictly before any of them reaches the text.
//
// Callers validate too, but the output is executed as root on someone else's server, so the guarantee
// that nothing in it can be shell syntax must not depend on code elsewhere. The values are then
// single-quoted anyway (origin-scripts.ts).
//
// The rules that are the same as the shared ones come from common/: the dotted quad and the
// "address/prefix" form (common/ipv4.ts), UUIDs and interface names (common/names.ts), the largest MTU
// (common/tunnel-spec.ts). Where this file differs from the wire contract's tunnel spec, it does so on
// purpose, because it guards what the origin's kernel and shell take, not what the gateway numbers:
// - inner subnets /8 to /31, not only /30 and /31: any point-to-point subnet works on the origin, and
//   the script renders whatever ends it is given (the gateway only ever gives /30s);
// - the smallest MTU is IPv4's 68, not the contract's 576: Linux takes 68 on the origin's link, and 576
//   is the edge's policy for the links it builds;
// - endpoints and inner addresses must also be unicast, the interface name must not be one of the names
//   the origin's kernel already uses for itself, and the route table must not be one of the kernel's own.
import { formatIPv4, parseIPv4, parseIPv4Prefix } from '../../../common/ipv4.ts';
import { isInterfaceName, isUuid } from '../../../common/names.ts';
import { MTU_MAX } from '../../../common/tunnel-spec.ts';

export interface OriginScriptParams {
  tunnelId: string; // uuid
  tunnelName: string; // Linux interface name, <= 15 chars, e.g. "tg-3k9x0a1b"
  protectedIp: string; // public protected IPv4 on the edge
  originIp: string; // the origin's own public IPv4 (GRE local on the origin)
  edgeIp: string; // the edge router's GRE underlay IPv4 (GRE remote on the origin)
  edgeInner: string; // e.g. "100.64.0.1/30"  (edge end of the inner subnet)
  originInner: string; // e.g. "100.64.0.2/30"  (origin end, with prefix length)
  mtu: number; // 1476
  greKey?: number | null; // optional GRE key (sets ikey and okey)
  routeTable: number; // policy routing table number to use on the origin
}

/** The checked values in the text form the script and the unit print them in. */
export interface OriginScriptValues {
  tunnelId: string;
  tunnelName: string;
  protectedIp: string;
  originIp: string;
  edgeIp: string;
  edgeInnerIp: string;
  originInner: string;
  originInnerIp: string;
  mtu: number;
  greKey: number | null;
  greKeyDotted: string;
  routeTable: number;
  scriptPath: string;
  unitName: string;
}

// The UUID and interface-name rules are the shared ones (common/names.ts): the interface name also
// becomes a sysctl key, a systemd unit name and a file name here, and must never need escaping.
// "all" and "default" are net.ipv4.conf.* entries of their own; gre0, gretap0 and erspan0 are the
// fallback devices ip_gre creates itself and cannot be deleted.
const RESERVED_IFNAMES = new Set(['all', 'default', 'lo', 'gre0', 'gretap0', 'erspan0']);
// main, local and default: `ip route replace default ... table main` would hijack the host's own route.
const RESERVED_TABLES = new Set([253, 254, 255]);
/** The least MTU an IPv4 link may have (RFC 791: every IPv4 host takes a 68-octet datagram whole). */
const IPV4_MIN_MTU = 68;

function bad(field: string, value: unknown, why: string): TypeError {
  const shown = typeof value === 'string' ? JSON.stringify(value.slice(0, 64)) : String(value);
  return new TypeError(`origin script: ${field} ${why}, got ${shown}`);
}

function str(field: string, value: unknown): string {
  if (typeof value !== 'string') throw bad(field, value, 'must be a string');
  return value;
}

/** 0/8, 127/8, multicast and 240/4 cannot be a tunnel endpoint or an interface address. */
function unicast(field: string, value: unknown, n: number): number {
  const first = n >>> 24;
  if (first === 0 || first === 127 || first >= 224) throw bad(field, value, 'is not a unicast IPv4 address');
  return n;
}

/** A dotted quad, strictly (no leading zeros: inet_aton reads "010" as octal), and unicast. */
function ipv4(field: string, value: unknown): number {
  const n = parseIPv4(str(field, value));
  if (n === null) throw bad(field, value, 'is not an IPv4 address');
  return unicast(field, value, n);
}

function cidr(field: string, value: unknown): { ip: number; prefix: number } {
  const p = parseIPv4Prefix(str(field, value));
  if (p === null) throw bad(field, value, 'is not an IPv4 address with a prefix length (a.b.c.d/nn)');
  // The address alone is shown, as the message is about the address.
  return { ip: unicast(field, formatIPv4(p.addr), p.addr), prefix: p.prefix };
}

function int(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw bad(field, value, `must be an integer in ${min}..${max}`);
  }
  return value;
}

/** The checked values, or a TypeError whose message starts "origin script: " and names the field. */
export function validateOriginScript(p: OriginScriptParams): OriginScriptValues {
  const tunnelId = str('tunnelId', p.tunnelId);
  if (!isUuid(tunnelId)) throw bad('tunnelId', tunnelId, 'is not a UUID');
  const tunnelName = str('tunnelName', p.tunnelName);
  if (!isInterfaceName(tunnelName) || RESERVED_IFNAMES.has(tunnelName)) {
    throw bad('tunnelName', tunnelName, 'is not a usable interface name (1-15 of A-Z a-z 0-9 _ -, not starting with _ or -)');
  }
  const protectedIp = ipv4('protectedIp', p.protectedIp);
  const originIp = ipv4('originIp', p.originIp);
  const edgeIp = ipv4('edgeIp', p.edgeIp);
  if (originIp === edgeIp) throw bad('edgeIp', p.edgeIp, 'must differ from originIp');

  const edgeInner = cidr('edgeInner', p.edgeInner);
  const originInner = cidr('originInner', p.originInner);
  // Both ends must share one point-to-point subnet, or the origin has no connected route to the edge end.
  const size = 2 ** (32 - originInner.prefix);
  const net = (n: number) => n - (n % size);
  if (
    edgeInner.prefix !== originInner.prefix ||
    originInner.prefix < 8 ||
    originInner.prefix > 31 ||
    net(edgeInner.ip) !== net(originInner.ip) ||
    edgeInner.ip === originInner.ip
  ) {
    throw bad('originInner', p.originInner, `must be the other end of edgeInner ${JSON.stringify(p.edgeInner)}'s subnet (/8../31)`);
  }
  if (size > 2) {
    for (const [field, end] of [['edgeInner', edgeInner], ['originInner', originInner]] as const) {
      const host = end.ip % size;
      if (host === 0 || host === size - 1) throw bad(field, p[field], 'is the network or broadcast address of its subnet');
    }
  }

  const mtu = int('mtu', p.mtu, IPV4_MIN_MTU, MTU_MAX);
  const greKey = p.greKey === undefined || p.greKey === null ? null : int('greKey', p.greKey, 0, 2 ** 32 - 1);
  const routeTable = int('routeTable', p.routeTable, 1, 2 ** 31);
  if (RESERVED_TABLES.has(routeTable)) throw bad('routeTable', routeTable, 'is a reserved table (253 default, 254 main, 255 local)');

  return {
    tunnelId: tunnelId.toLowerCase(),
    tunnelName,
    protectedIp: formatIPv4(protectedIp),
    originIp: formatIPv4(originIp),
    edgeIp: formatIPv4(edgeIp),
    edgeInnerIp: formatIPv4(edgeInner.ip),
    originInner: `${formatIPv4(originInner.ip)}/${originInner.prefix}`,
    originInnerIp: formatIPv4(originInner.ip),
    mtu,
    greKey,
    // `ip -d link show` prints GRE keys as dotted quads; the script compares against this form.
    greKeyDotted: greKey === null ? '' : formatIPv4(greKey),
    routeTable,
    scriptPath: `/usr/local/sbin/tunnelgate-${tunnelName}.sh`,
    unitName: `tunnelgate-${tunnelName}.service`,
  };
}
