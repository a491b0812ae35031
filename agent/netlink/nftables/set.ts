// nftables sets and maps: the body of add, their elements (add and delete; set-dump.ts reads them back) and
// the userdata blobs nft stores with a set to print it back. Userdata follows what nft 1.0.6 (libnftnl)
// writes, so our batches compare byte for byte with captures of `nft -f`.
import { NlWriter, ipv4ToBytes } from '../attrs.ts';
import { NLMSG_HDRLEN } from '../message.ts';
import { NFT_META_L4PROTO, verdictData } from './expressions.ts';
import { dataValue } from './message.ts';

const NFTA_SET_TABLE = 1;
const NFTA_SET_NAME = 2;
const NFTA_SET_FLAGS = 3;
const NFTA_SET_KEY_TYPE = 4;
const NFTA_SET_KEY_LEN = 5;
const NFTA_SET_DATA_TYPE = 6;
const NFTA_SET_DATA_LEN = 7;
const NFTA_SET_DESC = 9;
const NFTA_SET_ID = 10;
const NFTA_SET_TIMEOUT = 11;
const NFTA_SET_USERDATA = 13;
const NFTA_SET_OBJ_TYPE = 15;
const NFTA_SET_DESC_SIZE = 1;
const NFTA_SET_DESC_CONCAT = 2;
const NFTA_SET_FIELD_LEN = 1;
const NFTA_LIST_ELEM = 1;
export const NFT_SET_ANONYMOUS = 0x1;
export const NFT_SET_CONSTANT = 0x2;
export const NFT_SET_INTERVAL = 0x4;
export const NFT_SET_MAP = 0x8;
export const NFT_SET_TIMEOUT = 0x10;
/** "dynamic": the packet path may add elements (`update @set`). */
export const NFT_SET_EVAL = 0x20;
export const NFT_SET_OBJECT = 0x40;
export const NFT_SET_CONCAT = 0x80;
/** Map data type of a verdict map (NFT_DATA_VERDICT). */
export const NFT_DATA_VERDICT = 0xffffff00;

export const NFTA_SET_ELEM_LIST_TABLE = 1;
export const NFTA_SET_ELEM_LIST_SET = 2;
export const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_SET_ELEM_LIST_SET_ID = 4;
export const NFTA_SET_ELEM_KEY = 1;
export const NFTA_SET_ELEM_DATA = 2;
export const NFTA_SET_ELEM_FLAGS = 3;
const NFTA_SET_ELEM_USERDATA = 6;
export const NFTA_SET_ELEM_OBJREF = 9;
export const NFTA_SET_ELEM_KEY_END = 10;
/** An interval set's element that ends an interval (the first address past it): NFTA_SET_ELEM_FLAGS. */
export const NFT_SET_ELEM_INTERVAL_END = 1;
// libnftnl include/udata.h: an element's userdata record, and nft's flag for an interval open to the end of the space
const NFTNL_UDATA_SET_ELEM_FLAGS = 1;
const NFTNL_SET_ELEM_F_INTERVAL_OPEN = 1;

// nftables userspace (src/datatype.h, not uapi): set key/data type ids nft stores and prints by
export const NFT_TYPE_IPADDR = 7;
export const NFT_TYPE_INET_PROTOCOL = 12;
export const NFT_TYPE_INET_SERVICE = 13;
/** A 32-bit integer (`mark`): how a `type` declaration spells a hash bucket in a concatenation. */
export const NFT_TYPE_MARK = 19;
export const NFT_TYPE_IFNAME = 41;
/** Bits per type id in a concatenation's type (nft: TYPE_BITS). */
const CONCAT_TYPE_BITS = 6;
/** The key type nft stores for `type a . b . c`. */
export function concatType(types: readonly number[]): number {
  return types.reduce((acc, t) => acc * 2 ** CONCAT_TYPE_BITS + t, 0);
}
/** IFNAMSIZ: an interface name as a set key, NUL-padded. */
export const IFNAME_LEN = 16;

