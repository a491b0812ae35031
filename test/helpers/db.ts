// Per-file databases cloned from the migrated template made by global-setup.ts.
import { randomBytes } from 'node:crypto';
import { inject } from 'vitest';
import pg from 'pg';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { withDatabase } from './global-setup.ts';
import { dropDatabase } from './postgres.ts';

export interface TestDatabase {
  url: string;
  name: string;
  db: Database;
  /** A plain pg client for assertions that should not go through the code under test. */
  raw: pg.Pool;
  drop(): Promise<void>;
}

export async function createTestDatabase(opts: { poolMax?: number } = {}): Promise<TestDatabase> {
  const adminUrl = inject('adminDatabaseUrl');
  const template = inject('templateDatabase');
  const name = `${template}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  // Cloning needs the template idle; retry briefly if another file is cloning at the same moment.
  for (let attempt = 0; ; attempt++) {
    try {
      await admin.query(`create database ${name} template ${template}`);
      break;
    } catch (e) {
      if (attempt > 20 || !/being accessed by other users/.test((e as Error).message)) throw e;
      await new Promise((r) => setTimeout(r, 100 + Math.random() * 200));
    }
  }
  await admin.end();
  const url = withDatabase(adminUrl, name);
  const orm = await openOrm({ databaseUrl: url, dataDir: '', poolMax: opts.poolMax });
  const raw = new pg.Pool({ connectionString: url, max: 4 });
  // pg's Pool.end() resolves before its connections' sockets close; drop() then ends any still open WITH
  // (FORCE), whose FATAL reaches the pool as an 'error' event: without a listener, an uncaught exception.
  raw.on('error', () => {});
  const database = new Database(orm);
  return {
    url,
    name,
    db: database,
    raw,
    async drop() {
      await raw.end();
      await database.close();
      const a = new pg.Client({ connectionString: adminUrl });
      await a.connect();
      await dropDatabase(a, name);
      await a.end();
    },
  };
}
