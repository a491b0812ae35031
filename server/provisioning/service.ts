// Provisioning as the domain sees it: queue a tunnel's edge work and wait a few seconds for the
// outcome, ask the agent for a probe, and (on replicas that run it) the worker with its sweeper and
// its reconcile rounds. REST and GraphQL reach this only through TunnelService.
//
// One live edge job per tunnel (docs/CONTRACTS.md "Tunnel lifecycle"): dispatch() and the sweeper queue through sendOnce(), so a
// repeated or concurrent provision/delete while a job is live queues nothing and answers at once; one
// probe per tunnel at a time across replicas, its answer shared (probes.ts).
import { isCanonicalUuid } from '../../common/names.ts';
import type { Database } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import type { Logger } from '../../common/log.ts';
import type { ServerSecrets } from '../secrets.ts';
import { ApiError } from '../domain/errors.ts';
import { EdgeConnections } from '../edge/connections.ts';
import { EdgeSshError } from '../edge/result-line.ts';
import { ON_EDGE, contactableNodes, edgeTunnel } from './edge-state.ts';
import { KeyedLocks, type LockedSql } from './locks.ts';
import { ProbeCoordinator, type TunnelProbe } from './probes.ts';
import { EdgeQueue, type ReconcileJobData, type SendOnceResult } from './queue.ts';
import { TunnelStatusBus } from './status-bus.ts';
import { Transitions } from './transitions.ts';
import { AgentRefused, EdgeWorker, type JobObserver } from './worker.ts';
import type { EdgeNode } from '../edge/connections.ts';
import type { TrafficBody, TrafficResult } from '../../common/traffic-live.ts';
import type { LineChannel, LineChannelOptions } from '../edge/line-channel.ts';
import type { StatusCursor, StatusResult } from '../../common/tunnel-status.ts';
import { BOSS_SCHEMA, EDGE_QUEUE } from './queue.ts';
import { TunnelEvents } from '../webhooks/events.ts';

export interface ProvisioningConfig {
  /** How long provision/delete wait for the agent before answering 202. */
  edgeWaitMs: number;
  /** One job on an agent, connect included. */
  edgeJobTimeoutMs: number;
  /** Retries of a job after its first attempt (exponential backoff from 1 s, at most 60 s apart). */
  edgeRetryLimit: number;
  /** Jobs this process runs at once (different nodes; one node runs one job at a time). */
  edgeWorkerConcurrency: number;
  /** Every this many seconds, tunnels stuck in provisioning/deleting without a live job are queued again. */
  edgeSweepSeconds: number;
  /** A job held longer than this by a worker that died is handed out again. */
  edgeJobExpireSeconds: number;
  /** Every node is reconciled about this often (jittered), besides after its connection came back. */
  edgeReconcileSeconds: number;
  /** Part of the tunnel view the status-change webhook carries (server/webhooks/events.ts). */
  adminSshPort: number;
}

/** Statuses whose tunnel an operator's `tunnel repair` can queue work for (queueRepair). */
const REPAIRABLE: readonly TunnelStatus[] = ['provisioning', 'provisioned', 'active', 'deleting'];

/** How often a PATCH waiting for its revision looks whether the live job it relied on ended without it (applySpec). */
const APPLY_RECHECK_MS = 1000;

/** The periodic reconcile's spread: each round comes after 80-120% of the period, each node's job within 20% of it. */
const RECONCILE_JITTER = 0.2;


/**
 * A tunnel the sweeper hands the queue: a provision or delete under way, or a tunnel on the edge whose
 * stored spec is newer than the one the edge applied (a settings change whose job was lost), unchanged
 * for `seconds` (the placeholder given). The one definition for the sweep's read and its re-check.
 */
function stuckWhere(seconds: string): string {
  return `(status in ('provisioning', 'deleting') or (status in ('provisioned', 'active') and applied_revision < spec_revision))
    and updated_at <= now() - make_interval(secs => ${seconds})`;
}

export class ProvisioningService {
  readonly bus: TunnelStatusBus;
  readonly transitions: Transitions;
  /** The tunnel webhook events: status moves emit through transitions; health collection calls healthChanged in its own transaction. */
  readonly events: TunnelEvents;
  private queueP: Promise<EdgeQueue> | null = null;
  private edge: { worker: EdgeWorker; connections: EdgeConnections } | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private reconcileTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  private readonly probeLocks: KeyedLocks;
  private readonly probes: ProbeCoordinator;
  private readonly jobObservers = new Set<JobObserver>();

