// A fresh, migrated database for one benchmark run, on the PostgreSQL the tests use (or
// BENCH_DATABASE_URL): the set-up bench:gateway, bench:oidc and bench:traffic share.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Database } from '../../server/db/database.ts';
import { migrate, openOrm } from '../../server/db/orm.ts';
import { ensureLocalPostgres, withDatabase } from '../../test/helpers/postgres.ts';

export interface BenchDatabase {
  /** A connection to the server's maintenance database (the bench's own database is dropped through it). */
  admin: pg.Client;
  dbName: string;
  url: string;
  db: Database;
}

export async function createBenchDatabase(prefix: string, adminUrl = process.env.BENCH_DATABASE_URL ?? ensureLocalPostgres()): Promise<BenchDatabase> {
  const dbName = `${prefix}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${dbName}`);
  const url = withDatabase(adminUrl, dbName);
  const orm = await openOrm({ databaseUrl: url, dataDir: '' });
  await migrate(orm);
  return { admin, dbName, url, db: new Database(orm) };
}
