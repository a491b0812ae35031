// 50 concurrent purchases from two accounts against 10 free IPs, with balance for 20: exactly 10
// succeed, the rest are out_of_stock, no balance goes negative, the ledger sums to the balances and
// no IP is sold twice. Real HTTP, real PostgreSQL with a real connection pool.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { createTestDatabase } from '../helpers/db.ts';
import { setRate } from '../../server/domain/settings.ts';

let gw: RunningGateway;
let users: SeededUser[];

beforeAll(async () => {
  gw = await startGateway({ testDb: await createTestDatabase({ poolMax: 20 }) });
  // 10 IPs over three nodes: /29 gives 6, /30 gives 2, /31 gives 2.
  await seedNode(gw.testDb.db, '198.18.2.0/29');
  await seedNode(gw.testDb.db, '198.18.3.0/30');
  await seedNode(gw.testDb.db, '198.18.4.0/31');
  await setRate(gw.testDb.db, '100'); // price 1.00 USD
  // Balance for 10 purchases each: 20 in all, more than the stock.
  users = [await seedUser(gw.testDb.db, { balanceUsd: '10.00' }), await seedUser(gw.testDb.db, { balanceUsd: '10.00' })];
});
afterAll(async () => {
  await gw?.close();
  await gw?.testDb.drop();
});

it('never oversells an IP or overdraws a balance', async () => {
  const results = await Promise.all(
    Array.from({ length: 50 }, (_, i) => call(gw.url, 'POST', '/api/dedicated', { token: users[i % 2]!.writeKey, body: { name: `c${i}`, origin_ip: '8.8.4.4' } })),
  );
  const created = results.filter((r) => r.status === 201);
  const refused = results.filter((r) => r.status !== 201);
  expect(created).toHaveLength(10);
  expect(refused.every((r) => r.status === 409 && r.body.error === 'out_of_stock')).toBe(true);

  const ips = created.map((r) => r.body.tunnel.protected_ip);
  expect(new Set(ips).size).toBe(10);
  const { rows: taken } = await gw.testDb.raw.query('select count(*)::int as n, count(distinct tunnel_id)::int as d from protected_ip where tunnel_id is not null');
  expect(taken[0]).toEqual({ n: 10, d: 10 });

  const { rows } = await gw.testDb.raw.query(
    `select a.id, a.balance_usd, coalesce(sum(l.amount_usd), 0)::numeric(14,2) as ledger, count(l.*) filter (where l.kind = 'purchase')::int as purchases
       from account a left join ledger_entry l on l.account_id = a.id where a.id = any($1) group by a.id`,
    [users.map((u) => u.accountId)],
  );
  let spent = 0;
  for (const r of rows) {
    expect(Number(r.balance_usd)).toBeGreaterThanOrEqual(0);
    expect(r.ledger).toBe(r.balance_usd);
    spent += 10 - Number(r.balance_usd);
  }
  expect(spent).toBe(10);
  expect(rows.reduce((n, r) => n + r.purchases, 0)).toBe(10);
  const pricing = await call(gw.url, 'GET', '/api/dedicated/pricing');
  gw.services.pricing.invalidate();
  expect((await call(gw.url, 'GET', '/api/dedicated/pricing')).body.availability).toEqual({ total: 10, available: 0, in_stock: false });
  expect(pricing.status).toBe(200);
});

it('never overdraws when the balance, not the stock, runs out', async () => {
  await seedNode(gw.testDb.db, '198.18.5.0/27'); // 30 more IPs
  const u = await seedUser(gw.testDb.db, { balanceUsd: '5.00' });
  const results = await Promise.all(Array.from({ length: 20 }, () => call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } })));
  expect(results.filter((r) => r.status === 201)).toHaveLength(5);
  expect(results.filter((r) => r.status === 402).every((r) => r.body.error === 'insufficient_balance')).toBe(true);
  expect(results.filter((r) => r.status === 402)).toHaveLength(15);
  const { rows } = await gw.testDb.raw.query('select balance_usd from account where id = $1', [u.accountId]);
  expect(rows[0].balance_usd).toBe('0.00');
});
