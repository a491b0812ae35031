// Reading a set's elements back: the NFT_MSG_GETSETELEM requests (a dump of one set, one element by key) and
// the decoders of the NFT_MSG_NEWSETELEM messages that answer them, from plain elements to views with interval
// ends, verdicts and each element's own counter. The element attributes are set.ts's, which encodes them.
import { AttrTable, HOST_LE, NLA_HDRLEN, NLA_TYPE_MASK, NetlinkParseError, bytesToIpv4, nlaAlign, parseAttrs, readString } from '../attrs.ts';
import { NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { NFGENMSG_LEN, NFPROTO_IPV4, NFTA_DATA_VALUE, NFTA_LIST_ELEM, NFT_MSG_GETSETELEM, NFT_MSG_NEWSETELEM, dataValue, getMessage, nftAttrs, nftType } from './message.ts';
import {
  NFTA_SET_ELEM_DATA,
  NFTA_SET_ELEM_FLAGS,
  NFTA_SET_ELEM_KEY,
  NFTA_SET_ELEM_KEY_END,
  NFTA_SET_ELEM_LIST_ELEMENTS,
  NFTA_SET_ELEM_LIST_SET,
  NFTA_SET_ELEM_LIST_TABLE,
  NFTA_SET_ELEM_OBJREF,
  type SetElement,
} from './set.ts';

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
