// The kernel side of the dataplane: reading back what is there (links, addresses, map elements, counters)
// into a KernelView, building the agent's table once, and carrying out a Plan through our netlink client.
import { randomInt } from 'node:crypto';
import { NetlinkError, NftBatch, addTunnelgateRuleset, ipv4MapElement, ipv4ObjElement, type CommitOptions, type Nft, type Rtnl } from '../netlink/client.ts';
import type { DecodedRule } from '../netlink/nftables/index.ts';
import { NFPROTO_IPV4, NFT_OBJECT_SYNPROXY } from '../netlink/nftables/index.ts';
import { ALLOWED_SETS, NFT_TABLE_F_DORMANT, POLICY_SETS, RULESET_DEFAULTS, addRateLimitChain, addSynproxyObject, deleteRateLimitChain, rateLimitName, rateLimitOf, synproxyMssOf, synproxyName } from '../netlink/ruleset.ts';
import { LEGACY_ALLOWED_SET, LINK_KEYED_SETS, TUNNEL_SETS, addElementToDigest, addKeyToDigest, allowsConnection, digestIn, elementId, fromLegacyAllowed, linkBucketOfKey, sameDigest, tunnelCounterNames, tunnelElements, type OwnerDigests, type PolicyElement } from './policy.ts';
import type { LinkInfo } from '../netlink/rtnetlink.ts';
import { bytesToIpv4 } from '../netlink/attrs.ts';
import type { TunnelSpec } from './types.ts';
import type { Conntrack } from './conntrack.ts';
import { ipOf, nftChangeCount, recordedSpecs, type CleanOwners, type KernelView, type NftChanges, type ObservedLink, type OwnedTunnel, type Plan } from './diff.ts';
import type { LinkDriver } from './links.ts';
import { writeSysctls } from './netns.ts';
import { COLLECT_EVERY_REQUESTS, phases } from '../housekeeping/memory.ts';
import { activity } from '../housekeeping/activity.ts';

export const DNAT_MAP = RULESET_DEFAULTS.dnatMap;
const COUNTER_MAP = RULESET_DEFAULTS.counterMap;

/** Links that loading ip_gre creates in every namespace: never ours, never looked at. */
export const FALLBACK_TUNNEL_LINKS: ReadonlySet<string> = new Set(['gre0', 'gretap0', 'erspan0']);

/**
 * The rules of a correctly built table, per chain, as expression-name lists (what listRules decodes). The
 * rate-limit chains (one per limit value in use) are the tunnels' and are left out of this comparison.
 */
export const EXPECTED_RULES = [
  'early: payload objref',
  'early: payload bitwise cmp payload lookup payload objref immediate',
  'early: payload lookup',
  'early: meta cmp payload bitwise cmp payload lookup notrack',
  'allowlist: payload meta lookup immediate',
  'allowlist: payload meta payload bitwise lookup immediate',
  'allowlist: payload meta payload bitwise lookup immediate',
  'allowlist: payload meta payload bitwise lookup immediate',
  'allowlist: payload meta payload lookup immediate',
  'allowlist: payload objref immediate',
  'prerouting: meta cmp payload bitwise cmp payload lookup payload objref immediate',
  'prerouting: immediate',
  'prerouting: meta lookup counter payload lookup nat',
  'nat_out: meta cmp payload lookup nat',
  'guard: meta cmp payload bitwise cmp meta cmp rt byteorder exthdr',
  'guard: ct bitwise cmp meta cmp immediate',
  'guard: meta cmp immediate',
  'guard: ct bitwise cmp immediate',
  'guard: ct bitwise cmp immediate',
  'guard_ct: immediate',
  'guard_ct: payload objref',
  'guard_ct: payload objref immediate',
  'guard_ct: meta cmp immediate',
  'guard_nodnat: meta cmp immediate',
  'guard_nodnat: payload objref immediate',
  'from_tunnel: ct cmp ct bitwise cmp meta payload ct lookup immediate',
  'from_tunnel: meta objref immediate',
  'from_tunnel: immediate',
  'tunnel_reply: meta objref',
  'tunnel_reply: immediate',
  'local_in: meta cmp immediate',
  'local_in: payload objref immediate',
  'tunnel_in: ct bitwise cmp meta payload lookup immediate',
  'tunnel_in: meta objref immediate',
  'tunnel_in: immediate',
];

/** The policy sets' elements by id (a whole read: reconcile, and the rebuild of a tampered table). */
async function readElements(k: KernelContext): Promise<Map<string, PolicyElement>> {
  const out = new Map<string, PolicyElement>();
  for (const set of TUNNEL_SETS) {
    // A table of an older agent lacks the newer sets (tunnel_out, issue 11): keep what the others hold.
    await k.nft
      .eachSetElement(k.table, set, (e) => {
        const el = { key: Buffer.from(e.key), ...(e.keyEnd ? { keyEnd: Buffer.from(e.keyEnd) } : {}), ...(e.data ? { data: Buffer.from(e.data) } : {}), ...(e.objref !== undefined ? { objref: e.objref } : {}), ...(e.verdict ? { verdict: e.verdict } : {}) };
        const id = elementId(set, el);
        out.set(id, { set, el, id });
      })
      .catch((err: unknown) => {
        if (!(err instanceof NetlinkError && err.code === 'ENOENT')) throw err;
      });
  }
  // A table of an agent before the port blocks: its interval allowlist, as the blocks allowing the same ports.
  await k.nft
    .eachSetElement(k.table, LEGACY_ALLOWED_SET, (e) => {
      for (const b of fromLegacyAllowed(e)) out.set(b.id, b);
    })
    .catch((err: unknown) => {
      if (!(err instanceof NetlinkError && err.code === 'ENOENT')) throw err;
    });
  return out;
}

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

