// Carrying out a Plan in the kernel, in its order: links first (created, then MTU, addresses, up), then one
// atomic nftables batch (or one per WHOLE_PER_BATCH tunnels added whole), then the links of removed tunnels,
// then conntrack. Apart from the diff (diff.ts), which decides what the plan holds, and from the reads
// (read.ts) that the diff compares against.
import { NetlinkError, NftBatch, ipv4MapElement, ipv4ObjElement, type CommitOptions } from '../../netlink/client.ts';
import { addDynamicChain, addSynproxyObject, deleteDynamicChain, type DynamicChainSizes } from '../../netlink/ruleset-chains.ts';
import { allowsConnection } from '../policy.ts';
import { nftChangeCount, type KernelView, type NftChanges, type Plan } from '../plan.ts';
import { phases } from '../../housekeeping/memory.ts';
import { COUNTER_MAP, DNAT_MAP, ignoreCode, inChunks, step, turn, type KernelContext } from './context.ts';
import { addMapElements, addPolicyElements, addWholeCounters, addWholeElements } from './batch.ts';
import { SYSCTL_SLICE, deleteLinks, getLinks, tunnelLinkSysctls } from './links.ts';

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
 * ~815,000 elements, a 30 MB batch whose buffer doubles its way there (the agent's RSS at the apply's peak): a batch of this
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
function firstBatch(t: string, n: NftChanges, deferred: ReadonlySet<string> | undefined, sizes: DynamicChainSizes, damaged: ReadonlySet<string> | undefined): NftBatch {
  const b = new NftBatch();
  // Policy elements a scoped change deletes are added first (no error when present), so the delete cannot fail.
  addPolicyElements(b, t, n.ensureElements, 'add');
  if (n.delCounterMap.length) b.deleteElements({ table: t, set: COUNTER_MAP, elements: n.delCounterMap.map((a) => ipv4ObjElement(a, '')) });
  if (n.delDnat.length) b.deleteElements({ table: t, set: DNAT_MAP, elements: n.delDnat.map((a) => ipv4MapElement(a, '0.0.0.0')) });
  addPolicyElements(b, t, n.delElements, 'delete');
  for (const c of n.delChains) deleteDynamicChain(b, t, c);
  for (const s of n.delSynproxies) b.deleteSynproxy(t, s);
  for (const c of n.delCounters) b.deleteCounter(t, c);
  for (const c of n.addCounters) b.addCounter({ table: t, name: c });
  const whole = n.addWhole.slice(0, WHOLE_PER_BATCH);
  addWholeCounters(b, t, whole);
  for (const m of n.addSynproxies) addSynproxyObject(b, t, m);
  for (const c of n.addChains) addDynamicChain(b, t, c, sizes, { repair: damaged?.has(c) ?? false });
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
  // tunnels added whole. The generation right after our last commit goes to edge-dataplane.ts run(), which compares it
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
  await send(firstBatch(k.table, n, deferred, k.sizes, view.damagedChains), commit);
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
