// The edge table's fast path (docs/FLOWTABLE.md, docs/CONTRACTS.md "Dataplane"): a flowtable on the upstream
// links, and the rule that puts a client's DNAT-ed connection in it. Offloaded packets are forwarded from the
// ingress hook of the upstream link: they skip prerouting, forward and the output path, so what they must still
// meet (counters, allowlist, per-source meter) runs at that hook, ahead of the flowtable. Only inbound packets
// (client to origin) take it: tunnel links are not in the flowtable, so replies keep the classic path and the
// isolation in forward. Pure, like ruleset.ts.
import { NFT_CMP_NEQ, NFT_FLOWTABLE_COUNTER, NFT_META_IIFNAME, expr, type Expr, type NftBatch } from './nftables/index.ts';
import { ctDnat } from './ruleset-exprs.ts';

/** The flowtable's name in the agent's table. */
export const FASTPATH_FLOWTABLE = 'fastpath';
/**
 * Its priority at the ingress hook: after the protection's ingress chain (-500, so an offloaded packet is counted,
 * judged by the allowlist and metered first), before anything at the netdev default (0).
 */
export const FASTPATH_PRIORITY = -10;

export interface FastPathOptions {
  table: string;
  /** The links clients' packets arrive on (the agent's AGENT_UPSTREAM_DEVICES, or those of its default routes). */
  devices: readonly string[];
  /** The tunnel links' name prefix: packets arriving on a tunnel are never offloaded. */
  ifnamePrefix: string;
  /** Conntrack's counters kept for offloaded packets (the flowtable's `counter` flag). */
  counter?: boolean;
}

/**
 * `ct status & dnat != 0 iifname != "<prefix>*" flow add @fastpath`: a client's packet of a DNAT-ed connection (the
 * guard's common case) puts its connection in the flowtable. The kernel takes only connections it can offload: a
 * TCP connection once established (never its SYN, so the MSS clamp and the SYN proxy still see every handshake),
 * none with sequence adjustment (a syn-proxied connection stays on the classic path), no fragment.
 */
export function fastPathRuleExprs(o: Pick<FastPathOptions, 'ifnamePrefix'>, flowtable = FASTPATH_FLOWTABLE): Expr[] {
  return [...ctDnat(NFT_CMP_NEQ), expr.meta(NFT_META_IIFNAME), expr.cmp(NFT_CMP_NEQ, Buffer.from(o.ifnamePrefix, 'utf8')), expr.flowOffload(flowtable)];
}

/** Adds the flowtable (devices as given) and, at the end of `chain`, the rule that offloads into it. */
export function addFastPath(b: NftBatch, o: FastPathOptions, chain: string): void {
  b.addFlowtable({ table: o.table, name: FASTPATH_FLOWTABLE, priority: FASTPATH_PRIORITY, devices: o.devices, flags: o.counter ? NFT_FLOWTABLE_COUNTER : 0 });
  b.addRule({ table: o.table, chain, exprs: fastPathRuleExprs(o) });
}
