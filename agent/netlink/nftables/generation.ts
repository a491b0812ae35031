// The ruleset generation id: read before a batch and sent in it (NFNL_BATCH_GENID), so the kernel refuses
// the batch whole if the ruleset changed in between.
import { NetlinkParseError, readU32be } from '../attrs.ts';
import { NLM_F_ACK, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { NFPROTO_UNSPEC, NFT_MSG_GETGEN, NFT_MSG_NEWGEN, getMessage, nftAttrs } from './message.ts';

const NFTA_GEN_ID = 1;

export function encodeGetGen(seq: number): Buffer {
  return getMessage(NFT_MSG_GETGEN, NLM_F_REQUEST | NLM_F_ACK, seq, NFPROTO_UNSPEC, () => undefined);
}

export function decodeGen(msg: NlMsg): number {
  const t = nftAttrs(msg, NFT_MSG_NEWGEN);
  const b = t.get(NFTA_GEN_ID);
  if (!b) throw new NetlinkParseError('NEWGEN without NFTA_GEN_ID');
  return readU32be(b);
}
