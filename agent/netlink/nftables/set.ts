// nftables sets and maps: the body of add, their elements (add, delete, the dump and its decoders) and
// the userdata blobs nft stores with a set to print it back. Userdata follows what nft 1.0.6 (libnftnl)
// writes, so our batches compare byte for byte with captures of `nft -f`.
import { AttrTable, HOST_LE, NLA_HDRLEN, NLA_TYPE_MASK, NetlinkParseError, NlWriter, bytesToIpv4, ipv4ToBytes, nlaAlign, parseAttrs, readString } from '../attrs.ts';
import { NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, NLMSG_HDRLEN, type NlMsg } from '../message.ts';
import { NFT_META_L4PROTO, verdictData } from './expressions.ts';
import { NFGENMSG_LEN, NFPROTO_IPV4, NFTA_DATA_VALUE, NFT_MSG_GETSETELEM, NFT_MSG_NEWSETELEM, dataValue, getMessage, nftAttrs, nftType } from './message.ts';

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

const NFTA_SET_ELEM_LIST_TABLE = 1;
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_SET_ELEM_LIST_SET_ID = 4;
const NFTA_SET_ELEM_KEY = 1;
const NFTA_SET_ELEM_DATA = 2;
const NFTA_SET_ELEM_FLAGS = 3;
const NFTA_SET_ELEM_USERDATA = 6;
const NFTA_SET_ELEM_OBJREF = 9;
const NFTA_SET_ELEM_KEY_END = 10;
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

/** NFT_MSG_GETSETELEM dump of one set (the attribute order is nft's: set, then table). */
export function encodeGetSetElements(table: string, set: string, seq: number, family = NFPROTO_IPV4): Buffer {
  return getMessage(NFT_MSG_GETSETELEM, NLM_F_REQUEST | NLM_F_DUMP, seq, family, (w) => w.attrString(NFTA_SET_ELEM_LIST_SET, set).attrString(NFTA_SET_ELEM_LIST_TABLE, table));
}

/**
 * NFT_MSG_GETSETELEM for one element by key, not a dump (what `nft get element` sends: set, table, then the
 * element list with the key, and the interval end for an interval set). The kernel answers one NEWSETELEM
 * and the ack, or refuses with ENOENT when no element has that key (test/fixtures/netlink/reply-nft-get-elem*).
 * One key per request: a list of keys is answered up to the first missing one only.
 */
export function encodeGetSetElement(table: string, set: string, key: Pick<SetElement, 'key' | 'keyEnd'>, seq: number, family = NFPROTO_IPV4): Buffer {
  return getMessage(NFT_MSG_GETSETELEM, NLM_F_REQUEST | NLM_F_ACK, seq, family, (w) => {
    w.attrString(NFTA_SET_ELEM_LIST_SET, set).attrString(NFTA_SET_ELEM_LIST_TABLE, table);
    w.nest(NFTA_SET_ELEM_LIST_ELEMENTS, (l) =>
      l.nest(1, (x) => {
        dataValue(x, NFTA_SET_ELEM_KEY, key.key);
        if (key.keyEnd) dataValue(x, NFTA_SET_ELEM_KEY_END, key.keyEnd);
      }),
    );
  });
}

export interface DecodedElement {
  key: Buffer;
  data?: Buffer;
  objref?: string;
  flags?: number;
}

export interface DecodedElements {
  table: string;
  set: string;
  elements: DecodedElement[];
}

/** Decodes one NFT_MSG_NEWSETELEM (a dump part or our own request). */
export function decodeSetElements(msg: NlMsg): DecodedElements {
  const t = nftAttrs(msg, NFT_MSG_NEWSETELEM);
  const out: DecodedElements = { table: t.string(NFTA_SET_ELEM_LIST_TABLE) ?? '', set: t.string(NFTA_SET_ELEM_LIST_SET) ?? '', elements: [] };
  const list = t.get(NFTA_SET_ELEM_LIST_ELEMENTS);
  if (!list) return out;
  for (const entry of parseAttrs(list)) {
    const e = new AttrTable(entry.data);
    const key = e.nested(NFTA_SET_ELEM_KEY)?.get(NFTA_DATA_VALUE);
    if (!key) throw new NetlinkParseError('set element without a key');
    const el: DecodedElement = { key: Buffer.from(key) };
    const data = e.nested(NFTA_SET_ELEM_DATA)?.get(NFTA_DATA_VALUE);
    if (data) el.data = Buffer.from(data);
    const obj = e.get(NFTA_SET_ELEM_OBJREF);
    if (obj) el.objref = readString(obj);
    const fl = e.u32be(NFTA_SET_ELEM_FLAGS);
    if (fl !== undefined) el.flags = fl;
    out.elements.push(el);
  }
  return out;
}

