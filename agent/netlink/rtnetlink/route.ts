// rtnetlink IPv4 routes in numbered tables (the origin script's policy routing, the tests' namespaces): add,
// replace, delete, dump and decode, tables above 255 carried in RTA_TABLE as iproute2 does.
// Pure: every encoder returns the bytes of one request message for a given seq; no I/O here. Attribute order and
// defaults follow what iproute2 6.1 sends for the same command (test/unit/netlink checks it against strace).
import { AttrTable, NetlinkParseError, type NlWriter, bytesToIpv4, ipv4ToBytes } from '../attrs.ts';
import { NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { AF_INET, FLAGS_ACK, FLAGS_CREATE, FLAGS_REPLACE, RTM_DELROUTE, RTM_GETROUTE, RTM_NEWROUTE, message } from './message.ts';

// include/uapi/linux/rtnetlink.h: RTA_*, RTPROT_*, RT_SCOPE_*, RTN_*, RT_TABLE_*
export const RTA_DST = 1;
export const RTA_OIF = 4;
export const RTA_GATEWAY = 5;
export const RTA_PRIORITY = 6;
export const RTA_PREFSRC = 7;
export const RTA_TABLE = 15;
export const RTPROT_UNSPEC = 0;
export const RTPROT_BOOT = 3;
export const RTPROT_STATIC = 4;
export const RT_SCOPE_UNIVERSE = 0;
export const RT_SCOPE_LINK = 253;
export const RT_SCOPE_NOWHERE = 255;
export const RTN_UNSPEC = 0;
export const RTN_UNICAST = 1;
export const RT_TABLE_UNSPEC = 0;

const RTMSG_LEN = 12;

export interface RouteSpec {
  /** "a.b.c.d/len", or "default" */
  dst: string;
  table: number;
  /** Output interface index. */
  oif?: number;
  gateway?: string;
  /** RTPROT_BOOT is what `ip route add` uses; a daemon may prefer RTPROT_STATIC. */
  protocol?: number;
  priority?: number;
  prefsrc?: string;
}

function parseDst(dst: string): { addr?: Buffer; len: number } {
  if (dst === 'default') return { len: 0 };
  const [a, l] = dst.split('/');
  const len = l === undefined ? 32 : Number(l);
  if (!Number.isInteger(len) || len < 0 || len > 32) throw new RangeError(`bad route destination ${dst}`);
  return { addr: ipv4ToBytes(a!), len };
}

function rtmsg(w: NlWriter, f: { dstLen: number; table: number; protocol: number; scope: number; type: number }): void {
  // struct rtmsg { u8 family, dst_len, src_len, tos, table, protocol, scope, type; u32 flags; }
  w.u8(AF_INET).u8(f.dstLen).u8(0).u8(0).u8(f.table).u8(f.protocol).u8(f.scope).u8(f.type).u32(0);
}

/**
 * RTM_NEWROUTE. Tables above 255 do not fit rtm_table (a u8): like iproute2 we then put RT_TABLE_UNSPEC
 * there and the real id in RTA_TABLE. Scope follows iproute2: link scope without a gateway, universe with.
 */
function routeBody(w: NlWriter, spec: RouteSpec, del: boolean): void {
  const d = parseDst(spec.dst);
  const small = spec.table < 256;
  rtmsg(w, {
    dstLen: d.len,
    table: small ? spec.table : RT_TABLE_UNSPEC,
    protocol: del ? RTPROT_UNSPEC : (spec.protocol ?? RTPROT_BOOT),
    scope: del ? RT_SCOPE_NOWHERE : spec.gateway ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK,
    type: del ? RTN_UNSPEC : RTN_UNICAST,
  });
  if (d.addr) w.attrBytes(RTA_DST, d.addr);
  if (!small) w.attrU32(RTA_TABLE, spec.table);
  if (spec.gateway) w.attrBytes(RTA_GATEWAY, ipv4ToBytes(spec.gateway));
  if (spec.prefsrc) w.attrBytes(RTA_PREFSRC, ipv4ToBytes(spec.prefsrc));
  if (spec.priority !== undefined) w.attrU32(RTA_PRIORITY, spec.priority);
  if (spec.oif !== undefined) w.attrU32(RTA_OIF, spec.oif);
}

export function encodeNewRoute(spec: RouteSpec, seq: number, flags = FLAGS_CREATE): Buffer {
  return message(RTM_NEWROUTE, flags, seq, (w) => routeBody(w, spec, false));
}

export function encodeReplaceRoute(spec: RouteSpec, seq: number): Buffer {
  return encodeNewRoute(spec, seq, FLAGS_REPLACE);
}

export function encodeDelRoute(spec: RouteSpec, seq: number): Buffer {
  return message(RTM_DELROUTE, FLAGS_ACK, seq, (w) => routeBody(w, spec, true));
}

export function encodeDumpRoutes(seq: number): Buffer {
  return message(RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP, seq, (w) => rtmsg(w, { dstLen: 0, table: 0, protocol: 0, scope: 0, type: 0 }));
}

export interface RouteInfo {
  table: number;
  dst: string;
  gateway?: string;
  oif?: number;
  protocol: number;
  scope: number;
  type: number;
  priority?: number;
}

export function decodeRoute(msg: NlMsg): RouteInfo {
  const p = msg.payload;
  if (p.length < RTMSG_LEN) throw new NetlinkParseError('short rtmsg');
  const t = new AttrTable(p.subarray(RTMSG_LEN));
  const dstLen = p[1]!;
  const dst = t.get(RTA_DST);
  const out: RouteInfo = {
    table: t.u32(RTA_TABLE) ?? p[4]!,
    dst: dst && dst.length === 4 ? `${bytesToIpv4(dst)}/${dstLen}` : dstLen === 0 ? 'default' : `?/${dstLen}`,
    protocol: p[5]!,
    scope: p[6]!,
    type: p[7]!,
  };
  const gw = t.get(RTA_GATEWAY);
  if (gw && gw.length === 4) out.gateway = bytesToIpv4(gw);
  const oif = t.u32(RTA_OIF);
  if (oif !== undefined) out.oif = oif;
  const pr = t.u32(RTA_PRIORITY);
  if (pr !== undefined) out.priority = pr;
  return out;
}
