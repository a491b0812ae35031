// A PostgreSQL restart with transactions in flight must not cost the gateway its pooled connections:
// each transaction whose connection died fails once, and the next ones run (server/db/release-on-failed-
// rollback.ts). A private cluster, so the shared test cluster is never restarted.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { canRunPrivatePostgres, startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

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

it.skipIf(skipUnless(canRunPrivatePostgres, 'a private PostgreSQL cluster (root, PostgreSQL server binaries, the postgres user)'))('transactions cut by a restart fail, and every later one still gets a connection', async () => {
  // As many as the pool holds, each asleep inside a transaction for far longer than any host needs to
  // restart the server: only the restart can end them, and nothing depends on how fast they started.
  const sleeping = Array.from({ length: 4 }, () =>
    db
      .transaction(async (sql) => {
        await sql.query('select pg_sleep(600)');
        return 'ok';
      })
      .catch((e: Error) => e.message),
  );
  // Cut them only once PostgreSQL shows all four asleep (in flight is observed, not assumed).
  const observer = new pg.Client({ connectionString: cluster.url });
  observer.on('error', () => {}); // the restart ends it
  await observer.connect();
  await until('four transactions asleep in PostgreSQL', async () => {
    const { rows } = await observer.query<{ n: number }>(`select count(*)::int as n from pg_stat_activity where query like '%pg_sleep(600)%' and state = 'active' and pid <> pg_backend_pid()`);
    return rows[0]!.n === 4;
  });
  await cluster.restart();
  await observer.end().catch(() => {});
  for (const r of await Promise.all(sleeping)) expect(r).not.toBe('ok');
  // Every later transaction gets a connection and commits; a pool that lost its connections would hang
  // here, and the test's bound turns that into a failure.
  for (let i = 0; i < 8; i++) expect(await db.transaction(async (sql) => (await sql.query('select 1 as x'), 'ok'))).toBe('ok');
}, 120_000);