/**
 * Visits the elements of one NFT_MSG_NEWSETELEM without building DecodedElements: `key` and `data` are
 * views into the message, valid only during the call. For dumps of 10,000 elements, where a copied
 * Buffer and an object per element were the bulk of the transient heap of reading the table back.
 */
export function eachSetElement(msg: NlMsg, visit: (key: Buffer, data: Buffer | undefined, objref: string | undefined) => void): void {
  eachElementAttrs(msg, (e, key) => {
    const obj = e.get(NFTA_SET_ELEM_OBJREF);
    visit(key, e.nested(NFTA_SET_ELEM_DATA)?.get(NFTA_DATA_VALUE), obj ? readString(obj) : undefined);
  });
}

/** The attributes and key of each element of one NFT_MSG_NEWSETELEM. */
function eachElementAttrs(msg: NlMsg, visit: (e: AttrTable, key: Buffer) => void): void {
  const list = nftAttrs(msg, NFT_MSG_NEWSETELEM).get(NFTA_SET_ELEM_LIST_ELEMENTS);
  if (!list) return;
  for (const entry of parseAttrs(list)) {
    const e = new AttrTable(entry.data);
    const key = e.nested(NFTA_SET_ELEM_KEY)?.get(NFTA_DATA_VALUE);
    if (!key) throw new NetlinkParseError('set element without a key');
    visit(e, key);
  }
}

/**
 * Visits the key of each element of one NFT_MSG_NEWSETELEM as a byte range of the message's buffer, allocating
 * nothing: for a reconcile's digest of ~800,000 allowlist elements, where an object, a view and a table of
 * attributes per element were most of its time and garbage (agent/dataplane/kernel/read.ts readElementIds).
 */
export function eachElementKeyRange(msg: NlMsg, visit: (buf: Buffer, start: number, end: number) => void): void {
  if (msg.type !== nftType(NFT_MSG_NEWSETELEM)) throw new NetlinkParseError(`expected nft message ${NFT_MSG_NEWSETELEM}, got type ${msg.type}`);
  const b = msg.payload;
  // The attribute of `type` directly inside [from, to): its payload's start, its end in `foundEnd`; -1 if absent.
  // No tuple per call: a reconcile visits ~800,000 keys, and two arrays each were most of its young garbage.
  let foundEnd = 0;
  const find = (from: number, to: number, type: number): number => {
    for (let off = from; off + NLA_HDRLEN <= to; ) {
      const len = HOST_LE ? b.readUInt16LE(off) : b.readUInt16BE(off);
      if (len < NLA_HDRLEN || off + len > to) throw new NetlinkParseError(`bad attribute length ${len} at offset ${off}`);
      if (((HOST_LE ? b.readUInt16LE(off + 2) : b.readUInt16BE(off + 2)) & NLA_TYPE_MASK) === type) {
        foundEnd = off + len;
        return off + NLA_HDRLEN;
      }
      off += nlaAlign(len);
    }
    return -1;
  };
  const listStart = find(NFGENMSG_LEN, b.length, NFTA_SET_ELEM_LIST_ELEMENTS);
  if (listStart < 0) return;
  const listEnd = foundEnd;
  for (let off = listStart; off + NLA_HDRLEN <= listEnd; ) {
    const len = HOST_LE ? b.readUInt16LE(off) : b.readUInt16BE(off);
    if (len < NLA_HDRLEN || off + len > listEnd) throw new NetlinkParseError(`bad attribute length ${len} at offset ${off}`);
    const keyStart = find(off + NLA_HDRLEN, off + len, NFTA_SET_ELEM_KEY);
    const valueStart = keyStart < 0 ? -1 : find(keyStart, foundEnd, NFTA_DATA_VALUE);
    if (valueStart < 0) throw new NetlinkParseError('set element without a key');
    visit(b, valueStart, foundEnd);
    off += nlaAlign(len);
  }
}

