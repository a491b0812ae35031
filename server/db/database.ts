// A thin handle over the ORM for the services: raw parameterised SQL (`?` placeholders) for hot and
// locking paths, transactions over the same SQL, and the ORM itself (`orm`) for entity work.
import { EventEmitter } from 'node:events';
import pg from 'pg';
import { HOT_POOL_TYPES, databaseUrlOf, type Em, type Orm } from './orm.ts';
import { pgConfig } from './multi-host.ts';

export interface Sql {
  /** Runs one statement with `?` placeholders and returns its rows. */
  query<T extends object = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<T[]>;
}

class EmSql implements Sql {
  constructor(private readonly em: Em) {}
  query<T extends object>(text: string, params: readonly unknown[] = []): Promise<T[]> {
    return this.em.execute<T[]>(text, [...params], 'all');
  }
}

/** application_name of the LISTEN connections, so operators can tell them apart in pg_stat_activity. */
export const LISTENER_APPLICATION_NAME = 'tunnelgate-listen';

export class Database {
  /** Notifications raised by this process, delivered at once without a round trip. */
  private readonly local = new EventEmitter();
  private readonly listeners: pg.Client[] = [];
  private closing = false;
  /** Hot reads on PostgreSQL go through plain pg with named prepared statements (parsed and planned once per connection). */
  private hotPool: pg.Pool | null = null;
  private readonly hotText = new Map<string, string>();
  /** hotTransaction()'s statement names, by text: a transaction's SQL is written in the code, so the set is small. */
  private readonly txNames = new Map<string, string>();

  constructor(
    readonly orm: Orm,
    private readonly opts: {
      /**
       * Waits before a lost LISTEN connection is replaced (attempt 0), or retried after a failed
       * replacement (1, 2, ...). Tests inject a gate here to hold a replica deaf for as long as they need.
       */
      listenRetryDelay?: (attempt: number) => Promise<void>;
    } = {},
  ) {
    this.local.setMaxListeners(0);
  }

  /** The PostgreSQL URL, or null on the embedded database. */
  get url(): string | null {
    // PGlite reports a default clientUrl too, so ask the driver which database this is.
    if (this.orm.config.getDriver().constructor.name === 'PgliteDriver') return null;
    // All of a multi-host URL's hosts: connections made from it follow the primary (multi-host.ts).
    return databaseUrlOf(this.orm) ?? (this.orm.config.get('clientUrl') as string | undefined) ?? null;
  }

  /**
   * Tells every process on this database (and this one at once) that something changed, through
   * PostgreSQL NOTIFY. Used to drop caches, never to carry state.
   */
  async notify(channel: string, payload: string): Promise<void> {
    this.local.emit(channel, payload);
    if (this.url) await this.query('select pg_notify(?, ?)', [channel, payload]);
  }

  /**
   * Calls `handler` for every notification on `channel`, from any process. On PostgreSQL this holds
   * one dedicated connection; on the embedded database every writer is this process, so local
   * delivery is complete.
   *
   * A listener connection lost to a server restart, a failover or `pg_terminate_backend` is replaced
   * (after a short pause), so notices from other replicas resume; but what was sent while it was down
   * is gone. `onMissed` is how subscribers learn that: it is called when the connection is lost
   * (notices may be missed from now on) and again once the replacement listens (anything read in
   * between may have changed unannounced). Whatever a subscriber keeps because "a notice would have
   * told me otherwise" must be dropped or re-read then.
   */
  async listen(channel: string, handler: (payload: string) => void, onMissed?: () => void): Promise<void> {
    if (!/^[a-z_]{1,63}$/.test(channel)) throw new Error(`bad channel name ${channel}`);
    this.local.on(channel, handler);
    const url = this.url;
    if (!url) return;
    const missed = () => {
      try {
        onMissed?.();
      } catch {
        // A subscriber's failure must not stop the replacement connection.
      }
    };
    const connect = async (replacing: boolean): Promise<void> => {
      // Keepalive: a connection silently cut by the network is noticed (and replaced) too.
      const client = new pg.Client({ ...pgConfig(url), application_name: LISTENER_APPLICATION_NAME, keepAlive: true, keepAliveInitialDelayMillis: 10_000 });
      let lost = false;
      const onLost = () => {
        if (lost) return;
        lost = true;
        const i = this.listeners.indexOf(client);
        if (i >= 0) this.listeners.splice(i, 1);
        client.end().catch(() => {});
        if (this.closing) return;
        missed();
        const retry = (attempt: number) => {
          void this.listenRetryDelay(attempt).then(() => {
            if (this.closing) return;
            connect(true).catch(() => retry(attempt + 1));
          });
        };
        retry(0);
      };
      client.on('error', onLost);
      client.on('end', onLost);
      client.on('notification', (n) => {
        if (n.channel === channel && n.payload !== undefined) handler(n.payload);
      });
      try {
        await client.connect();
        await client.query(`listen ${channel}`);
      } catch (e) {
        client.removeAllListeners('end');
        client.end().catch(() => {});
        throw e;
      }
      this.listeners.push(client);
      // Listening again: from here on notices arrive; those sent during the gap never will.
      if (replacing) missed();
    };
    await connect(false);
  }

