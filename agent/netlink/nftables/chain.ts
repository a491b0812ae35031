// nftables chains: the body of add (base chains carry a hook, a priority and a type).
import type { NlWriter } from '../attrs.ts';

// include/uapi/linux/netfilter.h
export const NF_INET_PRE_ROUTING = 0;
export const NF_INET_FORWARD = 2;
export const NF_ACCEPT = 1;
// include/uapi/linux/netfilter_ipv4.h: enum nf_ip_hook_priorities
export const NF_IP_PRI_MANGLE = -150;
export const NF_IP_PRI_NAT_DST = -100;

const NFTA_CHAIN_TABLE = 1;
const NFTA_CHAIN_NAME = 3;
const NFTA_CHAIN_HOOK = 4;
const NFTA_CHAIN_POLICY = 5;
const NFTA_CHAIN_TYPE = 7;
const NFTA_HOOK_HOOKNUM = 1;
const NFTA_HOOK_PRIORITY = 2;

export interface ChainSpec {
  table: string;
  name: string;
  /** Base chain: "filter" | "nat" | "route". Omit type/hook for a regular chain. */
  type?: string;
  hook?: number;
  priority?: number;
  policy?: number;
}

export function chainBody(w: NlWriter, c: ChainSpec): void {
  w.attrString(NFTA_CHAIN_TABLE, c.table).attrString(NFTA_CHAIN_NAME, c.name);
  if (c.type !== undefined) w.attrString(NFTA_CHAIN_TYPE, c.type);
  if (c.policy !== undefined) w.attrU32be(NFTA_CHAIN_POLICY, c.policy);
  if (c.hook !== undefined) {
    const hook = c.hook;
    w.nest(NFTA_CHAIN_HOOK, (h) => h.attrU32be(NFTA_HOOK_HOOKNUM, hook).attrU32be(NFTA_HOOK_PRIORITY, (c.priority ?? 0) >>> 0));
  }
}
