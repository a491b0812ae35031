// The durable queue of edge work: pg-boss on the gateway's own PostgreSQL (schema `pgboss`), or on the
// embedded PGlite through pg-boss's own PGlite adapter and `pglite` backend, so both modes run the same
// engine and keep queued jobs across restarts.
//
// One queue, `edge-job`, policy `singleton` with the edge node id as singletonKey: at most one job per
// node is active at a time across every replica, so a node's reconcile never races an apply or remove
// of one of its tunnels. The node id is also each job's group, and workers fetch with group concurrency 1:
// a job whose node is busy is passed over at fetch time, read from the job table itself. Without that, the
// singleton index alone refuses such a job only when it is already being started (a failed, empty fetch),
// and pg-boss skips busy nodes only from a queue cache refreshed once a minute; so the oldest waiting job of
// one busy node stalled every other node's jobs behind it for up to a minute (measured in
// test/integration/queue-per-node.test.ts). The singleton index stays the guarantee when two replicas
// fetch for one node at the same instant. Fetching uses SKIP LOCKED, so one delivery goes to one worker; a worker that
// dies holding a job loses it to expiry and pg-boss hands it out again. Jobs carry only ids: the worker
// reads the tunnel's status and does what that status asks, so a duplicate or stale job is a no-op.
//
// Two kinds of job share the queue (and so the per-node slot): a tunnel job, and a node `reconcile`
// (periodic, or after the connection to the node came back). sendOnce() queues a job only when none
// for the same tunnel (or the same node's reconcile) is live, under a per-key lock that spans every
// replica (locks.ts), so repeated or concurrent requests never pile up jobs (docs/CONTRACTS.md "Tunnel lifecycle").
import { PgBoss, fromPglite, type JobResult, type JobWithMetadata, type PGliteLike } from 'pg-boss';
import type { Database } from '../db/database.ts';
import { pgConfig } from '../db/multi-host.ts';
import type { Logger } from '../../common/log.ts';
import { KeyedLocks, type LockedSql } from './locks.ts';

export const EDGE_QUEUE = 'edge-job';
export const BOSS_SCHEMA = 'pgboss';

/** A tunnel job: make the edge match the tunnel's status (provisioning -> apply, deleting -> remove). */
export interface TunnelJobData {
  tunnelId: string;
  nodeId: string;
  /**
   * An operator's `tunnel repair` (docs/CONTRACTS.md "Admin CLI"): a provisioned or active tunnel is applied again as it
   * stands (its status does not move); any other status is handled as for any tunnel job.
   */
  repair?: true;
}

/** A node job: send the node its whole desired set. */
export interface ReconcileJobData {
  kind: 'reconcile';
  nodeId: string;
  /** Why it was queued (logged): the periodic pass, a connection that came back, or an operator. */
  reason: 'periodic' | 'reconnect' | 'operator';
}

export type EdgeJobData = TunnelJobData | ReconcileJobData;

export function isReconcileJob(d: EdgeJobData): d is ReconcileJobData {
  return (d as Partial<ReconcileJobData>).kind === 'reconcile';
}

/** The part of a job's data that says which live job it duplicates (jsonb containment). */
function liveMatch(d: EdgeJobData): Record<string, string> {
  return isReconcileJob(d) ? { kind: 'reconcile', nodeId: d.nodeId } : { tunnelId: d.tunnelId };
}

export interface SendOnceOptions {
  /** A job of the same key created this recently counts as live even when it already ended (0: only live ones). */
  freshSeconds?: number;
  /** Do not start it before this many seconds from now (jitter). */
  delaySeconds?: number;
  /**
   * Checked under the key's lock, after the live-job check: false queues nothing. For a caller that chose
   * the job from a read made before the lock (the sweeper), so a job that ended in between, having
   * already done the work, is not followed by a second one.
   */
  stillNeeded?: (sql: LockedSql) => Promise<boolean>;
}

export interface SendOnceResult {
  /** The job now live for this key: the one just queued, or the one that already was. */
  jobId: string | null;
  queued: boolean;
}

export interface QueueOptions {
  /** Attempts after the first before a provisioning tunnel is marked failed. */
  retryLimit: number;
  /** Seconds a worker may hold a job before pg-boss gives it to another (worker crash). */
  expireInSeconds: number;
}

export type EdgeJob = JobWithMetadata<EdgeJobData>;

/**
 * Thrown by a job handler when no retry can help (the failure needs an operator): the job fails at once,
 * whatever retries it has left, with `cause` as its output. Any other throw fails the attempt and pg-boss
 * retries it with backoff.
 */
export class FinalJobFailure extends Error {
  override name = 'FinalJobFailure';
  constructor(override readonly cause: Error) {
    super(cause.message);
  }
}

export class EdgeQueue {
  private constructor(
    readonly boss: PgBoss,
    private readonly opts: QueueOptions,
    private readonly locks: KeyedLocks,
    /** The embedded database's connection as pg-boss uses it (null on PostgreSQL: the lock's connection is used). */
    private readonly embedded: LockedSql | null,
  ) {}

