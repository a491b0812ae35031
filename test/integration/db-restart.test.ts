// A PostgreSQL restart with transactions in flight must not cost the gateway its pooled connections:
// each transaction whose connection died fails once, and the next ones run (server/db/release-on-failed-
// rollback.ts). A private cluster, so the shared test cluster is never restarted.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { canRunPrivatePostgres, startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';

let cluster: PrivatePostgres;
let db: Database;

beforeAll(async () => {
  if (!canRunPrivatePostgres) return;
  cluster = await startPrivatePostgres();
  db = new Database(await openOrm({ databaseUrl: cluster.url, dataDir: '', poolMax: 4 }));
}, 60_000);

afterAll(async () => {
  await db?.close();
  cluster?.stop();
});

it.skipIf(!canRunPrivatePostgres)('transactions cut by a restart fail, and every later one still gets a connection', async () => {
  const tx = () =>
    db.transaction(async (sql) => {
      await sql.query('select pg_sleep(0.3)');
      return 'ok';
    });
  // As many as the pool holds, all in the middle of a transaction when the server restarts.
  const cut = Array.from({ length: 4 }, () => tx().catch((e: Error) => e.message));
  await new Promise((r) => setTimeout(r, 100));
  await cluster.restart();
  for (const r of await Promise.all(cut)) expect(r).not.toBe('ok');
  const timeout = () => new Promise((r) => setTimeout(() => r('no connection within 5 s'), 5000));
  for (let i = 0; i < 8; i++) expect(await Promise.race([tx(), timeout()])).toBe('ok');
}, 90_000);
