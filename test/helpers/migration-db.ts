// A fresh database migrated only up to a given migration, with a raw pool to write data "from before":
// what the migration tests start from (test/integration/migration-*.test.ts).
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { openOrm, type Orm } from '../../server/db/orm.ts';
import { dropDatabase, withDatabase } from './postgres.ts';

export interface DatabaseAtMigration {
  orm: Orm;
  raw: pg.Pool;
  /** Closes the pools, then drops the database. */
  drop(): Promise<void>;
}

export async function databaseAt(adminUrl: string, prefix: string, migration: string): Promise<DatabaseAtMigration> {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  const admin = async <T>(fn: (c: pg.Client) => Promise<T>): Promise<T> => {
    const c = new pg.Client({ connectionString: adminUrl });
    await c.connect();
    try {
      return await fn(c);
    } finally {
      await c.end();
    }
  };
  await admin((c) => c.query(`create database ${name}`));
  const url = withDatabase(adminUrl, name);
  const orm = await openOrm({ databaseUrl: url, dataDir: '' });
  await orm.migrator.up({ to: migration });
  const raw = new pg.Pool({ connectionString: url, max: 2 });
  return {
    orm,
    raw,
    async drop() {
      await raw.end();
      await orm.close();
      await admin((c) => dropDatabase(c, name));
    },
  };
}