  static async open(db: Database, opts: QueueOptions, log: Logger): Promise<EdgeQueue> {
    let boss: PgBoss;
    let embedded: LockedSql | null = null;
    // A job left `active` by a worker that died (or whose completion was lost to a database restart)
    // holds its node's singleton slot until pg-boss expires it, which its monitor pass does; the default
    // pass every 60 s would stall that node for minutes, so it runs every 10 s (one cheap, try-locked query).
    const timing = { superviseIntervalSeconds: 10, monitorIntervalSeconds: 10 };
    if (db.url) {
      boss = new PgBoss({ ...pgConfig(db.url), schema: BOSS_SCHEMA, max: 5, useListenNotify: true, application_name: 'tunnelgate-queue', ...timing });
    } else {
      const conn = db.orm.em.getConnection() as unknown as { getNativeClient(): Promise<PGliteLike> };
      const adapter = fromPglite(await conn.getNativeClient());
      embedded = adapter as unknown as LockedSql;
      boss = new PgBoss({ db: adapter, backend: 'pglite', schema: BOSS_SCHEMA, useListenNotify: true, ...timing });
    }
    // pg-boss reports connection trouble (a restarting PostgreSQL) here and carries on; never crash on it.
    boss.on('error', (err: Error) => log.warn('queue error', { err: err.message }));
    await boss.start();
    await boss.createQueue(EDGE_QUEUE, {
      policy: 'singleton',
      notify: true,
      retryLimit: opts.retryLimit,
      retryDelay: 1,
      retryBackoff: true,
      retryDelayMax: 60,
      expireInSeconds: opts.expireInSeconds,
    });
    const locks = new KeyedLocks(db.url, { maxConnections: 4, application: 'tunnelgate-queue-lock' });
    return new EdgeQueue(boss, opts, locks, embedded);
  }

  /**
   * Queues `data` unless a job for the same tunnel (or the same node's reconcile) is queued, retrying or
   * running, or (with `freshSeconds`) was created that recently. Check and insert happen under one lock
   * per key across replicas, so concurrent callers queue exactly one job between them.
   */
  async sendOnce(data: EdgeJobData, o: SendOnceOptions = {}): Promise<SendOnceResult> {
    const match = liveMatch(data);
    const key = `edge-job:${JSON.stringify(match)}`;
    // The wait bound only matters when another replica's holder is stuck on a dead connection.
    return this.locks.withLock(key, 10_000, async (locked) => {
      // PostgreSQL: the lock's connection, so the check and the insert commit together under the lock.
      const sql = locked ?? this.embedded;
      if (!sql) throw new Error('edge queue: no connection to check live jobs on');
      // pg-boss's own findJobs() reads a key's whole history (completed jobs are kept for days); this
      // reads pg-boss's table (pinned version, schema `pgboss`) for the few live or fresh ones.
      const text = `select id::text as id from ${BOSS_SCHEMA}.job
         where name = $1 and data @> $2::jsonb and (state < 'completed' or created_on > now() - make_interval(secs => $3::float8))
         order by created_on desc limit 1`;
      const values = [EDGE_QUEUE, JSON.stringify(match), o.freshSeconds ?? 0];
      const live = (await sql.executeSql(text, values)).rows[0]?.id;
      if (typeof live === 'string') return { jobId: live, queued: false };
      if (o.stillNeeded && !(await o.stillNeeded(sql))) return { jobId: null, queued: false };
      const jobId = await this.boss.send(EDGE_QUEUE, data, {
        singletonKey: data.nodeId,
        // The group work() limits to one active job: a busy node's waiting jobs are passed over, not in the way.
        group: { id: data.nodeId },
        // Retry settings go on each job too: the queue's own were fixed by whichever replica created it.
        retryLimit: this.opts.retryLimit,
        retryDelay: 1,
        retryBackoff: true,
        retryDelayMax: 60,
        expireInSeconds: this.opts.expireInSeconds,
        ...(o.delaySeconds ? { startAfter: new Date(Date.now() + o.delaySeconds * 1000) } : {}),
        db: sql,
      });
      return { jobId, queued: jobId !== null };
    });
  }

  /**
   * Runs `handler` for each job, `concurrency` at a time in this process; a throw fails (and retries) the
   * job, a FinalJobFailure fails it with no retry (pg-boss's per-job `deadletter` disposition: terminal at
   * once; the queue has no dead-letter queue, so the job just ends `failed`).
   */
  async work(concurrency: number, handler: (job: EdgeJob) => Promise<void>): Promise<void> {
    const options = {
      batchSize: 1,
      includeMetadata: true as const,
      perJobResults: true as const,
      localConcurrency: concurrency,
      // One active job per group (the node) across every replica, checked in the fetch itself (see the top).
      groupConcurrency: 1,
      pollingIntervalSeconds: 1,
      notifyPollingIntervalSeconds: 1,
    };
    await this.boss.work<EdgeJobData, void, typeof options>(EDGE_QUEUE, options, async (jobs: EdgeJob[]) => {
      const results: JobResult[] = [];
      for (const job of jobs) {
        try {
          await handler(job);
          results.push({ id: job.id, status: 'completed' });
        } catch (e) {
          // The output is what a plain throw stores: the error (pg-boss serialises it).
          if (e instanceof FinalJobFailure) results.push({ id: job.id, status: 'deadletter', output: e.cause });
          else results.push({ id: job.id, status: 'failed', output: e });
        }
      }
      return results;
    });
  }

  async stop(): Promise<void> {
    await this.boss.stop({ graceful: true, timeout: 5000 });
    await this.locks.close();
  }
}
