// EdgeDataplane, the one DataplaneHandle: every operation one at a time (validate, read the kernel back, diff,
// record intent, apply, record the result), the reconcile's short cut when the nftables generation proves
// nothing changed, and the read-only accessors (probe, counters, the attack vector). A reconcile the kernel refuses
// as a whole is taken tunnel by tunnel by isolate.ts. createDataplane() in index.ts opens its sockets and journals
// and builds one.
import { NetlinkError, Rtnl } from '../netlink/client.ts';
import { checkDesired, diff } from './diff.ts';
import { heldSpecs, intentOver, recordedSpecs, type OwnedTunnel } from './records.ts';
import { ipOf, linkStepsFor } from './link-steps.ts';
import { sameSpec } from './spec-compare.ts';
import { step, type KernelContext, type LazySockets } from './kernel/context.ts';
import { FALLBACK_TUNNEL_LINKS, awaitReaping, readLinks } from './kernel/links.ts';
import { ensureBogons, ensureTable, flushDisallowed } from './kernel/table.ts';
import { DEFAULT_EDGE_PPS } from './sizing.ts';
import { ConntrackSizer } from './conntrack-sizer.ts';
import { RepairOnTouch } from './repair-on-touch.ts';
import { readConsistently, readView, recordedView, scopedReadOf, type ScopedRead } from './kernel/read.ts';
import { applyPlan, nextGeneration, phaseClock } from './kernel/apply.ts';
import { CommitWatch } from './commit-watch.ts';
import { readCounterPackets, readCounters, readDropped } from './kernel/counters.ts';
import { readVector, watchVector, type VectorRead } from './kernel/vector.ts';
import { EchoProber } from './probe.ts';
import { ownerDigests } from './policy.ts';
import { isolateRefused } from './isolate.ts';
import type { DropReason } from '../netlink/ruleset.ts';
import type { StateStore } from './state.ts';
import { ReleaseAfterOperations, phases } from '../housekeeping/memory.ts';
import { SerialQueue } from '../housekeeping/serial-queue.ts';
import { activity } from '../housekeeping/activity.ts';
import { KernelError, kernelError, type ChangeCounts, type ProbeResult, type ReconcileResult, type TunnelRef, type TunnelSpec } from './types.ts';
import { InvalidTunnel, validateRef, validateSpec } from './validate.ts';
import type { Capacity, DataplaneHandle, DataplaneOptions } from './handle.ts';
import type { TunnelLinks } from '../../common/tunnel-links.ts';

/** The probes' route socket takes one link's answer per datagram (~1 KB without stats): no dump's 1 MB buffer. */
const PROBE_RECEIVE_BYTES = 64 * 1024;

/** How long close() waits for link deletions still in the kernel (each normally takes ~20 ms). */
const CLOSE_REAPING_WAIT_MS = 5_000;

export class EdgeDataplane implements DataplaneHandle {
  private readonly queue = new SerialQueue();
  private closed = false;
  /** Set by run() when the operation it carried out was large enough to release memory right after. */
  private largeOperation = false;
  private readonly release = new ReleaseAfterOperations();
  /** One raw ICMP socket for every probe, opened in the dataplane's namespace at the first (probe.ts). */
  private readonly prober: EchoProber;
  /**
   * The nftables generation id at which the table is known to hold exactly what the records say: left by the
   * agent's own last operation when that operation read a consistent view and its commit was the only one in
   * between (run()). Any other commit in the namespace (an `nft` by hand) moves the kernel's id past it; the
   * watch then tells whether those commits touched the table (provenGeneration), and when it cannot tell, the
   * next reconcile reads everything back (docs/CONTRACTS.md "Dataplane"). In memory only: a restarted agent
   * reads everything once.
   */
  private cleanGeneration: number | undefined;
  /** Listens to other programs' commits between the agent's own operations (commit-watch.ts). */
  private readonly watch: CommitWatch;
  /** The probes' route socket (probe.ts LinkLookup), opened at the first probe. */
  private probeRtnl?: Rtnl;
  /** The repair a touch of the table schedules (repair-on-touch.ts). */
  private readonly repair: RepairOnTouch;
  /** The sizes the agent wants for the connection table and the meters, and whether it set the kernel's. */
  /** nf_conntrack_max and its buckets for the desired tunnels (conntrack-sizer.ts). */
  private readonly sizer: ConntrackSizer;

