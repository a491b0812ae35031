// Health and traffic as the rest of the gateway sees them (docs/CONTRACTS.md "Health and
// traffic"): the traffic and health-history queries REST and GraphQL share (validation and retention
// rules written once), the ingest seam, and the collector on the replicas that run the edge worker.
import type { Database } from '../db/database.ts';
import type { Logger } from '../../common/log.ts';
import type { Principal } from '../auth/principal.ts';
import { ApiError } from '../domain/errors.ts';
import { readTunnel } from '../domain/tunnels/rows.ts';
import { ON_EDGE } from '../domain/tunnels/spec.ts';
import type { ProvisioningService } from '../provisioning/service.ts';
import { KeyedLocks } from '../provisioning/locks.ts';
import { contactableNodes, edgeNode } from '../provisioning/edge-state.ts';
import type { EdgeNode } from '../edge/connections.ts';
import { Collector, type RoundOutcome } from './collector.ts';
import { StatusIngest } from './ingest.ts';
import type { AttackIngest } from '../attacks/ingest.ts';
import { EventStreams, type EventStreamsOptions } from '../events/streams.ts';
import { applyEdgeEvent } from '../events/apply.ts';
import { HOUR_MS, RETENTION_MS, STEPS, STEP_MS, TrafficStore, type Step, type TrafficPoint } from './storage.ts';
import { HEALTH_CHANGE_RETENTION_MS, readHealthChanges, type HealthChange } from './history.ts';
import { LiveTraffic, type LiveWatch } from '../traffic-live/poller.ts';
import { TrafficUnsupported } from '../provisioning/worker.ts';
import { EdgeSshError } from '../edge/result-line.ts';

export type { Step, TrafficPoint } from './storage.ts';
export type { HealthChange } from './history.ts';

/** At most this many points in one answer, and in one GraphQL operation however many traffic fields it has (docs/CONTRACTS.md "Health and traffic"). */
export const MAX_TRAFFIC_POINTS = 10_000;
const MAX_POINTS = MAX_TRAFFIC_POINTS;
/** Without `from`: the last hour of minutes, or the last day of hours. */
const DEFAULT_SPAN_MS: Record<Step, number> = { '1m': HOUR_MS, '1h': 24 * HOUR_MS };

/**
 * At most this many health changes in one answer, the oldest of the range: a chart's range holds a few
 * (a tunnel changes health a few times a day), a flapping tunnel's is cut here rather than at the
 * client; whoever gets this many asks again from the last one's `at`.
 */
export const MAX_HEALTH_CHANGES = 1000;
/** Without `from`: the last day of changes (the span of the traffic chart's hourly default). */
const HEALTH_CHANGES_DEFAULT_SPAN_MS = 24 * HOUR_MS;

export interface HealthChangesView {
  tunnel_id: string;
  changes: HealthChange[];
}

/** The health-history query as a client sends it (strings or absent). */
export interface HealthChangesQueryInput {
  from?: string | null;
  to?: string | null;
}

export interface TrafficView {
  tunnel_id: string;
  step: Step;
  points: TrafficPoint[];
}

/** The query as a client sends it (strings or absent), from REST's query string or GraphQL's arguments. */
export interface TrafficQueryInput {
  from?: string | null;
  to?: string | null;
  step?: string | null;
}

/** A query's time (`from`, `to`): ISO 8601 with a date, a time and an offset or Z; anything else is invalid_request naming it. */
export function parseQueryTime(v: string, name: string): Date {
  // ISO 8601 with a date and a time (an offset or Z); Date.parse alone accepts too much.
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/.test(v) || Number.isNaN(Date.parse(v))) {
    throw new ApiError('invalid_request', `${name} must be an ISO 8601 time such as 2026-11-25T12:00:00Z.`);
  }
  return new Date(v);
}

/**
 * The range a query asks for, checked: step 1m (default) or 1h; `to` defaults to now, `from` to `to`
 * minus DEFAULT_SPAN_MS; from < to; `to` at most one step after now (later points cannot exist, and a far
 * `to` would only inflate the count); `from` within the step's retention (48 h of minutes, 90 days of
 * hours); at most MAX_POINTS points. Anything else is invalid_request.
 */
