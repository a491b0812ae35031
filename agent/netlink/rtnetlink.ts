// rtnetlink encoders and decoders: links (GRE, veth), addresses, routes in numbered tables, policy rules.
// Pure: every encoder returns the bytes of one request message for a given seq; no I/O here.
// Attribute order and defaults follow what iproute2 6.1 sends for the same command, so our requests are
// byte-for-byte the ones the kernel already sees from `ip` (test/unit/netlink checks it against strace).
import { AttrTable, HOST_LE, NLA_HDRLEN, NLA_TYPE_MASK, NetlinkParseError, NlWriter, bytesToIpv4, ipv4ToBytes, readString, readU32, readU64 } from './attrs.ts';
import { NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, beginMessage, endMessage, type NlMsg } from './message.ts';

// include/uapi/linux/rtnetlink.h: message types
export const RTM_NEWLINK = 16;
export const RTM_DELLINK = 17;
export const RTM_GETLINK = 18;
export const RTM_NEWADDR = 20;
export const RTM_DELADDR = 21;
export const RTM_GETADDR = 22;
export const RTM_NEWROUTE = 24;
export const RTM_DELROUTE = 25;
export const RTM_GETROUTE = 26;
export const RTM_NEWRULE = 32;
export const RTM_DELRULE = 33;
export const RTM_GETRULE = 34;

// include/linux/socket.h
export const AF_UNSPEC = 0;
export const AF_INET = 2;

// include/uapi/linux/if_link.h: IFLA_*
export const IFLA_IFNAME = 3;
export const IFLA_MTU = 4;
export const IFLA_OPERSTATE = 16;
export const IFLA_LINKINFO = 18;
export const IFLA_STATS64 = 23;
export const IFLA_GROUP = 27;
export const IFLA_EXT_MASK = 29;
// include/uapi/linux/if_link.h: IFLA_INFO_*
export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;
// include/uapi/linux/veth.h
export const VETH_INFO_PEER = 1;
// include/uapi/linux/rtnetlink.h: RTEXT_FILTER_*
export const RTEXT_FILTER_VF = 1 << 0;
export const RTEXT_FILTER_SKIP_STATS = 1 << 3;
// include/uapi/linux/if.h
export const IFF_UP = 0x1;

// include/uapi/linux/if_tunnel.h: IFLA_GRE_*
export const IFLA_GRE_IFLAGS = 2;
export const IFLA_GRE_OFLAGS = 3;
export const IFLA_GRE_IKEY = 4;
export const IFLA_GRE_OKEY = 5;
export const IFLA_GRE_LOCAL = 6;
export const IFLA_GRE_REMOTE = 7;
export const IFLA_GRE_TTL = 8;
export const IFLA_GRE_TOS = 9;
export const IFLA_GRE_PMTUDISC = 10;
export const IFLA_GRE_ENCAP_TYPE = 14;
export const IFLA_GRE_ENCAP_FLAGS = 15;
export const IFLA_GRE_ENCAP_SPORT = 16;
export const IFLA_GRE_ENCAP_DPORT = 17;
export const IFLA_GRE_FWMARK = 20;
// include/uapi/linux/if_tunnel.h: GRE_KEY is a __be16 flag (the bit as it sits in the GRE header)
export const GRE_KEY = 0x2000;

// include/uapi/linux/if_addr.h: IFA_*
export const IFA_ADDRESS = 1;
export const IFA_LOCAL = 2;
export const IFA_LABEL = 3;

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

// include/uapi/linux/fib_rules.h
export const FRA_SRC = 2;
export const FRA_PRIORITY = 6;
export const FRA_TABLE = 15;
export const FR_ACT_UNSPEC = 0;
export const FR_ACT_TO_TBL = 1;

const IFINFOMSG_LEN = 16;
const IFADDRMSG_LEN = 8;
const RTMSG_LEN = 12;
const FIB_RULE_HDR_LEN = 12;