  constructor(
    private readonly db: Database,
    readonly config: ProvisioningConfig,
    private readonly log: Logger,
    private readonly onStockChange: () => void,
  ) {
    this.bus = new TunnelStatusBus(db);
    this.events = new TunnelEvents(config.adminSshPort);
    this.transitions = new Transitions(db, this.bus, this.events, onStockChange);
    this.probeLocks = new KeyedLocks(db.url, { maxConnections: 8, application: 'tunnelgate-probe-lock' });
    this.probes = new ProbeCoordinator(db, this.probeLocks, config.edgeJobTimeoutMs + 2000);
  }

  /** The queue, opened on first use (an API-only replica needs no SSH keys for it). */
  queue(): Promise<EdgeQueue> {
    this.queueP ??= EdgeQueue.open(this.db, { retryLimit: this.config.edgeRetryLimit, expireInSeconds: this.config.edgeJobExpireSeconds }, this.log).catch((e: unknown) => {
      this.queueP = null;
      throw e;
    });
    return this.queueP;
  }

  /** Opens the SSH side with the server secrets; with `worker`, also takes jobs from the queue. */
  async start(secrets: Pick<ServerSecrets, 'jobSigningKey' | 'gatewaySshKey'>, opts: { worker: boolean }): Promise<void> {
    await this.bus.start();
    let worker: EdgeWorker | null = null;
    const connections = new EdgeConnections(secrets.gatewaySshKey.privateKey, {
      connectTimeoutMs: this.config.edgeJobTimeoutMs,
      onLost: (nodeId, why) => {
        worker?.nodeLost(nodeId);
        // A connection that drops (agent restarted, router rebooted, network cut) gets a reconcile job,
        // which retries until the node answers again: every reconnect is followed by a reconcile,
        // with no tunnel job needed (an edge reboot must not silently kill paid tunnels). Any replica may queue it (an API-only one notices
        // through its probe connections); whichever worker is free runs it.
        if (!this.stopped) void this.queueReconcile(nodeId, 'reconnect').catch((e: unknown) => this.log.warn('could not queue a reconcile', { node_id: nodeId, why, err: (e as Error).message }));
      },
    });
    worker = new EdgeWorker({
      db: this.db,
      connections,
      signingKey: secrets.jobSigningKey,
      transitions: this.transitions,
      log: this.log.child({ component: 'edge-worker' }),
      jobTimeoutMs: this.config.edgeJobTimeoutMs,
      onJob: (op, outcome, seconds) => {
        for (const fn of this.jobObservers) fn(op, outcome, seconds);
      },
      onStockChange: this.onStockChange,
    });
    this.edge = { worker, connections };
    if (!opts.worker) return;
    const queue = await this.queue();
    const w = worker;
    await queue.work(this.config.edgeWorkerConcurrency, (job) => w.handle(job));
    await this.sweep(0);
    this.sweepTimer = setInterval(() => void this.sweep(this.config.edgeSweepSeconds).catch(() => {}), this.config.edgeSweepSeconds * 1000);
    this.sweepTimer.unref();
    this.scheduleReconcileRound();
  }

  /**
   * Queues a reconcile of one node unless one is live (or, for the periodic round, recent). The result
   * names the live job either way (what `node reconcile` of docs/CONTRACTS.md "Admin CLI" prints).
   */
  async queueReconcile(nodeId: string, reason: ReconcileJobData['reason']): Promise<SendOnceResult> {
    const queue = await this.queue();
    const period = this.config.edgeReconcileSeconds;
    const periodic = reason === 'periodic';
    const r = await queue.sendOnce(
      { kind: 'reconcile', nodeId, reason },
      // Every replica runs the round; a node whose reconcile was queued within half a period is skipped, so the
      // replicas together reconcile each node about once a period, spread over a fifth of it.
      periodic ? { freshSeconds: period / 2, delaySeconds: Math.random() * period * RECONCILE_JITTER } : {},
    );
    return r;
  }

  /**
   * `tunnel repair` (docs/CONTRACTS.md "Admin CLI"): queues what the tunnel's status asks through the same one-live-job rule
   * (docs/CONTRACTS.md "Tunnel lifecycle"): provisioning is applied (and moves on as usual), provisioned and active are applied
   * again as they stand, deleting is removed (finishing the delete). When the tunnel already has a live
   * job, that job is the answer: it does what the status asks before it ends. Pending (never sent to an
   * edge), failed (the buyer provisions it again) and deleted tunnels have nothing to repair: invalid_state.
   */
  async queueRepair(tunnelId: string): Promise<SendOnceResult> {
    const id = tunnelId.toLowerCase();
    const [t] = isCanonicalUuid(id)
      ? await this.db.query<{ node_id: string; status: TunnelStatus }>('select node_id, status from tunnel where id = ?', [id])
      : [];
    if (!t) throw new ApiError('not_found', `no tunnel with id ${tunnelId}.`);
    if (!REPAIRABLE.includes(t.status)) {
      throw new ApiError('invalid_state', `the tunnel is ${t.status}; only provisioning, provisioned, active and deleting tunnels are on (or going to) an edge.`);
    }
    const queue = await this.queue();
    return queue.sendOnce({ tunnelId: id, nodeId: t.node_id, repair: true });
  }

