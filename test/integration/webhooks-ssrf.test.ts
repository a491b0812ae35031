// A finding of the security review on webhooks (docs/SECURITY.md): a URL whose normalised form
// (percent-encoded) is longer than the column was a 500; now 400 invalid_request, over REST and GraphQL
// alike. On the real gateway and real PostgreSQL.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';

let strict: RunningGateway;
let user: SeededUser;

beforeAll(async () => {
  // Production rules (ALLOW_PRIVATE_WEBHOOKS off), ADMIN_SSH_PORT at its default 52222.
  strict = await startGateway({ config: { allowPrivateWebhooks: false } });
  await seedNode(strict.testDb.db, '198.18.0.0/28');
  user = await seedUser(strict.testDb.db);
}, 120_000);

afterAll(async () => {
  await strict?.close();
});

async function register(body: unknown) {
  const r = await call(strict.url, 'POST', '/api/webhooks', { token: user.writeKey, body });
  expectMatchesOpenApi('post', '/api/webhooks', r.status, r.body, r.headers);
  return r;
}

const gql = async (query: string, variables?: Record<string, unknown>) => {
  const r = await call(strict.url, 'POST', '/graphql', { token: user.writeKey, body: { query, variables } });
  return { status: r.status, body: r.body as { data?: any; errors?: { message: string; extensions?: { code?: string; status?: number } }[] } };
};
const CREATE = 'mutation($i: CreateWebhookInput!) { createWebhook(input: $i) { webhook { url } } }';

describe('a URL longer than the column once normalised', () => {
  // 2,000 é are 2,000 characters sent and 12,000 once percent-encoded (%C3%A9 each).
  const long = `https://hooks.example.com/${'é'.repeat(2000)}`;

  it('REST: 400 invalid_request with the documented body, not a 500', async () => {
    const r = await register({ url: long });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'invalid_request', error_description: expect.stringMatching(/url is longer than 2048 characters once normalised/) });
  });

  it('GraphQL createWebhook: invalid_request, status 400, no server_error', async () => {
    const r = await gql(CREATE, { i: { url: long } });
    expect(r.status).toBeLessThan(500);
    expect(r.body.errors?.[0]?.extensions).toMatchObject({ code: 'invalid_request', status: 400 });
    expect(r.body.errors?.[0]?.message).toMatch(/url is longer than 2048 characters once normalised/);
  });

  it('a URL whose normalised form fits is stored normalised', async () => {
    // 337 é: 26 + 337 * 6 = 2048 characters once encoded, exactly the column.
    const fits = `https://hooks.example.com/${'é'.repeat(337)}`;
    const r = await register({ url: fits });
    expect(r.status).toBe(201);
    expect(r.body.webhook.url).toHaveLength(2048);
    expect(r.body.webhook.url).toBe(new URL(fits).href);
    expect((await register({ url: `${fits}a` })).status).toBe(400);
    await call(strict.url, 'DELETE', `/api/webhooks/${r.body.webhook.id}`, { token: user.writeKey });
  });
});
