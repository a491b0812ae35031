// The edge worker: takes jobs from the queue, signs them (EdDSA, the persisted job-signing key), runs
// them on the node's agent over the warm, host-key-pinned SSH connection, and moves the tunnel through
// the lifecycle. A job names a tunnel; what to do comes from the tunnel's status at that moment
// (provisioning -> apply, deleting -> remove, anything else -> nothing), so replays are harmless.
//
// Reconciliation: the worker sends a node a full `reconcile` (its whole desired set) before the first
// job after it started, and again after any failed contact or dropped connection. So a node that comes
// back (agent restarted, network healed, edge rebuilt) is brought to the desired state at its next
// contact, before anything else runs on it; jobs are one at a time per node, so nothing interleaves.
// Reconcile jobs (queued periodically and when a node's connection drops; service.ts) do the same
// without waiting for a tunnel job. A reconcile that fails for some tunnels never blocks the node
// (one broken tunnel must not block its node): the failures are logged, the node counts as reconciled, and each broken tunnel's
// own job fails and retries until that tunnel alone ends `failed`.
//
// Versions (docs/CONTRACTS.md "Versions"): each job is signed for one connection and the agent's answer
// to `hello` on it (connections.ts EdgeSession): the newest version both list, never a version the agent
// did not list. A tunnel policy other than the default cannot travel in version 1: to an agent that speaks
// only version 1 (mid rolling upgrade) the tunnel goes without its policy, so it keeps forwarding, and
// `edge_policy_not_enforced` is logged once per connection naming the node. Likewise `forwarding: false`
// (an origin that has not answered the activate probe) needs version 3: an older agent gets the tunnel
// without it and forwards as it always did, and `edge_forwarding_not_enforced` is logged the same way.
//
// A failure only an operator can fix (no pinned host key, an agent presenting another host key, the
// gateway's key refused) is not retried: the job fails at once (queue.ts FinalJobFailure) and a
// provision ends `failed` (docs/CONTRACTS.md "Tunnel lifecycle").
import type { Database } from '../db/database.ts';
import type { Logger } from '../../common/log.ts';
import type { JobBodies, Op, ResultLine } from '../edge/job-signing.ts';
import { STATUS_OP, signEventsJob, signJob, signStatusJob, signTrafficJob } from '../edge/job-signing.ts';
import { FEATURE_TRAFFIC_LIVE, checkTrafficResult, type TrafficBody, type TrafficResult } from '../../common/traffic-live.ts';
import type { LineChannel, LineChannelOptions } from '../edge/line-channel.ts';
import { FEATURE_EVENTS } from '../../common/edge-events.ts';
import { FEATURE_STATUS_DELTA, checkStatusResult, type StatusCursor, type StatusResult } from '../../common/tunnel-status.ts';
import type { EdgeConnections, EdgeNode, EdgeSession } from '../edge/connections.ts';
import { EdgeSshError } from '../edge/result-line.ts';
import type { JobSigningKey } from '../secrets.ts';
import type { ProbeResult, TunnelSpec } from '../../common/tunnel-spec.ts';
import { JOB_VERSION_1, JOB_VERSION_FORWARDING, type JobVersion } from '../../common/job-contract.ts';
import { isDefaultPolicy } from '../../common/tunnel-policy.ts';
import { desiredSet, edgeNode, edgeTunnel } from './edge-state.ts';
import { FinalJobFailure, isReconcileJob, type EdgeJob } from './queue.ts';
import type { Transitions } from './transitions.ts';
import { recordTunnelLinks } from '../domain/nodes.ts';
import type { TunnelLinks } from '../../common/tunnel-links.ts';
import { attackSettingsFor } from '../attacks/wire.ts';

/** The agent answered `ok: false`: delivered, but refused or failed on the kernel. */
export class AgentRefused extends Error {
  override name = 'AgentRefused';
  constructor(
    readonly code: string,
    description: string,
  ) {
    super(`${code}: ${description}`);
  }
}