  private listenRetryDelay(attempt: number): Promise<void> {
    if (this.opts.listenRetryDelay) return this.opts.listenRetryDelay(attempt);
    return new Promise((r) => setTimeout(r, attempt === 0 ? 500 : 1000).unref());
  }

  /**
   * Test hook: the server process ids of this process's LISTEN connections, so a test can cut exactly
   * this replica's notices (`pg_terminate_backend`).
   */
  listenerPids(): number[] {
    return this.listeners.map((c) => (c as unknown as { processID: number | null }).processID).filter((p): p is number => typeof p === 'number');
  }

  /** Outside any transaction; each call gets its own forked EntityManager. */
  query<T extends object = Record<string, unknown>>(text: string, params: readonly unknown[] = []): Promise<T[]> {
    return (this.orm.em.fork() as Em).execute<T[]>(text, [...params], 'all');
  }

  /**
   * A read on a hot path (authentication, listing, reading a tunnel): same `?` SQL as query(), but on
   * PostgreSQL a named prepared statement on a lean pool, which measured about twice the throughput
   * of going through the ORM. `name` must identify `text` uniquely. Values are parsed as query() parses
   * them, on both databases (orm.ts "Types"): int8, numeric and times as text, jsonb parsed.
   */
  hot<T extends object = Record<string, unknown>>(name: string, text: string, params: readonly unknown[] = []): Promise<T[]> {
    const url = this.url;
    if (!url) return this.query<T>(text, params);
    const pgText = this.pgText(name, text);
    return this.pool(url).query<T>({ name, text: pgText, values: [...params] }).then((r) => r.rows);
  }

  /**
   * A statement on a hot write path (the token endpoint's consume-and-issue): same `?` SQL as query(),
   * run through a forked EntityManager on MikroORM's own connection pool, but on PostgreSQL as a named
   * prepared statement on that pool's pg client (parsed and planned once per connection) instead of
   * MikroORM's query pipeline. `name` must identify `text` uniquely. Rows come back as pg parses them:
   * use it for statements whose results are counted, not read (`returning 1`).
   */
  async prepared<T extends object = Record<string, unknown>>(name: string, text: string, params: readonly unknown[] = []): Promise<T[]> {
    if (!this.url) return (this.orm.em.fork() as Em).execute<T[]>(text, [...params], 'all');
    const pool = await this.nativePool();
    return pool.query<T>({ name, text: this.pgText(name, text), values: [...params] }).then((r) => r.rows);
  }

  /**
   * hot() with each row as an array of its columns in select order: no object with named keys is
   * built per row, which is most of what reading a page of rows costs this process.
   *
   * Both drivers are asked for array rows, so columns keep their place even when names repeat (several
   * unnamed `(...)::text` columns are all called `text`, and an object would keep only the last of
   * them). Outside any transaction, like hot(): on the embedded database it waits for a transaction
   * in progress (PGlite runs one statement or one transaction at a time).
   */
  async hotRows(name: string, text: string, params: readonly unknown[] = []): Promise<unknown[][]> {
    const url = this.url;
    if (!url) {
      const pglite = await this.embedded();
      return (await pglite.query<unknown[]>(this.pgText(name, text), [...params], { rowMode: 'array' })).rows;
    }
    return this.pool(url).query<unknown[]>({ name, text: this.pgText(name, text), values: [...params], rowMode: 'array' }).then((r) => r.rows);
  }

  /**
   * The PGlite instance under MikroORM's connection (embedded database only), for what the ORM's query
   * path cannot ask for: array rows. Its type parsers are the ones openOrm configured, so values come
   * back as query() returns them.
   */
  private async embedded(): Promise<EmbeddedClient> {
    const em = this.orm.em.fork() as Em;
    return (em.getConnection() as unknown as { getNativeClient(): Promise<EmbeddedClient> }).getNativeClient();
  }

