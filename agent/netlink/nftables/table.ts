// nftables tables: the body of add/delete, the dump request and its decoder.
import type { NlWriter } from '../attrs.ts';
import { NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { NFPROTO_UNSPEC, NFT_MSG_GETTABLE, NFT_MSG_NEWTABLE, getMessage, nftAttrs } from './message.ts';

export const NFTA_TABLE_NAME = 1;
export const NFTA_TABLE_FLAGS = 2;

export function tableBody(w: NlWriter, name: string, flags?: number): void {
  w.attrString(NFTA_TABLE_NAME, name);
  if (flags !== undefined) w.attrU32be(NFTA_TABLE_FLAGS, flags);
}

export function encodeGetTables(seq: number, family = NFPROTO_UNSPEC): Buffer {
  return getMessage(NFT_MSG_GETTABLE, NLM_F_REQUEST | NLM_F_DUMP, seq, family, () => undefined);
}

export function decodeTable(msg: NlMsg): { name: string; family: number; flags?: number } {
  const t = nftAttrs(msg, NFT_MSG_NEWTABLE);
  const out: { name: string; family: number; flags?: number } = { name: t.string(NFTA_TABLE_NAME) ?? '', family: msg.payload[0]! };
  const f = t.u32be(NFTA_TABLE_FLAGS);
  if (f !== undefined) out.flags = f;
  return out;
}
