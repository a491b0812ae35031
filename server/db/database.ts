// A thin handle over the ORM for the services: raw parameterised SQL (`?` placeholders) for hot and
// locking paths, a forked EntityManager for everything else, and transactions that give both.
import type { Em, Orm } from './orm.ts';

export interface Sql {
  /** Runs one statement with `?` placeholders and returns its rows. */
  query<T extends object = Record<string, unknown>>(text: string, params?: readonly unknown[]): Promise<T[]>;
  /** A fresh entity manager bound to the same connection or transaction. */
  readonly em: Em;
}

class EmSql implements Sql {
  constructor(readonly em: Em) {}
  query<T extends object>(text: string, params: readonly unknown[] = []): Promise<T[]> {
    return this.em.execute<T[]>(text, [...params], 'all');
  }
}

export class Database {
  constructor(readonly orm: Orm) {}

  /** Outside any transaction; each call gets its own forked EntityManager. */
  query<T extends object = Record<string, unknown>>(text: string, params: readonly unknown[] = []): Promise<T[]> {
    return (this.orm.em.fork() as Em).execute<T[]>(text, [...params], 'all');
  }

  em(): Em {
    return this.orm.em.fork() as Em;
  }

  /** Runs `fn` in one transaction (READ COMMITTED); it commits when `fn` resolves and rolls back when it throws. */
  transaction<T>(fn: (sql: Sql) => Promise<T>): Promise<T> {
    const em = this.orm.em.fork() as Em;
    return em.transactional((tx) => fn(new EmSql(tx)));
  }

  close(): Promise<void> {
    return this.orm.close();
  }
}