// libnftnl include/udata.h & nftables userspace: set userdata TLVs (u8 type, u8 len, value)
const NFTNL_UDATA_SET_KEYBYTEORDER = 0;
const NFTNL_UDATA_SET_DATABYTEORDER = 1;
const NFTNL_UDATA_SET_KEY_TYPEOF = 3;
const BYTEORDER_INVALID = 0;
// nftables 1.0.6 src/expression.h: EXPR_CONCAT, what it records as the "typeof" of a concatenated `type` key
const NFT_EXPR_CONCAT = 13;
const NFTNL_UDATA_SET_DATA_INTERVAL = 6;
const NFTNL_UDATA_SET_TYPEOF_EXPR = 0;
const NFTNL_UDATA_SET_TYPEOF_DATA = 1;
const NFTNL_UDATA_META_KEY = 0;
// nftables src/expression.h enum expr_types, and enum byteorder
const NFT_EXPR_META = 9;
const BYTEORDER_HOST_ENDIAN = 1;
const BYTEORDER_BIG_ENDIAN = 2;

// --- sets --------------------------------------------------------------------------------------

export interface SetSpec {
  table: string;
  name: string;
  flags: number;
  keyType: number;
  keyLen: number;
  dataType?: number;
  dataLen?: number;
  /** For object maps (NFT_SET_OBJECT): the object type, e.g. NFT_OBJECT_COUNTER. */
  objType?: number;
  /** NFTA_SET_DESC_SIZE (nft sends the element count for constant anonymous sets, and a set's `size`). */
  descSize?: number;
  /** NFTA_SET_DESC_CONCAT: the byte length of each field of a concatenated key (intervals need it). */
  descConcat?: readonly number[];
  /** NFTA_SET_TIMEOUT: the default element timeout, ms. */
  timeoutMs?: number;
  userdata?: Uint8Array;
}

/** `id` is the set's batch-local id (NFTA_SET_ID), by which later messages of the batch refer to it. */
export function setBody(w: NlWriter, s: SetSpec, id: number): void {
  w.attrString(NFTA_SET_TABLE, s.table).attrString(NFTA_SET_NAME, s.name);
  w.attrU32be(NFTA_SET_FLAGS, s.flags).attrU32be(NFTA_SET_KEY_TYPE, s.keyType).attrU32be(NFTA_SET_KEY_LEN, s.keyLen);
  if (s.dataType !== undefined) w.attrU32be(NFTA_SET_DATA_TYPE, s.dataType);
  if (s.dataLen !== undefined) w.attrU32be(NFTA_SET_DATA_LEN, s.dataLen);
  if (s.objType !== undefined) w.attrU32be(NFTA_SET_OBJ_TYPE, s.objType);
  w.attrU32be(NFTA_SET_ID, id);
  if (s.descSize !== undefined || s.descConcat !== undefined) {
    const { descSize, descConcat } = s;
    w.nest(NFTA_SET_DESC, (d) => {
      if (descSize !== undefined) d.attrU32be(NFTA_SET_DESC_SIZE, descSize);
      if (descConcat !== undefined) d.nest(NFTA_SET_DESC_CONCAT, (c) => descConcat.forEach((len) => c.nest(NFTA_LIST_ELEM, (f) => f.attrU32be(NFTA_SET_FIELD_LEN, len))));
    });
  }
  if (s.timeoutMs !== undefined) w.attrU64be(NFTA_SET_TIMEOUT, BigInt(s.timeoutMs));
  if (s.userdata) w.attrBytes(NFTA_SET_USERDATA, s.userdata);
}

// --- userdata ----------------------------------------------------------------------------------

/** nftnl udata: a flat run of (type u8, len u8, value) records. nft reads these to print sets back. */
export function udata(entries: readonly (readonly [number, Uint8Array])[]): Buffer {
  const parts: Buffer[] = [];
  for (const [t, v] of entries) {
    if (v.length > 255) throw new RangeError('udata value over 255 bytes');
    parts.push(Buffer.from([t, v.length]), Buffer.from(v));
  }
  return Buffer.concat(parts);
}

function hostU32(v: number): Buffer {
  const w = new NlWriter(4);
  w.u32(v);
  return w.toBuffer();
}