/**
 * Whether a failed contact needs an operator rather than a retry: the node has no pinned host key, its
 * agent presented another host key (nothing was sent), or it refused the gateway's key. Such a job fails
 * at once: a provision ends `failed` without spending its retries against an edge that cannot be trusted.
 */
function needsOperator(e: unknown): boolean {
  return (e instanceof EdgeSshError && !e.retryable) || (e instanceof AgentRefused && e.code === 'no_host_key');
}

/** One tunnel a reconcile could not apply, as the agent reports it (`failed` in the reconcile result). */
export interface ReconcileFailure {
  id: string;
  error: string;
  error_description: string;
}

/**
 * The `failed` list of a reconcile result: `[{id, error, error_description}]`; agents from before it
 * existed leave it out (none). Entries of another shape are kept with what can be read of them.
 */
export function reconcileFailures(result: unknown): ReconcileFailure[] {
  const failed = (result as { failed?: unknown } | null)?.failed;
  if (!Array.isArray(failed)) return [];
  return failed.map((f: unknown) => {
    const o = (typeof f === 'object' && f !== null ? f : {}) as Record<string, unknown>;
    const text = (v: unknown, fallback: string) => (typeof v === 'string' ? v.slice(0, 500) : fallback);
    return { id: text(o.id, 'unknown'), error: text(o.error, 'kernel_error'), error_description: text(o.error_description, '') };
  });
}

/** A tunnel as job version `v` carries it: version 1 has no `policy`, versions 1 and 2 no `forwarding`. */
function specFor(t: TunnelSpec, v: JobVersion): TunnelSpec {
  const dropPolicy = v === JOB_VERSION_1 && t.policy !== undefined;
  const dropForwarding = v < JOB_VERSION_FORWARDING && t.forwarding !== undefined;
  if (!dropPolicy && !dropForwarding) return t;
  const out = { ...t };
  if (dropPolicy) delete out.policy;
  if (dropForwarding) delete out.forwarding;
  return out;
}

/**
 * The body as version `v` carries it, with the ids of tunnels put on the edge (apply, reconcile) that it could
 * not carry whole: `unenforced`, a non-default policy left out (version 1), and `forwarded`, a tunnel whose
 * origin has not answered the activate probe, which an agent before version 3 forwards anyway (it has no way to
 * hold a DNAT back). A remove or a probe needs neither.
 */
export function bodyFor<O extends Op>(op: O, body: JobBodies[O], v: JobVersion): { body: JobBodies[O]; unenforced: string[]; forwarded: string[] } {
  // A body without tunnels (status, traffic) is the same in every version that has the op.
  if (!('tunnels' in body) && !('tunnel' in body)) return { body, unenforced: [], forwarded: [] };
  const tunnels: TunnelSpec[] = 'tunnels' in body ? body.tunnels : [body.tunnel as TunnelSpec];
  const places = op === 'apply' || op === 'reconcile';
  const unenforced = v === JOB_VERSION_1 && places ? tunnels.filter((t) => t.policy !== undefined && t.policy !== null && !isDefaultPolicy(t.policy)).map((t) => t.id) : [];
  const forwarded = v < JOB_VERSION_FORWARDING && places ? tunnels.filter((t) => t.forwarding === false).map((t) => t.id) : [];
  if (v >= JOB_VERSION_FORWARDING) return { body, unenforced, forwarded };
  const out = 'tunnels' in body ? { tunnels: body.tunnels.map((t) => specFor(t, v)) } : { tunnel: specFor(body.tunnel as TunnelSpec, v) };
  return { body: out as JobBodies[O], unenforced, forwarded };
}

/** The agent speaks job version 1 only: it has no `status` op (its tunnels' health stays unknown). */
export class StatusUnsupported extends Error {
  override name = 'StatusUnsupported';
}

/** The agent does not take op `traffic` (an agent from before it, or one that speaks job version 1 only). */
export class TrafficUnsupported extends Error {
  override name = 'TrafficUnsupported';
}

