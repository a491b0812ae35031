// nfnetlink framing shared by every nftables object: message types, the nfgenmsg header, the one-message
// GET requests and the attribute table of a reply. Numbers from include/uapi/linux/netfilter/nfnetlink.h,
// netfilter.h and nf_tables.h (enum nf_tables_msg_types).
import { AttrTable, NetlinkParseError, NlWriter } from '../attrs.ts';
import { beginMessage, endMessage, type NlMsg } from '../message.ts';

export const NFNL_SUBSYS_NFTABLES = 10;
export const NFNL_MSG_BATCH_BEGIN = 0x10; // NLMSG_MIN_TYPE
export const NFNL_MSG_BATCH_END = 0x11;
export const NFNL_BATCH_GENID = 1;
export const NFNETLINK_V0 = 0;

export const NFPROTO_UNSPEC = 0;
export const NFPROTO_IPV4 = 2;

export const NFT_MSG_NEWTABLE = 0;
export const NFT_MSG_GETTABLE = 1;
export const NFT_MSG_DELTABLE = 2;
export const NFT_MSG_NEWCHAIN = 3;
export const NFT_MSG_DELCHAIN = 5;
export const NFT_MSG_NEWRULE = 6;
export const NFT_MSG_GETRULE = 7;
export const NFT_MSG_DELRULE = 8;
export const NFT_MSG_NEWSET = 9;
export const NFT_MSG_DELSET = 11;
export const NFT_MSG_NEWSETELEM = 12;
export const NFT_MSG_GETSETELEM = 13;
export const NFT_MSG_DELSETELEM = 14;
export const NFT_MSG_NEWGEN = 15;
export const NFT_MSG_GETGEN = 16;
export const NFT_MSG_NEWOBJ = 18;
export const NFT_MSG_GETOBJ = 19;
export const NFT_MSG_DELOBJ = 20;
export const NFT_MSG_GETOBJ_RESET = 21;
export const NFT_MSG_NEWFLOWTABLE = 22;
export const NFT_MSG_GETFLOWTABLE = 23;
export const NFT_MSG_DELFLOWTABLE = 24;

/** Attribute type of each entry in a nested list (rule expressions). */
export const NFTA_LIST_ELEM = 1;
/** Inside NFTA_*_DATA-like nests: a plain value or a verdict. */
export const NFTA_DATA_VALUE = 1;
export const NFTA_DATA_VERDICT = 2;

/** The nlmsg_type of an nftables message. */
export const nftType = (msg: number): number => (NFNL_SUBSYS_NFTABLES << 8) | msg;

/** struct nfgenmsg { u8 nfgen_family; u8 version; __be16 res_id; } */
export function nfgenmsg(w: NlWriter, family: number, resId: number): void {
  w.u8(family).u8(NFNETLINK_V0).u16be(resId);
}

/** A NFTA_DATA_VALUE inside a nest of the given type (keys, map data, cmp operands). */
export function dataValue(w: NlWriter, type: number, value: Uint8Array): void {
  w.nest(type, (d) => d.attrBytes(NFTA_DATA_VALUE, value));
}

/** One request outside a batch (a GET or a dump). */
export function getMessage(type: number, flags: number, seq: number, family: number, body: (w: NlWriter) => void): Buffer {
  const w = new NlWriter(256);
  const start = beginMessage(w, nftType(type), flags, seq);
  nfgenmsg(w, family, 0);
  body(w);
  endMessage(w, start);
  return w.toBuffer();
}

export const NFGENMSG_LEN = 4;

/** The attributes of a reply, after checking it is the nft message expected. */
export function nftAttrs(msg: NlMsg, expected: number): AttrTable {
  if (msg.type !== nftType(expected)) throw new NetlinkParseError(`expected nft message ${expected}, got type ${msg.type}`);
  if (msg.payload.length < NFGENMSG_LEN) throw new NetlinkParseError('short nfgenmsg');
  return new AttrTable(msg.payload.subarray(NFGENMSG_LEN));
}