  /** One periodic round: a reconcile job for every node the gateway may contact. */
  async reconcileRound(): Promise<number> {
    let queued = 0;
    for (const nodeId of await contactableNodes(this.db)) {
      if (this.stopped) break;
      if ((await this.queueReconcile(nodeId, 'periodic')).queued) queued++;
    }
    if (queued) this.log.info('periodic reconcile queued', { nodes: queued });
    return queued;
  }

  private scheduleReconcileRound(): void {
    if (this.stopped) return;
    const ms = this.config.edgeReconcileSeconds * 1000 * (1 - RECONCILE_JITTER + 2 * RECONCILE_JITTER * Math.random());
    this.reconcileTimer = setTimeout(() => {
      void this.reconcileRound()
        .catch((e: unknown) => this.log.warn('periodic reconcile round failed', { err: (e as Error).message }))
        .finally(() => this.scheduleReconcileRound());
    }, ms);
    this.reconcileTimer.unref();
  }

  /** Each edge job this process sends: op, outcome, seconds (the /metrics histogram). Returns the unsubscribe. */
  onJob(fn: JobObserver): () => void {
    this.jobObservers.add(fn);
    return () => this.jobObservers.delete(fn);
  }

  /**
   * Op `status` of one node over its warm connection (server/health/collector.ts). Throws EdgeSshError,
   * AgentRefused, or StatusUnsupported for an agent that speaks job version 1 only.
   */
  async nodeStatus(node: EdgeNode, since?: () => Promise<StatusCursor | null>): Promise<StatusResult> {
    if (!this.edge) throw new EdgeSshError('connect_failed', 'the edge side of this gateway is not started');
    return this.edge.worker.status(node, since);
  }

  /** Whether the node's agent answers op `traffic` (docs/CONTRACTS.md "Live traffic"); asks its hello on first contact. */
  async nodeHasLiveTraffic(node: EdgeNode): Promise<boolean> {
    if (!this.edge) throw new EdgeSshError('connect_failed', 'the edge side of this gateway is not started');
    return this.edge.worker.hasLiveTraffic(node);
  }

  /** Op `traffic` of one node: the per-second points of some of its tunnels (server/traffic-live/). */
  async nodeTraffic(node: EdgeNode, body: TrafficBody): Promise<TrafficResult> {
    if (!this.edge) throw new EdgeSshError('connect_failed', 'the edge side of this gateway is not started');
    return this.edge.worker.traffic(node, body);
  }

  /**
   * Op `events` of one node (server/events/streams.ts): its open stream, or null when its agent does not take the
   * op. Throws EdgeSshError when the node cannot be reached.
   */
  async openEvents(node: EdgeNode, o: LineChannelOptions): Promise<LineChannel | null> {
    if (!this.edge) throw new EdgeSshError('connect_failed', 'the edge side of this gateway is not started');
    return this.edge.worker.openEvents(node, o);
  }

  /** Edge jobs waiting to run (created or waiting for a retry), across replicas; null before the queue exists. */
  async queueDepth(): Promise<number | null> {
    const [t] = await this.db.query<{ ok: boolean }>(`select to_regclass('${BOSS_SCHEMA}.job') is not null as ok`);
    if (!t?.ok) return null;
    const [r] = await this.db.query<{ n: string }>(`select count(*)::text as n from ${BOSS_SCHEMA}.job where name = ? and state in ('created', 'retry')`, [EDGE_QUEUE]);
    return Number(r?.n ?? 0);
  }

  /** Test hook: the warm connections of this process. */
  get connections(): EdgeConnections | null {
    return this.edge?.connections ?? null;
  }

  /**
   * Queues the edge work for a tunnel whose status was just set, and waits up to edgeWaitMs for a
   * status other than `waitingIn`. Resolves either way; the caller re-reads the row.
   */
  async dispatch(tunnelId: string, nodeId: string, waitingIn: TunnelStatus, change: () => Promise<boolean>): Promise<void> {
    const w = this.bus.waiter(tunnelId, (s) => s !== waitingIn, this.config.edgeWaitMs);
    try {
      await this.bus.start();
      const moved = await change();
      const queue = await this.queue();
      const sent = await queue.sendOnce({ tunnelId, nodeId });
      // A repeat while the tunnel's job is already live (this call neither moved the tunnel nor queued
      // anything) answers the current state at once instead of holding a request open (docs/CONTRACTS.md "Tunnel lifecycle").
      if (!moved && !sent.queued) w.cancel();
    } catch (e) {
      w.cancel();
      throw e;
    }
    await w.promise;
  }

