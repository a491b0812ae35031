// The price list cache (server/domain/pricing.ts) on real PostgreSQL: the requests that find
// it empty share ONE read (a burst at the end of every cached second used to count the pool once per
// request), the bytes served are made once per rate or stock, and a read begun before a change never
// answers a request made after the change (the drop stays immediate). The service reads through a
// wrapper of the real Database that counts statements and can hold one read's answer back.
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Database } from '../../server/db/database.ts';
import { PricingService } from '../../server/domain/pricing.ts';
import { setRate } from '../../server/domain/settings.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { seedNode } from '../helpers/fixtures.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
  await seedNode(t.db, '198.18.30.0/28');
  await setRate(t.db, '90');
});
afterAll(async () => t?.drop());

/** The real database, counting queries; `hold()` makes the next query's answer wait for `release()`. */
function counting(db: Database) {
  let queries = 0;
  let gate: Promise<void> | null = null;
  let open = () => {};
  let answered = () => {};
  let held: Promise<void> = Promise.resolve();
  const wrapped = {
    async query<T extends object>(text: string, params?: readonly unknown[]): Promise<T[]> {
      queries++;
      const g = gate;
      gate = null;
      const rows = await db.query<T>(text, params);
      if (g) {
        answered();
        await g;
      }
      return rows;
    },
  };
  return {
    db: wrapped as unknown as Database,
    queries: () => queries,
    /** Holds the next query's answer back; resolves once that query has been answered by PostgreSQL. */
    hold: () => {
      gate = new Promise<void>((r) => (open = r));
      held = new Promise<void>((r) => (answered = r));
    },
    answered: () => held,
    release: () => open(),
  };
}

it('concurrent requests on an empty cache share one read, and get the same bytes', async () => {
  const c = counting(t.db);
  const pricing = new PricingService(c.db, 52222);
  const answers = await Promise.all(Array.from({ length: 20 }, () => pricing.json()));
  expect(c.queries()).toBe(1);
  expect(new Set(answers).size).toBe(1);
  expect(JSON.parse(answers[0]!.toString())).toEqual(await pricing.get());
  expect(c.queries()).toBe(1);
});

it('after an expiry with rate and stock unchanged, the very same bytes are served again', async () => {
  const c = counting(t.db);
  const pricing = new PricingService(c.db, 52222, 0); // every call re-reads
  const first = await pricing.json();
  const second = await pricing.json();
  expect(c.queries()).toBe(2);
  expect(second).toBe(first);
});

it('a read begun before invalidate() does not answer a request made after it', async () => {
  const c = counting(t.db);
  const pricing = new PricingService(c.db, 52222);
  c.hold();
  const early = pricing.get(); // reads the rate 90, then waits at the gate
  await c.answered();
  await setRate(t.db, '95');
  pricing.invalidate();
  const late = pricing.get();
  c.release();
  expect((await late).usd_rub_rate).toBe(95);
  expect((await early).usd_rub_rate).toBe(90);
  expect(c.queries()).toBe(2);
  // And the late read is what stays cached.
  expect((await pricing.get()).usd_rub_rate).toBe(95);
  expect(c.queries()).toBe(2);
  await setRate(t.db, '90');
});
