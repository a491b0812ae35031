// Reading the kernel back into a KernelView for the diff: a reconcile's full read (policy elements compared by
// digest per owner), a one-tunnel change's scoped read (by key and by name, never a dump that grows with the
// tunnels), or the records standing for the table when the nftables generation proves them (recordedView).
// A dump the kernel marks interrupted is read again (readConsistently).
import { NetlinkError, ipv4MapElement, ipv4ObjElement } from '../../netlink/client.ts';
import { NFT_OBJECT_SYNPROXY } from '../../netlink/nftables/index.ts';
import { ALLOWED_SETS, synproxyName } from '../../netlink/ruleset.ts';
import { LINK_KEYED_SETS, TUNNEL_SETS, addElementToDigest, addKeyToDigest, digestIn, elementId, linkBucketOfKey, sameDigest, sharedNeeds, tunnelCounterNames, tunnelElements, type OwnerDigests, type PolicyElement } from '../policy.ts';
import type { LinkInfo } from '../../netlink/rtnetlink/index.ts';
import { bytesToIpv4 } from '../../netlink/attrs.ts';
import type { TunnelSpec } from '../types.ts';
import type { CleanOwners, KernelView } from '../plan.ts';
import { recordedSpecs, type OwnedTunnel } from '../records.ts';
import { ipOf } from '../link-steps.ts';
import { phases } from '../../housekeeping/memory.ts';
import { COUNTER_MAP, DNAT_MAP, type KernelContext } from './context.ts';
import { counterMap, dynamicChains, readShared } from './table.ts';
import { getLinks, observeLinks, readAddresses } from './links.ts';

/** Which of these counters exist (one GET each). */
async function listCounters(k: KernelContext, names: readonly string[]): Promise<Set<string>> {
  const unique = [...new Set(names)];
  const found = await Promise.all(unique.map((n) => k.nft.getCounter(k.table, n)));
  return new Set(unique.filter((_, i) => found[i] !== undefined));
}

/**
 * The ids of the policy sets' elements (a reconcile's view: strings only, no object per element). With the
 * wanted digests, every element is digested by owner instead (its protected IP, or its link name: policy.ts
 * ownerDigests): `clean` names the owners whose digest matched, and only the others' elements are listed.
 */
async function readElementIds(k: KernelContext, wanted?: OwnerDigests): Promise<{ ids: Set<string>; clean?: CleanOwners; dirty?: CleanOwners }> {
  const ids = new Set<string>();
  if (!wanted) {
    for (const set of TUNNEL_SETS) await k.nft.eachSetElement(k.table, set, (e) => void ids.add(elementId(set, e)));
    return { ids };
  }
  const found: OwnerDigests = { ips: new Map(), links: new Map() };
  // A collection between the sets' dumps (when the read is large): each dump's decoding garbage, promoted past
  // young collections, otherwise piles up under the next (RSS +15-25 MB at 10,000 tunnels with port lists).
  const mem = phases('read', wanted.ips.size);
  for (const set of TUNNEL_SETS) {
    mem.between();
    if (ALLOWED_SETS.includes(set))
      // Digested from the key's bytes as they come (policy.ts addKeyToDigest): no id, object or view per element.
      await k.nft.eachSetElementKey(k.table, set, (buf, from, to) => addKeyToDigest(digestIn(found.ips, buf.readUInt32BE(from)), set, buf, from, to));
    else if (LINK_KEYED_SETS.has(set)) await k.nft.eachSetElement(k.table, set, (e) => addElementToDigest(digestIn(found.links, linkBucketOfKey(e.key)), set, e));
    else await k.nft.eachSetElement(k.table, set, (e) => addElementToDigest(digestIn(found.ips, e.key.readUInt32BE(0)), set, e));
  }
  // Where the kernel's elements of an owner differ from the wanted ones (or nobody wants them), its exact
  // elements are read again, so the diff can add and delete them one by one; the rest are known by digest.
  const clean: CleanOwners = { ips: new Set(), links: new Set() };
  const dirty: CleanOwners = { ips: new Set(), links: new Set() };
  for (const [key, d] of found.ips) (sameDigest(d, wanted.ips.get(key)) ? clean.ips : dirty.ips).add(key);
  for (const [key, d] of found.links) (sameDigest(d, wanted.links.get(key)) ? clean.links : dirty.links).add(key);
  for (const set of TUNNEL_SETS) {
    const link = LINK_KEYED_SETS.has(set);
    const owners = link ? dirty.links : dirty.ips;
    if (owners.size === 0) continue;
    await k.nft.eachSetElement(k.table, set, (e) => {
      if (owners.has(link ? linkBucketOfKey(e.key) : e.key.readUInt32BE(0))) ids.add(elementId(set, e));
    });
  }
  return { ids, clean, dirty };
}