/** The userdata nft writes for a map whose key and data are big-endian (ipv4_addr : ipv4_addr). */
export function mapUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)],
    [NFTNL_UDATA_SET_DATABYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)],
    [NFTNL_UDATA_SET_DATA_INTERVAL, hostU32(0)],
  ]);
}

/** ... for an object map (ipv4_addr : counter). */
export function objMapUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)],
    [NFTNL_UDATA_SET_DATA_INTERVAL, hostU32(0)],
  ]);
}

/** ... for a set of ipv4 addresses (`type ipv4_addr`). */
export function ipv4SetUserdata(): Buffer {
  return udata([[NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)]]);
}

/** ... for a set or map keyed by a concatenation (`type a . b`): nft records the key as a concat expression. */
export function concatSetUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_INVALID)],
    [NFTNL_UDATA_SET_KEY_TYPEOF, udata([[NFTNL_UDATA_SET_TYPEOF_EXPR, hostU32(NFT_EXPR_CONCAT)], [NFTNL_UDATA_SET_TYPEOF_DATA, new Uint8Array(0)]])],
  ]);
}

/** ... for an object map keyed by an interface name (`type ifname : counter`): host byte order. */
export function ifnameObjMapUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_HOST_ENDIAN)],
    [NFTNL_UDATA_SET_DATA_INTERVAL, hostU32(0)],
  ]);
}

/** ... for a verdict map keyed by ipv4 (`type ipv4_addr : verdict`). */
export function vmapUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)],
    [NFTNL_UDATA_SET_DATABYTEORDER, hostU32(BYTEORDER_INVALID)],
    [NFTNL_UDATA_SET_DATA_INTERVAL, hostU32(0)],
  ]);
}

/** ... for the anonymous set of `meta l4proto { tcp, udp }` (typeof meta l4proto). */
export function l4protoSetUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_HOST_ENDIAN)],
    [
      NFTNL_UDATA_SET_KEY_TYPEOF,
      udata([
        [NFTNL_UDATA_SET_TYPEOF_EXPR, hostU32(NFT_EXPR_META)],
        [NFTNL_UDATA_SET_TYPEOF_DATA, udata([[NFTNL_UDATA_META_KEY, hostU32(NFT_META_L4PROTO)]])],
      ]),
    ],
  ]);
}

// --- elements ----------------------------------------------------------------------------------

export interface SetElement {
  key: Uint8Array;
  /** The last key of an interval element (sets with NFT_SET_INTERVAL and a concatenated key). */
  keyEnd?: Uint8Array;
  /** Map value (NFTA_SET_ELEM_DATA). */
  data?: Uint8Array;
  /** Verdict map value (NFTA_SET_ELEM_DATA holding a verdict): a code and, for a jump, the chain. */
  verdict?: { code: number; chain?: string };
  /** Object map value: the object's name (NFTA_SET_ELEM_OBJREF). */
  objref?: string;
  /** NFTA_SET_ELEM_FLAGS (NFT_SET_ELEM_INTERVAL_END), sent as nft does: by interval elements only. */
  flags?: number;
  /** NFTA_SET_ELEM_USERDATA: what nft stores with an element to print it back (an interval open to the end). */
  userdata?: Uint8Array;
}

export interface ElementsSpec {
  table: string;
  set: string;
  /** The set's batch-local id; nft sends it for every element message, the kernel only needs it for new sets. */
  setId?: number;
  elements: readonly SetElement[];
  /** `create element` semantics: fail with EEXIST even when the element is identical. */
  exclusive?: boolean;
}

const attrSize = (payload: number): number => 4 + ((payload + 3) & ~3);

/** Bytes of one element message before its first element: nlmsghdr, nfgenmsg, table, set, set id, list nest. */
export function elementsHeaderSize(e: ElementsSpec): number {
  return NLMSG_HDRLEN + 4 + attrSize(Buffer.byteLength(e.table) + 1) + attrSize(Buffer.byteLength(e.set) + 1) + (e.setId !== undefined ? 8 : 0) + 4;
}

