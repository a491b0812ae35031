// rtnetlink IPv4 addresses: add, delete, the dump (of one link, on a socket with strict dumps) and its decoders.
// Pure: every encoder returns the bytes of one request message for a given seq; no I/O here. Attribute order and
// defaults follow what iproute2 6.1 sends for the same command (test/unit/netlink checks it against strace).
import { AttrTable, NetlinkParseError, HOST_LE, type NlWriter, bytesToIpv4, ipv4ToBytes, readU32 } from '../attrs.ts';
import { NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { AF_INET, FLAGS_ACK, FLAGS_CREATE, RTM_DELADDR, RTM_GETADDR, RTM_NEWADDR, message } from './message.ts';

// include/uapi/linux/if_addr.h: IFA_*
export const IFA_ADDRESS = 1;
export const IFA_LOCAL = 2;
export const IFA_LABEL = 3;

const IFADDRMSG_LEN = 8;

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