  /**
   * Queues the edge work for a tunnel whose stored spec just became `revision` (a PATCH of its settings,
   * docs/CONTRACTS.md "Tunnel settings"): a tunnel job, which applies the stored spec to a provisioned or
   * active tunnel (worker.ts) and to a provisioning one as part of its provision. Waits up to edgeWaitMs
   * until the edge holds that revision or the tunnel left the edge (failed, deleting): true when it did.
   * A job already live for the tunnel is the answer: it applies the newer spec before it ends. That job
   * may have taken its last look at the tunnel just before this change committed, and end without it: so
   * while the edge lacks the revision, this queues again (at most one job of its own) once no job is live,
   * looking every APPLY_RECHECK_MS (a job's end sends no notice).
   */
  async applySpec(tunnelId: string, nodeId: string, revision: number): Promise<boolean> {
    let queued = false;
    const check = async (): Promise<boolean> => {
      const [t] = await this.db.query<{ status: TunnelStatus; applied_revision: number }>('select status, applied_revision from tunnel where id = ?', [tunnelId]);
      if (!t || t.applied_revision >= revision || !ON_EDGE.includes(t.status)) return true;
      if (!queued) queued = (await (await this.queue()).sendOnce({ tunnelId, nodeId })).queued;
      return false;
    };
    return this.bus.until(tunnelId, check, this.config.edgeWaitMs, () => this.bus.start(), APPLY_RECHECK_MS);
  }

  /**
   * The agent's probe of one tunnel, with the origin revision it was about (probes.ts TunnelProbe); 503
   * edge_unavailable when the agent cannot be asked. At most one per tunnel at a time across replicas, its
   * answer shared with every activate that asked meanwhile (probes.ts).
   */
  probe(tunnelId: string): Promise<TunnelProbe> {
    const id = tunnelId.toLowerCase();
    return this.probes.probe(id, () => this.probeNow(id));
  }

  private async probeNow(tunnelId: string): Promise<TunnelProbe> {
    const t = await edgeTunnel(this.db, tunnelId);
    if (!t) throw new ApiError('not_found', 'No such tunnel for this account.');
    // The agent probes the link it holds: until it applied the revision that set the tunnel's origin, that link
    // leads to an earlier origin, whose answer must not activate this one. Nothing to ask it then.
    if (t.appliedRevision < t.originRevision) return { reachable: false, originRevision: null };
    if (!this.edge || !t.node) throw new ApiError('edge_unavailable', 'The edge router cannot be reached from this gateway right now; try again shortly.');
    try {
      return { ...(await this.edge.worker.probe(t.node, t.spec)), originRevision: t.originRevision };
    } catch (e) {
      if (e instanceof EdgeSshError || e instanceof AgentRefused) {
        this.log.warn('probe failed', { tunnel_id: tunnelId, err: e.message });
        // The cause names the edge's internal SSH address: logged (with the request id), never in the body.
        throw new ApiError('edge_unavailable', 'The edge router did not answer the probe; try again shortly.', {}, e.message);
      }
      throw e;
    }
  }

  /**
   * Queues tunnels left in provisioning/deleting with no live job (a crash between commit and send), and
   * provisioned/active ones whose edge lacks their latest settings (a PATCH that found a job live as it
   * ended, or whose job spent its retries).
   */
  async sweep(olderThanSeconds: number): Promise<number> {
    if (this.stopped) return 0;
    const stuck = await this.db.query<{ id: string; node_id: string }>(`select id, node_id from tunnel where ${stuckWhere('?')} order by updated_at limit 1000`, [olderThanSeconds]);
    if (stuck.length === 0) return 0;
    const queue = await this.queue();
    let sent = 0;
    for (const t of stuck) {
      // Under the tunnel's lock: a provision or delete request racing the sweeper cannot add a second job,
      // and a job that finished since the read above (another replica's sweep queued it) is not followed
      // by a second one: the tunnel must still be stuck when the lock is held.
      const stillNeeded = async (sql: LockedSql): Promise<boolean> =>
        (
          await sql.executeSql(
            `select 1 from tunnel where id = $1 and ${stuckWhere('$2::float8')}`,
            [t.id, olderThanSeconds],
          )
        ).rows.length > 0;
      if ((await queue.sendOnce({ tunnelId: t.id, nodeId: t.node_id }, { stillNeeded })).queued) sent++;
    }
    if (sent) this.log.info('sweeper queued stuck tunnels', { count: sent });
    return sent;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    if (this.reconcileTimer) clearTimeout(this.reconcileTimer);
    const q = this.queueP;
    this.queueP = null;
    if (q) await (await q.catch(() => null))?.stop();
    await this.edge?.connections.close();
    this.edge = null;
    await this.probeLocks.close();
  }
}
