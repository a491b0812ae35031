// The tunnel API tests' world (rest.test.ts: pricing, purchase, Idempotency-Key; rest-tunnels.test.ts: reading,
// lifecycle, the rest of the surface, limits): one real gateway on real PostgreSQL per test file, a node of 62
// protected IPs, the rate, and two funded users. A test file calls useRestWorld() once, at its top.
import { afterAll, beforeAll } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { setRate } from '../../server/domain/settings.ts';

export let gw: RunningGateway;
export let alice: SeededUser;
export let bob: SeededUser;
export const ORIGIN = '8.8.4.4';

export async function balanceOf(accountId: string): Promise<string> {
  const { rows } = await gw.testDb.raw.query('select balance_usd from account where id = $1', [accountId]);
  return rows[0].balance_usd;
}

export async function ledgerSum(accountId: string): Promise<string> {
  const { rows } = await gw.testDb.raw.query('select coalesce(sum(amount_usd), 0)::numeric(14,2) as s from ledger_entry where account_id = $1', [accountId]);
  return rows[0].s;
}

export const buy = (token: string, body: unknown = { name: 'web', origin_ip: ORIGIN }, headers: Record<string, string> = {}) =>
  call(gw.url, 'POST', '/api/dedicated', { token, body, headers });

/** Starts the world before the file's tests and closes it after them. */
export function useRestWorld(): void {
  beforeAll(async () => {
    gw = await startGateway();
    await seedNode(gw.testDb.db, '198.18.0.0/26'); // 62 protected IPs
    await setRate(gw.testDb.db, '90');
    alice = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
    bob = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
  });
  afterAll(async () => gw?.close());
}