/** The synproxy objects and rate-limit chains present: one per distinct value in use, never per tunnel. */
async function readShared(k: KernelContext): Promise<{ synproxies: Set<string>; rateChains: Set<string> }> {
  const [synproxies, rules] = await Promise.all([k.nft.listObjectNames(k.table, NFT_OBJECT_SYNPROXY), k.nft.listRules(k.table)]);
  const rateChains = new Set(rules.filter((r) => rateLimitOf(r.chain) !== undefined).map((r) => r.chain));
  return { synproxies, rateChains };
}

/**
 * How many elements' objects (key Buffers) exist at once while a batch is built: the batch encodes each slice
 * as it comes (nftables/batch.ts), so 100,000 elements of 10,000 tunnels are never all objects together (RSS).
 */
const ELEMENT_SLICE = 4096;
/**
 * Tunnels whose elements are built at once when added whole (~10 elements each, ~80 with a port list): few, so
 * few of them are still alive at a young collection and promoted (the old generation is RSS).
 */
const WHOLE_SLICE = 32;

/** Adds policy elements to the batch, grouped by set, a slice at a time. */
function addPolicyElements(b: NftBatch, table: string, els: readonly PolicyElement[], op: 'add' | 'delete'): void {
  const bySet = new Map<string, PolicyElement[]>();
  for (const e of els) {
    let list = bySet.get(e.set);
    if (!list) bySet.set(e.set, (list = []));
    list.push(e);
  }
  for (const [set, list] of bySet) {
    for (let i = 0; i < list.length; i += ELEMENT_SLICE) {
      const elements = list.slice(i, i + ELEMENT_SLICE).map((e) => e.el);
      if (op === 'add') b.addElements({ table, set, elements });
      else b.deleteElements({ table, set, elements });
    }
  }
}

/** Protected IP → origin inner address, and → counter name, as the `protected` and `tunnel_counters` maps hold them. */
function addMapElements(b: NftBatch, table: string, dnat: readonly (readonly [string, string])[], counters: readonly (readonly [string, string])[]): void {
  if (dnat.length) b.addElements({ table, set: DNAT_MAP, elements: dnat.map(([a, v]) => ipv4MapElement(a, v)) });
  if (counters.length) b.addElements({ table, set: COUNTER_MAP, elements: counters.map(([a, c]) => ipv4ObjElement(a, c)) });
}

/** The counters of tunnels added whole: before anything that refers to them. */
function addWholeCounters(b: NftBatch, table: string, tunnels: readonly TunnelSpec[]): void {
  for (const x of tunnels) for (const c of tunnelCounterNames(x)) b.addCounter({ table, name: c });
}

/** The policy elements of tunnels added whole: built a slice of tunnels at a time, encoded, and dropped. */
function addWholeElements(b: NftBatch, table: string, tunnels: readonly TunnelSpec[]): void {
  for (let i = 0; i < tunnels.length; i += WHOLE_SLICE) addPolicyElements(b, table, tunnels.slice(i, i + WHOLE_SLICE).flatMap(tunnelElements), 'add');
}

export interface KernelContext {
  rtnl: Rtnl;
  nft: Nft;
  conntrack: () => Conntrack;
  /**
   * A new route socket whose sends run off the event loop (socket.ts sendOffThread), for the deletion of one
   * link (deleteLinkUnlisted), closed by the caller. One per deletion: a socket sends its next request only
   * once the last returned, and the next remove must not wait out the previous one's barrier. Absent: those
   * deletions go through `rtnl`.
   */
  reaper?: () => Rtnl;
  /** Deletions still finishing on the reaper's thread after their links left the kernel's lists. */
  reaping?: Set<Promise<void>>;
  table: string;
  linkPrefix: string;
  driver: LinkDriver;
  netns?: string;
  /** TEST SEAM ONLY (DataplaneOptions.testOnlyHang). Never set by the agent itself. */
  testOnlyHang?: TestOnlyHang;
}

/**
 * TEST SEAM ONLY: the first operation that reaches step `step` hangs there, as one the kernel never answers would
 * (test/integration/agent-watchdog.test.ts). Only the first: the next operation is the one that repairs.
 */
export interface TestOnlyHang {
  step: string;
  /** Only in this operation (apply, remove, reconcile); any, without it. */
  op?: string;
  /** Ends the hang (the operation goes on); without it the hang never ends. */
  release?: Promise<void>;
  /** Holds the event loop itself, as a synchronous kernel call that never returns would (release is then ignored). */
  blockEventLoop?: boolean;
  /** Set once an operation has hung. */
  used?: boolean;
}

