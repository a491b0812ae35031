// rtnetlink links: GRE and veth creation, the GRE support probe, up/down, MTU, device groups, deletion (by
// index, name or group), and the link decoders (whole, or only its name or header for a dump's cheap skip).
// Pure: every encoder returns the bytes of one request message for a given seq; no I/O here. Attribute order and
// defaults follow what iproute2 6.1 sends for the same command (test/unit/netlink checks it against strace).
import { AttrTable, HOST_LE, NLA_HDRLEN, NLA_TYPE_MASK, NetlinkParseError, type NlWriter, bytesToIpv4, ipv4ToBytes, readString, readU32, readU64 } from '../attrs.ts';
import { NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { AF_UNSPEC, FLAGS_ACK, FLAGS_CREATE, RTM_DELLINK, RTM_GETLINK, RTM_NEWLINK, message } from './message.ts';

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

const IFINFOMSG_LEN = 16;

function ifinfomsg(w: NlWriter, index = 0, flags = 0, change = 0, family = AF_UNSPEC): void {
  // struct ifinfomsg { u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change; }
  w.u8(family).u8(0).u16(0).i32(index).u32(flags).u32(change);
}

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