export function trafficRange(q: TrafficQueryInput, now: Date): { from: Date; to: Date; step: Step; points: number } {
  const step = (q.step ?? '1m') as Step;
  if (!STEPS.includes(step)) throw new ApiError('invalid_request', 'step must be 1m or 1h.');
  const to = q.to ? parseQueryTime(q.to, 'to') : now;
  const from = q.from ? parseQueryTime(q.from, 'from') : new Date(to.getTime() - DEFAULT_SPAN_MS[step]);
  if (from >= to) throw new ApiError('invalid_request', 'from must be before to.');
  if (to.getTime() > now.getTime() + STEP_MS[step]) {
    throw new ApiError('invalid_request', `to is in the future: at most one step (${step}) after now (${new Date(now.getTime() + STEP_MS[step]).toISOString()}).`);
  }
  const oldest = now.getTime() - RETENTION_MS[step];
  if (from.getTime() < oldest) {
    throw new ApiError('invalid_request', `from is outside retention: ${step} points are kept ${step === '1m' ? '48 hours' : '90 days'} (from ${new Date(oldest).toISOString()}).`);
  }
  const ms = STEP_MS[step];
  const points = Math.ceil(to.getTime() / ms) - Math.floor(from.getTime() / ms);
  if (points > MAX_POINTS) throw new ApiError('invalid_request', `the range holds ${points} points of ${step}; at most ${MAX_POINTS}.`);
  return { from, to, step, points };
}

/**
 * The range of a health-history query, checked: `to` defaults to now, `from` to a day before `to`;
 * from < to; `from` within retention (90 days). Anything else is invalid_request.
 */
function healthChangesRange(q: HealthChangesQueryInput, now: Date): { from: Date; to: Date } {
  const to = q.to ? parseQueryTime(q.to, 'to') : now;
  const from = q.from ? parseQueryTime(q.from, 'from') : new Date(to.getTime() - HEALTH_CHANGES_DEFAULT_SPAN_MS);
  if (from >= to) throw new ApiError('invalid_request', 'from must be before to.');
  const oldest = now.getTime() - HEALTH_CHANGE_RETENTION_MS;
  if (from.getTime() < oldest) throw new ApiError('invalid_request', `from is outside retention: health changes are kept 90 days (from ${new Date(oldest).toISOString()}).`);
  return { from, to };
}

/** An agent from before live traffic: said plainly, with where the history is (the stored minutes). */
function liveUnsupported(): ApiError {
  return new ApiError('edge_unavailable', 'the tunnel\'s edge agent does not keep per-second traffic (an older agent); read Tunnel.traffic (one point a minute) until it is upgraded.');
}

export class HealthService {
  readonly store: TrafficStore;
  readonly ingest: StatusIngest;
  /** The per-second pollers of the `tunnelTraffic` subscriptions of this replica (server/traffic-live/). */
  readonly live: LiveTraffic;
  private collector: Collector | null = null;
  private locks: KeyedLocks | null = null;
  private streams: EventStreams | null = null;

  constructor(
    private readonly db: Database,
    private readonly provisioning: ProvisioningService,
    /** The attack records of each status answer (server/attacks), stored in the round's transaction. */
    private readonly attacks?: AttackIngest,
    log?: Pick<Logger, 'warn' | 'info'>,
  ) {
    this.store = new TrafficStore(db);
    this.ingest = new StatusIngest(db, this.store, provisioning.events, provisioning.bus, attacks);
    this.live = new LiveTraffic({
      fetch: (node, body) => provisioning.nodeTraffic(node, body),
      isFinal: (e) => e instanceof TrafficUnsupported,
      finalError: () => liveUnsupported(),
      log: log ?? { warn: () => {}, info: () => {} },
    });
  }

  /**
   * The `tunnelTraffic` subscription (docs/CONTRACTS.md "Live traffic"): another account's tunnel or a missing one
   * is not_found; one not on an edge is invalid_state; an edge that cannot be reached now, or whose agent keeps no
   * per-second traffic (an agent from before it), is edge_unavailable, said before anything is sent.
   */
  async liveTraffic(principal: Principal, id: string): Promise<LiveWatch> {
    const t = await readTunnel(this.db, principal, id);
    if (!(ON_EDGE as readonly string[]).includes(t.status)) throw new ApiError('invalid_state', `the tunnel is ${t.status}; only a tunnel on an edge (provisioned or active) has live traffic.`);
    const node = await edgeNode(this.db, t.node_id);
    if (!node) throw new ApiError('edge_unavailable', 'the tunnel\'s edge node cannot be contacted (no pinned host key).');
    let supported: boolean;
    try {
      supported = await this.provisioning.nodeHasLiveTraffic(node);
    } catch (e) {
      if (e instanceof EdgeSshError) throw new ApiError('edge_unavailable', 'the tunnel\'s edge node does not answer now; subscribe again later.');
      throw e;
    }
    if (!supported) throw liveUnsupported();
    return this.live.watch(node, t.id);
  }

