// The diff's two ends as data: what it reads of the kernel (KernelView, ObservedLink) and what it hands to
// the kernel side (Plan: link steps, one set of nftables changes, conntrack flushes). Types and counting only,
// apart from the diff itself (diff.ts) and from the code that reads and applies them (kernel/), so both sides
// and their tests import the shapes without importing each other.
import type { PolicyElement } from './policy.ts';
import type { OwnedTunnel } from './records.ts';
import type { ChangeCounts, TunnelSpec } from './types.ts';

/** What identifies a tunnel link beyond its name (GRE: local, remote, ttl, key both ways). */
export interface LinkParams {
  local: string;
  remote: string;
  ttl: number;
  /** undefined = no key; NaN = inconsistent keys (ikey != okey, one direction only): never equal. */
  key?: number;
}

export interface ObservedLink {
  name: string;
  index: number;
  up: boolean;
  mtu: number;
  /** undefined when the link is not of the kind we create (it will be recreated). */
  params?: LinkParams;
  /** "a.b.c.d/len" */
  addresses: string[];
}

export interface KernelView {
  /** Links by name, for every name the agent owns or is asked to create. */
  links: Map<string, ObservedLink>;
  /** protected ip → origin inner ip */
  dnat: Map<string, string>;
  /** protected ip → counter name */
  counterMap: Map<string, string>;
  /** Every named counter of the table (tunnels' traffic and drop counters). */
  counters: Set<string>;
  /** Synproxy objects present (by name): few, one per MSS in use. */
  synproxies: Set<string>;
  /**
   * Chains made by value present with exactly their rules, by name (agent/netlink/ruleset-chains.ts addDynamicChain): one
   * per tunnel with a per-source limit (its meter) and one per max_flows value in use (the flow caps).
   */
  chains: Set<string>;
  /** Chains made by value present with other rules than theirs (one deleted by hand): built again, flushed first. */
  damagedChains?: Set<string>;
  /**
   * The elements of the tunnels' policy sets (policy.ts TUNNEL_SETS) by id: read back whole for a reconcile, and
   * for a scoped apply or remove only its tunnels' own, by key (kernel/read.ts readScoped). Undefined (trust the
   * records, delete with add-then-delete so a record the kernel lost cannot fail the batch) is what callers
   * without a read of the elements pass, e.g. the diff's unit tests. The diff consumes it: each id a desired or
   * kept tunnel claims is taken out, so what remains is what no tunnel wants (a second Set of every claimed id
   * would double the reconcile's largest structure: ~800,000 ids at 10,000 tunnels with port lists). A view
   * serves one diff.
   */
  elements?: Set<string>;
  /**
   * A reconcile's read: the owners whose elements in the kernel are exactly the ones the desired and kept tunnels
   * want, as a digest per owner showed (kernel/read.ts readElementIds): protected IPs (policy.ts protectedKey) and link
   * names (linkBucket, for LINK_KEYED_SETS). Their ids are not in `elements`; every other element's is.
   */
  cleanOwners?: CleanOwners;
  /**
   * With cleanOwners: the owners with elements in the kernel that differ from the wanted ones (their ids are in
   * `elements`). An owner in neither has no element in the kernel at all.
   */
  dirtyOwners?: CleanOwners;
}

/** Owners (protected IPs, link name buckets) whose elements a reconcile found as wanted, by digest. */
export interface CleanOwners {
  ips: Set<number>;
  links: Set<number>;
}

export type LinkStep =
  | { op: 'create'; name: string; spec: TunnelSpec }
  | { op: 'delete'; name: string }
  | { op: 'mtu'; name: string; mtu: number }
  | { op: 'up'; name: string }
  | { op: 'addr-add'; name: string; cidr: string }
  | { op: 'addr-del'; name: string; cidr: string };

export type TunnelAction = 'added' | 'changed' | 'removed' | 'unchanged';

export interface NftChanges {
  delDnat: string[];
  addDnat: [string, string][];
  delCounterMap: string[];
  addCounterMap: [string, string][];
  delCounters: string[];
  addCounters: string[];
  /** Policy elements to add (idempotent: an identical element is no error) before `delElements` are deleted. */
  ensureElements: PolicyElement[];
  delElements: PolicyElement[];
  addElements: PolicyElement[];
  /**
   * Tunnels added whole: every counter and policy element of each is added, none is in the kernel. Named, not
   * listed: a first apply of 10,000 tunnels would otherwise hold ~70,000 counter names and ~100,000 element
   * objects in the plan at the apply's peak; the batch builds them a slice of tunnels at a time.
   */
  addWhole: TunnelSpec[];
  /** Synproxy objects by name to delete; MSS values to create one for. */
  delSynproxies: string[];
  addSynproxies: number[];
  /** Chains made by value, by name, to delete (with their sets) and to create (or repair: KernelView.damagedChains). */
  delChains: string[];
  addChains: string[];
}

export interface Plan {
  actions: Map<string, TunnelAction>;
  /** Links to (re)create or fix, in order: deletes of recreated links come before their create. */
  linkSteps: LinkStep[];
  nft: NftChanges;
  /** Links of removed tunnels (deleted after the nft batch stopped sending traffic to them). */
  linkDeletes: string[];
  /** Protected IPs whose conntrack entries must go. */
  flush: string[];
  /**
   * Tunnels (not in `flush`) whose allowlist lost elements: their connections that the new allowlist no longer
   * lets in must go, as the allowlist judges only a connection's first packet (docs/CONTRACTS.md "Dataplane").
   */
  narrowed: TunnelSpec[];
  counts: ChangeCounts;
  /** The agent's records after the plan succeeded. */
  owned: Map<string, OwnedTunnel>;
}

export class PlanConflict extends Error {
  override name = 'PlanConflict';
}

/** What one tunnel added whole stands for in a change count: its 7 counters and its ~10 elements (policy.ts). */
const WHOLE_TUNNEL_CHANGES = 16;

export function nftChangeCount(n: NftChanges): number {
  return (
    n.delDnat.length +
    n.addDnat.length +
    n.delCounterMap.length +
    n.addCounterMap.length +
    n.delCounters.length +
    n.addCounters.length +
    n.ensureElements.length +
    n.delElements.length +
    n.addElements.length +
    n.addWhole.length * WHOLE_TUNNEL_CHANGES +
    n.delSynproxies.length +
    n.addSynproxies.length +
    n.delChains.length +
    n.addChains.length
  );
}