/** How one edge job ended, for /metrics: `ok`, the agent's error code, or the transport failure's kind. */
function jobOutcome(e: unknown): string {
  if (e === undefined) return 'ok';
  if (e instanceof AgentRefused) return e.code;
  if (e instanceof EdgeSshError) return e.kind;
  if (e instanceof StatusUnsupported || e instanceof TrafficUnsupported) return 'unsupported_version';
  return 'error';
}

/** Told of every edge job this worker sent: op, outcome (jobOutcome) and its duration in seconds. */
export type JobObserver = (op: string, outcome: string, seconds: number) => void;

export interface EdgeWorkerOptions {
  db: Database;
  connections: EdgeConnections;
  signingKey: JobSigningKey;
  transitions: Transitions;
  log: Logger;
  /** Per job on the agent (connect included). */
  jobTimeoutMs: number;
  /** Each job's op, outcome and duration (the /metrics histogram). */
  onJob?: JobObserver;
  /** A node's ability to carry tunnels changed (docs/CONTRACTS.md "Tunnel links"): the stock purchases can take changed. */
  onStockChange?: () => void;
}

export class EdgeWorker {
  /** Nodes this process has reconciled since its last failed contact with them. */
  private readonly inSync = new Set<string>();
  /** Connections whose hello was logged, and those warned of a policy or a held-back DNAT they could not carry: once per connection. */
  private readonly greeted = new WeakSet<EdgeSession>();
  private readonly policyWarned = new WeakSet<EdgeSession>();
  private readonly forwardingWarned = new WeakSet<EdgeSession>();

  constructor(private readonly o: EdgeWorkerOptions) {}

  /** The connection pool reports a lost connection: the next contact reconciles first. */
  nodeLost(nodeId: string): void {
    this.inSync.delete(nodeId);
  }

  /** Signs and runs one job on a node; transport failures throw EdgeSshError, `ok: false` throws AgentRefused. */
  async run<O extends Op>(node: EdgeNode, op: O, body: JobBodies[O]): Promise<ResultLine & { ok: true }> {
    return this.timed(op, () => this.runUntimed(node, op, body));
  }

  /** Runs `fn` as edge job `op`, telling the observer its outcome and duration. */
  private async timed<T>(op: string, fn: () => Promise<T>): Promise<T> {
    const started = performance.now();
    let failure: unknown;
    try {
      return await fn();
    } catch (e) {
      failure = e ?? new Error('unknown');
      throw e;
    } finally {
      this.o.onJob?.(op, jobOutcome(failure), (performance.now() - started) / 1000);
    }
  }

  /**
   * Op `status` (docs/CONTRACTS.md "Version 2"): the node's tunnels, their health and counters, checked
   * against common/tunnel-status.ts. Version 2 only: an agent whose hello did not list 2 gets no job
   * (StatusUnsupported). A status changes nothing on the node, so a failure does not mark it out of sync.
   */
  async status(node: EdgeNode, since?: () => Promise<StatusCursor | null>): Promise<StatusResult> {
    return this.timed(STATUS_OP, async () => {
      const { privateKey, kid } = this.o.signingKey;
      const session = await this.session(node);
      if (session.version < 2) throw new StatusUnsupported(`the agent of node ${node.id} (${session.hello.agent}) speaks job version 1 only`);
      // By change only to an agent that says it answers so (docs/CONTRACTS.md "Status by change"): any other gets the
      // job without a body and answers in full, as before. The cursor is read once the connection says so.
      const delta = since !== undefined && session.hello.features?.includes(FEATURE_STATUS_DELTA) === true;
      const opts = delta ? { version: session.version, since: await since() } : { version: session.version };
      const line = await session.run(await signStatusJob(privateKey, kid, node.id, opts), this.o.jobTimeoutMs);
      if (!line.ok) throw new AgentRefused(line.error, line.error_description);
      const why = checkStatusResult(line.result);
      if (why) throw new EdgeSshError('protocol', `the status answer of node ${node.id} breaks the contract: ${why}`);
      const result = line.result as unknown as StatusResult;
      await this.recordTunnelLinks(node, result.agent.tunnel_links ?? null, 'status');
      return result;
    });
  }