  /** GET /api/dedicated/{id}/traffic and Tunnel.traffic: another account's tunnel is not_found. */
  async traffic(principal: Principal, id: string, q: TrafficQueryInput, now = new Date()): Promise<TrafficView> {
    const range = trafficRange(q, now);
    const t = await readTunnel(this.db, principal, id);
    return { tunnel_id: t.id, step: range.step, points: await this.store.points(this.db, t.id, range.from, range.to, range.step) };
  }

  /**
   * GET /api/dedicated/{id}/health-changes and Tunnel.healthChanges: the tunnel's health changes in the
   * range, oldest first, at most MAX_HEALTH_CHANGES; another account's tunnel is not_found.
   */
  async healthChanges(principal: Principal, id: string, q: HealthChangesQueryInput, now = new Date()): Promise<HealthChangesView> {
    const range = healthChangesRange(q, now);
    const t = await readTunnel(this.db, principal, id);
    return { tunnel_id: t.id, changes: await readHealthChanges(this.db, t.id, range.from, range.to, MAX_HEALTH_CHANGES) };
  }

  /** Starts the collector (where the edge worker runs; provisioning must be started first). */
  startCollector(log: Logger, opts: { intervalSeconds: number; concurrency?: number }): Collector {
    if (this.collector) throw new Error('the status collector is already running in this process');
    this.locks = new KeyedLocks(this.db.url, { maxConnections: 4, application: 'tunnelgate-status-lock' });
    this.collector = new Collector({
      db: this.db,
      ingest: this.ingest,
      store: this.store,
      locks: this.locks,
      log,
      nodes: () => this.contactable(),
      status: (node, since) => this.provisioning.nodeStatus(node, since),
      intervalSeconds: opts.intervalSeconds,
      concurrency: opts.concurrency ?? 8,
    });
    this.collector.start();
    return this.collector;
  }

  /**
   * Starts the nodes' `events` streams (server/events/streams.ts; docs/CONTRACTS.md "Events stream") where the
   * edge worker runs, beside the collector: pushed attacks and health changes go through this service's ingest.
   */
  startEvents(log: Logger, opts: Pick<EventStreamsOptions, 'refreshMs' | 'backoffMs' | 'maxBackoffMs' | 'silenceMs'> = {}): EventStreams {
    if (this.streams) throw new Error('the events streams already run in this process');
    const attacks = this.attacks;
    if (!attacks) throw new Error('the events streams need the attack ingest');
    this.streams = new EventStreams({
      ...opts,
      log,
      nodes: () => this.contactable(),
      open: (node, o) => this.provisioning.openEvents(node, o),
      apply: (nodeId, e) => applyEdgeEvent({ db: this.db, attacks, health: this.ingest }, nodeId, e),
    });
    this.streams.start();
    return this.streams;
  }

  /** The running streams (tests, diagnostics); null when none run here. */
  get events(): EventStreams | null {
    return this.streams;
  }

  async stopEvents(): Promise<void> {
    await this.streams?.stop();
    this.streams = null;
    // The pushed changes still gathering (server/health/push-batch.ts) are written before the database closes.
    await this.ingest.drainPushes();
  }

  /** The nodes the gateway may contact, with their addresses and pinned keys. */
  private async contactable(): Promise<EdgeNode[]> {
    return (await Promise.all((await contactableNodes(this.db)).map((id) => edgeNode(this.db, id)))).filter((n): n is EdgeNode => n !== null);
  }

  /** One round now (tests, the admin's curiosity); null when no collector runs here. */
  async collectNow(): Promise<RoundOutcome | null> {
    return this.collector ? this.collector.round({ force: true }) : null;
  }

  async stopCollector(): Promise<void> {
    this.live.stop();
    await this.collector?.stop();
    this.collector = null;
    await this.locks?.close();
    this.locks = null;
  }

  /** Nodes as the last round found them, across replicas (the /metrics gauge). */
  async nodeReachability(): Promise<{ node_id: string; reachable: boolean }[]> {
    return this.db.query<{ node_id: string; reachable: boolean }>('select node_id::text, reachable from traffic.node_poll p where exists (select 1 from edge_node n where n.id = p.node_id)');
  }

  /** Tunnels by status and by health as the API shows it (not on an edge: unknown); deleted ones left out. */
  async tunnelCounts(): Promise<{ status: string; health: string; n: number }[]> {
    const rows = await this.db.query<{ status: string; health: string; n: string }>(
      `select status, case when status in (${ON_EDGE.map(() => '?').join(', ')}) then health else 'unknown' end as health, count(*)::text as n
         from tunnel where status <> 'deleted' group by 1, 2`,
      [...ON_EDGE],
    );
    return rows.map((r) => ({ status: r.status, health: r.health, n: Number(r.n) }));
  }
}