/**
 * The operation begins step `name`: progress for the watchdog (housekeeping/activity.ts), and the name a job that
 * does not finish gives in its kernel_error ("nftables commit did not finish within 60 s").
 */
export async function step(k: Pick<KernelContext, 'testOnlyHang'>, name: string): Promise<void> {
  activity.step(name);
  const hang = k.testOnlyHang;
  if (hang?.step !== name || hang.used || (hang.op !== undefined && activity.currentOp() !== hang.op)) return;
  hang.used = true;
  if (hang.blockEventLoop) {
    // Nothing wakes this wait: the thread is held as by a kernel call that never returns.
    activity.syscall(`TEST SEAM: ${name} held on the event loop`, () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0));
    return;
  }
  await (hang.release ?? new Promise<never>(() => undefined));
}

/**
 * Builds the table when it is missing; leaves it alone when it has the expected rules; rebuilds it in one
 * atomic batch, keeping every element and counter value, when its rules were tampered with.
 */
export async function ensureTable(k: KernelContext): Promise<'created' | 'present' | 'rebuilt'> {
  const tables = await k.nft.listTables();
  const exists = tables.some((t) => t.name === k.table && t.family === NFPROTO_IPV4);
  if (exists) {
    const listed = (await k.nft.listRules(k.table)).filter((r) => rateLimitOf(r.chain) === undefined);
    const rules = listed.map((r) => `${r.chain}: ${r.exprs.join(' ')}`);
    if (rules.length === EXPECTED_RULES.length && rules.every((r, i) => r === EXPECTED_RULES[i]) && (await sameAsBuilt(k, listed))) return 'present';
  }
  const b = new NftBatch();
  let elements:
    | { dnat: Map<string, string>; ctrMap: Map<string, string>; counters: { name: string; bytes?: bigint; packets?: bigint }[]; policy: Map<string, PolicyElement>; shared: { synproxies: Set<string>; rateChains: Set<string> } }
    | undefined;
  if (exists) {
    // A table of an older agent lacks some sets: what cannot be read is rebuilt by the next reconcile (restore).
    elements = {
      dnat: await k.nft.listIpv4Map(k.table, DNAT_MAP).catch(() => new Map<string, string>()),
      ctrMap: await counterMap(k).catch(() => new Map<string, string>()),
      counters: await k.nft.listCounters(k.table),
      policy: await readElements(k).catch(() => new Map<string, PolicyElement>()),
      shared: await readShared(k).catch(() => ({ synproxies: new Set<string>(), rateChains: new Set<string>() })),
    };
    b.deleteTable(k.table);
  }
  addTunnelgateRuleset(b, { table: k.table, ifnamePrefix: k.linkPrefix });
  if (elements) {
    for (const c of elements.counters) b.addCounter({ table: k.table, name: c.name, bytes: c.bytes, packets: c.packets });
    if (elements.dnat.size) b.addElements({ table: k.table, set: DNAT_MAP, elements: [...elements.dnat].map(([a, v]) => ipv4MapElement(a, v)) });
    const names = new Set(elements.counters.map((c) => c.name));
    const refs = [...elements.ctrMap].filter(([, n]) => names.has(n));
    if (refs.length) b.addElements({ table: k.table, set: COUNTER_MAP, elements: refs.map(([a, n]) => ipv4ObjElement(a, n)) });
    const { synproxies, rateChains } = elements.shared;
    for (const n of synproxies) {
      const mss = synproxyMssOf(n);
      if (mss !== undefined) addSynproxyObject(b, k.table, mss);
    }
    for (const c of rateChains) addRateLimitChain(b, k.table, rateLimitOf(c)!);
    const keep = [...elements.policy.values()].filter((e) => {
      const el = e.el;
      const o = el.objref;
      if (o !== undefined) return e.set === POLICY_SETS.synproxy ? synproxies.has(o) : names.has(o);
      return el.verdict?.chain === undefined || rateChains.has(el.verdict.chain);
    });
    addPolicyElements(b, k.table, keep, 'add');
  }
  await k.nft.commit(b);
  return exists ? 'rebuilt' : 'created';
}

/**
 * Whether the table's rules are, value for value, the ones the agent builds: a rule with the same expressions
 * but another value (a verdict turned from drop to accept, a port, a prefix) is tampering too. Compared with the
 * rules the kernel lists for a fresh copy built beside it, dormant (its chains hook nothing) and deleted right
 * after, so both sides are in the kernel's own encoding (attribute order, NUL-terminated names, set names for
 * set ids); an anonymous counter's values are the only ones that differ by right.
 */
