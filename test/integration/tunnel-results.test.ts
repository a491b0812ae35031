// The domain answers with domain results and codes; the REST adapter alone turns them into statuses,
// paths and headers. Real gateway, real PostgreSQL.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { setRate } from '../../server/domain/settings.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';

let gw: RunningGateway;
let alice: SeededUser;

beforeAll(async () => {
  gw = await startGateway();
  await seedNode(gw.testDb.db, '198.18.0.0/28');
  await setRate(gw.testDb.db, '90');
  alice = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
});
afterAll(async () => gw?.close());

it('an account gone between authentication and the purchase: 401 invalid_token with the RFC 6750 challenge, nothing bought', async () => {
  // A credential kind that authenticates as an account that no longer exists: the window between a
  // key check and the purchase's account lock, held open for the test.
  const ghost = randomUUID();
  gw.services.auth.use(
    (t) => t.startsWith('ghost_'),
    async () => ({ accountId: ghost, userId: null, permission: 'write', credential: { kind: 'api_key', id: 'ghost' } }),
  );
  const res = await call(gw.url, 'POST', '/api/dedicated', { token: 'ghost_1', body: { origin_ip: '8.8.8.8' } });
  expect(res.status).toBe(401);
  expect(res.body).toEqual({ error: 'invalid_token', error_description: 'The account of this credential no longer exists.' });
  expect(res.headers.get('www-authenticate')).toBe('Bearer error="invalid_token"');
  const { rows } = await gw.testDb.raw.query('select count(*)::int as n from tunnel');
  expect(rows[0]).toEqual({ n: 0 });
});

it('a purchase stored by the previous version (next_steps inside the record) replays as it was answered', async () => {
  const first = await call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, body: { origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'old-1' } });
  expect(first.status).toBe(201);
  const body = first.body as { tunnel: { id: string }; next_steps: unknown };
  expect(body.next_steps).toEqual({ setup: `/api/dedicated/${body.tunnel.id}/setup`, provision: `/api/dedicated/${body.tunnel.id}/provision` });
  // What the gateway before shared validation kept: the whole REST body, next_steps included.
  await gw.testDb.raw.query('update idempotency_record set body = $3 where account_id = $1 and key = $2', [alice.accountId, 'old-1', JSON.stringify(first.body)]);
  const replay = await call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, body: { origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'old-1' } });
  expect(replay.status).toBe(201);
  // Same fields and values (field order inside the record is jsonb's, as it always was).
  expect(replay.body).toEqual(first.body);
});

it('a purchase recorded before tunnel settings existed replays with the default settings every tunnel shows now (REST and GraphQL)', async () => {
  const first = await call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, body: { origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'pre-settings' } });
  expect(first.status).toBe(201);
  // What the gateway before tunnel settings kept: the tunnel with ports "*" and protocol "both", no protection.
  const old = structuredClone(first.body) as { tunnel: Record<string, unknown> };
  delete old.tunnel.protection;
  await gw.testDb.raw.query('update idempotency_record set body = $3 where account_id = $1 and key = $2', [alice.accountId, 'pre-settings', JSON.stringify(old)]);
  const replay = await call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, body: { origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'pre-settings' } });
  expect(replay.status).toBe(201);
  expect(replay.body).toEqual(first.body);
  expectMatchesOpenApi('post', '/api/dedicated', replay.status, replay.body, replay.headers);
  // GraphQL replays the same record (keys are shared with REST).
  const g = await call(gw.url, 'POST', '/graphql', {
    token: alice.writeKey,
    body: {
      query: 'mutation($i: PurchaseTunnelInput!, $k: String) { purchaseTunnel(input: $i, idempotencyKey: $k) { tunnel { id protection { synProxy sourcePpsLimit dropFragments } } } }',
      variables: { i: { originIp: '8.8.4.4' }, k: 'pre-settings' },
    },
  });
  expect(g.body.errors).toBeUndefined();
  expect(g.body.data.purchaseTunnel.tunnel).toEqual({ id: first.body.tunnel.id, protection: { synProxy: false, sourcePpsLimit: null, dropFragments: false } });
});
