// /graphql's 429 (untested before). docs/CONTRACTS.md "REST shapes" and "REST errors": a spent rate limit is 429 with Retry-After.
// GraphQL over HTTP answers its refusals in GraphQL's own error shape with the REST code in
// extensions.code (docs/API.md "GraphQL"; the 401 and the WebSocket's rate limit do the same), so a
// GraphQL client sees `errors[0].extensions.code === 'rate_limited'`; REST answers its one body shape.
// The budget is one token a minute: nothing refills while the test runs, however slow the machine.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser } from '../helpers/fixtures.ts';

let gw: RunningGateway;
beforeAll(async () => {
  gw = await startGateway({ config: { rateLimitPerMinute: 1, rateLimitBurst: 3 } });
});
afterAll(async () => gw?.close());

const gql = (token: string | undefined, query: string) => call(gw.url, 'POST', '/graphql', { token, body: { query } });

it('/graphql: once a key spent its burst, 429 with Retry-After in GraphQL error shape; another key is unaffected', async () => {
  const u = await seedUser(gw.testDb.db);
  const v = await seedUser(gw.testDb.db);
  for (let i = 0; i < 3; i++) {
    const ok = await gql(u.readKey, '{ me { accountId } }');
    expect(ok.status).toBe(200);
    expect(ok.body.data.me.accountId).toBe(u.accountId);
  }
  const over = await gql(u.readKey, '{ me { accountId } }');
  expect(over.status).toBe(429);
  const retryAfter = Number(over.headers.get('retry-after'));
  expect(Number.isInteger(retryAfter) && retryAfter >= 1).toBe(true);
  expect(over.headers.get('content-type')).toMatch(/^application\/(graphql-response\+)?json/);
  // A GraphQL request error: no data, one error naming the code, its status and when to come back.
  expect(Object.keys(over.body)).toEqual(['errors']);
  expect(over.body.errors).toHaveLength(1);
  expect(over.body.errors[0]).toEqual({
    message: expect.stringMatching(/retry in \d+ s/),
    extensions: { code: 'rate_limited', status: 429, retry_after: retryAfter },
  });
  expect((await gql(v.readKey, '{ me { accountId } }')).status).toBe(200);
});

it('/graphql: anonymous calls spend the address budget and get the same 429 shape', async () => {
  // A fresh gateway: its anonymous budget (per address) is untouched by the other test.
  const anon = await startGateway({ testDb: gw.testDb, config: { rateLimitPerMinute: 1, rateLimitBurst: 2 } });
  try {
    for (let i = 0; i < 2; i++) expect((await call(anon.url, 'POST', '/graphql', { body: { query: '{ pricing { price } }' } })).status).toBe(200);
    const over = await call(anon.url, 'POST', '/graphql', { body: { query: '{ pricing { price } }' } });
    expect(over.status).toBe(429);
    expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(over.body.errors[0].extensions).toMatchObject({ code: 'rate_limited', status: 429 });
  } finally {
    await anon.close();
  }
});

it('REST: the 429 body is exactly {error: rate_limited, error_description} with Retry-After', async () => {
  const u = await seedUser(gw.testDb.db);
  for (let i = 0; i < 3; i++) expect((await call(gw.url, 'GET', '/api/dedicated', { token: u.readKey })).status).toBe(200);
  const over = await call(gw.url, 'GET', '/api/dedicated', { token: u.readKey });
  expect(over.status).toBe(429);
  expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  expect(over.body).toEqual({ error: 'rate_limited', error_description: expect.stringMatching(/retry in \d+ s/) });
  // REST and GraphQL share one budget per credential (docs/API.md "Errors and rate limits"): /graphql is spent too.
  expect((await gql(u.readKey, '{ me { accountId } }')).status).toBe(429);
});