/** Flags of a "create, fail if it exists" request (ip link/addr/route/rule add). */
export const FLAGS_CREATE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
/** Flags of a "create or replace" request (ip route replace). */
export const FLAGS_REPLACE = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE;
/** Flags of a change or delete request. */
export const FLAGS_ACK = NLM_F_REQUEST | NLM_F_ACK;

function ifinfomsg(w: NlWriter, index = 0, flags = 0, change = 0, family = AF_UNSPEC): void {
  // struct ifinfomsg { u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change; }
  w.u8(family).u8(0).u16(0).i32(index).u32(flags).u32(change);
}

function message(type: number, flags: number, seq: number, body: (w: NlWriter) => void): Buffer {
  const w = new NlWriter(256);
  const start = beginMessage(w, type, flags, seq);
  body(w);
  endMessage(w, start);
  return w.toBuffer();
}

// --- links -------------------------------------------------------------------------------------

export interface GreLinkSpec {
  name: string;
  local: string;
  remote: string;
  ttl?: number;
  /** Sets both directions (ikey and okey) and the GRE_KEY flag on both; omitted = no key. */
  key?: number;
  mtu?: number;
}

/**
 * RTM_NEWLINK for a GRE (kind "gre") link. Keys and key flags travel in network order (the kernel copies
 * them into the GRE header as they are): ikey/okey are __be32, iflags/oflags __be16. Like iproute2 we send
 * the kernel's defaults explicitly (pmtudisc on, tos inherit 0, no encap), so the request is the same one
 * `ip link add NAME type gre ...` sends.
 */
export function encodeNewGreLink(spec: GreLinkSpec, seq: number, flags = FLAGS_CREATE): Buffer {
  const key = spec.key;
  if (key !== undefined && (!Number.isInteger(key) || key < 0 || key > 0xffffffff)) throw new RangeError(`GRE key out of range: ${key}`);
  const ttl = spec.ttl ?? 255;
  return message(RTM_NEWLINK, flags, seq, (w) => {
    ifinfomsg(w);
    if (spec.mtu !== undefined) w.attrU32(IFLA_MTU, spec.mtu);
    w.attrString(IFLA_IFNAME, spec.name);
    w.nest(
      IFLA_LINKINFO,
      (li) => {
        // iproute2 sends the kind without its NUL (addattr_l with strlen); the kernel compares with nla_strcmp.
        li.attrStringNoNul(IFLA_INFO_KIND, 'gre');
        li.nest(
          IFLA_INFO_DATA,
          (d) => {
            d.attrU32be(IFLA_GRE_IKEY, key ?? 0);
            d.attrU32be(IFLA_GRE_OKEY, key ?? 0);
            d.attrU16be(IFLA_GRE_IFLAGS, key !== undefined ? GRE_KEY : 0);
            d.attrU16be(IFLA_GRE_OFLAGS, key !== undefined ? GRE_KEY : 0);
            d.attrBytes(IFLA_GRE_LOCAL, ipv4ToBytes(spec.local));
            d.attrBytes(IFLA_GRE_REMOTE, ipv4ToBytes(spec.remote));
            d.attrU8(IFLA_GRE_PMTUDISC, 1);
            d.attrU8(IFLA_GRE_TOS, 0);
            d.attrU8(IFLA_GRE_TTL, ttl);
            d.attrU32(IFLA_GRE_FWMARK, 0);
            d.attrU16(IFLA_GRE_ENCAP_TYPE, 0);
            d.attrU16(IFLA_GRE_ENCAP_FLAGS, 0);
            d.attrU16be(IFLA_GRE_ENCAP_SPORT, 0);
            d.attrU16be(IFLA_GRE_ENCAP_DPORT, 0);
          },
          false,
        );
      },
      false,
    );
  });
}

/**
 * RTM_NEWLINK of kind "gre" that no kernel can carry out: its input flags set GRE_VERSION, which the GRE
 * driver's validator (net/ipv4/ip_gre.c ipgre_tunnel_validate) refuses with EINVAL before any device is
 * made. A kernel with GRE (built in, or its module loaded on demand as for a real link) answers EINVAL; a
 * kernel without it answers EOPNOTSUPP ("Unknown device type"), since the kind has no driver. So the
 * question "can this kernel make GRE links" is asked with nothing created, in any namespace.
 */
