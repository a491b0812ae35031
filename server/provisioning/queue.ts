// The durable queue of edge work: pg-boss on the gateway's own PostgreSQL (schema `pgboss`), or on the
// embedded PGlite through pg-boss's own PGlite adapter and `pglite` backend, so both modes run the same
// engine and keep queued jobs across restarts.
//
// One queue, `edge-job`, policy `singleton` with the edge node id as singletonKey: at most one job per
// node is active at a time across every replica, so a node's reconcile never races an apply or remove
// of one of its tunnels. Fetching uses SKIP LOCKED, so one delivery goes to one worker; a worker that
// dies holding a job loses it to expiry and pg-boss hands it out again. Jobs carry only ids: the worker
// reads the tunnel's status and does what that status asks, so a duplicate or stale job is a no-op.
import { PgBoss, fromPglite, type JobWithMetadata, type PGliteLike } from 'pg-boss';
import type { Database } from '../db/database.ts';
import type { Logger } from '../log.ts';

export const EDGE_QUEUE = 'edge-job';
export const BOSS_SCHEMA = 'pgboss';

/** A tunnel job: make the edge match the tunnel's status (provisioning -> apply, deleting -> remove). */
export interface TunnelJobData {
  tunnelId: string;
  nodeId: string;
}

export interface QueueOptions {
  /** Attempts after the first before a provisioning tunnel is marked failed. */
  retryLimit: number;
  /** Seconds a worker may hold a job before pg-boss gives it to another (worker crash). */
  expireInSeconds: number;
}

export type EdgeJob = JobWithMetadata<TunnelJobData>;

export class EdgeQueue {
  private constructor(
    readonly boss: PgBoss,
    private readonly opts: QueueOptions,
  ) {}

  static async open(db: Database, opts: QueueOptions, log: Logger): Promise<EdgeQueue> {
    let boss: PgBoss;
    // A job left `active` by a worker that died (or whose completion was lost to a database restart)
    // holds its node's singleton slot until pg-boss expires it, which its monitor pass does; the default
    // pass every 60 s would stall that node for minutes, so it runs every 10 s (one cheap, try-locked query).
    const timing = { superviseIntervalSeconds: 10, monitorIntervalSeconds: 10 };
    if (db.url) {
      boss = new PgBoss({ connectionString: db.url, schema: BOSS_SCHEMA, max: 5, useListenNotify: true, application_name: 'tunnelgate-queue', ...timing });
    } else {
      const conn = db.orm.em.getConnection() as unknown as { getNativeClient(): Promise<PGliteLike> };
      boss = new PgBoss({ db: fromPglite(await conn.getNativeClient()), backend: 'pglite', schema: BOSS_SCHEMA, useListenNotify: true, ...timing });
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
    return new EdgeQueue(boss, opts);
  }

  /** Queues work for one tunnel; resolves with the job id. */
  async send(data: TunnelJobData): Promise<string | null> {
    // Retry settings go on each job too: the queue's own were fixed by whichever replica created it.
    return this.boss.send(EDGE_QUEUE, data, {
      singletonKey: data.nodeId,
      retryLimit: this.opts.retryLimit,
      retryDelay: 1,
      retryBackoff: true,
      retryDelayMax: 60,
      expireInSeconds: this.opts.expireInSeconds,
    });
  }

  /** Whether a job for this tunnel is queued, retrying or running. */
  async hasLiveJob(tunnelId: string): Promise<boolean> {
    // `queued: true` would leave out active jobs; a tunnel has few jobs, so filter here.
    const jobs = await this.boss.findJobs<TunnelJobData>(EDGE_QUEUE, { data: { tunnelId } });
    return jobs.some((j) => j.state === 'created' || j.state === 'retry' || j.state === 'active');
  }

  /** Runs `handler` for each job, `concurrency` at a time in this process; a throw fails (and retries) the job. */
  async work(concurrency: number, handler: (job: EdgeJob) => Promise<void>): Promise<void> {
    const options = { batchSize: 1, includeMetadata: true as const, localConcurrency: concurrency, pollingIntervalSeconds: 1, notifyPollingIntervalSeconds: 1 };
    await this.boss.work<TunnelJobData, void, typeof options>(
      EDGE_QUEUE,
      options,
      async (jobs: EdgeJob[]) => {
        for (const job of jobs) await handler(job);
      },
    );
  }

  get retryLimit(): number {
    return this.opts.retryLimit;
  }

  async stop(): Promise<void> {
    await this.boss.stop({ graceful: true, timeout: 5000 });
  }
}