  constructor(
    private readonly k: KernelContext,
    private readonly state: StateStore,
    /** The last desired state (DESIRED_FILE), recorded before each change reaches the kernel. */
    private readonly desired: StateStore,
    private readonly opts: DataplaneOptions,
    readonly table: 'created' | 'present' | 'rebuilt',
    private readonly log: (event: string, fields?: Record<string, unknown>) => void,
    private readonly ct: LazySockets,
    /** nf_conntrack_max and its buckets as the kernel had them at start: the floor of the agent's sizes (undefined: unreadable, nothing set). */
    kernelLimits: { max: number; buckets: number } | undefined,
  ) {
    // The probes look their links up on a route socket of their own: not queued behind a reconcile's dumps on
    // the dataplane's (each is one small GET, and concurrent checks' GETs leave in one sendto).
    this.prober = new EchoProber(k.netns, (name) => (this.probeRtnl ??= Rtnl.open({ netns: k.netns, receiveBytes: PROBE_RECEIVE_BYTES })).linkState(name));
    this.watch = new CommitWatch({
      netns: k.netns,
      table: k.table,
      unavailable: (error) => this.log('dataplane.commit_watch_unavailable', { error }),
      ended: (v) => this.repair.schedule(v.why),
    });
    this.repair = new RepairOnTouch({
      enabled: opts.healOnTouch !== false,
      repair: () => this.restore(),
      log: (event, fields) => this.log(event, fields),
    });
    this.sizer = new ConntrackSizer({
      netns: k.netns,
      meterSources: k.sizes.meterSources,
      edgePps: opts.edgePps ?? DEFAULT_EDGE_PPS,
      kernelLimits,
      maxFlows: () => [...this.desired.tunnels.values()].map((o) => o.spec.policy?.max_flows),
      log: (event, fields) => this.log(event, fields),
    });
    this.sizer.resize();
  }

  capacity(): Capacity {
    return this.sizer.capacity();
  }

  /**
   * The generation at which the table is known, now, to hold what the records say: the agent's own last one, or a
   * later one when the watch heard every commit since and none named the table. Undefined when nothing proves it
   * (then the clean generation is forgotten, and the next reconcile reads the table back).
   */
  private async provenGeneration(): Promise<number | undefined> {
    const clean = this.cleanGeneration;
    if (clean === undefined) return undefined;
    const gen = await this.k.nft.getGeneration();
    if (gen === clean) return clean;
    const v = this.watch.cleanThrough(gen);
    this.log('dataplane.commits_heard', { since: clean, generation: gen, ...(v ? (v.clean ? { untouched: true } : { untouched: false, why: v.why, ...(v.by ? { by: v.by } : {}) }) : { untouched: false, why: 'not_watching' }) });
    this.cleanGeneration = v?.clean ? v.generation : undefined;
    return this.cleanGeneration;
  }