  /** Whether the node's agent takes op `traffic` (hello feature traffic_live and job version 2 or newer). */
  async hasLiveTraffic(node: EdgeNode): Promise<boolean> {
    const session = await this.session(node);
    return session.version >= 2 && session.hello.features?.includes(FEATURE_TRAFFIC_LIVE) === true;
  }

  /**
   * Op `traffic` (docs/CONTRACTS.md "Live traffic"): the per-second points of `body.ids`, checked against
   * common/traffic-live.ts. An agent without the feature gets no job (TrafficUnsupported). Changes nothing.
   */
  async traffic(node: EdgeNode, body: TrafficBody): Promise<TrafficResult> {
    return this.timed('traffic', async () => {
      const { privateKey, kid } = this.o.signingKey;
      const session = await this.session(node);
      if (session.version < 2 || session.hello.features?.includes(FEATURE_TRAFFIC_LIVE) !== true) {
        throw new TrafficUnsupported(`the agent of node ${node.id} (${session.hello.agent}) does not keep per-second traffic`);
      }
      const line = await session.run(await signTrafficJob(privateKey, kid, node.id, body, { version: session.version }), this.o.jobTimeoutMs);
      if (!line.ok) throw new AgentRefused(line.error, line.error_description);
      const why = checkTrafficResult(line.result);
      if (why) throw new EdgeSshError('protocol', `the traffic answer of node ${node.id} breaks the contract: ${why}`);
      return line.result as TrafficResult;
    });
  }

  /**
   * Opens node `node`'s `events` stream (docs/CONTRACTS.md "Events stream") on its warm connection, or null when
   * its agent does not take the op (its hello lists no `events`, or no version 2): that agent is only pulled, and
   * is never sent the op. The stream's lines go to `o.onLine`; server/events/streams.ts keeps it open.
   */
  async openEvents(node: EdgeNode, o: LineChannelOptions): Promise<LineChannel | null> {
    const session = await this.session(node);
    if (session.version < 2 || !session.hello.features?.includes(FEATURE_EVENTS)) return null;
    const { privateKey, kid } = this.o.signingKey;
    return session.stream(await signEventsJob(privateKey, kid, node.id, { version: session.version }), o);
  }

  private async runUntimed<O extends Op>(node: EdgeNode, op: O, body: JobBodies[O]): Promise<ResultLine & { ok: true }> {
    const { privateKey, kid } = this.o.signingKey;
    let line: ResultLine;
    try {
      const session = await this.session(node);
      const sent = bodyFor(op, attackSettingsFor(op, body, session.hello.features), session.version);
      if (sent.unenforced.length > 0 && !this.policyWarned.has(session)) {
        this.policyWarned.add(session);
        this.o.log.warn('edge_policy_not_enforced', {
          node_id: node.id,
          node_host: node.host,
          agent: session.hello.agent,
          agent_versions: session.hello.versions,
          tunnel_ids: sent.unenforced.slice(0, 20),
          reason: 'the agent speaks job version 1 only: tunnels are sent without their protection policy until it is upgraded',
        });
      }
      if (sent.forwarded.length > 0 && !this.forwardingWarned.has(session)) {
        this.forwardingWarned.add(session);
        this.o.log.warn('edge_forwarding_not_enforced', {
          node_id: node.id,
          node_host: node.host,
          agent: session.hello.agent,
          agent_versions: session.hello.versions,
          tunnel_ids: sent.forwarded.slice(0, 20),
          reason: 'the agent speaks job version 2 or older: it forwards to origins that have not answered the activate probe until it is upgraded',
        });
      }
      const jws = await signJob(privateKey, kid, node.id, op, sent.body, { version: session.version });
      line = await session.run(jws, this.o.jobTimeoutMs);
    } catch (e) {
      this.inSync.delete(node.id);
      throw e;
    }
    if (!line.ok) {
      // A kernel failure is about the tunnels of that job, not about the node being out of step with
      // this process; any other refusal (key, clock, version) makes the next contact reconcile first.
      if (line.error !== 'kernel_error') this.inSync.delete(node.id);
      throw new AgentRefused(line.error, line.error_description);
    }
    return line;
  }