  /** `?` placeholders numbered for PostgreSQL, once per statement name. */
  private pgText(name: string, text: string): string {
    let pgText = this.hotText.get(name);
    if (pgText === undefined) {
      pgText = numbered(text);
      this.hotText.set(name, pgText);
    }
    return pgText;
  }

  private pool(url: string): pg.Pool {
    if (!this.hotPool) {
      // DateStyle pinned: hot statements may return times as PostgreSQL's text output and parse it.
      // Types parsed as MikroORM's pool parses them (times as PostgreSQL's text, not Date), so hot() returns
      // what query() does, on this database and on the embedded one (orm.ts HOT_POOL_TYPES).
      this.hotPool = new pg.Pool({ ...pgConfig(url), max: 10, options: '-c DateStyle=ISO,YMD', types: HOT_POOL_TYPES });
      // An idle connection dropped by the server (restart, failover) must not crash the process:
      // the pool discards it and the next query opens a new one.
      this.hotPool.on('error', () => {});
    }
    return this.hotPool;
  }

  /** Runs `fn` in one transaction (READ COMMITTED); it commits when `fn` resolves and rolls back when it throws. */
  transaction<T>(fn: (sql: Sql) => Promise<T>): Promise<T> {
    const em = this.orm.em.fork() as Em;
    return em.transactional((tx) => fn(new EmSql(tx)));
  }

  /**
   * transaction() for a hot write path (the purchase): on PostgreSQL its statements run as named
   * prepared statements, parsed and planned once per connection, on a connection of MikroORM's own pool
   * (the one transaction() uses, so the connection budget is the same), instead of through MikroORM's
   * query pipeline, whose per-statement cost in this process bounded purchases (measured by bench:gateway). Rows come back
   * as pg parses them (numeric and int8 as strings, jsonb parsed), so `fn` formats times in SQL, as the
   * tunnel columns do. A connection that failed mid-transaction is discarded, never handed on.
   */
  async hotTransaction<T>(fn: (sql: Sql) => Promise<T>): Promise<T> {
    if (!this.url) return this.transaction(fn);
    const client = await (await this.nativePool()).connect();
    let broken: Error | undefined;
    try {
      await client.query('begin');
      const result = await fn({
        query: <R extends object>(text: string, params: readonly unknown[] = []) => {
          const name = this.txStatementName(text);
          return client.query<R>({ name, text: name === undefined ? numbered(text) : this.pgText(name, text), values: [...params] }).then((r) => r.rows);
        },
      });
      await client.query('commit');
      return result;
    } catch (e) {
      await client.query('rollback').catch((rollbackFailed: Error) => {
        broken = rollbackFailed;
      });
      throw e;
    } finally {
      client.release(broken);
    }
  }

  /** A name for a transaction statement's text; none (an unnamed statement) past a bound, so SQL built at run time cannot grow each connection's statement cache without end. */
  private txStatementName(text: string): string | undefined {
    let name = this.txNames.get(text);
    if (name === undefined && this.txNames.size < 256) {
      name = `tx_${this.txNames.size}`;
      this.txNames.set(text, name);
    }
    return name;
  }

  /** The pg pool under MikroORM's connection (PostgreSQL only). */
  private async nativePool(): Promise<pg.Pool> {
    const em = this.orm.em.fork() as Em;
    return (em.getConnection() as unknown as { getNativeClient(): Promise<pg.Pool> }).getNativeClient();
  }

  async close(): Promise<void> {
    this.closing = true;
    // end() of a connection the server already dropped can wait forever: do not hold the close on it.
    const ended = (c: pg.Client) => Promise.race([c.end().catch(() => {}), new Promise<void>((r) => setTimeout(r, 1000).unref())]);
    await Promise.all(this.listeners.splice(0).map(ended));
    await this.hotPool?.end().catch(() => {});
    this.hotPool = null;
    this.local.removeAllListeners();
    // The driver's pool waits for every checked-out connection; one orphaned by a connection lost in
    // the middle of a transaction (a PostgreSQL restart) would hold shutdown forever.
    await Promise.race([this.orm.close(), new Promise<void>((r) => setTimeout(r, 5000).unref())]);
  }
}

/** What hotRows() uses of a PGlite instance (`@electric-sql/pglite`'s query with its row mode). */
interface EmbeddedClient {
  query<R>(text: string, params: unknown[], options: { rowMode: 'array' | 'object' }): Promise<{ rows: R[] }>;
}

/** `?` placeholders as PostgreSQL's `$1`, `$2`, ... */
function numbered(text: string): string {
  let n = 0;
  return text.replace(/\?/g, () => `$${++n}`);
}
