// Database.hotTransaction (the purchase's transaction, kept to few statements) on real PostgreSQL: its statements are
// named prepared statements on the connection that holds the transaction; it commits, rolls back on a
// throw, and a connection that died mid-transaction is thrown away rather than handed to the next caller.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

let t: TestDatabase;
beforeAll(async () => {
  // One connection in the ORM's pool: every transaction below runs on the same one unless it was discarded.
  t = await createTestDatabase({ poolMax: 1 });
  await t.raw.query('create table hot_tx_probe (n int primary key)');
});
afterAll(async () => t?.drop());

describe('Database.hotTransaction', () => {
  it('runs its statements as named prepared statements, with `?` numbered for PostgreSQL', async () => {
    const text = 'select ?::int + ?::int as sum';
    const { rows, prepared } = await t.db.hotTransaction(async (sql) => ({
      rows: await sql.query<{ sum: number }>(text, [2, 3]),
      prepared: await sql.query<{ statement: string }>('select statement from pg_prepared_statements'),
    }));
    expect(rows).toEqual([{ sum: 5 }]);
    // An unnamed statement (the ORM's pipeline) never shows here.
    expect(prepared.map((p) => p.statement)).toContain('select $1::int + $2::int as sum');
  });

  it('commits when the function resolves and rolls back when it throws', async () => {
    await t.db.hotTransaction((sql) => sql.query('insert into hot_tx_probe (n) values (?)', [1]));
    await expect(
      t.db.hotTransaction(async (sql) => {
        await sql.query('insert into hot_tx_probe (n) values (?)', [2]);
        throw new Error('refused after the write');
      }),
    ).rejects.toThrow('refused after the write');
    const { rows } = await t.raw.query<{ n: number }>('select n from hot_tx_probe order by n');
    expect(rows.map((r) => r.n)).toEqual([1]);
  });

  it('a connection killed mid-transaction is discarded: the next transaction gets a live one', async () => {
    const [{ pid }] = await t.db.hotTransaction((sql) => sql.query<{ pid: number }>('select pg_backend_pid() as pid'));
    await expect(
      t.db.hotTransaction(async (sql) => {
        await t.raw.query('select pg_terminate_backend($1)', [pid]);
        await sql.query('select 1');
      }),
    ).rejects.toThrow();
    const [after] = await t.db.hotTransaction((sql) => sql.query<{ pid: number }>('select pg_backend_pid() as pid'));
    expect(after!.pid).not.toBe(pid);
  });
});