/** Reads of the kernel whose dump was interrupted by a concurrent change are made this many times at most. */
const READ_ATTEMPTS = 3;

/**
 * Runs a read again when one of its dumps came back marked interrupted (NLM_F_DUMP_INTR: someone changed the
 * list while it was dumped, so entries may be missing or repeated; client.ts turns it into EINTR). Acting on such
 * a read could create a link that exists or delete an element that went: the batch would then fail whole.
 * Reads only: nothing they do needs undoing.
 */
export async function readConsistently<T>(read: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await read();
    } catch (e) {
      if (!(e instanceof NetlinkError && e.code === 'EINTR') || attempt >= READ_ATTEMPTS) throw e;
    }
  }
}

/** What the kernel has for these link names (owned or wanted) and the whole of the agent's table. */
/**
 * `full`: also read every policy element back (a reconcile); otherwise only what a single-tunnel change read
 * before policies existed, plus the synproxy objects and the chains made by value.
 */
export async function readView(
  k: KernelContext,
  names: readonly string[],
  owned: ReadonlyMap<string, OwnedTunnel>,
  full = false,
  /**
   * A scoped apply or remove: everything the operation can touch, read by key or by name (links, map elements,
   * counters, policy elements, synproxy objects), never a dump that grows with the tunnels (a job must not grow with the node).
   */
  scoped?: ScopedRead,
  /**
   * A full read's wanted digests, by owner (policy.ts ownerDigests of the tunnels the operation keeps or wants):
   * the kernel's elements are then compared by digest (KernelView.cleanOwners).
   */
  wanted?: OwnerDigests,
): Promise<KernelView> {
  if (scoped) return readScoped(k, names, owned, scoped);
  const recordedByName = new Map(recordedSpecs(owned.values()).map((t) => [t.tunnel_name, t]));
  // Names, strings and Sets only: at 10,000 tunnels every decoded object per element is megabytes of heap.
  // A large read goes one dump at a time with a collection after each (housekeeping/memory.ts): the four
  // dumps in parallel, each promoting its partial results past young collections, made the heap grow to
  // twice what the view holds (the peak of the agent's memory at 10,000 tunnels); one at a time is still fast.
  let links: Map<string, LinkInfo>, dnat: Map<string, string>, ctrMap: Map<string, string>, counters: Set<string>;
  const mem = phases('read', names.length + owned.size);
  if (mem.large) {
    mem.between();
    links = await getLinks(k, names);
    mem.between();
    dnat = await k.nft.listIpv4Map(k.table, DNAT_MAP);
    mem.between();
    ctrMap = await counterMap(k);
    mem.between();
    counters = await k.nft.listCounterNames(k.table);
    mem.between();
  } else {
    [links, dnat, ctrMap, counters] = await Promise.all([getLinks(k, names), k.nft.listIpv4Map(k.table, DNAT_MAP), counterMap(k), k.nft.listCounterNames(k.table)]);
  }
  const shared = await readShared(k);
  const policy = full ? await readElementIds(k, wanted) : undefined;
  mem.between();
  const addrs = await readAddresses(k, links);
  mem.between();
  const view: KernelView = {
    links: new Map(),
    dnat,
    counterMap: ctrMap,
    counters,
    ...shared,
    ...(policy ? { elements: policy.ids } : {}),
    ...(policy?.clean ? { cleanOwners: policy.clean } : {}),
    ...(policy?.dirty ? { dirtyOwners: policy.dirty } : {}),
  };
  observeLinks(k, view, links, addrs, recordedByName);
  return view;
}

/** What a scoped apply or remove reads: its tunnels' keys and names, from the desired specs and the agent's records. */
export interface ScopedRead {
  /** The agent's records of the tunnels in scope (a GRE link's parameters are read against its record). */
  recorded?: readonly TunnelSpec[];
  /** Protected IPs whose `protected` and `tunnel_counters` elements are read (one GET each). */
  protectedIps: readonly string[];
  /** Named counters (the tunnels' traffic and drop counters). */
  counterNames: readonly string[];
  /** Policy and isolation elements (policy.ts tunnelElements), each read by its key; present when the kernel's is the same element. */
  elements: readonly PolicyElement[];
  /** Synproxy object names the tunnels use or used. */
  synproxies: readonly string[];
  /** Chains made by value the tunnels use or used (their meters, their flow caps): each one's rules are read. */
  chains: readonly string[];
}

/**
 * What a scoped change reads: its own tunnels' elements, counters and objects, by key and by name, both what the
 * desired specs ask for and what the records say they had (a rename or a new protected IP drops the old ones).
 */