  /** The node's connection and its hello; a new one is logged, a bad hello answer too (then thrown). */
  private async session(node: EdgeNode): Promise<EdgeSession> {
    let session: EdgeSession;
    try {
      session = await this.o.connections.session(node, this.o.jobTimeoutMs);
    } catch (e) {
      if (e instanceof EdgeSshError && e.kind === 'protocol') this.o.log.warn('edge hello failed: the agent broke the job contract', { node_id: node.id, err: e.message });
      throw e;
    }
    if (!this.greeted.has(session)) {
      this.greeted.add(session);
      this.o.log.info('edge agent hello', { node_id: node.id, agent: session.hello.agent, agent_versions: session.hello.versions, job_version: session.version, tunnel_links: session.hello.tunnelLinks });
      await this.recordTunnelLinks(node, session.hello.tunnelLinks, 'hello');
    }
    return session;
  }

  /**
   * Keeps what the agent said of its tunnel links on the node (null: it said nothing), so purchases and
   * pricing leave out a node that cannot carry tunnels and `node list` shows why. A failed write is
   * logged and the job goes on: the next hello or status writes it again.
   */
  private async recordTunnelLinks(node: EdgeNode, links: TunnelLinks | null, from: 'hello' | 'status'): Promise<void> {
    let changed: boolean;
    try {
      changed = await recordTunnelLinks(this.o.db, node.id, links);
    } catch (e) {
      this.o.log.warn('could not record the node\'s tunnel links', { node_id: node.id, from, err: (e as Error).message });
      return;
    }
    if (!changed) return;
    this.o.onStockChange?.();
    if (links?.usable === false) {
      this.o.log.warn('edge node cannot carry tunnels: no sales from it', { node_id: node.id, node_host: node.host, from, kind: links.kind, reason: links.reason });
    } else {
      this.o.log.info('edge node tunnel links', { node_id: node.id, from, kind: links?.kind ?? null, usable: links?.usable ?? null });
    }
  }

  /** Sends the node its whole desired set unless this process knows it is in sync (or `force`). */
  async ensureReconciled(node: EdgeNode, force = false): Promise<void> {
    if (this.inSync.has(node.id) && !force) return;
    const tunnels = await desiredSet(this.o.db, node.id);
    try {
      const line = await this.run(node, 'reconcile', { tunnels });
      const failed = reconcileFailures(line.result);
      if (failed.length === 0) {
        this.o.log.info('edge reconciled', { node_id: node.id, tunnels: tunnels.length, result: line.result });
      } else {
        // Everything else was applied; the broken tunnels' own jobs keep failing until they end `failed`.
        this.o.log.warn('edge reconciled with failures', { node_id: node.id, tunnels: tunnels.length, failed: failed.length, failures: failed.slice(0, 20) });
      }
    } catch (e) {
      // An agent that reports kernel failures as a failed reconcile (before `failed` existed) must not
      // hold every other tenant's job on the node: carry on, and let each job's own result decide.
      if (!(e instanceof AgentRefused && e.code === 'kernel_error')) throw e;
      this.o.log.warn('edge reconcile failed in the kernel; carrying on with the node', { node_id: node.id, tunnels: tunnels.length, err: e.message });
    }
    this.inSync.add(node.id);
  }