async function sameAsBuilt(k: KernelContext, listed: readonly DecodedRule[]): Promise<boolean> {
  const ref = `${k.table}_reference`;
  const build = new NftBatch();
  // A copy left behind (a kill in between) goes first: added dormant, so it is neither woken up for the length of
  // this batch nor missing for the delete.
  build.addTable(ref, NFT_TABLE_F_DORMANT).deleteTable(ref);
  addTunnelgateRuleset(build, { table: ref, ifnamePrefix: k.linkPrefix, dormant: true });
  try {
    await k.nft.commit(build);
  } catch {
    // No reference to compare with: the rebuild, which keeps every element and counter value, is the safe side.
    return false;
  }
  try {
    const want = (await k.nft.listRules(ref)).filter((r) => rateLimitOf(r.chain) === undefined);
    const body = (r: DecodedRule): string => `${r.chain}: ${r.exprs.map((e, i) => (e === 'counter' ? e : `${e}(${r.exprData[i]})`)).join(' ')}`;
    return want.length === listed.length && want.every((r, i) => body(r) === body(listed[i]!));
  } catch {
    return false;
  } finally {
    // A copy that stays is dormant (it hooks nothing) and goes at the next start.
    await k.nft.commit(new NftBatch().deleteTable(ref)).catch(() => undefined);
  }
}

function counterMap(k: KernelContext): Promise<Map<string, string>> {
  return k.nft.listIpv4ObjMap(k.table, COUNTER_MAP);
}

/**
 * What every tunnel link gets: loose reverse-path filtering (clients' source addresses route out the upstream),
 * and no IPv6 at all: the table is IPv4, so an origin's IPv6 through its GRE link would pass the isolation.
 */
export function tunnelLinkSysctls(netns: string | undefined, names: readonly string[]): void {
  writeSysctls(
    netns,
    names.map((n) => [['net', 'ipv4', 'conf', n, 'rp_filter'], '2'] as const),
  );
  writeSysctls(
    netns,
    names.map((n) => [['net', 'ipv6', 'conf', n, 'disable_ipv6'], '1'] as const),
    { skipMissing: true },
  );
}

/** New links whose sysctls applyPlan writes between two turns of the event loop. */
const SYSCTL_SLICE = 1024;

/** Lists fewer links than this one by one; more with one dump. */
const LINK_GET_LIMIT = 16;

