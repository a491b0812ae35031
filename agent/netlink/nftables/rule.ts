// nftables rules: the body of add (a list of expressions), the dump request and its decoder (which keeps
// only the expression names: enough to tell a correctly built table from a tampered one).
import { AttrTable, parseAttrs, type NlWriter } from '../attrs.ts';
import { NLM_F_DUMP, NLM_F_REQUEST, type NlMsg } from '../message.ts';
import type { Expr } from './expressions.ts';
import { NFPROTO_IPV4, NFTA_LIST_ELEM, NFT_MSG_GETRULE, NFT_MSG_NEWRULE, getMessage, nftAttrs } from './message.ts';

const NFTA_RULE_TABLE = 1;
const NFTA_RULE_CHAIN = 2;
const NFTA_RULE_HANDLE = 3;
const NFTA_RULE_EXPRESSIONS = 4;
const NFTA_EXPR_NAME = 1;
const NFTA_EXPR_DATA = 2;

export interface RuleSpec {
  table: string;
  chain: string;
  exprs: readonly Expr[];
}

export function ruleBody(w: NlWriter, r: RuleSpec): void {
  w.attrString(NFTA_RULE_TABLE, r.table).attrString(NFTA_RULE_CHAIN, r.chain);
  w.nest(NFTA_RULE_EXPRESSIONS, (l) => {
    for (const x of r.exprs) {
      l.nest(NFTA_LIST_ELEM, (e) => {
        e.attrString(NFTA_EXPR_NAME, x.name);
        const data = x.data;
        if (data) e.nest(NFTA_EXPR_DATA, (d) => data(d));
      });
    }
  });
}

/** NFT_MSG_GETRULE dump of a table's rules, or of one chain's (`nft list chain` sends the chain too). */
export function encodeGetRules(table: string, seq: number, family = NFPROTO_IPV4, chain?: string): Buffer {
  return getMessage(NFT_MSG_GETRULE, NLM_F_REQUEST | NLM_F_DUMP, seq, family, (w) => {
    w.attrString(NFTA_RULE_TABLE, table);
    if (chain !== undefined) w.attrString(NFTA_RULE_CHAIN, chain);
  });
}

export interface DecodedRule {
  table: string;
  chain: string;
  handle?: bigint;
  exprs: string[];
  /** Each expression's data (NFTA_EXPR_DATA) in hex, as the kernel encodes it; '' for none. */
  exprData: string[];
}

export function decodeRule(msg: NlMsg): DecodedRule {
  const t = nftAttrs(msg, NFT_MSG_NEWRULE);
  const out: DecodedRule = { table: t.string(NFTA_RULE_TABLE) ?? '', chain: t.string(NFTA_RULE_CHAIN) ?? '', exprs: [], exprData: [] };
  const h = t.u64be(NFTA_RULE_HANDLE);
  if (h !== undefined) out.handle = h;
  const list = t.get(NFTA_RULE_EXPRESSIONS);
  if (list)
    for (const e of parseAttrs(list)) {
      const x = new AttrTable(e.data);
      out.exprs.push(x.string(NFTA_EXPR_NAME) ?? '?');
      const data = x.get(NFTA_EXPR_DATA);
      out.exprData.push(data ? Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('hex') : '');
    }
  return out;
}