export function encodeGreSupportProbe(name: string, seq: number): Buffer {
  return message(RTM_NEWLINK, FLAGS_CREATE, seq, (w) => {
    ifinfomsg(w);
    w.attrString(IFLA_IFNAME, name);
    w.nest(
      IFLA_LINKINFO,
      (li) => {
        li.attrStringNoNul(IFLA_INFO_KIND, 'gre');
        // GRE_VERSION (0x0007 of the header's flags): a version other than 0 is not GRE as RFC 2784 has it.
        li.nest(IFLA_INFO_DATA, (d) => d.attrU16be(IFLA_GRE_IFLAGS, GRE_VERSION_MASK), false);
      },
      false,
    );
  });
}

/** include/net/gre.h GRE_VERSION, as a __be16 flag like GRE_KEY. */
export const GRE_VERSION_MASK = 0x0007;

/** RTM_NEWLINK for a veth pair (tests and the NAT proof use it in place of GRE). */
export function encodeNewVeth(name: string, peer: string, seq: number, flags = FLAGS_CREATE): Buffer {
  return message(RTM_NEWLINK, flags, seq, (w) => {
    ifinfomsg(w);
    w.attrString(IFLA_IFNAME, name);
    w.nest(
      IFLA_LINKINFO,
      (li) => {
        li.attrStringNoNul(IFLA_INFO_KIND, 'veth');
        li.nest(
          IFLA_INFO_DATA,
          (d) =>
            d.nest(
              VETH_INFO_PEER,
              (p) => {
                ifinfomsg(p);
                p.attrString(IFLA_IFNAME, peer);
              },
              false,
            ),
          false,
        );
      },
      false,
    );
  });
}

/** Brings a link up or down (ifi_change masks IFF_UP so no other flag is touched). */
export function encodeSetLinkUp(index: number, up: boolean, seq: number): Buffer {
  return message(RTM_NEWLINK, FLAGS_ACK, seq, (w) => ifinfomsg(w, index, up ? IFF_UP : 0, IFF_UP));
}

export function encodeSetLinkMtu(index: number, mtu: number, seq: number): Buffer {
  return message(RTM_NEWLINK, FLAGS_ACK, seq, (w) => {
    ifinfomsg(w, index);
    w.attrU32(IFLA_MTU, mtu);
  });
}

export function encodeDelLink(index: number, seq: number): Buffer {
  return message(RTM_DELLINK, FLAGS_ACK, seq, (w) => ifinfomsg(w, index));
}

/** Puts a link in a device group (`ip link set dev X group N`): what a deletion by group then takes. */
export function encodeSetLinkGroup(index: number, group: number, seq: number): Buffer {
  return message(RTM_NEWLINK, FLAGS_ACK, seq, (w) => {
    ifinfomsg(w, index);
    w.attrU32(IFLA_GROUP, group);
  });
}

/**
 * RTM_DELLINK of every link of the namespace in a device group (`ip link del group N`, index 0): the kernel
 * unregisters them together, so they wait out one RCU barrier between them instead of one each.
 */
export function encodeDelLinkGroup(group: number, seq: number): Buffer {
  return message(RTM_DELLINK, FLAGS_ACK, seq, (w) => {
    ifinfomsg(w);
    w.attrU32(IFLA_GROUP, group);
  });
}

/** RTM_DELLINK by name (index 0): one round trip instead of a lookup and a delete. */
export function encodeDelLinkByName(name: string, seq: number): Buffer {
  return message(RTM_DELLINK, FLAGS_ACK, seq, (w) => {
    ifinfomsg(w);
    w.attrString(IFLA_IFNAME, name);
  });
}

export interface GetLinkOptions {
  /** RTEXT_FILTER_* mask; stats64 come unless RTEXT_FILTER_SKIP_STATS is in it. */
  extMask?: number;
  flags?: number;
}

