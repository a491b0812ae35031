// rtnetlink policy rules (`ip rule`: from a source, look up a table): add, delete, dump and decode.
// Pure: every encoder returns the bytes of one request message for a given seq; no I/O here. Attribute order and
// defaults follow what iproute2 6.1 sends for the same command (test/unit/netlink checks it against strace).
import { AttrTable, NetlinkParseError, type NlWriter, bytesToIpv4, ipv4ToBytes } from '../attrs.ts';
import { NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import { AF_INET, FLAGS_ACK, FLAGS_CREATE, RTM_DELRULE, RTM_GETRULE, RTM_NEWRULE, message } from './message.ts';
import { RT_TABLE_UNSPEC } from './route.ts';

// include/uapi/linux/fib_rules.h
export const FRA_SRC = 2;
export const FRA_PRIORITY = 6;
export const FRA_TABLE = 15;
export const FR_ACT_UNSPEC = 0;
export const FR_ACT_TO_TBL = 1;

const FIB_RULE_HDR_LEN = 12;

export interface RuleSpec {
  /** "a.b.c.d" or "a.b.c.d/len" */
  src: string;
  table: number;
  priority?: number;
}

function ruleBody(w: NlWriter, spec: RuleSpec, del: boolean): void {
  const [a, l] = spec.src.split('/');
  const srcLen = l === undefined ? 32 : Number(l);
  if (!Number.isInteger(srcLen) || srcLen < 0 || srcLen > 32) throw new RangeError(`bad rule source ${spec.src}`);
  const small = spec.table < 256;
  // struct fib_rule_hdr { u8 family, dst_len, src_len, tos, table, res1, res2, action; u32 flags; }
  w.u8(AF_INET).u8(0).u8(srcLen).u8(0).u8(small ? spec.table : RT_TABLE_UNSPEC).u8(0).u8(0).u8(del ? FR_ACT_UNSPEC : FR_ACT_TO_TBL).u32(0);
  w.attrBytes(FRA_SRC, ipv4ToBytes(a!));
  if (!small) w.attrU32(FRA_TABLE, spec.table);
  if (spec.priority !== undefined) w.attrU32(FRA_PRIORITY, spec.priority);
}

export function encodeNewRule(spec: RuleSpec, seq: number, flags = FLAGS_CREATE): Buffer {
  return message(RTM_NEWRULE, flags, seq, (w) => ruleBody(w, spec, false));
}

export function encodeDelRule(spec: RuleSpec, seq: number): Buffer {
  return message(RTM_DELRULE, FLAGS_ACK, seq, (w) => ruleBody(w, spec, true));
}

export function encodeDumpRules(seq: number): Buffer {
  return message(RTM_GETRULE, NLM_F_REQUEST | NLM_F_DUMP, seq, (w) => w.u8(AF_INET).zeros(FIB_RULE_HDR_LEN - 1));
}

export interface RuleInfo {
  table: number;
  src?: string;
  priority?: number;
  action: number;
}

export function decodeRule(msg: NlMsg): RuleInfo {
  const p = msg.payload;
  if (p.length < FIB_RULE_HDR_LEN) throw new NetlinkParseError('short fib_rule_hdr');
  const t = new AttrTable(p.subarray(FIB_RULE_HDR_LEN));
  const out: RuleInfo = { table: t.u32(FRA_TABLE) ?? p[4]!, action: p[7]! };
  const src = t.get(FRA_SRC);
  if (src && src.length === 4) out.src = `${bytesToIpv4(src)}/${p[2]!}`;
  const pr = t.u32(FRA_PRIORITY);
  if (pr !== undefined) out.priority = pr;
  return out;
}
