// The GraphQL tests' world (graphql.test.ts: queries, purchases and the lifecycle; graphql-limits.test.ts:
// authentication, limits, the HTTP surface, unexpected errors, stock and the schema drift check): one real gateway
// on real PostgreSQL per test file, a node of 14 protected IPs, the rate and three users (one too poor to buy),
// and the calls both use. A test file calls useGraphqlWorld() once, at its top.
import { afterAll, beforeAll, expect } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { setRate } from '../../server/domain/settings.ts';

export let gw: RunningGateway;
export let alice: SeededUser;
export let bob: SeededUser;
export let poor: SeededUser;
export let priceUsd: number;
export const POOL_SIZE = 14; // 198.18.0.0/28
export const ORIGIN = '8.8.4.4';

export interface GqlResponse {
  status: number;
  headers: Headers;
  body: { data?: any; errors?: Array<{ message: string; path?: string[]; extensions?: Record<string, any> }> };
}

export async function gql(query: string, variables?: Record<string, unknown>, token?: string, headers: Record<string, string> = {}): Promise<GqlResponse> {
  const res = await call(gw.url, 'POST', '/graphql', { token, body: { query, variables }, headers });
  return { status: res.status, headers: res.headers, body: res.body };
}

/** The only error of a response, asserting there is exactly one. */
export function onlyError(res: GqlResponse) {
  expect(res.body.errors, JSON.stringify(res.body)).toHaveLength(1);
  return res.body.errors![0]!;
}

export const cents = (n: number) => Math.round(n * 100);

export async function balanceCents(accountId: string): Promise<number> {
  const { rows } = await gw.testDb.raw.query('select balance_usd from account where id = $1', [accountId]);
  return cents(Number(rows[0].balance_usd));
}

export async function purchaseRows(accountId: string): Promise<number> {
  const { rows } = await gw.testDb.raw.query(`select count(*)::int as n from ledger_entry where account_id = $1 and kind = 'purchase'`, [accountId]);
  return rows[0].n;
}

export const TUNNEL_FIELDS = 'id name protectedIp originIp ports protocol tunnelName status adminSshPort edgeIp createdAt updatedAt';
export const PURCHASE = `mutation Buy($input: PurchaseTunnelInput!, $key: String) {
  purchaseTunnel(input: $input, idempotencyKey: $key) {
    tunnel { ${TUNNEL_FIELDS} }
    charged chargedUsd currency balanceAfter
    nextSteps { setup provision }
  }
}`;

export const buy = (token: string, input: Record<string, unknown> = { name: 'web', originIp: ORIGIN }, key?: string) => gql(PURCHASE, { input, key }, token);

/** Starts the world before the file's tests and closes it after them. */
export function useGraphqlWorld(): void {
  beforeAll(async () => {
    gw = await startGateway();
    await seedNode(gw.testDb.db, '198.18.0.0/28');
    await setRate(gw.testDb.db, '90');
    gw.services.pricing.invalidate();
    alice = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
    bob = await seedUser(gw.testDb.db, { balanceUsd: '100.00', role: 'viewer' });
    poor = await seedUser(gw.testDb.db, { balanceUsd: '0.50' });
    priceUsd = (await gw.services.pricing.get()).price_usd;
  });
  afterAll(async () => gw?.close());
}