  /** The queue handler. Throwing fails the attempt; pg-boss retries it with backoff. */
  async handle(job: EdgeJob): Promise<void> {
    const data = job.data;
    if (isReconcileJob(data)) {
      const node = await edgeNode(this.o.db, data.nodeId);
      // A node deleted or without a pinned host key: nothing to contact.
      if (!node) return;
      const started = Date.now();
      try {
        await this.ensureReconciled(node, true);
      } catch (e) {
        const final = needsOperator(e);
        this.o.log.warn('edge reconcile job failed', { node_id: node.id, reason: data.reason, attempt: job.retryCount + 1, last: final || job.retryCount >= job.retryLimit, err: (e as Error).message });
        throw final ? new FinalJobFailure(e as Error) : e;
      }
      this.o.log.info('edge reconcile job done', { node_id: node.id, reason: data.reason, ms: Date.now() - started });
      return;
    }
    // One live job per tunnel (service.ts) means a delete (or a new provision) that arrives while this
    // job runs adds no job of its own: when the status moved under this job, it does what the new
    // status asks before it ends. A tunnel can change direction at most twice in a row that way.
    // A repair re-applies only on its first pass; later passes serve a status that moved under it.
    for (let pass = 0; pass < 3; pass++) {
      if (!(await this.step(job, data.tunnelId, data.repair === true && pass === 0))) return;
    }
  }

  /**
   * Does what the tunnel's status asks; true when the status changed under it and asks for more.
   * `repair`: a provisioned or active tunnel is applied again without moving its status (the edge lost
   * or garbled it; `tunnel repair`, docs/CONTRACTS.md "Admin CLI"). A provisioned or active tunnel whose
   * stored spec is newer than the one its edge applied (a PATCH of its settings, docs/CONTRACTS.md
   * "Tunnel settings") is applied the same way, whatever job brought the worker here.
   */
  private async step(job: EdgeJob, tunnelId: string, repair = false): Promise<boolean> {
    const t = await edgeTunnel(this.o.db, tunnelId);
    if (!t) return false;
    const reapply = (t.status === 'provisioned' || t.status === 'active') && (repair || t.appliedRevision < t.specRevision);
    const op = t.status === 'provisioning' || reapply ? 'apply' : t.status === 'deleting' ? 'remove' : null;
    if (op === null) return false;
    const started = Date.now();
    try {
      if (!t.node) throw new AgentRefused('no_host_key', `edge node ${t.nodeId} has no pinned host key (node add --host-key); it is never contacted`);
      await this.ensureReconciled(t.node);
      const line = await this.run(t.node, op, { tunnel: t.spec });
      if (reapply) {
        await this.o.transitions.applied(t.spec.id, t.specRevision);
        this.o.log.info('edge job done', { tunnel_id: t.spec.id, op, repair: true, revision: t.specRevision, result: line.result, attempt: job.retryCount + 1, ms: Date.now() - started });
        // One more pass: a delete, provision or settings change that arrived meanwhile found this job live and queued nothing.
        return true;
      }
      const moved = op === 'apply' ? await this.o.transitions.move(t.spec.id, ['provisioning'], 'provisioned') : await this.o.transitions.finishDelete(t.spec.id);
      // After the move, so a PATCH waiting for this revision answers with the tunnel provisioned.
      const newer = op === 'apply' && (await this.o.transitions.applied(t.spec.id, t.specRevision));
      this.o.log.info('edge job done', { tunnel_id: t.spec.id, op, result: line.result, attempt: job.retryCount + 1, ms: Date.now() - started });
      // A settings change stored while this job applied the older spec found the job live and queued nothing.
      return !moved || newer;
    } catch (e) {
      // No retry for what needs an operator (a wrong or missing host key, a refused gateway key).
      const final = needsOperator(e);
      const last = final || job.retryCount >= job.retryLimit;
      this.o.log.warn('edge job failed', { tunnel_id: t.spec.id, op, attempt: job.retryCount + 1, last, err: (e as Error).message });
      // Retries spent: a provision ends `failed` (the buyer may provision again). A delete stays
      // `deleting`; the sweeper queues it again, so the IP is never handed out while the edge may
      // still route it.
      if (last && op === 'apply') await this.o.transitions.move(t.spec.id, ['provisioning'], 'failed');
      throw final ? new FinalJobFailure(e as Error) : e;
    }
  }

  /** Asks the agent whether the origin answers through the tunnel (not queued: it changes nothing). */
  async probe(node: EdgeNode, spec: TunnelSpec): Promise<ProbeResult> {
    const line = await this.run(node, 'probe', { tunnel: spec });
    return line.result as ProbeResult;
  }
}