/** One element as a dump reports it, every field the agent's sets use (views into the message). */
export interface ElementView {
  key: Buffer;
  keyEnd?: Buffer;
  data?: Buffer;
  objref?: string;
  verdict?: { code: number; chain?: string };
  /** NFTA_SET_ELEM_FLAGS when the kernel sent them (an interval set's end elements). */
  flags?: number;
  /** The element's own `counter` (a dynset's `update @s { KEY counter }` gives each element one). */
  counter?: { packets: bigint; bytes: bigint };
}

// An element's stateful expressions: one is sent as NFTA_SET_ELEM_EXPR, several as a list in
// NFTA_SET_ELEM_EXPRESSIONS (the kernel's nft_set_elem_expr_dump); each is {NFTA_EXPR_NAME, NFTA_EXPR_DATA}.
const NFTA_SET_ELEM_EXPR = 7;
const NFTA_SET_ELEM_EXPRESSIONS = 11;
const NFTA_EXPR_NAME = 1;
const NFTA_EXPR_DATA = 2;
const NFTA_COUNTER_BYTES = 1;
const NFTA_COUNTER_PACKETS = 2;

/** The `counter` among an element's expressions; undefined when it has none. */
function elementCounter(e: AttrTable): { packets: bigint; bytes: bigint } | undefined {
  const exprs: AttrTable[] = [];
  const one = e.nested(NFTA_SET_ELEM_EXPR);
  if (one) exprs.push(one);
  const list = e.get(NFTA_SET_ELEM_EXPRESSIONS);
  if (list) for (const item of parseAttrs(list)) if (item.type === NFTA_LIST_ELEM) exprs.push(new AttrTable(item.data));
  for (const x of exprs) {
    if (x.string(NFTA_EXPR_NAME) !== 'counter') continue;
    const d = x.nested(NFTA_EXPR_DATA);
    return { packets: d?.u64be(NFTA_COUNTER_PACKETS) ?? 0n, bytes: d?.u64be(NFTA_COUNTER_BYTES) ?? 0n };
  }
  return undefined;
}

const NFTA_VERDICT_CODE_ATTR = 1;
const NFTA_VERDICT_CHAIN_ATTR = 2;
const NFTA_DATA_VERDICT_ATTR = 2;

/** Like eachSetElement, with interval ends and verdicts (the policy sets: docs/CONTRACTS.md "Dataplane"). */
export function eachSetElementView(msg: NlMsg, visit: (e: ElementView) => void): void {
  eachElementAttrs(msg, (e, key) => {
    const v: ElementView = { key };
    const keyEnd = e.nested(NFTA_SET_ELEM_KEY_END)?.get(NFTA_DATA_VALUE);
    if (keyEnd) v.keyEnd = keyEnd;
    const data = e.nested(NFTA_SET_ELEM_DATA);
    const value = data?.get(NFTA_DATA_VALUE);
    if (value) v.data = value;
    const verdict = data?.nested(NFTA_DATA_VERDICT_ATTR);
    if (verdict) {
      const chain = verdict.get(NFTA_VERDICT_CHAIN_ATTR);
      v.verdict = { code: (verdict.u32be(NFTA_VERDICT_CODE_ATTR) ?? 0) | 0, ...(chain ? { chain: readString(chain) } : {}) };
    }
    const obj = e.get(NFTA_SET_ELEM_OBJREF);
    if (obj) v.objref = readString(obj);
    const flags = e.u32be(NFTA_SET_ELEM_FLAGS);
    if (flags) v.flags = flags;
    const counter = elementCounter(e);
    if (counter) v.counter = counter;
    visit(v);
  });
}

/** An `ipv4_addr : ipv4_addr` map's elements as strings. */
export function decodeIpv4MapElements(msgs: readonly NlMsg[], out = new Map<string, string>()): Map<string, string> {
  for (const m of msgs) {
    eachSetElement(m, (key, data) => {
      if (!data) throw new NetlinkParseError('map element without data');
      out.set(bytesToIpv4(key), bytesToIpv4(data));
    });
  }
  return out;
}
