// Ruleset notifications (multicast group NFNLGRP_NFTABLES), pure: what one says to a watcher of one table.
// The kernel sends, for every committed batch, one message per object the batch changed (a table, chain,
// rule, set, element list, object or flowtable, each naming its table in attribute 1) and then one
// NFT_MSG_NEWGEN with the generation id the commit produced (net/netfilter/nf_tables_api.c,
// nf_tables_commit: the objects' notifications, then nf_tables_gen_notify). Used by
// agent/dataplane/commit-watch.ts.
import { AttrTable, readString, readU32be } from '../attrs.ts';
import type { NlMsg } from '../message.ts';
import { NFGENMSG_LEN, NFNL_SUBSYS_NFTABLES, NFT_MSG_NEWGEN } from './message.ts';

/** include/uapi/linux/netfilter/nfnetlink.h enum nfnetlink_groups. */
export const NFNLGRP_NFTABLES = 7;

/**
 * NFTA_TABLE_NAME, NFTA_CHAIN_TABLE, NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE and
 * NFTA_FLOWTABLE_TABLE are all attribute 1 of their message; NFTA_GEN_ID is attribute 1 of NEWGEN.
 */
const ATTR_TABLE = 1;
const NFTA_GEN_ID = 1;
const NFTA_GEN_PROC_PID = 2;
const NFTA_GEN_PROC_NAME = 3;

export type NftNotification =
  /** A commit ended: the ruleset is now at this generation; `pid` and `proc` name the process that committed. */
  | { kind: 'generation'; genId: number; pid?: number; proc?: string }
  /** An object of a commit changed: its table's name and family (undefined when the message names none). */
  | { kind: 'change'; msgType: number; family: number; table: string | undefined }
  /** Not an nftables message at all. */
  | { kind: 'other'; type: number };

export function decodeNotification(msg: NlMsg): NftNotification {
  if (msg.type >> 8 !== NFNL_SUBSYS_NFTABLES || msg.payload.length < NFGENMSG_LEN) return { kind: 'other', type: msg.type };
  const msgType = msg.type & 0xff;
  const attrs = new AttrTable(msg.payload.subarray(NFGENMSG_LEN));
  const first = attrs.get(ATTR_TABLE);
  if (msgType === NFT_MSG_NEWGEN) {
    // A NEWGEN without a whole id names no generation (and no table): judged as proving nothing.
    if (!first || first.length < 4) return { kind: 'change', msgType, family: msg.payload[0]!, table: undefined };
    const pid = attrs.get(NFTA_GEN_PROC_PID);
    const proc = attrs.get(NFTA_GEN_PROC_NAME);
    return { kind: 'generation', genId: readU32be(first), ...(pid && pid.length >= 4 ? { pid: readU32be(pid) } : {}), ...(proc ? { proc: readString(proc) } : {}) };
  }
  return { kind: 'change', msgType, family: msg.payload[0]!, table: first ? readString(first) : undefined };
}