/** RTM_GETLINK for one link by name or index (what `ip link show dev NAME` sends to resolve it). */
export function encodeGetLink(target: { name: string } | { index: number }, seq: number, opts: GetLinkOptions = {}): Buffer {
  return message(RTM_GETLINK, opts.flags ?? FLAGS_ACK, seq, (w) => {
    ifinfomsg(w, 'index' in target ? target.index : 0);
    if (opts.extMask !== undefined) w.attrU32(IFLA_EXT_MASK, opts.extMask);
    if ('name' in target) w.attrString(IFLA_IFNAME, target.name);
  });
}

/** `extMask` (IFLA_EXT_MASK, e.g. RTEXT_FILTER_SKIP_STATS) is only sent when given. */
export function encodeDumpLinks(seq: number, extMask?: number): Buffer {
  return message(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq, (w) => {
    ifinfomsg(w);
    if (extMask !== undefined) w.attrU32(IFLA_EXT_MASK, extMask);
  });
}

export interface LinkStats64 {
  rxPackets: bigint;
  txPackets: bigint;
  rxBytes: bigint;
  txBytes: bigint;
  rxErrors: bigint;
  txErrors: bigint;
  rxDropped: bigint;
  txDropped: bigint;
  multicast: bigint;
  collisions: bigint;
}

export interface GreInfo {
  local?: string;
  remote?: string;
  ttl?: number;
  ikey?: number;
  okey?: number;
  /** Host-order view of the __be16 flags (GRE_KEY = 0x2000). */
  iflags?: number;
  oflags?: number;
}

export interface LinkInfo {
  index: number;
  name: string;
  flags: number;
  up: boolean;
  mtu?: number;
  operstate?: number;
  kind?: string;
  gre?: GreInfo;
  stats64?: LinkStats64;
}

// include/uapi/linux/if_link.h: struct rtnl_link_stats64, the first ten u64 fields in order
const STATS64_FIELDS: (keyof LinkStats64)[] = ['rxPackets', 'txPackets', 'rxBytes', 'txBytes', 'rxErrors', 'txErrors', 'rxDropped', 'txDropped', 'multicast', 'collisions'];

/**
 * Only the name of an RTM_NEWLINK (undefined without IFLA_IFNAME): a scan of the top-level attributes
 * without the attribute table decodeLink builds, so a dump can skip the links it does not want cheaply.
 */
export function linkName(msg: NlMsg): string | undefined {
  const p = msg.payload;
  let off = IFINFOMSG_LEN;
  while (off + NLA_HDRLEN <= p.length) {
    const len = HOST_LE ? p.readUInt16LE(off) : p.readUInt16BE(off);
    const type = (HOST_LE ? p.readUInt16LE(off + 2) : p.readUInt16BE(off + 2)) & NLA_TYPE_MASK;
    if (len < NLA_HDRLEN || off + len > p.length) return undefined;
    if (type === IFLA_IFNAME) return readString(p.subarray(off + NLA_HDRLEN, off + len));
    off += (len + 3) & ~3;
  }
  return undefined;
}

/**
 * Only the ifinfomsg header of an RTM_NEWLINK: the link's index and IFF_* flags, no attribute read. What a health
 * probe needs of its tunnel's link, per check (agent/dataplane/probe.ts), without decodeLink's attribute table.
 */
export function linkHeader(msg: NlMsg): { index: number; flags: number } {
  if (msg.type !== RTM_NEWLINK) throw new NetlinkParseError(`expected RTM_NEWLINK, got type ${msg.type}`);
  const p = msg.payload;
  if (p.length < IFINFOMSG_LEN) throw new NetlinkParseError('short ifinfomsg');
  return { index: readU32(p.subarray(4, 8)) | 0, flags: readU32(p.subarray(8, 12)) };
}

