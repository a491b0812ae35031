// Database.hotRowsShared: identical reads that are still waiting for a pooled connection share one
// query; a read never gets the answer of a query that was sent before it asked.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { until } from '../helpers/wait.ts';

// clock_timestamp() differs for every execution, so equal answers mean one shared query.
const STMT = 'select clock_timestamp()::text as t, ?::int as n';

describe('hotRowsShared', () => {
  let t: TestDatabase;
  beforeAll(async () => {
    t = await createTestDatabase();
  });
  afterAll(async () => {
    await t?.drop();
  });

  /**
   * Occupies every hot-pool connection (10) until release() is called: each runs a statement that waits for
   * an advisory lock this test holds on a connection of its own. Resolves once PostgreSQL shows all ten
   * waiting, so whatever is asked next queues behind a busy pool, however slow the host.
   */
  const occupyPool = async () => {
    const holder = await t.raw.connect();
    await holder.query('select pg_advisory_lock(4242)');
    const busy = Promise.all(Array.from({ length: 10 }, (_, i) => t.db.hot(`wait_${i}`, `select pg_advisory_xact_lock_shared(4242) as s, ${i} as i`, [])));
    await until('ten hot-pool connections waiting on the test lock', async () => {
      const { rows } = await t.raw.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query like '%pg_advisory_xact_lock_shared(4242)%' and pid <> pg_backend_pid()`,
      );
      return rows[0]!.n === 10;
    });
    return {
      release: async () => {
        await holder.query('select pg_advisory_unlock(4242)');
        holder.release();
        await busy;
      },
    };
  };

  it('callers queued behind a busy pool share one query; different parameters do not', async () => {
    await t.db.hot('warm', 'select 1 as x'); // the pool exists
    const pool = await occupyPool();
    const same = Promise.all([1, 2, 3, 4, 5].map(() => t.db.hotRowsShared('shared_clock', STMT, [7])));
    const other = t.db.hotRowsShared('shared_clock', STMT, [8]);
    await pool.release();
    const rows = await same;
    expect(new Set(rows.map((r) => r[0]![0])).size).toBe(1);
    expect(rows.every((r) => r === rows[0])).toBe(true);
    expect((await other)[0]![1]).toBe(8);
  });

  it('a caller that asks after the shared query was sent gets a query of its own', async () => {
    const first = await t.db.hotRowsShared('shared_clock', STMT, [7]);
    const second = await t.db.hotRowsShared('shared_clock', STMT, [7]);
    expect(second).not.toBe(first);
    expect(second[0]![0]).not.toBe(first[0]![0]);
  });

  it('sees what was committed before it asked, even while others wait', async () => {
    await t.raw.query('create table if not exists shared_probe (v int)');
    const pool = await occupyPool();
    const before = t.db.hotRowsShared('shared_probe', 'select count(*)::int from shared_probe where v = ?', [1]);
    await t.raw.query('insert into shared_probe values (1)');
    const after = t.db.hotRowsShared('shared_probe', 'select count(*)::int from shared_probe where v = ?', [1]);
    await pool.release();
    // Both were unsent when the insert committed, so both (one shared query) see it.
    expect((await before)[0]![0]).toBe(1);
    expect((await after)[0]![0]).toBe(1);
    const later = await t.db.hotRowsShared('shared_probe', 'select count(*)::int from shared_probe where v = ?', [1]);
    expect(later[0]![0]).toBe(1);
  });
});