async function getLinks(k: KernelContext, names: readonly string[]): Promise<Map<string, LinkInfo>> {
  const want = new Set(names.filter((n) => !FALLBACK_TUNNEL_LINKS.has(n)));
  const out = new Map<string, LinkInfo>();
  if (want.size === 0) return out;
  if (want.size < LINK_GET_LIMIT) {
    const found = await Promise.all([...want].map((n) => k.rtnl.findLink(n)));
    for (const l of found) if (l) out.set(l.name, l);
  } else {
    // keepName: the other links (a veth stand-in's peers, the host's own) are skipped before decoding.
    for (const l of await k.rtnl.listLinks({ skipStats: true, keepName: (n) => want.has(n) })) out.set(l.name, l);
  }
  return out;
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
 * before policies existed, plus the synproxy objects and rate-limit chains (one per value in use).
 */
export async function readView(
  k: KernelContext,
  names: readonly string[],
  owned: ReadonlyMap<string, OwnedTunnel>,
  full = false,
  /**
   * A scoped apply or remove: everything the operation can touch, read by key or by name (links, map elements,
   * counters, policy elements, synproxy objects), never a dump that grows with the tunnels (issue 10 item 4).
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

/**
 * The links side of a view only (links and their addresses, no nftables read): what a reconcile checks when
 * the generation id proves the table unchanged since the agent's own last commit (index.ts, docs/CONTRACTS.md
 * "Dataplane"). One link dump and one address dump, whatever the number of tunnels.
 */
export async function readLinks(k: KernelContext, names: readonly string[], owned: ReadonlyMap<string, OwnedTunnel>): Promise<Map<string, ObservedLink>> {
  const links = await getLinks(k, names);
  const addrs = await readAddresses(k, links);
  const view: Pick<KernelView, 'links'> = { links: new Map() };
  const recordedByName = new Map<string, TunnelSpec>();
  for (const o of owned.values()) recordedByName.set(o.spec.tunnel_name, o.spec);
  observeLinks(k, view, links, addrs, recordedByName);
  return view.links;
}

/** The IPv4 addresses of these links, by index (other links' addresses are not decoded). */
async function readAddresses(k: KernelContext, links: ReadonlyMap<string, LinkInfo>): Promise<Map<number, string[]>> {
  const addrs = new Map<number, string[]>();
  if (links.size === 0) return addrs;
  const indexes = new Set([...links.values()].map((l) => l.index));
  // A few links: one dump per link, filtered by the kernel (strict dumps), so a single job's read stays its own.
  const found =
    indexes.size < LINK_GET_LIMIT
      ? (await Promise.all([...indexes].map((i) => k.rtnl.listAddresses(i)))).flat()
      : await k.rtnl.listAddresses(undefined, { keepIndex: (i) => indexes.has(i) });
  for (const a of found) {
    if (!a.local) continue;
    let list = addrs.get(a.index);
    if (!list) addrs.set(a.index, (list = []));
    list.push(`${a.local}/${a.prefixLen}`);
  }
  return addrs;
}

function observeLinks(k: KernelContext, view: Pick<KernelView, 'links'>, links: ReadonlyMap<string, LinkInfo>, addrs: ReadonlyMap<number, string[]>, recordedByName: ReadonlyMap<string, TunnelSpec>): void {
  for (const l of links.values()) {
    const o: ObservedLink = { name: l.name, index: l.index, up: l.up, mtu: l.mtu ?? 0, addresses: addrs.get(l.index) ?? [] };
    const p = k.driver.params(l, recordedByName.get(l.name));
    if (p) o.params = p;
    view.links.set(l.name, o);
  }
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
    // The table's rules: its fixed two dozen plus one rate-limit chain per limit value in use, never per tunnel.
    k.nft.listRules(t),
  ]);
  const view: KernelView = {
    links: new Map(),
    dnat: new Map(),
    counterMap: new Map(),
    counters,
    synproxies: new Set(synproxies.filter((n): n is string => n !== undefined)),
    rateChains: new Set(rules.filter((x) => rateLimitOf(x.chain) !== undefined).map((x) => x.chain)),
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
 * (index.ts run(): no commit by anyone since the agent's own last one, which left the table as recorded). The
 * records in scope stand for the table's side: their map elements, counters and policy elements, and the
 * shared objects of every value in use (`shared`, the state index's counts). Only the links are read, as links
 * have no generation. A commit by someone else between this and the change's own is caught by the batch's
 * genid (ERESTART), and the change is then read back from the kernel after all.
 */
export async function recordedView(k: KernelContext, names: readonly string[], recorded: readonly TunnelSpec[], shared: { mss: Iterable<number>; pps: Iterable<number> }): Promise<KernelView> {
  const links = await getLinks(k, names);
  const view: KernelView = {
    links: new Map(),
    dnat: new Map(),
    counterMap: new Map(),
    counters: new Set(),
    synproxies: new Set([...shared.mss].map(synproxyName)),
    rateChains: new Set([...shared.pps].map(rateLimitName)),
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

/**
 * Runs `fn` over `items` with at most CHUNK requests alive at a time. The socket coalesces up to 256
 * requests per sendto() anyway; keeping tens of thousands of promises (and their reply buffers) alive at
 * once only grows the heap (measured: ~150 MB of transient garbage at 10,000 tunnels) for no speed.
 */
const CHUNK = 256;
async function inChunks<T>(items: readonly T[], fn: (x: T) => Promise<unknown>, collect: () => void = () => undefined): Promise<void> {
  for (let i = 0; i < items.length; i += CHUNK) {
    await Promise.all(items.slice(i, i + CHUNK).map(fn));
    if ((i + CHUNK) % COLLECT_EVERY_REQUESTS === 0 && i + CHUNK < items.length) collect();
    if (i + CHUNK < items.length) await turn();
  }
}

/**
 * Lets the event loop run once (timers, the SSH server's sockets). The socket answers most requests within
 * the promise chain (socket.ts: the kernel has replied by the time sendto() returns), so without this a
 * 10,000-tunnel apply would hold the loop for its whole ~12 s: SSH handshakes and keepalives, probes and
 * timers would all wait for it.
 */
function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Deletes these links (names the read-back saw in `view`), each one's IPv4 addresses first. A link going down
 * with an address on it makes the kernel mark the address's routes dead and then walk the whole routing table
 * to drop them (fib_flush): O(links) per deletion, 7-11 ms of a one-tunnel remove at 10,000 tunnels here.
 * Deleting the address first removes its routes by key, and the link then goes with none (unlisted after
 * ~3 ms). A few links (a remove, or an apply recreating its link) are each answered once unlisted
 * (deleteLinkUnlisted). More go in slices of GROUP_DELETE_SLICE, each slice put in one device group and
 * deleted in one request: the kernel unregisters them together and waits out one RCU barrier for all, not
 * ~20 ms for each (a reconcile removing 1,000 tunnels: 0.96 s instead of 22.6 s). docs/CONTRACTS.md "Dataplane".
 */
export async function deleteLinks(k: KernelContext, names: readonly string[], view: KernelView): Promise<void> {
  const seen: ObservedLink[] = [];
  const unseen: string[] = [];
  for (const name of names) {
    const l = view.links.get(name);
    if (l) seen.push(l);
    else unseen.push(name);
  }
  // The diff deletes only links its view saw; by name, as before, should a plan ever name another.
  await inChunks(unseen, (name) => k.rtnl.deleteLink(name).catch(ignoreCode('ENODEV')));
  if (seen.length <= UNLISTED_DELETES_MAX) {
    await Promise.all(seen.map((l) => deleteLinkUnlisted(k, l)));
    return;
  }
  await inChunks(
    seen.flatMap((l) => l.addresses.map((a) => ({ index: l.index, a }))),
    (x) => dropAddress(k, x.index, x.a),
  );
  for (let i = 0; i < seen.length; i += GROUP_DELETE_SLICE) await deleteGroup(k, seen.slice(i, i + GROUP_DELETE_SLICE));
}

/** A doomed link's address deleted before it (deleteLinks); already gone, or the link with it, is no error. */
function dropAddress(k: KernelContext, index: number, cidr: string): Promise<void> {
  return k.rtnl.deleteAddress(index, cidr).catch(ignoreCode('EADDRNOTAVAIL', 'ENODEV'));
}

/**
 * Links deleted in one request, at most: the request holds RTNL while the kernel unregisters them (~0.25 s per
 * 1,000 here), and every other RTNL user on the host (`ip`, routing daemons) waits that long.
 */
const GROUP_DELETE_SLICE = 1024;

/**
 * Puts these links in a device group of their own and deletes the group. The group number is one no
 * administrator picks (theirs are small: /etc/iproute2/group), drawn for each deletion; a link created meanwhile
 * starts in group 0, so nothing but these links is in it. A link gone meanwhile (ENODEV) is simply not in it.
 * When grouping fails halfway, the links already grouped are still deleted before the error is thrown, so none
 * is left up, without its address, in a stray group.
 */
async function deleteGroup(k: KernelContext, links: readonly ObservedLink[]): Promise<void> {
  const group = randomInt(1 << 24, 2 ** 31 - 1);
  let failure: unknown;
  await inChunks(links, (l) =>
    k.rtnl
      .setLinkGroup(l.index, group)
      .catch(ignoreCode('ENODEV'))
      .catch((e: unknown) => void (failure ??= e)),
  );
  // Off the event loop when it can be: the request blocks its sender until every link is unregistered.
  const rtnl = k.reaper?.() ?? k.rtnl;
  try {
    await rtnl.deleteLinkGroup(group).catch(ignoreCode('ENODEV'));
  } finally {
    if (rtnl !== k.rtnl) rtnl.close();
  }
  if (failure !== undefined) throw failure;
}

/** A plan deleting at most this many links (a one-tunnel job) waits for each only until it is unlisted. */
const UNLISTED_DELETES_MAX = 8;
/** Polls of a deletion's link that are not a timer tick apart (deleteLinkUnlisted). */
const UNLISTED_FAST_POLLS = 16;

/**
 * Deletes a link, returning once the kernel no longer lists it (its name is free, `ip link` shows nothing)
 * rather than once the kernel's deletion returns. In rtnetlink a deletion releases RTNL and then waits for an
 * RCU barrier before acking (netdev_run_todo; ~20 ms here against ~2 ms until the link is unlisted), blocking
 * whichever thread sent it: the reaper's sends run on a worker thread, so the job answers after ~2 ms and the
 * event loop (SSH, probes) never waits out the barrier (issue 10 item 4, docs/CONTRACTS.md "Dataplane"). The
 * route socket's own requests show when the link is gone: each takes RTNL, so it answers after the deletion's
 * part under RTNL, or before it started. A refusal (the link still listed) surfaces as the deletion's error.
 */
export async function deleteLinkUnlisted(k: KernelContext, link: { name: string; index: number; addresses?: readonly string[] }): Promise<void> {
  // Its addresses first, by key, so the link goes down with no route left to flush (deleteLinks).
  await Promise.all((link.addresses ?? []).map((a) => dropAddress(k, link.index, a)));
  if (!k.reaper) return k.rtnl.deleteLink(link.index).catch(ignoreCode('ENODEV'));
  let outcome: { error?: unknown } | undefined;
  const reaper = k.reaper();
  // By index, not by name: the request may still wait for a worker thread when the poll below finds the name
  // gone (the link deleted by someone else meanwhile); a later job may then create the name again, and a
  // deletion by name arriving late would take that new link. The kernel gives a new link the next free index,
  // never this one back, unless someone asks for it (`ip link add ... index N`, or a device moved into the
  // namespace keeping its index): that needs CAP_NET_ADMIN here, which could delete the link anyway.
  const deleting = reaper
    .deleteLink(link.index)
    .catch(ignoreCode('ENODEV'))
    .then(
      () => void (outcome = {}),
      (error: unknown) => void (outcome = { error }),
    )
    .finally(() => reaper.close());
  k.reaping?.add(deleting);
  void deleting.then(() => k.reaping?.delete(deleting));
  // The link leaves the lists ~1 ms after the request (one expedited RCU grace period under RTNL): the first
  // polls follow each other at once (each is one RTM_GETLINK round trip), later ones a timer tick apart.
  for (let polls = 0; ; polls++) {
    if (outcome) {
      if (outcome.error !== undefined) throw outcome.error;
      return;
    }
    if ((await k.rtnl.findLink(link.name))?.index !== link.index) return;
    await new Promise((r) => (polls < UNLISTED_FAST_POLLS ? setImmediate(r) : setTimeout(r, 1)));
  }
}

/**
 * Waits for the link deletions still finishing on their threads (deleteLinkUnlisted), for at most `ms`: a
 * deletion the kernel never finishes (a device whose references never drop: "unregister_netdevice: waiting
 * for ... to become free") must not hold the agent's shutdown forever. Resolves with how many were left.
 */
export async function awaitReaping(reaping: ReadonlySet<Promise<void>>, ms: number): Promise<number> {
  if (reaping.size === 0) return 0;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = await Promise.race([
    Promise.all(reaping).then(() => false),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), ms);
    }),
  ]);
  clearTimeout(timer);
  return timedOut ? reaping.size : 0;
}

const ignoreCode =
  (...codes: string[]) =>
  (e: unknown): void => {
    if (e instanceof NetlinkError && codes.includes(e.code)) return;
    throw e;
  };

/**
 * The generation id the kernel gives the ruleset after `commits` commits of one at `gen` (nf_tables_commit bumps
 * it by one per non-empty commit, skipping 0 on wrap-around).
 */
export const nextGeneration = (gen: number, commits = 1): number => {
  let g = gen;
  for (let i = 0; i < commits; i++) g = g >= 0xffffffff ? 1 : g + 1;
  return g;
};

/**
 * Tunnels added whole per nft batch beyond the first. A first apply of 10,000 tunnels with long port lists is
 * ~815,000 elements, a 30 MB batch whose buffer doubles its way there (RSS; issue 10 item 6): a batch of this
 * many tunnels is ~1.3 MB, and building it leaves ~10 MB resident until the release before the next (1,000
 * per batch: ~20 MB; 20 batches add ~1 s of releases to a 10,000-tunnel apply of ~13 s). Such tunnels have nothing in the kernel and nothing shared among
 * them, so each batch carries its tunnels whole (counters, map elements, policy elements): a tunnel is never
 * half committed, and traffic reaches none before its isolation and policy are in.
 */
export const WHOLE_PER_BATCH = 500;

/**
 * A plan's first nft batch: every change but the tunnels added whole beyond the first WHOLE_PER_BATCH (their map
 * elements, named by protected IP in `deferred`, go in their own batch). What the deleted elements referred to
 * goes after them; what added elements refer to comes before them.
 */
function firstBatch(t: string, n: NftChanges, deferred: ReadonlySet<string> | undefined): NftBatch {
  const b = new NftBatch();
  // Policy elements a scoped change deletes are added first (no error when present), so the delete cannot fail.
  addPolicyElements(b, t, n.ensureElements, 'add');
  if (n.delCounterMap.length) b.deleteElements({ table: t, set: COUNTER_MAP, elements: n.delCounterMap.map((a) => ipv4ObjElement(a, '')) });
  if (n.delDnat.length) b.deleteElements({ table: t, set: DNAT_MAP, elements: n.delDnat.map((a) => ipv4MapElement(a, '0.0.0.0')) });
  addPolicyElements(b, t, n.delElements, 'delete');
  for (const c of n.delRateLimits) deleteRateLimitChain(b, t, c);
  for (const s of n.delSynproxies) b.deleteSynproxy(t, s);
  for (const c of n.delCounters) b.deleteCounter(t, c);
  for (const c of n.addCounters) b.addCounter({ table: t, name: c });
  const whole = n.addWhole.slice(0, WHOLE_PER_BATCH);
  addWholeCounters(b, t, whole);
  for (const m of n.addSynproxies) addSynproxyObject(b, t, m);
  for (const p of n.addRateLimits) addRateLimitChain(b, t, p);
  const now = (e: readonly [string, string]): boolean => !deferred?.has(e[0]);
  addMapElements(b, t, n.addDnat.filter(now), n.addCounterMap.filter(now));
  addPolicyElements(b, t, n.addElements, 'add');
  addWholeElements(b, t, whole);
  return b;
}

/**
 * Carries out a plan: links, then nft batches (one, or one per WHOLE_PER_BATCH tunnels added whole), then
 * deletes of removed links, then conntrack.
 */
export async function applyPlan(
  k: KernelContext,
  plan: Plan,
  view: KernelView,
  commit: CommitOptions = {},
): Promise<{ flushed: number | undefined; disallowed: number; generation?: number; commits: number; ms: ApplyPhaseMs }> {
  const clock = phaseClock();
  const steps = plan.linkSteps;
  await step(k, 'links');
  // 1. recreated links go first, then creates (all requests in flight together: the socket coalesces them).
  await deleteLinks(
    k,
    steps.flatMap((s) => (s.op === 'delete' ? [s.name] : [])),
    view,
  );
  const creates = steps.filter((s) => s.op === 'create');
  // Large plans collect between phases (housekeeping/memory.ts): a lower peak for ~2% of the time.
  const between = phases('apply', steps.length + plan.linkDeletes.length).between;
  const nftMem = phases('apply', nftChangeCount(plan.nft));
  // A first apply in several batches also gives memory back around its nft phase: the link phase's garbage
  // (~20 MB at 10,000 tunnels) would stay resident under the batches, and theirs under what follows.
  const batches = phases('batches', Math.ceil(plan.nft.addWhole.length / WHOLE_PER_BATCH));
  between();
  await inChunks(creates, (s) => k.driver.create(k.rtnl, s.spec), between);
  between();
  const index = new Map([...view.links.values()].map((l) => [l.name, l.index]));
  if (creates.length > 0) {
    const fresh = await getLinks(k, creates.map((c) => c.name));
    for (const c of creates) {
      const l = fresh.get(c.name);
      if (!l) throw new NetlinkError({ errno: 19, operation: `link ${c.name} vanished right after its creation` });
      index.set(c.name, l.index);
    }
    // Two synchronous /proc writes per link (~40 ms per 1,000 here): in slices, the event loop turning between.
    for (let i = 0; i < creates.length; i += SYSCTL_SLICE) {
      if (i > 0) await turn();
      tunnelLinkSysctls(k.netns, creates.slice(i, i + SYSCTL_SLICE).map((c) => c.name));
    }
  }
  const idx = (name: string): number => {
    const i = index.get(name);
    if (i === undefined) throw new NetlinkError({ errno: 19, operation: `link ${name} not found` });
    return i;
  };
  // 2. MTU, addresses, up: independent of each other.
  const later: (() => Promise<void>)[] = [];
  for (const s of steps) {
    if (s.op === 'create' && !k.driver.mtuAtCreate) later.push(() => k.rtnl.setMtu(idx(s.name), s.spec.mtu));
    else if (s.op === 'mtu') later.push(() => k.rtnl.setMtu(idx(s.name), s.mtu));
    else if (s.op === 'addr-del') later.push(() => k.rtnl.deleteAddress(idx(s.name), s.cidr).catch(ignoreCode('EADDRNOTAVAIL')));
    else if (s.op === 'addr-add') later.push(() => k.rtnl.addAddress(idx(s.name), s.cidr).catch(ignoreCode('EEXIST')));
    else if (s.op === 'up') later.push(() => k.rtnl.setLinkUp(idx(s.name)));
  }
  await inChunks(later, (f) => f(), between);
  if (batches.large) batches.between();
  else {
    between();
    nftMem.between();
  }

  const linksMs = clock();
  await step(k, 'nftables commit');
  // 3. One atomic nft batch (a changed element is delete + add in it), and a batch per WHOLE_PER_BATCH further
  // tunnels added whole. The generation right after our last commit goes to index.ts run(), which compares it
  // with the one read before the plan's read-back, `commits` steps on. A plan read from the kernel sends no genid:
  // a commit by another nftables user in between must not fail its batch, it only means the agent cannot tell
  // which generation is its own. A plan built from the records (recordedView) sends the generation they were
  // proven at (`commit.genId`), as it read nothing.
  const n = plan.nft;
  const deferred = n.addWhole.length > WHOLE_PER_BATCH ? new Set(n.addWhole.slice(WHOLE_PER_BATCH).map((x) => x.protected_ip)) : undefined;
  let generation: number | undefined;
  let commits = 0;
  // Each batch's buffer is the next one's: after the first, none grows (or is freed) again.
  let storage: Buffer | undefined;
  const send = async (b: NftBatch, opts: CommitOptions = {}): Promise<void> => {
    storage = b.storage;
    if (b.messageCount === 0) return;
    await k.nft.commit(b, opts);
    commits++;
  };
  // Built in a call of its own, so the batch object is garbage once sent (its buffer is kept in `storage`).
  await send(firstBatch(k.table, n, deferred), commit);
  if (deferred) {
    const isDeferred = (e: readonly [string, string]): boolean => deferred.has(e[0]);
    const dnat = new Map(n.addDnat.filter(isDeferred));
    const ctr = new Map(n.addCounterMap.filter(isDeferred));
    for (let i = WHOLE_PER_BATCH; i < n.addWhole.length; i += WHOLE_PER_BATCH) {
      batches.between();
      const tunnels = n.addWhole.slice(i, i + WHOLE_PER_BATCH);
      const mapped = (m: ReadonlyMap<string, string>): [string, string][] => tunnels.flatMap((x) => (m.has(x.protected_ip) ? [[x.protected_ip, m.get(x.protected_ip)!] as [string, string]] : []));
      const b = new NftBatch({ storage });
      addWholeCounters(b, k.table, tunnels);
      addMapElements(b, k.table, mapped(dnat), mapped(ctr));
      addWholeElements(b, k.table, tunnels);
      await send(b);
      // Not after the last: getGeneration follows it, and a turn there gives another commit a chance to come first.
      if (i + WHOLE_PER_BATCH < n.addWhole.length) await turn();
    }
  }
  if (commits > 0) generation = await k.nft.getGeneration();
  (batches.large ? batches : nftMem).between();

  const nftMs = clock();
  // 4. Links of removed tunnels: traffic no longer goes to them.
  await step(k, 'link deletion');
  await deleteLinks(k, plan.linkDeletes, view);
  const unlinkMs = clock();

  await step(k, 'conntrack flush');
  // 5. Conntrack of every protected IP whose mapping appeared, changed or went; then the connections that a
  // narrowed allowlist no longer lets in, now that it is committed (a packet in between is judged as new).
  const flushed = await k.conntrack().flushDestinations(plan.flush);
  const disallowed = await k.conntrack().flushDisallowed(plan.narrowed.map((t) => ({ ip: t.protected_ip, allows: (proto, port) => allowsConnection(t, proto, port) })));
  return { flushed, disallowed, commits, ms: { links: linksMs, nft: nftMs, unlink: unlinkMs, conntrack: clock() }, ...(generation ? { generation } : {}) };
}

/** Milliseconds applyPlan spent per step, for the `dataplane.applied` log line (where a slow job's time went). */
export interface ApplyPhaseMs {
  links: number;
  nft: number;
  unlink: number;
  conntrack: number;
}

/** Each call returns the milliseconds since the previous one (or since the clock was made), to 0.1 ms. */
export function phaseClock(): () => number {
  let last = performance.now();
  return () => {
    const now = performance.now();
    const ms = Math.round((now - last) * 10) / 10;
    last = now;
    return ms;
  };
}
