// Desired state against what the kernel has: a pure function from (desired tunnels, the agent's own
// records, a view of the kernel) to a plan of link steps, one nftables batch and conntrack flushes.
// No I/O here, so every decision (what is added, changed, left alone, never touched) is unit-testable.
import { synproxyName } from '../netlink/ruleset.ts';
import { LINK_KEYED_SETS, allowedElementIp, elementFromId, elementNeeds, linkBucket, protectedKey, sharedNeeds, tunnelCounterNames, tunnelElements, tunnelElementsButAllowlist, type PolicyElement } from './policy.ts';
import { PlanConflict, type KernelView, type LinkStep, type NftChanges, type Plan, type TunnelAction } from './plan.ts';
import { OwnedIndex, heldSpecs, type OwnedTunnel } from './records.ts';
import { ipOf, linkStepsFor } from './link-steps.ts';
import { samePolicyAsSent, sameSpec, sameTunnel } from './spec-compare.ts';
import type { ChangeCounts, TunnelSpec } from './types.ts';

/** The per-tunnel named counter. */
const counterName = (t: Pick<TunnelSpec, 'tunnel_name'>): string => t.tunnel_name;

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
  /** `owned` looked up by name, IP and shared object (the state store's); built from `owned` when absent. */
  index?: OwnedIndex;
  /**
   * With scope 'all': owned tunnels left exactly as they are (neither changed nor removed; their names,
   * protected IPs and counters stay claimed). A reconcile's tunnels that the kernel refused.
   */
  keep?: ReadonlySet<string>;
  /**
   * Called after every PACE_EVERY desired tunnels: where a large plan's caller may collect garbage (housekeeping/memory.ts
   * phases). The per-tunnel garbage of 10,000 tunnels (names, steps, claims) was a drift repair's RSS peak.
   */
  pace?: () => void;
}

const PACE_EVERY = 2048;