/** Bytes one element adds to an element message. */
export function elementSize(el: SetElement): number {
  let n = 4 + 4 + attrSize(el.key.length); // list entry + KEY nest + DATA_VALUE
  if (el.keyEnd) n += 4 + attrSize(el.keyEnd.length);
  if (el.data) n += 4 + attrSize(el.data.length);
  if (el.verdict) n += 4 + 4 + 8 + (el.verdict.chain !== undefined ? attrSize(Buffer.byteLength(el.verdict.chain) + 1) : 0);
  if (el.objref !== undefined) n += attrSize(Buffer.byteLength(el.objref) + 1);
  if (el.flags !== undefined) n += 8;
  if (el.userdata) n += attrSize(el.userdata.length);
  return n;
}

/** The body of one add/delete element message carrying `els` (a chunk of e.elements). */
export function elementsBody(w: NlWriter, e: ElementsSpec, els: readonly SetElement[]): void {
  w.attrString(NFTA_SET_ELEM_LIST_TABLE, e.table).attrString(NFTA_SET_ELEM_LIST_SET, e.set);
  if (e.setId !== undefined) w.attrU32be(NFTA_SET_ELEM_LIST_SET_ID, e.setId);
  w.nest(NFTA_SET_ELEM_LIST_ELEMENTS, (l) => {
    // libnftnl numbers the list entries 1, 2, 3...; the kernel ignores the type of list entries.
    els.forEach((el, i) => l.nest(i + 1, (x) => encodeElement(x, el)));
  });
}

function encodeElement(w: NlWriter, el: SetElement): void {
  if (el.flags !== undefined) w.attrU32be(NFTA_SET_ELEM_FLAGS, el.flags);
  dataValue(w, NFTA_SET_ELEM_KEY, el.key);
  if (el.keyEnd) dataValue(w, NFTA_SET_ELEM_KEY_END, el.keyEnd);
  if (el.data) dataValue(w, NFTA_SET_ELEM_DATA, el.data);
  const v = el.verdict;
  if (v) w.nest(NFTA_SET_ELEM_DATA, (d) => verdictData(d, v.code, v.chain));
  if (el.objref !== undefined) w.attrString(NFTA_SET_ELEM_OBJREF, el.objref);
  if (el.userdata) w.attrBytes(NFTA_SET_ELEM_USERDATA, el.userdata);
}

/**
 * The elements of an interval set of IPv4 prefixes (`type ipv4_addr; flags interval`), as nft sends them: the
 * prefixes sorted and merged, each interval as its first address and an end element holding the first address
 * past it (flags NFT_SET_ELEM_INTERVAL_END); an interval running to 255.255.255.255 has no end element and is
 * marked open in its userdata.
 */
export function ipv4IntervalElements(cidrs: readonly string[]): SetElement[] {
  const ranges = cidrs
    .map((c) => {
      const [addr = '', len = '32'] = c.split('/');
      const bits = Number(len);
      const start = ipv4ToBytes(addr).readUInt32BE(0);
      const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
      const from = (start & mask) >>> 0;
      return [from, from + 2 ** (32 - bits) - 1] as [number, number];
    })
    .sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const r of ranges) {
    const last = merged[merged.length - 1];
    if (last && r[0] <= last[1] + 1) last[1] = Math.max(last[1], r[1]);
    else merged.push([r[0], r[1]]);
  }
  const u32 = (v: number): Buffer => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(v >>> 0);
    return b;
  };
  const out: SetElement[] = [];
  for (const [from, to] of merged) {
    if (to === 0xffffffff) out.push({ key: u32(from), userdata: udata([[NFTNL_UDATA_SET_ELEM_FLAGS, hostU32(NFTNL_SET_ELEM_F_INTERVAL_OPEN)]]) });
    else out.push({ key: u32(from) }, { flags: NFT_SET_ELEM_INTERVAL_END, key: u32(to + 1) });
  }
  return out;
}

/** ipv4 → ipv4 map element (protected ip → origin inner ip). */
export function ipv4MapElement(key: string, value: string): SetElement {
  return { key: ipv4ToBytes(key), data: ipv4ToBytes(value) };
}

/** ipv4 → named counter element. */
export function ipv4ObjElement(key: string, objName: string): SetElement {
  return { key: ipv4ToBytes(key), objref: objName };
}