export function decodeLink(msg: NlMsg): LinkInfo {
  if (msg.type !== RTM_NEWLINK) throw new NetlinkParseError(`expected RTM_NEWLINK, got type ${msg.type}`);
  const p = msg.payload;
  if (p.length < IFINFOMSG_LEN) throw new NetlinkParseError('short ifinfomsg');
  const index = readU32(p.subarray(4, 8)) | 0;
  const flags = readU32(p.subarray(8, 12));
  const t = new AttrTable(p.subarray(IFINFOMSG_LEN));
  const out: LinkInfo = { index, name: t.string(IFLA_IFNAME) ?? '', flags, up: (flags & IFF_UP) !== 0 };
  const mtu = t.u32(IFLA_MTU);
  if (mtu !== undefined) out.mtu = mtu;
  const op = t.u8(IFLA_OPERSTATE);
  if (op !== undefined) out.operstate = op;
  const li = t.nested(IFLA_LINKINFO);
  if (li) {
    const kind = li.string(IFLA_INFO_KIND);
    if (kind !== undefined) out.kind = kind;
    const data = li.nested(IFLA_INFO_DATA);
    if (data && kind === 'gre') {
      const g: GreInfo = {};
      const loc = data.get(IFLA_GRE_LOCAL);
      if (loc) g.local = bytesToIpv4(loc);
      const rem = data.get(IFLA_GRE_REMOTE);
      if (rem) g.remote = bytesToIpv4(rem);
      const ttl = data.u8(IFLA_GRE_TTL);
      if (ttl !== undefined) g.ttl = ttl;
      const ik = data.u32be(IFLA_GRE_IKEY);
      if (ik !== undefined) g.ikey = ik;
      const ok = data.u32be(IFLA_GRE_OKEY);
      if (ok !== undefined) g.okey = ok;
      const ifl = data.u16be(IFLA_GRE_IFLAGS);
      if (ifl !== undefined) g.iflags = ifl;
      const ofl = data.u16be(IFLA_GRE_OFLAGS);
      if (ofl !== undefined) g.oflags = ofl;
      out.gre = g;
    }
  }
  const s = t.get(IFLA_STATS64);
  if (s && s.length >= STATS64_FIELDS.length * 8) {
    const st = {} as LinkStats64;
    STATS64_FIELDS.forEach((f, i) => (st[f] = readU64(s.subarray(i * 8, i * 8 + 8))));
    out.stats64 = st;
  }
  return out;
}

// --- addresses ---------------------------------------------------------------------------------

export interface AddressSpec {
  index: number;
  /** "a.b.c.d/len" */
  address: string;
  prefixLen: number;
  /** Peer address (point-to-point); defaults to the local address, as iproute2 does. */
  peer?: string;
}

function ifaddrmsg(w: NlWriter, spec: { index: number; prefixLen: number }, family = AF_INET): void {
  // struct ifaddrmsg { u8 family; u8 prefixlen; u8 flags; u8 scope; u32 index; }
  w.u8(family).u8(spec.prefixLen).u8(0).u8(0).u32(spec.index);
}

function addrBody(w: NlWriter, spec: AddressSpec): void {
  ifaddrmsg(w, spec);
  w.attrBytes(IFA_LOCAL, ipv4ToBytes(spec.address));
  w.attrBytes(IFA_ADDRESS, ipv4ToBytes(spec.peer ?? spec.address));
}

export function encodeNewAddress(spec: AddressSpec, seq: number, flags = FLAGS_CREATE): Buffer {
  return message(RTM_NEWADDR, flags, seq, (w) => addrBody(w, spec));
}

export function encodeDelAddress(spec: AddressSpec, seq: number): Buffer {
  return message(RTM_DELADDR, FLAGS_ACK, seq, (w) => addrBody(w, spec));
}

/** `index`: only that link's addresses, on a socket with strict dump checking (NetlinkSocketOptions.strictDumps). */
export function encodeDumpAddresses(seq: number, family = AF_INET, index = 0): Buffer {
  return message(RTM_GETADDR, NLM_F_REQUEST | NLM_F_DUMP, seq, (w) => ifaddrmsg(w, { index, prefixLen: 0 }, family));
}

