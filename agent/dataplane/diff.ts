// Desired state against what the kernel has: a pure function from (desired tunnels, the agent's own
// records, a view of the kernel) to a plan of link steps, one nftables batch and conntrack flushes.
// No I/O here, so every decision (what is added, changed, left alone, never touched) is unit-testable.
import { synproxyName, rateLimitName } from '../netlink/ruleset.ts';
import { elementFromId, elementNeeds, sharedNeeds, tunnelCounterNames, tunnelElements, type PolicyElement } from './policy.ts';
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
  /** Synproxy objects present (by name), and rate-limit chains present (by name): few, one per value in use. */
  synproxies: Set<string>;
  rateChains: Set<string>;
  /**
   * The elements of the tunnels' policy sets (policy.ts TUNNEL_SETS) by id: read back whole for a reconcile, and
   * for a scoped apply or remove only its tunnels' own, by key (kernel.ts readScoped). Undefined (trust the
   * records, delete with add-then-delete so a record the kernel lost cannot fail the batch) is what callers
   * without a read of the elements pass, e.g. the diff's unit tests.
   */
  elements?: Set<string>;
}

/** What the agent has recorded as its own (state file). `pending`: apply started, not confirmed. */
export interface OwnedTunnel {
  spec: TunnelSpec;
  pending?: boolean;
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
  /** Synproxy objects by name to delete; MSS values to create one for. */
  delSynproxies: string[];
  addSynproxies: number[];
  /** Rate-limit chains by name to delete; packet rates to create one for. */
  delRateLimits: string[];
  addRateLimits: number[];
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
  counts: ChangeCounts;
  /** The agent's records after the plan succeeded. */
  owned: Map<string, OwnedTunnel>;
}

export class PlanConflict extends Error {
  override name = 'PlanConflict';
}

export const GRE_TTL = 255;

/** The per-tunnel named counter. */
export const counterName = (t: Pick<TunnelSpec, 'tunnel_name'>): string => t.tunnel_name;

export const ipOf = (cidr: string): string => cidr.split('/')[0]!;

export function wantedParams(t: TunnelSpec): LinkParams {
  return { local: t.edge_ip, remote: t.origin_ip, ttl: GRE_TTL, key: t.gre_key };
}

function sameParams(a: LinkParams, b: LinkParams): boolean {
  return a.local === b.local && a.remote === b.remote && a.ttl === b.ttl && a.key === b.key;
}

/** Same tunnel including its policy (specs are normalised: a default policy is no policy). */
function sameSpec(a: TunnelSpec, b: TunnelSpec): boolean {
  return sameTunnel(a, b) && JSON.stringify(a.policy ?? null) === JSON.stringify(b.policy ?? null);
}

/** Same link, addresses and mapping: a change of policy alone keeps the tunnel's connections (no conntrack flush). */
function sameTunnel(a: TunnelSpec, b: TunnelSpec): boolean {
  return (
    a.id === b.id &&
    a.tunnel_name === b.tunnel_name &&
    a.protected_ip === b.protected_ip &&
    a.origin_ip === b.origin_ip &&
    a.edge_ip === b.edge_ip &&
    a.edge_inner === b.edge_inner &&
    a.origin_inner === b.origin_inner &&
    a.mtu === b.mtu &&
    a.gre_key === b.gre_key
  );
}

/** Duplicate ids, names or protected IPs in one desired set cannot be applied. */
export function checkDesired(desired: readonly TunnelSpec[]): void {
  const seen = [new Map<string, string>(), new Map<string, string>(), new Map<string, string>()];
  for (const t of desired) {
    const keys = [t.id, t.tunnel_name, t.protected_ip];
    const what = ['id', 'tunnel_name', 'protected_ip'];
    keys.forEach((k, i) => {
      const other = seen[i]!.get(k);
      if (other !== undefined) throw new PlanConflict(`two tunnels share ${what[i]} ${k} (${other} and ${t.id})`);
      seen[i]!.set(k, t.id);
    });
  }
}