  /**
   * One operation at a time; errors surface as KernelError. Each is a track of the watchdog (housekeeping/activity.ts):
   * one without progress for its time fails here naming its step, and the queue goes on to the next operation (which
   * reads the kernel back, so it repairs whatever the stuck one left), while nothing more of the stuck one reaches
   * the kernel.
   */
  private serial<T>(op: string, fn: () => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      if (this.closed) throw new KernelError(`${op}: dataplane is closed`);
      try {
        return await activity.run(op, fn);
      } catch (e) {
        this.log('dataplane.error', { op, error: e instanceof Error ? e.message : String(e) });
        throw kernelError(op, e);
      }
    };
    const p = this.queue.run(run);
    const after = (): void => {
      // Memory goes back to the OS after an operation that read or changed many tunnels (housekeeping/memory.ts).
      const large = this.largeOperation;
      this.largeOperation = false;
      if (!this.closed) this.release.operationFinished(large);
    };
    void p.then(after, after);
    return p;
  }

  private checkSpec(t: TunnelSpec): TunnelSpec {
    const spec = validateSpec(t, this.k.linkPrefix);
    if (t.edge_ip !== this.opts.edgeIp) throw new InvalidTunnel(`edge_ip ${t.edge_ip} is not this router's ${this.opts.edgeIp}`);
    return spec;
  }

  private async run(desired: TunnelSpec[], scope: 'all' | Set<string>, orphans: string[] = [], keep?: ReadonlySet<string>): Promise<ChangeCounts> {
    const owned = this.state.tunnels;
    // The table matches the records after this operation only if it did before (a full read, or the clean
    // generation still current) and nobody else committed while it ran; a failure leaves it unknown.
    // A scoped change may take its table side from the records (below); a reconcile reads everything anyway.
    const clean = scope === 'all' ? undefined : await this.provenGeneration();
    this.cleanGeneration = undefined;
    // Not listening while the agent commits: every element of its batches would be a notification (commit-watch.ts).
    this.watch.stop();
    const clock = phaseClock();
    // The records this change may alter: all of them for a reconcile, else the scope's, looked up by id (a
    // single-tunnel change never walks every record: a job must not grow with the node), and every spec the kernel may hold for them.
    const inScope: OwnedTunnel[] = [];
    if (scope === 'all') for (const o of owned.values()) inScope.push(o);
    else
      for (const id of scope) {
        const o = owned.get(id);
        if (o) inScope.push(o);
      }
    const recorded = recordedSpecs(inScope);
    const names = new Set<string>();
    for (const t of recorded) names.add(t.tunnel_name);
    for (const t of desired) names.add(t.tunnel_name);
    for (const n of FALLBACK_TUNNEL_LINKS) names.delete(n);
    // A scoped change reads only its own tunnels' elements, counters and objects, by key and by name (kernel/read.ts).
    const scoped: ScopedRead | undefined = scope === 'all' ? undefined : scopedReadOf(desired, recorded, orphans);
    // Read from the kernel, the generation is requested before the read-back, on the same socket (which answers in
    // order), and both are awaited together: no other round trip in between for a one-tunnel job.
    // A reconcile compares the kernel's elements by digest per owner with what it wants or keeps (KernelView.cleanOwners).
    const kept = [...(keep ?? [])].flatMap((id) => {
      const o = owned.get(id);
      return o ? heldSpecs(o) : [];
    });
    const wanted = scope === 'all' ? ownerDigests([...desired, ...kept]) : undefined;
    // A scoped change on a table that no commit touched since the agent's own last one (cleanGeneration) takes the
    // table's side from its records and reads only the links: the ~81 GETs of a long port list are most of a
    // one-tunnel job's read otherwise. Its batch carries that generation, so a commit by anyone in between refuses
    // it (ERESTART) and the change runs again with the kernel read back: its intent then still names the spec it
    // replaces (OwnedTunnel.was), whose old link, map elements and ports that run reads and removes.
    const trusted = scoped !== undefined && clean !== undefined && inScope.every((o) => !o.pending);
    await step(this.k, 'read back the kernel');
    const [gen0, view] = trusted
      ? [clean, await readConsistently(() => recordedView(this.k, [...names], recorded, { mss: this.state.index.mssUsers().keys(), chains: this.state.index.chainUsers().keys() }))]
      : await readConsistently(() => Promise.all([this.k.nft.getGeneration(), readView(this.k, [...names], owned, scope === 'all', scoped, wanted)]));
    const readMs = clock();
    const knownBefore = (scope === 'all' && !keep?.size) || (scope !== 'all' && clean === gen0);
    // A large operation collects between read-back, diff and apply (housekeeping/memory.ts): each phase's
    // garbage (tens of thousands of decoded objects, Map tables outgrown) is gone before the next allocates.
    const mem = phases('operation', names.size);
    mem.between();
    const pace = phases('read', names.size);
    const plan = diff({ desired, owned, index: this.state.index, view, scope, orphanProtectedIps: orphans, ...(keep ? { keep } : {}), ...(pace.large ? { pace: pace.between } : {}) });
    mem.between();
    const c = plan.counts;
    if (mem.large || phases('operation', c.added + c.changed + c.removed).large) this.largeOperation = true;
    // What the change read its table side from: the records (a one-tunnel job on the agent's own generation), the
    // kernel by key (a one-tunnel job otherwise) or the whole table (a reconcile).
    this.log('dataplane.planned', { ...c, read: trusted ? 'records' : scoped ? 'keys' : 'full' });
    // Intent first: a link the agent is about to create is on record before it exists.
    await step(this.k, 'record intent');
    const intents: OwnedTunnel[] = [];
    for (const t of desired) if (plan.actions.get(t.id) !== 'unchanged') intents.push(intentOver(owned.get(t.id), t));
    this.state.commit(intents, []);
    const planMs = clock();
    let applied: Awaited<ReturnType<typeof applyPlan>>;
    try {
      applied = await applyPlan(this.k, plan, view, trusted ? { genId: gen0 } : {});
    } catch (e) {
      if (!(trusted && e instanceof NetlinkError && e.code === 'ERESTART')) throw e;
      // Someone committed since the generation was read: the records may no longer be the table. The intents
      // stay pending, so the second run adds what the tunnel wants whatever the kernel kept.
      this.log('dataplane.generation_moved', { tunnels: names.size });
      return this.run(desired, scope, orphans, keep);
    }
    const { flushed, disallowed, generation, commits, ms } = applied;
    clock(); // applyPlan timed its own steps (ms)
    await step(this.k, 'record result');
    const puts = desired.filter((t) => plan.actions.get(t.id) !== 'unchanged').map((t) => ({ spec: t }));
    const dels = [...plan.actions].filter(([, a]) => a === 'removed').map(([id]) => id);
    this.state.commit(puts, dels);
    if (knownBefore) {
      if (generation === undefined) {
        if ((await this.k.nft.getGeneration()) === gen0) this.cleanGeneration = gen0;
      } else if (generation === nextGeneration(gen0, commits)) {
        // Each of our commits is one step: exactly that many past gen0 means no other commit since the read-back.
        this.cleanGeneration = generation;
      }
    }
    // Listening again from the agent's own generation; a commit by anyone before the socket listens leaves it off.
    // A commit by someone else between this operation's and the listening leaves the watch off: whether it touched the
    // table is not known, so it is repaired as one that did (a `nft flush ruleset` right after a job must not wait
    // for the gateway's next reconcile). Not when the watch cannot work here at all: that would repair every second.
    if (this.cleanGeneration !== undefined && !(await this.watch.start(this.cleanGeneration, () => this.k.nft.getGeneration())) && this.watch.available) this.repair.schedule('gap');
    // The connection table's size follows the tunnels' max_flows.
    this.sizer.resize();
    const recordMs = clock();
    // Where the time went, per step: read-back, plan (with the intent records), the kernel's steps, the records after.
    const phaseMs = { read: readMs, plan: planMs, ...ms, record: recordMs };
    this.log('dataplane.applied', { ...plan.counts, links: plan.linkSteps.length + plan.linkDeletes.length, conntrackFlushed: flushed, conntrackDisallowed: disallowed, ms: phaseMs });
    return plan.counts;
  }

  apply(tunnel: TunnelSpec): Promise<ChangeCounts> {
    return this.serial('apply', async () => {
      const t = this.checkSpec(tunnel);
      this.desired.commitSpecs([t], []);
      return this.run([t], new Set([t.id]));
    });
  }

  remove(tunnel: TunnelRef): Promise<ChangeCounts> {
    return this.serial('remove', async () => {
      validateRef(tunnel, this.k.linkPrefix);
      this.desired.commitSpecs([], [tunnel.id]);
      const known = this.state.tunnels.has(tunnel.id);
      return this.run([], new Set([tunnel.id]), known ? [] : [tunnel.protected_ip]);
    });
  }

  reconcile(tunnels: TunnelSpec[]): Promise<ReconcileResult> {
    return this.serial('reconcile', async () => {
      // A spec the same as the one on record is the record's object: the records, the desired state and the
      // change then share one copy of 10,000 specs instead of holding two through the operation (RSS).
      const recorded = this.desired.tunnels;
      const desired = tunnels.map((t) => {
        const spec = this.checkSpec(t);
        const had = recorded.get(spec.id)?.spec;
        return had && sameSpec(had, spec) ? had : spec;
      });
      // Two tunnels sharing an id, a name or a protected IP make the set itself wrong, not one tunnel.
      checkDesired(desired);
      this.desired.commitSpecs(desired, 'replace');
      try {
        await step(this.k, 'check for changes');
        if (await this.unchangedSince(desired)) {
          this.log('dataplane.reconcile.unchanged', { tunnels: desired.length });
          return { added: 0, changed: 0, removed: 0, unchanged: desired.length, failed: [] };
        }
        await step(this.k, 'make sure of the table');
        await this.ensureOwnTable();
        return { ...(await this.run(desired, 'all')), failed: [] };
      } catch (e) {
        // Given up as stuck: nothing more of it may reach the kernel, so there is nothing to isolate.
        if (activity.givenUp()) throw e;
        // One broken tunnel must not block its node (the others are paid for and must run): find the ones the kernel refuses and
        // apply everything else.
        this.log('dataplane.reconcile.isolating', { tunnels: desired.length, error: e instanceof Error ? e.message : String(e) });
        return isolateRefused(desired, {
          applyScoped: (group) => this.run(group, new Set(group.map((t) => t.id))),
          reconcileRest: (rest, failed) => this.run(rest, 'all', [], failed),
          log: (event, fields) => this.log(event, fields),
        });
      }
    });
  }

  /**
   * A reconcile's short cut (10,000 unchanged tunnels must reconcile in well under a second): true when
   * nothing can have changed. The desired set is exactly the agent's confirmed records, and the nftables
   * generation id is still the one the agent's own last operation left (cleanGeneration), so no batch by anyone
   * has touched any table since, or every commit since was heard and none touched the agent's table (the watch:
   * provenGeneration): the maps, sets, counters and objects are what the records say, and are not read back.
   * Links have no such id: they are read (one link dump, one address dump) and must need nothing.
   * Anything else is the full reconcile's work (read everything back, diff, repair).
   */
  private async unchangedSince(desired: readonly TunnelSpec[]): Promise<boolean> {
    const owned = this.state.tunnels;
    if (this.cleanGeneration === undefined || desired.length !== owned.size) return false;
    for (const t of desired) {
      const o = owned.get(t.id);
      if (!o || o.pending || !sameSpec(o.spec, t)) return false;
    }
    if ((await this.provenGeneration()) === undefined) return false;
    const links = await readConsistently(() => readLinks(this.k, desired.map((t) => t.tunnel_name), owned));
    if (!desired.every((t) => linkStepsFor(t, links.get(t.tunnel_name)).length === 0)) return false;
    // The links were read after the generation: a commit while they were read must be proven too.
    return (await this.provenGeneration()) !== undefined;
  }

  /**
   * The full path's first step, as at the agent's start (kernel/table.ts ensureTable): the table is there and holds the
   * agent's rules. `nft flush ruleset` deletes it (Debian's nftables.service runs one at every start and reload),
   * and a running agent could then neither read nor repair anything until restarted; rules changed by hand are
   * rebuilt keeping every element, and the connections they let in that the policies would not are flushed.
   */
  private async ensureOwnTable(): Promise<void> {
    // Its check builds and deletes a reference copy: the agent's own commits, not to be heard as another's.
    this.watch.stop();
    this.cleanGeneration = undefined;
    const table = await ensureTable(this.k);
    if (table === 'present') {
      if (await ensureBogons(this.k)) this.log('dataplane.bogons_restored', { table: this.k.table });
      return;
    }
    const disallowed = table === 'rebuilt' ? await flushDisallowed(this.k, this.state) : 0;
    this.log('dataplane.table_restored', { table: this.k.table, tableState: table, conntrackDisallowed: disallowed });
  }

  restore(): Promise<ReconcileResult> {
    const specs = this.desiredTunnels();
    this.log('dataplane.restore', { tunnels: specs.length });
    return this.reconcile(specs);
  }

  tunnelLinks(): Promise<TunnelLinks> {
    return this.k.driver.support(this.k.rtnl);
  }

  desiredTunnels(): TunnelSpec[] {
    return [...this.desired.tunnels.values()].map((o) => o.spec);
  }

  probe(tunnel: TunnelSpec, opts: { timeoutMs?: number } = {}): Promise<ProbeResult> {
    // Not serialised: a probe waits on the network, not the kernel's configuration, and changes nothing.
    return (async () => {
      try {
        const t = this.checkSpec(tunnel);
        // A link that is missing or down answers `reachable: false` at once (the prober looks it up).
        return await this.prober.probe({ link: t.tunnel_name, source: t.edge_ip, target: ipOf(t.origin_inner), timeoutMs: opts.timeoutMs ?? this.opts.probeTimeoutMs });
      } catch (e) {
        throw kernelError('probe', e);
      }
    })();
  }

  async has(id: string): Promise<boolean> {
    const o = this.state.tunnels.get(id);
    return o !== undefined && !o.pending;
  }

  tunnels(): TunnelSpec[] {
    return [...this.state.tunnels.values()].map((o) => o.spec);
  }

  dropped(tunnel: Pick<TunnelSpec, 'tunnel_name'>): Promise<Record<DropReason, number>> {
    return readDropped(this.k, tunnel);
  }

  counters(): Promise<Map<string, { packets: bigint; bytes: bigint }>> {
    return readCounters(this.k);
  }
  counterPackets(names: readonly string[]): Promise<Map<string, bigint>> {
    return readCounterPackets(this.k, names);
  }
  readonly vector = { read: (): Promise<VectorRead> => readVector(this.k), watch: (ips: ReadonlySet<string>, clean: boolean): Promise<void> => this.ownCommits('vector watch', () => watchVector(this.k, ips, clean)) };

  /**
   * Commits of the agent's own outside a reconcile (the vector watch), one operation in the queue: the commit watch
   * stops for them and starts again from their generation, so they are not heard as another program's touch (a
   * repair, and the reconcile's short cut lost). `fn` returns how many commits it made.
   */
  private ownCommits(op: string, fn: () => Promise<number>): Promise<void> {
    return this.serial(op, async () => {
      const gen0 = await this.provenGeneration();
      this.watch.stop();
      this.cleanGeneration = undefined;
      const gen = nextGeneration(gen0 ?? 0, await fn());
      if (gen0 !== undefined && (await this.k.nft.getGeneration()) === gen) this.cleanGeneration = gen;
      if (this.cleanGeneration !== undefined && !(await this.watch.start(this.cleanGeneration, () => this.k.nft.getGeneration())) && this.watch.available) this.repair.schedule('gap');
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    await this.queue.drained();
    this.closed = true;
    this.repair.close();
    this.release.stop();
    this.watch.close();
    // Sockets and the journal only: the kernel state stays, traffic keeps flowing.
    this.prober.close();
    this.probeRtnl?.close();
    this.k.rtnl.close();
    this.k.nft.close();
    // Link deletions still finishing on a worker thread (kernel/links.ts deleteLinkUnlisted) return before close()
    // does, unless the kernel holds one past CLOSE_REAPING_WAIT_MS: then close() says so and goes on.
    const left = await awaitReaping(this.ct.reaping, CLOSE_REAPING_WAIT_MS);
    if (left > 0) this.log('dataplane.close.deletions_pending', { links: left, waitedMs: CLOSE_REAPING_WAIT_MS });
    this.ct.sock?.close();
    this.state.close();
    this.desired.close();
  }
}