export function scopedReadOf(desired: readonly TunnelSpec[], recorded: readonly TunnelSpec[], orphans: readonly string[]): ScopedRead {
  const specs = [...desired, ...recorded];
  return {
    recorded,
    protectedIps: [...specs.map((t) => t.protected_ip), ...orphans],
    counterNames: specs.flatMap(tunnelCounterNames),
    elements: specs.flatMap(tunnelElements),
    synproxies: specs.flatMap((t) => {
      const mss = sharedNeeds(t).mss;
      return mss === undefined ? [] : [synproxyName(mss)];
    }),
    chains: specs.flatMap((t) => sharedNeeds(t).chains),
  };
}

/**
 * The scoped read: one request per key or name, all in flight together (the socket coalesces them into a few
 * datagrams), so its cost is the tunnel's dozen-odd elements whatever the number of tunnels. The policy
 * elements' ids become KernelView.elements: the diff then repairs this tunnel's own drift from the kernel's
 * answer, as a reconcile does for all of them.
 */
async function readScoped(k: KernelContext, names: readonly string[], owned: ReadonlyMap<string, OwnedTunnel>, r: ScopedRead): Promise<KernelView> {
  const t = k.table;
  const ips = [...new Set(r.protectedIps)];
  const els = [...new Map(r.elements.map((e) => [e.id, e])).values()];
  const [links, dnat, ctr, counters, present, synproxies, rules] = await Promise.all([
    getLinks(k, names),
    Promise.all(ips.map((ip) => k.nft.getSetElement(t, DNAT_MAP, ipv4MapElement(ip, '0.0.0.0')))),
    Promise.all(ips.map((ip) => k.nft.getSetElement(t, COUNTER_MAP, ipv4ObjElement(ip, '')))),
    listCounters(k, r.counterNames),
    Promise.all(els.map((e) => k.nft.getSetElement(t, e.set, e.el))),
    Promise.all([...new Set(r.synproxies)].map(async (n) => ((await k.nft.hasObject(t, n, NFT_OBJECT_SYNPROXY)) ? n : undefined))),
    // Only the chains this change may touch (its meter, its flow caps: a dump filtered by chain), never the table's
    // every rule: 10,000 tunnels with a per-source limit are 40,000 rules.
    Promise.all([...new Set(r.chains)].map((c) => k.nft.listRules(t, { chain: c }))),
  ]);
  const view: KernelView = {
    links: new Map(),
    dnat: new Map(),
    counterMap: new Map(),
    counters,
    synproxies: new Set(synproxies.filter((n): n is string => n !== undefined)),
    ...dynamicChains(rules.flat()),
    elements: new Set(),
  };
  ips.forEach((ip, i) => {
    const d = dnat[i]?.data;
    if (d) view.dnat.set(ip, bytesToIpv4(d));
    const o = ctr[i]?.objref;
    if (o !== undefined) view.counterMap.set(ip, o);
  });
  // An interval set answers the interval holding the key: only the very same element counts as present.
  els.forEach((e, i) => {
    const got = present[i];
    if (got && elementId(e.set, got) === e.id) view.elements!.add(e.id);
  });
  const addrs = await readAddresses(k, links);
  const recorded = r.recorded ?? [...owned.values()].map((o) => o.spec);
  observeLinks(k, view, links, addrs, new Map(recorded.map((s) => [s.tunnel_name, s])));
  return view;
}

/**
 * A scoped change's view when the nftables generation proves that the table holds exactly the agent's records
 * (edge-dataplane.ts run(): no commit by anyone since the agent's own last one, which left the table as recorded). The
 * records in scope stand for the table's side: their map elements, counters and policy elements, and the
 * shared objects of every value in use (`shared`, the state index's counts). Only the links are read, as links
 * have no generation. A commit by someone else between this and the change's own is caught by the batch's
 * genid (ERESTART), and the change is then read back from the kernel after all.
 */
export async function recordedView(k: KernelContext, names: readonly string[], recorded: readonly TunnelSpec[], shared: { mss: Iterable<number>; chains: Iterable<string> }): Promise<KernelView> {
  const links = await getLinks(k, names);
  const view: KernelView = {
    links: new Map(),
    dnat: new Map(),
    counterMap: new Map(),
    counters: new Set(),
    synproxies: new Set([...shared.mss].map(synproxyName)),
    chains: new Set(shared.chains),
    elements: new Set(),
  };
  for (const t of recorded) {
    if (t.forwarding !== false) view.dnat.set(t.protected_ip, ipOf(t.origin_inner));
    view.counterMap.set(t.protected_ip, t.tunnel_name);
    for (const c of tunnelCounterNames(t)) view.counters.add(c);
    for (const e of tunnelElements(t)) view.elements!.add(e.id);
  }
  const addrs = await readAddresses(k, links);
  observeLinks(k, view, links, addrs, new Map(recorded.map((t) => [t.tunnel_name, t])));
  return view;
}
