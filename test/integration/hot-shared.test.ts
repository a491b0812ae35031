// Database.hotRowsShared: identical reads that are still waiting for a pooled connection share one
// query; a read never gets the answer of a query that was sent before it asked.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

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

  /** Occupies every hot-pool connection (10) for `ms`. */
  const busy = (ms: number) => Promise.all(Array.from({ length: 10 }, (_, i) => t.db.hot(`sleep_${i}`, `select pg_sleep(?::float8 / 1000) as s, ${i} as i`, [ms])));

  it('callers queued behind a busy pool share one query; different parameters do not', async () => {
    await t.db.hot('warm', 'select 1 as x'); // the pool exists
    const hold = busy(300);
    const same = await Promise.all([1, 2, 3, 4, 5].map(() => t.db.hotRowsShared('shared_clock', STMT, [7])));
    const other = t.db.hotRowsShared('shared_clock', STMT, [8]);
    await hold;
    expect(new Set(same.map((rows) => rows[0]![0])).size).toBe(1);
    expect(same.every((rows) => rows === same[0])).toBe(true);
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
    const hold = busy(200);
    const before = t.db.hotRowsShared('shared_probe', 'select count(*)::int from shared_probe where v = ?', [1]);
    await t.raw.query('insert into shared_probe values (1)');
    const after = t.db.hotRowsShared('shared_probe', 'select count(*)::int from shared_probe where v = ?', [1]);
    await hold;
    // Both were unsent when the insert committed, so both (one shared query) see it.
    expect((await before)[0]![0]).toBe(1);
    expect((await after)[0]![0]).toBe(1);
    const later = await t.db.hotRowsShared('shared_probe', 'select count(*)::int from shared_probe where v = ?', [1]);
    expect(later[0]![0]).toBe(1);
  });
});
