// Money: (1) the database itself refuses a negative balance (docs/API.md "Money": "the database
// refuses a negative balance"), hit directly with SQL that bypasses every service; (2) pricing freshness
// as docs/API.md and pricing.ts promise it, with no manual invalidate(): stock is cached 1 s and dropped at
// once by a purchase or release in this process; a change made elsewhere (the admin CLI, another
// replica) shows once the 1 s has passed. Time is the injected clock (vitest's fake Date only): frozen,
// so a cached answer cannot expire behind the test's back, and moved on by hand to cross the bound.
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { adminCli, cliOk } from '../helpers/admin-cli.ts';

let gw: RunningGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => gw?.close());
afterEach(() => {
  vi.useRealTimers();
});

describe('the balance CHECK constraint', () => {
  it('an UPDATE that would take a balance below zero fails with check_violation, and the row is unchanged', async () => {
    const u = await seedUser(gw.testDb.db, { balanceUsd: '1.10' });
    const attempt = async (sql: string) => {
      try {
        await gw.testDb.raw.query(sql, [u.accountId]);
        return null;
      } catch (e) {
        return e as { code?: string; constraint?: string };
      }
    };
    // One cent below zero, and an arithmetic debit larger than the balance.
    for (const sql of [`update account set balance_usd = -0.01 where id = $1`, `update account set balance_usd = balance_usd - 1.11 where id = $1`]) {
      const err = await attempt(sql);
      expect(err, sql).not.toBeNull();
      expect({ code: err!.code, constraint: err!.constraint }).toEqual({ code: '23514', constraint: 'account_balance_usd_check' });
    }
    // Exactly zero is allowed: the guard is >= 0, not > 0.
    expect(await attempt(`update account set balance_usd = balance_usd - 1.10 where id = $1`)).toBeNull();
    const { rows } = await gw.testDb.raw.query<{ b: string }>(`select balance_usd::text as b from account where id = $1`, [u.accountId]);
    expect(rows[0]!.b).toBe('0.00');
  });
});

describe('pricing freshness (cached 1 s, dropped on change)', () => {
  const pricing = async () => {
    const r = await call(gw.url, 'GET', '/api/dedicated/pricing');
    expect(r.status).toBe(200);
    return r.body as { usd_rub_rate: number; price_usd: number; availability: { total: number; available: number; in_stock: boolean } };
  };

  it('a purchase and a release in this process show in the very next answer, while the clock stands still', async () => {
    const node = await seedNode(gw.testDb.db, '198.18.7.0/30');
    const u = await seedUser(gw.testDb.db);
    vi.useFakeTimers({ toFake: ['Date'] });
    const before = await pricing();
    expect(before.availability.available).toBeGreaterThan(0);
    // A change nothing announces (SQL behind the service's back) is not seen: the cache is in effect.
    await gw.testDb.raw.query(`update setting set value = '95' where key = 'usd_rub_rate'`);
    expect(await pricing()).toEqual(before);

    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { name: 'w', origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    const after = await pricing();
    expect(after.availability).toEqual({ total: before.availability.total, available: before.availability.available - 1, in_stock: before.availability.available - 1 > 0 });
    // The drop was a real re-read: it also picked up the rate changed above.
    expect(after.usd_rub_rate).toBe(95);

    // A pending tunnel is deleted at once (no agent) and its IP returns to the pool: seen at once too.
    const deleted = await call(gw.url, 'DELETE', `/api/dedicated/${bought.body.tunnel.id}`, { token: u.writeKey });
    expect(deleted.status).toBe(200);
    expect((await pricing()).availability).toEqual(before.availability);
    expect(node.pool_size).toBeGreaterThan(0);
  });

  it('a rate change and a stock change through the admin CLI show once the 1 s cache has passed', async () => {
    const node = await seedNode(gw.testDb.db, '198.18.8.0/30');
    vi.useFakeTimers({ toFake: ['Date'] });
    // Past whatever the test above left cached: `before` is read now, with this node sellable.
    vi.setSystemTime(Date.now() + 10_000);
    const before = await pricing();
    cliOk(await adminCli(gw.testDb.url, ['rate', 'set', '--usd-rub', '100']));
    cliOk(await adminCli(gw.testDb.url, ['node', 'update', '--id', node.node_id, '--sellable', 'false']));
    // Another process cannot drop this process's cache: within the second, the old answer stands ...
    vi.setSystemTime(Date.now() + 999);
    expect(await pricing()).toEqual(before);
    // ... and from the second on, the new rate and the smaller stock.
    vi.setSystemTime(Date.now() + 1);
    const after = await pricing();
    expect({ rate: after.usd_rub_rate, price_usd: after.price_usd }).toEqual({ rate: 100, price_usd: 1 });
    expect(after.availability.total).toBe(before.availability.total - node.pool_size);
  });
});