export function diff(input: DiffInput): Plan {
  const { desired, owned, view, scope } = input;
  checkDesired(desired);
  const all = scope === 'all';
  const keep = input.keep ?? new Set<string>();
  const inScope = (id: string): boolean => (all ? !keep.has(id) : (scope as ReadonlySet<string>).has(id));

  const index = input.index ?? OwnedIndex.of(owned);
  // The owned tunnels this change may alter: every one for a reconcile (but those it keeps), else the scope's.
  const scopedOwned: OwnedTunnel[] = [];
  if (all) {
    for (const o of owned.values()) if (!keep.has(o.spec.id)) scopedOwned.push(o);
  } else {
    for (const id of scope as ReadonlySet<string>) {
      const o = owned.get(id);
      if (o) scopedOwned.push(o);
    }
  }

  // Names and protected IPs claimed by tunnels that stay (desired, or owned and out of scope): the desired
  // claims are kept here, the owned ones looked up in the index (never a walk of every record).
  const claimedNames = claims((n) => index.byName(n), inScope);
  const claimedIps = claims((ip) => index.byIp(ip), inScope);
  for (const t of desired) {
    if (!inScope(t.id)) throw new PlanConflict(`tunnel ${t.id} is outside the scope of this change`);
    const byName = claimedNames.get(t.tunnel_name);
    if (byName !== undefined && byName !== t.id) throw new PlanConflict(`link ${t.tunnel_name} belongs to tunnel ${byName}`);
    const byIp = claimedIps.get(t.protected_ip);
    if (byIp !== undefined && byIp !== t.id) throw new PlanConflict(`protected IP ${t.protected_ip} is mapped by tunnel ${byIp}`);
    claimedNames.set(t.tunnel_name, t.id);
    claimedIps.set(t.protected_ip, t.id);
  }
  const ownedName = (name: string): boolean => (index.byName(name)?.size ?? 0) > 0;

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
    addWhole: [],
    delSynproxies: [],
    addSynproxies: [],
    delChains: [],
    addChains: [],
  };
  const addEls = new Map<string, PolicyElement>();
  /**
   * Without a read of the elements (view.elements undefined): elements a desired tunnel wants that this plan
   * does not add, as its records say the kernel has them. A removed tunnel sharing one (a protected IP handed
   * to a new tunnel in the same plan) must not delete it. With a read, claiming takes the id out of
   * view.elements instead, which has the same effect on the removed tunnel and leaves the sweep the rest.
   */
  const claimed = new Set<string>();
  const delEls = new Map<string, PolicyElement>();
  const flush = new Set<string>();
  /** Desired tunnels whose new policy lets in less than their recorded one (see `narrowed` below). */
  const narrowedBySpec = new Map<string, TunnelSpec>();
  /** Records this plan replaces (desired) or drops (removed): the agent's records after it are built from these. */
  const putOwned = new Map<string, OwnedTunnel>();
  const dropOwned = new Set<string>();
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

  let paced = 0;
  for (const t of desired) {
    if (input.pace && ++paced % PACE_EVERY === 0) input.pace();
    const prev = owned.get(t.id);
    // What the kernel may hold for this tunnel: its record's spec, and a pending change's earlier ones.
    const held = prev ? heldSpecs(prev) : [];
    const name = t.tunnel_name;
    const link = view.links.get(name);
    if (link && !ownedName(name)) throw new PlanConflict(`link ${name} exists and was not created by this agent`);
    let touched = false;
    let mappingChanged = false;

    // The tunnel's previous identities, if it changed name or protected IP.
    for (const p of held) {
      if (p.tunnel_name !== name && !claimedOtherwise(claimedNames, p.tunnel_name, t.id)) {
        if (view.links.has(p.tunnel_name)) linkDeletes.push(p.tunnel_name);
        for (const c of tunnelCounterNames(p)) dropCounter(c);
        touched = true;
      }
      if (p.protected_ip !== t.protected_ip && !claimedOtherwise(claimedIps, p.protected_ip, t.id)) {
        dropDnat(p.protected_ip);
        dropCounterMap(p.protected_ip);
        flush.add(p.protected_ip);
        touched = true;
        mappingChanged = true;
      }
    }

    // The link.
    const steps = linkStepsFor(t, link);
    if (steps.length > 0) {
      linkSteps.push(...steps);
      touched = true;
      // A link recreated: its traffic's connections went with it.
      if (steps[0]!.op === 'delete') mappingChanged = true;
    }

    // The nftables elements and the counter. No DNAT while `forwarding` is false: buyer traffic reaches an
    // origin only once it answered the activate probe (docs/CONTRACTS.md "Dataplane"); the probe needs none.
    const inner = t.forwarding === false ? undefined : ipOf(t.origin_inner);
    const cur = view.dnat.get(t.protected_ip);
    if (cur !== inner) {
      if (cur !== undefined) delDnat.add(t.protected_ip);
      if (inner !== undefined) nft.addDnat.push([t.protected_ip, inner]);
      touched = true;
      mappingChanged = true;
    }
    const ctr = counterName(t);
    let countersMissing = false;
    const counterNames = tunnelCounterNames(t);
    // Elements of a clean owner (the kernel's are the wanted ones, by digest) are not looked at, and a clean
    // protected IP's allowlist (~70 elements with a port list) is not even built: at 10,000 tunnels they were
    // most of a drift repair's garbage (RSS at its peak, the diff).
    const ipKey = protectedKey(t.protected_ip);
    const linkKey = linkBucket(t.tunnel_name);
    const cleanIp = view.cleanOwners?.ips.has(ipKey) ?? false;
    const cleanLink = view.cleanOwners?.links.has(linkKey) ?? false;
    // Built only when looked at: nothing of a tunnel whose owners are both clean (a drift repair's ~99%), nor of one
    // added whole because neither of its owners has an element in the kernel (a first apply's every tunnel).
    let wanted: PolicyElement[] | undefined;
    const wantEls = (): PolicyElement[] => {
      if (wanted) return wanted;
      const built = cleanIp && cleanLink ? [] : cleanIp ? tunnelElementsButAllowlist(t) : tunnelElements(t);
      return (wanted = cleanIp || cleanLink ? built.filter((e) => (LINK_KEYED_SETS.has(e.set) ? !cleanLink : !cleanIp)) : built);
    };
    const absent = view.dirtyOwners !== undefined && !cleanIp && !cleanLink && !view.dirtyOwners.ips.has(ipKey) && !view.dirtyOwners.links.has(linkKey);
    // Nothing of it in the kernel, and the kernel's elements were read: added whole (NftChanges.addWhole).
    const whole =
      !prev && view.elements !== undefined && !cleanIp && !cleanLink && counterNames.every((c) => !view.counters.has(c)) && (absent || wantEls().every((e) => !view.elements!.has(e.id)));
    if (whole) {
      nft.addWhole.push(t);
      touched = true;
      countersMissing = true;
    } else
      for (const c of counterNames) {
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
    if (whole) {
      // its elements are in addWhole
    } else if (view.elements) {
      for (const e of wantEls()) {
        // In the kernel already: claimed (see KernelView.elements), and out of this plan's deletes: in a scoped plan
        // a tunnel before this one may have listed it (its earlier spec's, on the protected IP this one takes
        // over). A clean owner's are not in wantEls at all.
        if (view.elements.delete(e.id)) {
          delEls.delete(e.id);
          continue;
        }
        addEls.set(e.id, e);
        touched = true;
      }
      // A scoped change read its own elements by key (kernel/read.ts readScoped): what the record had, the kernel
      // still has and the tunnel no longer wants goes here (a reconcile's sweep does it for the whole table).
      if (!all && prev) {
        const wantIds = new Set(wantEls().map((e) => e.id));
        for (const p of held)
          for (const e of tunnelElements(p)) {
            if (wantIds.has(e.id) || !view.elements.has(e.id)) continue;
            delEls.set(e.id, e);
            touched = true;
          }
      }
    } else {
      const had = held.flatMap(tunnelElements);
      const wantIds = new Set(wantEls().map((e) => e.id));
      const hadIds = new Set(had.map((e) => e.id));
      for (const e of had) {
        if (wantIds.has(e.id)) continue;
        delEls.set(e.id, e);
        touched = true;
      }
      // Unconfirmed records (pending) or a counter recreated (its map elements went with it): add every element.
      const all = !prev || prev.pending === true || countersMissing;
      for (const e of wantEls()) {
        if (!all && hadIds.has(e.id)) {
          claimed.add(e.id);
          continue;
        }
        addEls.set(e.id, e);
        if (!hadIds.has(e.id)) touched = true;
      }
    }

    // Ports or protocols the policy took away, whether or not the kernel still held their elements: one lost to
    // drift is in no delete, yet a connection it let in may still be open (the allowlist judges first packets).
    // A pending record's specs count too: its refused change may have been committed before what failed after it.
    const otherPolicies = held.filter((p) => !samePolicyAsSent(p.policy, t.policy));
    if (otherPolicies.length > 0) {
      const now = new Set(tunnelElements(t).map((e) => e.id));
      if (otherPolicies.some((p) => tunnelElements(p).some((e) => allowedElementIp(e) !== undefined && !now.has(e.id)))) narrowedBySpec.set(t.id, t);
    }

    let action: TunnelAction;
    if (!prev || prev.pending) action = 'added';
    else if (touched || !sameSpec(prev.spec, t)) action = 'changed';
    else action = 'unchanged';
    // A policy change alone keeps conntrack: an established connection on a port still allowed keeps working
    // (the ones on ports it closes are deleted one by one: Plan.narrowed).
    if (action === 'added' || mappingChanged || held.some((p) => !sameTunnel(p, t))) flush.add(t.protected_ip);
    actions.set(t.id, action);
    counts[action]++;
    putOwned.set(t.id, { spec: t });
  }

  // Kept tunnels claim their elements too (every spec they may hold), before any removed tunnel could delete one they share.
  for (const id of keep) {
    const o = owned.get(id);
    if (o) for (const s of heldSpecs(o)) for (const e of tunnelElements(s)) view.elements?.delete(e.id);
  }

  // Owned tunnels in scope that are no longer desired.
  for (const o of scopedOwned) {
    const id = o.spec.id;
    if (putOwned.has(id)) continue;
    for (const s of heldSpecs(o)) {
      if (!claimedNames.has(s.tunnel_name)) {
        if (view.links.has(s.tunnel_name)) linkDeletes.push(s.tunnel_name);
        for (const c of tunnelCounterNames(s)) dropCounter(c);
      }
      // (A clean allowlist's ids are not in view.elements: it is what desired or kept tunnels want, so it stays.)
      for (const e of tunnelElements(s)) if (!view.elements || view.elements.has(e.id)) delEls.set(e.id, e);
      if (!claimedIps.has(s.protected_ip)) {
        dropDnat(s.protected_ip);
        dropCounterMap(s.protected_ip);
        flush.add(s.protected_ip);
      }
    }
    dropOwned.add(id);
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
    const wantedCounters = new Set<string>();
    for (const t of desired) for (const c of tunnelCounterNames(t)) wantedCounters.add(c);
    for (const id of keep) {
      const o = owned.get(id);
      if (!o) continue;
      for (const s of heldSpecs(o)) for (const c of tunnelCounterNames(s)) wantedCounters.add(c);
    }
    for (const c of view.counters) if (!wantedCounters.has(c)) delCounters.add(c);
    // What is left of the kernel's elements: no tunnel claimed them.
    for (const id of view.elements ?? []) delEls.set(id, elementFromId(id));
  }

  // Elements: an element both deleted and wanted (another tunnel took it over) stays. Scoped deletes first add
  // the element (see KernelView.elements), unless what it refers to is missing: then it cannot exist either.
  for (const id of addEls.keys()) delEls.delete(id);
  for (const id of claimed) delEls.delete(id);
  nft.addElements = [...addEls.values()];
  nft.delElements = [...delEls.values()];
  // Ports or protocols a desired tunnel no longer allows (its policy changed, or a reconcile sweeps allowlist
  // elements nobody wants): their live connections go with them, unless the whole IP is flushed anyway.
  const narrowed = new Map([...narrowedBySpec].filter(([, t]) => !flush.has(t.protected_ip)));
  if (nft.delElements.length > 0) {
    const byIp = new Map(desired.map((t) => [t.protected_ip, t]));
    for (const e of nft.delElements) {
      const ip = allowedElementIp(e);
      const t = ip === undefined ? undefined : byIp.get(ip);
      if (t && !flush.has(ip!)) narrowed.set(t.id, t);
    }
  }
  if (!view.elements) {
    nft.delElements = nft.delElements.filter((e) => {
      const n = elementNeeds(e);
      return (n.counter === undefined || view.counters.has(n.counter)) && (n.synproxy === undefined || view.synproxies.has(n.synproxy)) && (n.chain === undefined || view.chains.has(n.chain));
    });
    nft.ensureElements = nft.delElements;
  }

  // Shared objects by value: created with their first user, deleted with their last (in this same batch).
  // Users after the plan: the index's counts, less the records this plan replaces or drops, plus the desired.
  const mssUsers = new Map(index.mssUsers());
  const chainUsers = new Map(index.chainUsers());
  for (const o of scopedOwned)
    for (const s of heldSpecs(o)) {
      const n = sharedNeeds(s);
      if (n.mss !== undefined) mssUsers.set(n.mss, (mssUsers.get(n.mss) ?? 0) - 1);
      for (const c of n.chains) chainUsers.set(c, (chainUsers.get(c) ?? 0) - 1);
    }
  for (const o of putOwned.values()) {
    const n = sharedNeeds(o.spec);
    if (n.mss !== undefined) mssUsers.set(n.mss, (mssUsers.get(n.mss) ?? 0) + 1);
    for (const c of n.chains) chainUsers.set(c, (chainUsers.get(c) ?? 0) + 1);
  }
  const mss = [...mssUsers].filter(([, n]) => n > 0).map(([m]) => m);
  for (const m of mss) if (!view.synproxies.has(synproxyName(m))) nft.addSynproxies.push(m);
  const wantedSyn = new Set([...mss].map(synproxyName));
  nft.delSynproxies = [...view.synproxies].filter((n) => !wantedSyn.has(n));
  // A tunnel's meter has one user, its tunnel; the flow caps of a max_flows value as many as use it.
  const wantedChains = new Set([...chainUsers].filter(([, n]) => n > 0).map(([c]) => c));
  for (const c of wantedChains) if (!view.chains.has(c)) nft.addChains.push(c);
  nft.delChains = [...view.chains, ...(view.damagedChains ?? [])].filter((c) => !wantedChains.has(c));

  nft.delDnat = [...delDnat];
  nft.delCounterMap = [...delCounterMap];
  const adding = new Set(nft.addCounters);
  nft.delCounters = [...delCounters].filter((c) => !adding.has(c));
  let nextOwned: Map<string, OwnedTunnel> | undefined;
  return {
    actions,
    linkSteps,
    nft,
    linkDeletes: [...new Set(linkDeletes)],
    flush: [...flush],
    narrowed: [...narrowed.values()],
    counts,
    // Built only when asked for (tests): a copy of 10,000 records per single-tunnel change is what this avoids.
    get owned(): Map<string, OwnedTunnel> {
      if (!nextOwned) {
        nextOwned = new Map(owned);
        for (const id of dropOwned) nextOwned.delete(id);
        for (const [id, o] of putOwned) nextOwned.set(id, o);
      }
      return nextOwned;
    },
  };
}

/**
 * Claims on a key (link name or protected IP): those set by this plan's desired tunnels first, then an owned
 * record's that this plan does not touch (out of scope), looked up by key.
 */
function claims(owners: (key: string) => ReadonlySet<string> | undefined, inScope: (id: string) => boolean): { get(key: string): string | undefined; has(key: string): boolean; set(key: string, id: string): void } {
  const mine = new Map<string, string>();
  const get = (key: string): string | undefined => {
    const m = mine.get(key);
    if (m !== undefined) return m;
    for (const id of owners(key) ?? []) if (!inScope(id)) return id;
    return undefined;
  };
  return { get, has: (key) => get(key) !== undefined, set: (key, id) => void mine.set(key, id) };
}

function claimedOtherwise(claims: { get(key: string): string | undefined }, key: string, id: string): boolean {
  const c = claims.get(key);
  return c !== undefined && c !== id;
}
