// Desired state against what the kernel has: a pure function from (desired tunnels, the agent's own
// records, a view of the kernel) to a plan of link steps, one nftables batch and conntrack flushes.
// No I/O here, so every decision (what is added, changed, left alone, never touched) is unit-testable.
import { synproxyName, rateLimitName } from '../netlink/ruleset.ts';
import { LINK_KEYED_SETS, allowedElementIp, elementFromId, elementNeeds, linkBucket, protectedKey, sharedNeeds, tunnelCounterNames, tunnelElements, tunnelElementsButAllowlist, type PolicyElement } from './policy.ts';
import type { ChangeCounts, TunnelSpec } from './types.ts';
import { sameAttackSettings, type TunnelPolicy } from '../../common/tunnel-policy.ts';

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
   * without a read of the elements pass, e.g. the diff's unit tests. The diff consumes it: each id a desired or
   * kept tunnel claims is taken out, so what remains is what no tunnel wants (a second Set of every claimed id
   * would double the reconcile's largest structure: ~800,000 ids at 10,000 tunnels with port lists). A view
   * serves one diff.
   */
  elements?: Set<string>;
  /**
   * A reconcile's read: the owners whose elements in the kernel are exactly the ones the desired and kept tunnels
   * want, as a digest per owner showed (kernel.ts readElementIds): protected IPs (policy.ts protectedKey) and link
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

/** What the agent has recorded as its own (state file). `pending`: apply started, not confirmed. */
export interface OwnedTunnel {
  spec: TunnelSpec;
  pending?: boolean;
  /**
   * A pending change's earlier specs whose links and elements the kernel may still hold: the last confirmed one,
   * and any change to it that failed before this one (a refused batch leaves its links created). Absent once
   * confirmed. Without them a refused change would forget what it replaces: a reconcile keeping the tunnel as it
   * was would sweep the old spec's elements, and its old link would be no one's (docs/CONTRACTS.md "Dataplane").
   */
  was?: TunnelSpec[];
}

/** Every spec whose links and elements the kernel may hold for this record: its own, then what it replaces. */
export function heldSpecs(o: OwnedTunnel): TunnelSpec[] {
  return o.was?.length ? [o.spec, ...o.was] : [o.spec];
}

/**
 * Every spec the kernel may hold for these records, their earlier ones first: a map by link name built from the
 * list in order keeps the record's own spec for a name both have (a link is read against it: kernel.ts observeLinks).
 */
export function recordedSpecs(records: Iterable<OwnedTunnel>): TunnelSpec[] {
  const list = [...records];
  const out: TunnelSpec[] = [];
  for (const o of list) if (o.was) out.push(...o.was);
  for (const o of list) out.push(o.spec);
  return out;
}

/**
 * The intent record of a change to `next` over `prev`: pending, and keeping every spec of prev's that the kernel
 * may still hold and `next` does not describe (an apply refused again keeps what the first refusal kept).
 */
export function intentOver(prev: OwnedTunnel | undefined, next: TunnelSpec): OwnedTunnel {
  const was: TunnelSpec[] = [];
  for (const s of prev ? heldSpecs(prev) : []) if (!sameSpec(s, next) && !was.some((w) => sameSpec(w, s))) was.push(s);
  return was.length ? { spec: next, pending: true, was } : { spec: next, pending: true };
}

/**
 * The agent's records by link name and by protected IP, and how many of them need each shared object
 * (synproxy by MSS, rate-limit chain by rate). The state store keeps one up to date with every commit, so a
 * single-tunnel change looks its neighbours up instead of walking all 10,000 records (issue 10 item 4); the
 * diff builds one itself when it is given none (a reconcile walks every record anyway).
 */
export class OwnedIndex {
  private readonly names = new Map<string, Set<string>>();
  private readonly ips = new Map<string, Set<string>>();
  private readonly mss = new Map<number, number>();
  private readonly pps = new Map<number, number>();

  static of(owned: ReadonlyMap<string, OwnedTunnel>): OwnedIndex {
    const ix = new OwnedIndex();
    for (const o of owned.values()) ix.add(o);
    return ix;
  }

  /**
   * A record's names, protected IPs and shared objects, its earlier specs' too (OwnedTunnel.was): the agent created
   * those links and may still have those elements, which need their synproxy objects and rate-limit chains.
   */
  add(o: OwnedTunnel): void {
    const id = o.spec.id;
    for (const t of heldSpecs(o)) {
      addTo(this.names, t.tunnel_name, id);
      addTo(this.ips, t.protected_ip, id);
      const n = sharedNeeds(t);
      if (n.mss !== undefined) this.mss.set(n.mss, (this.mss.get(n.mss) ?? 0) + 1);
      if (n.pps !== undefined) this.pps.set(n.pps, (this.pps.get(n.pps) ?? 0) + 1);
    }
  }

  /** Undoes add() of the same record. */
  delete(o: OwnedTunnel): void {
    const id = o.spec.id;
    for (const t of heldSpecs(o)) {
      removeFrom(this.names, t.tunnel_name, id);
      removeFrom(this.ips, t.protected_ip, id);
      const n = sharedNeeds(t);
      if (n.mss !== undefined) decrement(this.mss, n.mss);
      if (n.pps !== undefined) decrement(this.pps, n.pps);
    }
  }

  /** Ids of the records with this link name, or with this protected IP (normally one at most). */
  byName(name: string): ReadonlySet<string> | undefined {
    return this.names.get(name);
  }
  byIp(ip: string): ReadonlySet<string> | undefined {
    return this.ips.get(ip);
  }
  /** How many records need each synproxy MSS and each rate limit (only values in use). */
  mssUsers(): ReadonlyMap<number, number> {
    return this.mss;
  }
  ppsUsers(): ReadonlyMap<number, number> {
    return this.pps;
  }
}

function addTo(m: Map<string, Set<string>>, key: string, id: string): void {
  let s = m.get(key);
  if (!s) m.set(key, (s = new Set()));
  s.add(id);
}

function removeFrom(m: Map<string, Set<string>>, key: string, id: string): void {
  const s = m.get(key);
  if (!s) return;
  s.delete(id);
  if (s.size === 0) m.delete(key);
}

function decrement(m: Map<number, number>, key: number): void {
  const n = (m.get(key) ?? 0) - 1;
  if (n > 0) m.set(key, n);
  else m.delete(key);
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

export const GRE_TTL = 255;

/** The per-tunnel named counter. */
const counterName = (t: Pick<TunnelSpec, 'tunnel_name'>): string => t.tunnel_name;

export const ipOf = (cidr: string): string => cidr.split('/')[0]!;

function wantedParams(t: TunnelSpec): LinkParams {
  return { local: t.edge_ip, remote: t.origin_ip, ttl: GRE_TTL, key: t.gre_key };
}

function sameParams(a: LinkParams, b: LinkParams): boolean {
  return a.local === b.local && a.remote === b.remote && a.ttl === b.ttl && a.key === b.key;
}

/** Same tunnel including its policy (specs are normalised: a default policy is no policy). */
export function sameSpec(a: TunnelSpec, b: TunnelSpec): boolean {
  return sameTunnel(a, b) && samePolicyAsSent(a.policy, b.policy);
}

/**
 * Two policies as jobs carry them (normalised by validation: common/tunnel-spec.ts normaliseSpec), field by
 * field, absent only equal to absent. No serialisation: a reconcile compares 10,000 of them, twice.
 */
function samePolicyAsSent(a: TunnelPolicy | undefined, b: TunnelPolicy | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.protocol !== b.protocol || a.syn_proxy !== b.syn_proxy || a.source_pps_limit !== b.source_pps_limit || a.drop_fragments !== b.drop_fragments) return false;
  // max_flows and alert_pps make no element: a change of them alone is recorded (the desired state, attack detection) and commits nothing.
  if (!sameAttackSettings(a, b)) return false;
  const [x, y] = [a.ports, b.ports];
  if (x === '*' || y === '*') return x === y;
  return x.length === y.length && x.every((r, i) => r[0] === y[i]![0] && r[1] === y[i]![1]);
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

/**
 * What tunnel `t`'s link needs, as observed (undefined: missing): created (after the delete of a link of the
 * wrong kind or parameters), or its MTU, addresses and state fixed. Empty when the link is right. The diff's
 * link check, and the whole of a reconcile's check when the generation id proves the table unchanged (index.ts).
 */
export function linkStepsFor(t: TunnelSpec, link: ObservedLink | undefined): LinkStep[] {
  const name = t.tunnel_name;
  const steps: LinkStep[] = [];
  if (!link || !link.params || !sameParams(link.params, wantedParams(t))) {
    if (link) steps.push({ op: 'delete', name });
    steps.push({ op: 'create', name, spec: t }, { op: 'addr-add', name, cidr: t.edge_inner }, { op: 'up', name });
    return steps;
  }
  if (link.mtu !== t.mtu) steps.push({ op: 'mtu', name, mtu: t.mtu });
  for (const a of link.addresses) if (a !== t.edge_inner) steps.push({ op: 'addr-del', name, cidr: a });
  if (!link.addresses.includes(t.edge_inner)) steps.push({ op: 'addr-add', name, cidr: t.edge_inner });
  if (!link.up) steps.push({ op: 'up', name });
  return steps;
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
    delRateLimits: [],
    addRateLimits: [],
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
      // A scoped change read its own elements by key (kernel.ts readScoped): what the record had, the kernel
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
      return (n.counter === undefined || view.counters.has(n.counter)) && (n.synproxy === undefined || view.synproxies.has(n.synproxy)) && (n.chain === undefined || view.rateChains.has(n.chain));
    });
    nft.ensureElements = nft.delElements;
  }

  // Shared objects by value: created with their first user, deleted with their last (in this same batch).
  // Users after the plan: the index's counts, less the records this plan replaces or drops, plus the desired.
  const mssUsers = new Map(index.mssUsers());
  const ppsUsers = new Map(index.ppsUsers());
  for (const o of scopedOwned)
    for (const s of heldSpecs(o)) {
      const n = sharedNeeds(s);
      if (n.mss !== undefined) mssUsers.set(n.mss, (mssUsers.get(n.mss) ?? 0) - 1);
      if (n.pps !== undefined) ppsUsers.set(n.pps, (ppsUsers.get(n.pps) ?? 0) - 1);
    }
  for (const o of putOwned.values()) {
    const n = sharedNeeds(o.spec);
    if (n.mss !== undefined) mssUsers.set(n.mss, (mssUsers.get(n.mss) ?? 0) + 1);
    if (n.pps !== undefined) ppsUsers.set(n.pps, (ppsUsers.get(n.pps) ?? 0) + 1);
  }
  const mss = [...mssUsers].filter(([, n]) => n > 0).map(([m]) => m);
  const pps = [...ppsUsers].filter(([, n]) => n > 0).map(([p]) => p);
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
    n.delRateLimits.length +
    n.addRateLimits.length
  );
}
