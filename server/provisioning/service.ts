// Provisioning as the domain sees it: queue a tunnel's edge work and wait a few seconds for the
// outcome, ask the agent for a probe, and (on replicas that run it) the worker with its sweeper.
// REST and GraphQL reach this only through TunnelService.
import type { Database } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import type { Logger } from '../log.ts';
import type { ServerSecrets } from '../secrets.ts';
import type { ProbeResult } from '../../agent/dataplane/types.ts';
import { ApiError } from '../domain/errors.ts';
import { EdgeConnections } from '../edge/connections.ts';
import { EdgeSshError } from '../edge/ssh-client.ts';
import { edgeTunnel } from './edge-state.ts';
import { EdgeQueue } from './queue.ts';
import { TunnelStatusBus } from './status-bus.ts';
import { Transitions } from './transitions.ts';
import { AgentRefused, EdgeWorker } from './worker.ts';

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
}

export class ProvisioningService {
  readonly bus: TunnelStatusBus;
  readonly transitions: Transitions;
  private queueP: Promise<EdgeQueue> | null = null;
  private edge: { worker: EdgeWorker; connections: EdgeConnections } | null = null;
  private sweepTimer: NodeJS.Timeout | null = null;
  private stopped = false;

  constructor(
    private readonly db: Database,
    readonly config: ProvisioningConfig,
    private readonly log: Logger,
    onStockChange: () => void,
  ) {
    this.bus = new TunnelStatusBus(db);
    this.transitions = new Transitions(db, this.bus, onStockChange);
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
      onLost: (nodeId) => worker?.nodeLost(nodeId),
    });
    worker = new EdgeWorker({
      db: this.db,
      connections,
      signingKey: secrets.jobSigningKey,
      transitions: this.transitions,
      log: this.log.child({ component: 'edge-worker' }),
      jobTimeoutMs: this.config.edgeJobTimeoutMs,
    });
    this.edge = { worker, connections };
    if (!opts.worker) return;
    const queue = await this.queue();
    const w = worker;
    await queue.work(this.config.edgeWorkerConcurrency, (job) => w.handle(job));
    await this.sweep(0);
    this.sweepTimer = setInterval(() => void this.sweep(this.config.edgeSweepSeconds).catch(() => {}), this.config.edgeSweepSeconds * 1000);
    this.sweepTimer.unref();
  }

  /** Test hook: the warm connections of this process. */
  get connections(): EdgeConnections | null {
    return this.edge?.connections ?? null;
  }

  /**
   * Queues the edge work for a tunnel whose status was just set, and waits up to edgeWaitMs for a
   * status other than `waitingIn`. Resolves either way; the caller re-reads the row.
   */
  async dispatch(tunnelId: string, nodeId: string, waitingIn: TunnelStatus, change: () => Promise<void>): Promise<void> {
    const w = this.bus.waiter(tunnelId, (s) => s !== waitingIn, this.config.edgeWaitMs);
    try {
      await this.bus.start();
      await change();
      const queue = await this.queue();
      await queue.send({ tunnelId, nodeId });
    } catch (e) {
      w.cancel();
      throw e;
    }
    await w.promise;
  }

  /** The agent's probe of one tunnel; 503 edge_unavailable when the agent cannot be asked. */
  async probe(tunnelId: string): Promise<ProbeResult> {
    const t = await edgeTunnel(this.db, tunnelId);
    if (!t) throw new ApiError('not_found', 'No such tunnel for this account.');
    if (!this.edge || !t.node) throw new ApiError('edge_unavailable', 'The edge router cannot be reached from this gateway right now; try again shortly.');
    try {
      return await this.edge.worker.probe(t.node, t.spec);
    } catch (e) {
      if (e instanceof EdgeSshError || e instanceof AgentRefused) {
        this.log.warn('probe failed', { tunnel_id: tunnelId, err: e.message });
        // The cause names the edge's internal SSH address: logged (with the request id), never in the body.
        throw new ApiError('edge_unavailable', 'The edge router did not answer the probe; try again shortly.', {}, e.message);
      }
      throw e;
    }
  }

  /** Queues tunnels left in provisioning/deleting with no live job (a crash between commit and send). */
  async sweep(olderThanSeconds: number): Promise<number> {
    if (this.stopped) return 0;
    const stuck = await this.db.query<{ id: string; node_id: string }>(
      `select id, node_id from tunnel where status in ('provisioning', 'deleting') and updated_at <= now() - make_interval(secs => ?) order by updated_at limit 1000`,
      [olderThanSeconds],
    );
    if (stuck.length === 0) return 0;
    const queue = await this.queue();
    let sent = 0;
    for (const t of stuck) {
      if (await queue.hasLiveJob(t.id)) continue;
      await queue.send({ tunnelId: t.id, nodeId: t.node_id });
      sent++;
    }
    if (sent) this.log.info('sweeper queued stuck tunnels', { count: sent });
    return sent;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    const q = this.queueP;
    this.queueP = null;
    if (q) await (await q.catch(() => null))?.stop();
    await this.edge?.connections.close();
    this.edge = null;
  }
}