export interface DiffInput {
  desired: readonly TunnelSpec[];
  owned: ReadonlyMap<string, OwnedTunnel>;
  view: KernelView;
  /**
   * 'all': the desired set is the node's whole set (reconcile): owned tunnels not in it are removed, and
   * map elements and counters nobody claims are deleted. Otherwise only these tunnel ids are looked at
   * (apply: the tunnel itself; remove: the id with an empty desired set).
   */
  scope: 'all' | ReadonlySet<string>;
  /** Extra protected IPs to clean out of the maps in a scoped remove of a tunnel the agent has no record of. */
  orphanProtectedIps?: readonly string[];
  /**
   * With scope 'all': owned tunnels left exactly as they are (neither changed nor removed; their names,
   * protected IPs and counters stay claimed). A reconcile's tunnels that the kernel refused.
   */
  keep?: ReadonlySet<string>;
}

export function diff(input: DiffInput): Plan {
  const { desired, owned, view, scope } = input;
  checkDesired(desired);
  const all = scope === 'all';
  const keep = input.keep ?? new Set<string>();
  const inScope = (id: string): boolean => (all ? !keep.has(id) : (scope as ReadonlySet<string>).has(id));

  // Names and protected IPs claimed by tunnels that stay (desired, or owned and out of scope).
  const claimedNames = new Map<string, string>();
  const claimedIps = new Map<string, string>();
  for (const [id, o] of owned) {
    if (inScope(id)) continue;
    claimedNames.set(o.spec.tunnel_name, id);
    claimedIps.set(o.spec.protected_ip, id);
  }
  for (const t of desired) {
    if (!inScope(t.id)) throw new PlanConflict(`tunnel ${t.id} is outside the scope of this change`);
    const byName = claimedNames.get(t.tunnel_name);
    if (byName !== undefined && byName !== t.id) throw new PlanConflict(`link ${t.tunnel_name} belongs to tunnel ${byName}`);
    const byIp = claimedIps.get(t.protected_ip);
    if (byIp !== undefined && byIp !== t.id) throw new PlanConflict(`protected IP ${t.protected_ip} is mapped by tunnel ${byIp}`);
    claimedNames.set(t.tunnel_name, t.id);
    claimedIps.set(t.protected_ip, t.id);
  }
  const ownedNames = new Set([...owned.values()].map((o) => o.spec.tunnel_name));

  const actions = new Map<string, TunnelAction>();
  const linkSteps: LinkStep[] = [];
  const linkDeletes: string[] = [];
  const nft: NftChanges = {
    delDnat: [],
    addDnat: [],
    delCounterMap: [],
    addCounterMap: [],
    delCounters: [],
    addCounters: [],
    ensureElements: [],
    delElements: [],
    addElements: [],
    delSynproxies: [],
    addSynproxies: [],
    delRateLimits: [],
    addRateLimits: [],
  };
  const addEls = new Map<string, PolicyElement>();
  /** Each desired tunnel's elements, built once (a reconcile of 10,000 tunnels would build them twice). */
  const elementsOf = new Map<string, PolicyElement[]>();
  const delEls = new Map<string, PolicyElement>();
  const flush = new Set<string>();
  const nextOwned = new Map(owned);
  const counts: ChangeCounts = { added: 0, changed: 0, removed: 0, unchanged: 0 };
  const delDnat = new Set<string>();
  const delCounterMap = new Set<string>();
  const delCounters = new Set<string>();
  const dropDnat = (ip: string): void => {
    if (view.dnat.has(ip)) delDnat.add(ip);
  };
  const dropCounterMap = (ip: string): void => {
    if (view.counterMap.has(ip)) delCounterMap.add(ip);
  };
  const dropCounter = (name: string): void => {
    if (view.counters.has(name)) delCounters.add(name);
  };

  for (const t of desired) {
    const prev = owned.get(t.id);
    const name = t.tunnel_name;
    const link = view.links.get(name);
    if (link && !ownedNames.has(name)) throw new PlanConflict(`link ${name} exists and was not created by this agent`);
    let touched = false;
    let mappingChanged = false;

    // The tunnel's previous identity, if it changed name or protected IP.
    if (prev && prev.spec.tunnel_name !== name && !claimedOtherwise(claimedNames, prev.spec.tunnel_name, t.id)) {
      if (view.links.has(prev.spec.tunnel_name)) linkDeletes.push(prev.spec.tunnel_name);
      for (const c of tunnelCounterNames(prev.spec)) dropCounter(c);
      touched = true;
    }
    if (prev && prev.spec.protected_ip !== t.protected_ip && !claimedOtherwise(claimedIps, prev.spec.protected_ip, t.id)) {
      dropDnat(prev.spec.protected_ip);
      dropCounterMap(prev.spec.protected_ip);
      flush.add(prev.spec.protected_ip);
      touched = true;
      mappingChanged = true;
    }

    // The link.
    const want = wantedParams(t);
    if (!link || !link.params || !sameParams(link.params, want)) {
      if (link) linkSteps.push({ op: 'delete', name });
      linkSteps.push({ op: 'create', name, spec: t });
      linkSteps.push({ op: 'addr-add', name, cidr: t.edge_inner });
      linkSteps.push({ op: 'up', name });
      touched = true;
      if (link) mappingChanged = true;
    } else {
      if (link.mtu !== t.mtu) linkSteps.push({ op: 'mtu', name, mtu: t.mtu });
      for (const a of link.addresses) if (a !== t.edge_inner) linkSteps.push({ op: 'addr-del', name, cidr: a });
      if (!link.addresses.includes(t.edge_inner)) linkSteps.push({ op: 'addr-add', name, cidr: t.edge_inner });
      if (!link.up) linkSteps.push({ op: 'up', name });
      if (link.mtu !== t.mtu || link.addresses.length !== 1 || link.addresses[0] !== t.edge_inner || !link.up) touched = true;
    }

    // The nftables elements and the counter.
    const inner = ipOf(t.origin_inner);
    const cur = view.dnat.get(t.protected_ip);
    if (cur !== inner) {
      if (cur !== undefined) delDnat.add(t.protected_ip);
      nft.addDnat.push([t.protected_ip, inner]);
      touched = true;
      mappingChanged = true;
    }
    const ctr = counterName(t);
    let countersMissing = false;
    for (const c of tunnelCounterNames(t)) {
      if (view.counters.has(c)) continue;
      nft.addCounters.push(c);
      touched = true;
      countersMissing = true;
    }
    const curCtr = view.counterMap.get(t.protected_ip);
    if (curCtr !== ctr) {
      if (curCtr !== undefined) delCounterMap.add(t.protected_ip);
      nft.addCounterMap.push([t.protected_ip, ctr]);
      touched = true;
    }

    // The isolation and policy elements: against the kernel's (reconcile) or the tunnel's own records (apply).
    const wantEls = tunnelElements(t);
    elementsOf.set(t.id, wantEls);
    if (view.elements) {
      for (const e of wantEls) {
        if (view.elements.has(e.id)) continue;
        addEls.set(e.id, e);
        touched = true;
      }
      // A scoped change read its own elements by key (kernel.ts readScoped): what the record had, the kernel
      // still has and the tunnel no longer wants goes here (a reconcile's sweep does it for the whole table).
      if (!all && prev) {
        const wantIds = new Set(wantEls.map((e) => e.id));
        for (const e of tunnelElements(prev.spec)) {
          if (wantIds.has(e.id) || !view.elements.has(e.id)) continue;
          delEls.set(e.id, e);
          touched = true;
        }
      }
    } else {
      const had = prev ? tunnelElements(prev.spec) : [];
      const wantIds = new Set(wantEls.map((e) => e.id));
      const hadIds = new Set(had.map((e) => e.id));
      for (const e of had) {
        if (wantIds.has(e.id)) continue;
        delEls.set(e.id, e);
        touched = true;
      }
      // Unconfirmed records (pending) or a counter recreated (its map elements went with it): add every element.
      const all = !prev || prev.pending === true || countersMissing;
      for (const e of wantEls) {
        if (!all && hadIds.has(e.id)) continue;
        addEls.set(e.id, e);
        if (!hadIds.has(e.id)) touched = true;
      }
    }

    let action: TunnelAction;
    if (!prev || prev.pending) action = 'added';
    else if (touched || !sameSpec(prev.spec, t)) action = 'changed';
    else action = 'unchanged';
    // A policy change alone keeps conntrack: an established connection on a port still allowed keeps working.
    if (action === 'added' || mappingChanged || (prev && !sameTunnel(prev.spec, t))) flush.add(t.protected_ip);
    actions.set(t.id, action);
    counts[action]++;
    nextOwned.set(t.id, { spec: t });
  }

  // Owned tunnels in scope that are no longer desired.
  const desiredIds = new Set(desired.map((t) => t.id));
  for (const [id, o] of owned) {
    if (!inScope(id) || desiredIds.has(id)) continue;
    const s = o.spec;
    if (!claimedNames.has(s.tunnel_name)) {
      if (view.links.has(s.tunnel_name)) linkDeletes.push(s.tunnel_name);
      for (const c of tunnelCounterNames(s)) dropCounter(c);
    }
    for (const e of tunnelElements(s)) if (!view.elements || view.elements.has(e.id)) delEls.set(e.id, e);
    if (!claimedIps.has(s.protected_ip)) {
      dropDnat(s.protected_ip);
      dropCounterMap(s.protected_ip);
      flush.add(s.protected_ip);
    }
    nextOwned.delete(id);
    actions.set(id, 'removed');
    counts.removed++;
  }

  // A scoped remove of a tunnel the agent never recorded: its elements, if any, still go (the table is ours).
  for (const ip of input.orphanProtectedIps ?? []) {
    if (claimedIps.has(ip)) continue;
    if (view.dnat.has(ip) || view.counterMap.has(ip)) {
      dropDnat(ip);
      dropCounterMap(ip);
      flush.add(ip);
      counts.removed++;
    }
  }

  // Reconcile: whatever the table holds that no desired tunnel claims.
  if (all) {
    for (const ip of view.dnat.keys()) if (!claimedIps.has(ip)) delDnat.add(ip);
    for (const ip of view.counterMap.keys()) if (!claimedIps.has(ip)) delCounterMap.add(ip);
    const wantedCounters = new Set(desired.flatMap(tunnelCounterNames));
    const wantedEls = new Set<string>();
    for (const els of elementsOf.values()) for (const e of els) wantedEls.add(e.id);
    for (const id of keep) {
      const o = owned.get(id);
      if (!o) continue;
      for (const c of tunnelCounterNames(o.spec)) wantedCounters.add(c);
      for (const e of tunnelElements(o.spec)) wantedEls.add(e.id);
    }
    for (const c of view.counters) if (!wantedCounters.has(c)) delCounters.add(c);
    for (const id of view.elements ?? []) if (!wantedEls.has(id)) delEls.set(id, elementFromId(id));
  }

  // Elements: an element both deleted and wanted (another tunnel took it over) stays. Scoped deletes first add
  // the element (see KernelView.elements), unless what it refers to is missing: then it cannot exist either.
  for (const id of addEls.keys()) delEls.delete(id);
  nft.addElements = [...addEls.values()];
  nft.delElements = [...delEls.values()];
  if (!view.elements) {
    nft.delElements = nft.delElements.filter((e) => {
      const n = elementNeeds(e);
      return (n.counter === undefined || view.counters.has(n.counter)) && (n.synproxy === undefined || view.synproxies.has(n.synproxy)) && (n.chain === undefined || view.rateChains.has(n.chain));
    });
    nft.ensureElements = nft.delElements;
  }

  // Shared objects by value: created with their first user, deleted with their last (in this same batch).
  const mss = new Set<number>();
  const pps = new Set<number>();
  for (const o of nextOwned.values()) {
    const n = sharedNeeds(o.spec);
    if (n.mss !== undefined) mss.add(n.mss);
    if (n.pps !== undefined) pps.add(n.pps);
  }
  for (const m of mss) if (!view.synproxies.has(synproxyName(m))) nft.addSynproxies.push(m);
  const wantedSyn = new Set([...mss].map(synproxyName));
  nft.delSynproxies = [...view.synproxies].filter((n) => !wantedSyn.has(n));
  for (const p of pps) if (!view.rateChains.has(rateLimitName(p))) nft.addRateLimits.push(p);
  const wantedRate = new Set([...pps].map(rateLimitName));
  nft.delRateLimits = [...view.rateChains].filter((n) => !wantedRate.has(n));

  nft.delDnat = [...delDnat];
  nft.delCounterMap = [...delCounterMap];
  const adding = new Set(nft.addCounters);
  nft.delCounters = [...delCounters].filter((c) => !adding.has(c));
  return { actions, linkSteps, nft, linkDeletes: [...new Set(linkDeletes)], flush: [...flush], counts, owned: nextOwned };
}

function claimedOtherwise(claims: ReadonlyMap<string, string>, key: string, id: string): boolean {
  const c = claims.get(key);
  return c !== undefined && c !== id;
}

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
    n.delSynproxies.length +
    n.addSynproxies.length +
    n.delRateLimits.length +
    n.addRateLimits.length
  );
}
