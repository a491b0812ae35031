// nftables flowtables: the software fast path of established connections (docs/CONTRACTS.md "Dataplane"). A
// flowtable hooks the ingress of the devices it lists; a rule's `flow add @name` (expressions.ts flowOffload) puts
// a connection in it, and its later packets arriving on a listed device are forwarded from there. Numbers from
// include/uapi/linux/netfilter/nf_tables.h.
import type { NlWriter } from '../attrs.ts';

const NFTA_FLOWTABLE_TABLE = 1;
const NFTA_FLOWTABLE_NAME = 2;
const NFTA_FLOWTABLE_HOOK = 3;
const NFTA_FLOWTABLE_FLAGS = 7;
const NFTA_FLOWTABLE_HOOK_NUM = 1;
const NFTA_FLOWTABLE_HOOK_PRIORITY = 2;
const NFTA_FLOWTABLE_HOOK_DEVS = 3;
const NFTA_DEVICE_NAME = 1;
/** include/uapi/linux/netfilter.h enum nf_dev_hooks: a flowtable's only hook. */
export const NF_NETDEV_INGRESS = 0;
/** Hardware offload, where the NIC's driver can. */
export const NFT_FLOWTABLE_HW_OFFLOAD = 0x1;
/** Conntrack's byte and packet counters kept for offloaded packets too (the connection's accounting). */
export const NFT_FLOWTABLE_COUNTER = 0x2;

export interface FlowtableSpec {
  table: string;
  name: string;
  /** At the ingress hook; runs after base chains of lower priority on the same device. */
  priority: number;
  /** Written in this order. `nft` sends a flowtable's devices in the reverse order of its text. */
  devices: readonly string[];
  flags?: number;
}

export function flowtableBody(w: NlWriter, f: FlowtableSpec): void {
  w.attrString(NFTA_FLOWTABLE_TABLE, f.table).attrString(NFTA_FLOWTABLE_NAME, f.name);
  w.nest(NFTA_FLOWTABLE_HOOK, (h) => {
    h.attrU32be(NFTA_FLOWTABLE_HOOK_NUM, NF_NETDEV_INGRESS).attrU32be(NFTA_FLOWTABLE_HOOK_PRIORITY, f.priority >>> 0);
    h.nest(NFTA_FLOWTABLE_HOOK_DEVS, (d) => {
      for (const dev of f.devices) d.attrString(NFTA_DEVICE_NAME, dev);
    });
  });
  // nft sends the flags even when none is set
  w.attrU32be(NFTA_FLOWTABLE_FLAGS, f.flags ?? 0);
}

export function deleteFlowtableBody(w: NlWriter, table: string, name: string): void {
  w.attrString(NFTA_FLOWTABLE_TABLE, table).attrString(NFTA_FLOWTABLE_NAME, name);
}
