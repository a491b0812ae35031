// Per-key mutual exclusion for provisioning, within this process and across every replica on the same
// PostgreSQL: "check whether a tunnel has a live job, then queue one" and "probe a tunnel" must each
// happen at most once at a time per tunnel (docs/CONTRACTS.md "Tunnel lifecycle" "one live edge job per tunnel": repeated clicks must not pile up jobs on the edge).
//
// In this process, callers of one key wait in line (a promise chain), so twenty concurrent requests hold
// one database connection, not twenty. Across replicas, the holder also takes a transaction-scoped
// PostgreSQL advisory lock on a connection of a small dedicated pool; the lock ends with the transaction
// (or with the connection, if this process dies). The embedded database (PGlite) is one process by
// construction, so the in-process line is the whole lock there and `fn` gets no connection.
import pg from 'pg';
import { pgConfig } from '../db/multi-host.ts';

/** What pg-boss accepts as its `db` option (`executeSql`) and what the lock holder queries with. */
export interface LockedSql {
  executeSql(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}

class LockTimeout extends Error {
  override name = 'LockTimeout';
}

export class KeyedLocks {
  private readonly lines = new Map<string, Promise<void>>();
  private pool: pg.Pool | null = null;

  /** `url` null: the embedded database, in-process locking only. */
  constructor(
    private readonly url: string | null,
    private readonly opts: { maxConnections: number; application: string },
  ) {}

  /**
   * Runs `fn` holding `key`: after every earlier holder in this process and, on PostgreSQL, while holding
   * the advisory lock for `key` (waiting at most `waitMs` for another replica to let go: LockTimeout).
   * `fn` gets the lock's connection, inside its transaction, or null on the embedded database.
   */
  withLock<T>(key: string, waitMs: number, fn: (sql: LockedSql | null) => Promise<T>): Promise<T> {
    return this.inLine(key, async () => {
      if (!this.url) return fn(null);
      const r = await this.advisory(this.url, key, waitMs, fn);
      if (!r.acquired) throw new LockTimeout(`another replica holds ${key}`);
      return r.value;
    });
  }

  /**
   * Like withLock(), but when another replica holds `key` it does not wait: `{acquired: false}` at once.
   * (In this process, callers of one key still run one after the other.)
   */
  tryLock<T>(key: string, fn: (sql: LockedSql | null) => Promise<T>): Promise<{ acquired: true; value: T } | { acquired: false }> {
    return this.inLine(key, async () => {
      if (!this.url) return { acquired: true as const, value: await fn(null) };
      const r = await this.advisory(this.url, key, null, fn);
      return r;
    });
  }

  async close(): Promise<void> {
    const p = this.pool;
    this.pool = null;
    await p?.end().catch(() => {});
  }

  private inLine<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const before = this.lines.get(key) ?? Promise.resolve();
    const run = before.then(fn);
    const tail = run.then(
      () => {},
      () => {},
    );
    this.lines.set(key, tail);
    void tail.then(() => {
      if (this.lines.get(key) === tail) this.lines.delete(key);
    });
    return run;
  }

  /** `waitMs` null: try once, never wait. */
  private async advisory<T>(url: string, key: string, waitMs: number | null, fn: (sql: LockedSql) => Promise<T>): Promise<{ acquired: true; value: T } | { acquired: false }> {
    if (!this.pool) {
      this.pool = new pg.Pool({ ...pgConfig(url), max: this.opts.maxConnections, idleTimeoutMillis: 10_000, application_name: this.opts.application });
      // A connection the server dropped (restart, failover) is discarded; the next lock opens another.
      this.pool.on('error', () => {});
    }
    const client = await this.pool.connect();
    let broken: Error | undefined;
    // pg.Pool listens for a dropped connection only while a client is idle; a checked-out client that the
    // server terminates (restart, failover) between two queries emits 'error' itself, which must not
    // become an uncaught exception. The pending or next query fails and the client is discarded.
    const onError = (e: Error) => (broken = e);
    client.on('error', onError);
    try {
      await client.query('begin');
      const lockKey = `tunnelgate:${key}`;
      if (waitMs === null) {
        const { rows } = await client.query<{ ok: boolean }>('select pg_try_advisory_xact_lock(hashtextextended($1, 0)) as ok', [lockKey]);
        if (!rows[0]?.ok) {
          await client.query('rollback');
          return { acquired: false };
        }
      } else {
        // lock_timeout bounds the wait for another replica's holder; it covers advisory lock waits too.
        await client.query(`select set_config('lock_timeout', $1, true)`, [`${Math.max(1, Math.round(waitMs))}ms`]);
        try {
          await client.query('select pg_advisory_xact_lock(hashtextextended($1, 0))', [lockKey]);
        } catch (e) {
          if ((e as { code?: string }).code === '55P03') {
            await client.query('rollback');
            return { acquired: false };
          }
          throw e;
        }
        await client.query(`select set_config('lock_timeout', '0', true)`);
      }
      const sql: LockedSql = { executeSql: (text, values) => client.query(text, values) };
      const value = await fn(sql);
      await client.query('commit');
      return { acquired: true, value };
    } catch (e) {
      await client.query('rollback').catch((err: unknown) => (broken = err as Error));
      throw e;
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
  }
}
