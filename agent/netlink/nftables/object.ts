// nftables stateful objects (the agent uses named counters): the body of add/delete, the dump request
// (optionally resetting) and its decoders.
import { readU64be, type NlWriter } from '../attrs.ts';
import { NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { NFPROTO_IPV4, NFT_MSG_GETOBJ, NFT_MSG_GETOBJ_RESET, NFT_MSG_NEWOBJ, getMessage, nftAttrs } from './message.ts';

const NFTA_OBJ_TABLE = 1;
const NFTA_OBJ_NAME = 2;
const NFTA_OBJ_TYPE = 3;
const NFTA_OBJ_DATA = 4;
const NFTA_OBJ_USE = 5;
const NFTA_OBJ_HANDLE = 6;
export const NFT_OBJECT_COUNTER = 1;
export const NFT_OBJECT_SYNPROXY = 10;
const NFTA_SYNPROXY_MSS = 1;
const NFTA_SYNPROXY_WSCALE = 2;
const NFTA_SYNPROXY_FLAGS = 3;
// include/uapi/linux/netfilter/nf_synproxy.h: the options the proxy offers the client
const NF_SYNPROXY_OPT_MSS = 0x01;
const NF_SYNPROXY_OPT_WSCALE = 0x02;
const NF_SYNPROXY_OPT_SACK_PERM = 0x04;
const NF_SYNPROXY_OPT_TIMESTAMP = 0x08;
const NFTA_COUNTER_BYTES = 1;
const NFTA_COUNTER_PACKETS = 2;

export interface CounterSpec {
  table: string;
  name: string;
  bytes?: bigint;
  packets?: bigint;
}

export function counterBody(w: NlWriter, c: CounterSpec): void {
  w.attrString(NFTA_OBJ_TABLE, c.table).attrString(NFTA_OBJ_NAME, c.name).attrU32be(NFTA_OBJ_TYPE, NFT_OBJECT_COUNTER);
  w.nest(NFTA_OBJ_DATA, (d) => d.attrU64be(NFTA_COUNTER_BYTES, c.bytes ?? 0n).attrU64be(NFTA_COUNTER_PACKETS, c.packets ?? 0n));
}

export function deleteCounterBody(w: NlWriter, table: string, name: string): void {
  deleteObjectBody(w, table, name, NFT_OBJECT_COUNTER);
}

export function deleteObjectBody(w: NlWriter, table: string, name: string, type: number): void {
  w.attrString(NFTA_OBJ_TABLE, table).attrString(NFTA_OBJ_NAME, name).attrU32be(NFTA_OBJ_TYPE, type);
  // libnftnl sends an empty data nest on delete; kept for byte-equality with nft
  w.nest(NFTA_OBJ_DATA, () => undefined);
}

/** `synproxy NAME { mss M; wscale W; timestamp sack-perm; }` */
export interface SynproxySpec {
  table: string;
  name: string;
  mss: number;
  wscale: number;
}

export function synproxyBody(w: NlWriter, s: SynproxySpec): void {
  w.attrString(NFTA_OBJ_TABLE, s.table).attrString(NFTA_OBJ_NAME, s.name).attrU32be(NFTA_OBJ_TYPE, NFT_OBJECT_SYNPROXY);
  const flags = NF_SYNPROXY_OPT_MSS | NF_SYNPROXY_OPT_WSCALE | NF_SYNPROXY_OPT_SACK_PERM | NF_SYNPROXY_OPT_TIMESTAMP;
  w.nest(NFTA_OBJ_DATA, (d) => d.attrU16be(NFTA_SYNPROXY_MSS, s.mss).attrU8(NFTA_SYNPROXY_WSCALE, s.wscale).attrU32be(NFTA_SYNPROXY_FLAGS, flags));
}

/** NFT_MSG_GETOBJ dump of a table's objects of one type (NFT_MSG_GETOBJ_RESET reads and zeroes them). */
export function encodeGetObjects(table: string, seq: number, opts: { type?: number; reset?: boolean; family?: number } = {}): Buffer {
  return getMessage(opts.reset ? NFT_MSG_GETOBJ_RESET : NFT_MSG_GETOBJ, NLM_F_REQUEST | NLM_F_DUMP, seq, opts.family ?? NFPROTO_IPV4, (w) => {
    w.attrString(NFTA_OBJ_TABLE, table);
    if (opts.type !== undefined) w.attrU32be(NFTA_OBJ_TYPE, opts.type);
  });
}

/** NFT_MSG_GETOBJ of one named object (no dump): its NEWOBJ, or ENOENT. */
export function encodeGetObject(table: string, name: string, type: number, seq: number, family = NFPROTO_IPV4): Buffer {
  return getMessage(NFT_MSG_GETOBJ, NLM_F_REQUEST | NLM_F_ACK, seq, family, (w) => w.attrString(NFTA_OBJ_TABLE, table).attrString(NFTA_OBJ_NAME, name).attrU32be(NFTA_OBJ_TYPE, type));
}

/** The table and name of one NFT_MSG_NEWOBJ, nothing else (no counter values, no BigInts). */
export function decodeObjectName(msg: NlMsg): { table: string; name: string } {
  const t = nftAttrs(msg, NFT_MSG_NEWOBJ);
  return { table: t.string(NFTA_OBJ_TABLE) ?? '', name: t.string(NFTA_OBJ_NAME) ?? '' };
}

export interface DecodedCounter {
  table: string;
  name: string;
  type: number;
  handle?: bigint;
  use?: number;
  bytes?: bigint;
  packets?: bigint;
}

export function decodeObject(msg: NlMsg): DecodedCounter {
  const t = nftAttrs(msg, NFT_MSG_NEWOBJ);
  const out: DecodedCounter = { table: t.string(NFTA_OBJ_TABLE) ?? '', name: t.string(NFTA_OBJ_NAME) ?? '', type: t.u32be(NFTA_OBJ_TYPE) ?? 0 };
  const h = t.u64be(NFTA_OBJ_HANDLE);
  if (h !== undefined) out.handle = h;
  const u = t.u32be(NFTA_OBJ_USE);
  if (u !== undefined) out.use = u;
  if (out.type === NFT_OBJECT_COUNTER) {
    const d = t.nested(NFTA_OBJ_DATA);
    const b = d?.get(NFTA_COUNTER_BYTES);
    const p = d?.get(NFTA_COUNTER_PACKETS);
    if (b) out.bytes = readU64be(b);
    if (p) out.packets = readU64be(p);
  }
  return out;
}