export interface AddressInfo {
  index: number;
  prefixLen: number;
  address?: string;
  local?: string;
  label?: string;
}

/** The link index of an RTM_NEWADDR (struct ifaddrmsg's ifa_index), without decoding the rest. */
export function addressIndex(msg: NlMsg): number {
  const p = msg.payload;
  if (p.length < IFADDRMSG_LEN) throw new NetlinkParseError('short ifaddrmsg');
  return HOST_LE ? p.readUInt32LE(4) : p.readUInt32BE(4);
}

export function decodeAddress(msg: NlMsg): AddressInfo {
  const p = msg.payload;
  if (p.length < IFADDRMSG_LEN) throw new NetlinkParseError('short ifaddrmsg');
  const t = new AttrTable(p.subarray(IFADDRMSG_LEN));
  const out: AddressInfo = { index: readU32(p.subarray(4, 8)), prefixLen: p[1]! };
  const a = t.get(IFA_ADDRESS);
  if (a && a.length === 4) out.address = bytesToIpv4(a);
  const l = t.get(IFA_LOCAL);
  if (l && l.length === 4) out.local = bytesToIpv4(l);
  const lb = t.string(IFA_LABEL);
  if (lb !== undefined) out.label = lb;
  return out;
}

// --- routes ------------------------------------------------------------------------------------

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

// --- policy rules ------------------------------------------------------------------------------

export interface RuleSpec {
  /** "a.b.c.d" or "a.b.c.d/len" */
  src: string;
  table: number;
  priority?: number;
}

function ruleBody(w: NlWriter, spec: RuleSpec, del: boolean): void {
  const [a, l] = spec.src.split('/');
  const srcLen = l === undefined ? 32 : Number(l);
  if (!Number.isInteger(srcLen) || srcLen < 0 || srcLen > 32) throw new RangeError(`bad rule source ${spec.src}`);
  const small = spec.table < 256;
  // struct fib_rule_hdr { u8 family, dst_len, src_len, tos, table, res1, res2, action; u32 flags; }
  w.u8(AF_INET).u8(0).u8(srcLen).u8(0).u8(small ? spec.table : RT_TABLE_UNSPEC).u8(0).u8(0).u8(del ? FR_ACT_UNSPEC : FR_ACT_TO_TBL).u32(0);
  w.attrBytes(FRA_SRC, ipv4ToBytes(a!));
  if (!small) w.attrU32(FRA_TABLE, spec.table);
  if (spec.priority !== undefined) w.attrU32(FRA_PRIORITY, spec.priority);
}

export function encodeNewRule(spec: RuleSpec, seq: number, flags = FLAGS_CREATE): Buffer {
  return message(RTM_NEWRULE, flags, seq, (w) => ruleBody(w, spec, false));
}

export function encodeDelRule(spec: RuleSpec, seq: number): Buffer {
  return message(RTM_DELRULE, FLAGS_ACK, seq, (w) => ruleBody(w, spec, true));
}

export function encodeDumpRules(seq: number): Buffer {
  return message(RTM_GETRULE, NLM_F_REQUEST | NLM_F_DUMP, seq, (w) => w.u8(AF_INET).zeros(FIB_RULE_HDR_LEN - 1));
}

export interface RuleInfo {
  table: number;
  src?: string;
  priority?: number;
  action: number;
}

export function decodeRule(msg: NlMsg): RuleInfo {
  const p = msg.payload;
  if (p.length < FIB_RULE_HDR_LEN) throw new NetlinkParseError('short fib_rule_hdr');
  const t = new AttrTable(p.subarray(FIB_RULE_HDR_LEN));
  const out: RuleInfo = { table: t.u32(FRA_TABLE) ?? p[4]!, action: p[7]! };
  const src = t.get(FRA_SRC);
  if (src && src.length === 4) out.src = `${bytesToIpv4(src)}/${p[2]!}`;
  const pr = t.u32(FRA_PRIORITY);
  if (pr !== undefined) out.priority = pr;
  return out;
}
