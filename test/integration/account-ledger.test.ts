// The account's ledger (GET /api/ledger, GraphQL `ledger`) and the webhook test event
// (POST /api/webhooks/{id}/test, GraphQL `testWebhook`) on the real gateway and real PostgreSQL. Test
// deliveries go over real HTTP to a receiver that verifies them with the `standardwebhooks` package.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addBalance } from '../../server/domain/accounts.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { setRate } from '../../server/domain/settings.ts';
import { createLogger } from '../../common/log.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi, expectMatchesSchema } from '../helpers/openapi.ts';
import { until } from '../helpers/wait.ts';
import { verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';

let gw: RunningGateway;
let alice: SeededUser;
let viewer: SeededUser;
let bob: SeededUser;
let receiver: WebhookReceiver;
const bought: { id: string; name: string | null }[] = [];

async function gql(query: string, variables: Record<string, unknown> | undefined, token: string) {
  const r = await call(gw.url, 'POST', '/graphql', { token, body: { query, variables } });
  return r.body as { data?: any; errors?: Array<{ message: string; extensions?: Record<string, any> }> };
}

const cents = (n: number) => Math.round(n * 100);

beforeAll(async () => {
  receiver = await WebhookReceiver.start();
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  await seedNode(gw.testDb.db, '198.18.0.0/28');
  await setRate(gw.testDb.db, '90');
  await createPromocode(gw.testDb.db, { code: 'LEDGER10', percent: 10 });
  alice = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
  viewer = await seedUser(gw.testDb.db, { balanceUsd: '5.00', role: 'viewer' });
  bob = await seedUser(gw.testDb.db, { balanceUsd: '50.00' });
  // Ledger of alice: opening top-up, a purchase, a top-up, a purchase with a promocode (then deleted).
  const buy = async (body: Record<string, unknown>) => {
    const r = await call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, body });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    bought.push({ id: r.body.tunnel.id, name: r.body.tunnel.name });
    return r.body.tunnel.id as string;
  };
  await buy({ origin_ip: '8.8.4.4', name: 'first' });
  await addBalance(gw.testDb.db, alice.email, '12.34');
  const second = await buy({ origin_ip: '8.8.4.4', promocode: 'ledger10' });
  expect((await call(gw.url, 'DELETE', `/api/dedicated/${second}`, { token: alice.writeKey })).status).toBe(200);
  // bob's own purchase must never show in alice's ledger.
  expect((await call(gw.url, 'POST', '/api/dedicated', { token: bob.writeKey, body: { origin_ip: '8.8.4.4' } })).status).toBe(201);
  gw.services.webhooks.startDelivery(createLogger('silent'), { pollMs: 20, backoffBaseMs: 1 });
}, 120_000);

afterAll(async () => {
  await gw?.close();
  await receiver?.close();
});

describe('ledger', () => {
  it('GET /api/ledger: newest first, tunnel and promocode on purchases, balance_after chaining exactly to the balance', async () => {
    const r = await call(gw.url, 'GET', '/api/ledger', { token: alice.readKey });
    expect(r.status).toBe(200);
    expectMatchesOpenApi('get', '/api/ledger', r.status, r.body, r.headers);
    const entries = r.body.entries as any[];
    expect(entries.map((e) => e.kind)).toEqual(['purchase', 'topup', 'purchase', 'topup']);
    expect(r.body.next_cursor).toBeNull();
    expect(entries[0].tunnel).toEqual({ id: bought[1]!.id, name: null });
    expect(entries[0].promocode).toBe('LEDGER10');
    expect(entries[2].tunnel).toEqual({ id: bought[0]!.id, name: 'first' });
    expect(entries[2].promocode).toBeNull();
    expect(entries[1]).toMatchObject({ amount_usd: 12.34, tunnel: null, promocode: null });
    expect(entries[3]).toMatchObject({ amount_usd: 100, balance_after: 100, tunnel: null });
    // The charged prices, as the tunnels recorded them, negated; every balance_after is the one before plus amount_usd.
    const { rows } = await gw.testDb.raw.query('select id::text, charged_usd::text from tunnel where account_id = $1', [alice.accountId]);
    const charged = new Map(rows.map((x: { id: string; charged_usd: string }) => [x.id, cents(Number(x.charged_usd))]));
    expect(cents(entries[0].amount_usd)).toBe(-charged.get(bought[1]!.id)!);
    expect(cents(entries[2].amount_usd)).toBe(-charged.get(bought[0]!.id)!);
    for (let i = 0; i < entries.length - 1; i++) {
      expect(cents(entries[i].balance_after)).toBe(cents(entries[i + 1].balance_after) + cents(entries[i].amount_usd));
    }
    const [acc] = (await gw.testDb.raw.query('select balance_usd::text from account where id = $1', [alice.accountId])).rows;
    expect(cents(entries[0].balance_after)).toBe(cents(Number(acc.balance_usd)));
    // ids are increasing sequence numbers, newest first.
    const ids = entries.map((e) => BigInt(e.id));
    expect([...ids].sort((a, b) => (a > b ? -1 : 1))).toEqual(ids);
  });

  it('keyset pages of one walk every entry once; GraphQL shows the same entries', async () => {
    const all = (await call(gw.url, 'GET', '/api/ledger', { token: alice.readKey })).body.entries as any[];
    const seen: any[] = [];
    let cursor: string | null = null;
    do {
      const r: Awaited<ReturnType<typeof call>> = await call(gw.url, 'GET', `/api/ledger?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { token: alice.readKey });
      expect(r.status).toBe(200);
      expectMatchesOpenApi('get', '/api/ledger', r.status, r.body, r.headers);
      seen.push(...r.body.entries);
      cursor = r.body.next_cursor;
    } while (cursor !== null);
    expect(seen).toEqual(all);

    const q = 'query L($c: String) { ledger(limit: 3, cursor: $c) { entries { id kind amountUsd balanceAfter tunnel { id name } promocode createdAt } nextCursor } }';
    const p1 = await gql(q, {}, alice.readKey);
    expect(p1.errors).toBeUndefined();
    const p2 = await gql(q, { c: p1.data.ledger.nextCursor }, alice.readKey);
    expect(p2.data.ledger.nextCursor).toBeNull();
    const viaGraphql = [...p1.data.ledger.entries, ...p2.data.ledger.entries];
    expect(viaGraphql).toEqual(
      all.map((e) => ({ id: e.id, kind: e.kind.toUpperCase(), amountUsd: e.amount_usd, balanceAfter: e.balance_after, tunnel: e.tunnel, promocode: e.promocode, createdAt: e.created_at })),
    );
  });

  it("a viewer reads its own account's ledger only; bad limit, cursor or parameters are invalid_request", async () => {
    const v = await call(gw.url, 'GET', '/api/ledger', { token: viewer.readKey });
    expect(v.status).toBe(200);
    expect(v.body.entries).toEqual([expect.objectContaining({ kind: 'topup', amount_usd: 5, balance_after: 5 })]);
    const b = await call(gw.url, 'GET', '/api/ledger', { token: bob.readKey });
    expect(b.body.entries.map((e: any) => e.tunnel?.id ?? null)).not.toContain(bought[0]!.id);
    // A cursor of bob's page gives alice nothing of bob's: it is only a position in her own ledger.
    const overInt8 = Buffer.from(JSON.stringify(['ledger', '9999999999999999999'])).toString('base64url');
    for (const path of [`/api/ledger?cursor=${overInt8}`, '/api/ledger?limit=0', '/api/ledger?limit=101', '/api/ledger?limit=x', '/api/ledger?cursor=bm9wZQ', '/api/ledger?page=2', '/api/ledger?limit=1&limit=2']) {
      const r = await call(gw.url, 'GET', path, { token: alice.readKey });
      expect(r.status, path).toBe(400);
      expect(r.body.error).toBe('invalid_request');
      expectMatchesOpenApi('get', '/api/ledger', r.status, r.body, r.headers);
    }
    const none = await call(gw.url, 'GET', '/api/ledger');
    expect(none.status).toBe(401);
    expectMatchesOpenApi('get', '/api/ledger', none.status, none.body, none.headers);
    const g = await gql('{ ledger(limit: 101) { nextCursor } }', undefined, alice.readKey);
    expect(g.errors?.[0]?.extensions?.code).toBe('invalid_request');
  });
});

describe('webhook test event', () => {
  it('POST /api/webhooks/{id}/test: 202, one signed webhook.test delivery to that webhook only', async () => {
    const a = await call(gw.url, 'POST', '/api/webhooks', { token: alice.writeKey, body: { url: receiver.url('/test-a'), events: ['tunnel.health_changed'] } });
    const b = await call(gw.url, 'POST', '/api/webhooks', { token: alice.writeKey, body: { url: receiver.url('/test-b') } });
    expect([a.status, b.status]).toEqual([201, 201]);
    const r = await call(gw.url, 'POST', `/api/webhooks/${a.body.webhook.id}/test`, { token: alice.writeKey });
    expect(r.status).toBe(202);
    expectMatchesOpenApi('post', '/api/webhooks/{id}/test', r.status, r.body, r.headers);
    await until('the test delivery', () => receiver.to('/test-a').length === 1);
    const d = receiver.to('/test-a')[0]!;
    expect(d.headers['webhook-id']).toBe(r.body.message_id);
    const event = verified(a.body.secret, d) as unknown as { type: string; data: unknown };
    expectMatchesSchema('WebhookTestEvent', event);
    expect(event).toMatchObject({ type: 'webhook.test', data: { webhook: { id: a.body.webhook.id, url: receiver.url('/test-a') } } });
    // Signed with this webhook's secret, not another's.
    expect(() => verified(b.body.secret, d)).toThrow();
    await until('delivered_at', async () => (await gw.testDb.raw.query('select delivered_at from webhook_delivery where id = $1', [r.body.message_id])).rows[0].delivered_at !== null);
    expect(receiver.to('/test-b')).toEqual([]);
  });

  it("GraphQL testWebhook; read permission is insufficient_scope; another account's or a missing webhook is not_found", async () => {
    const a = await call(gw.url, 'POST', '/api/webhooks', { token: alice.writeKey, body: { url: receiver.url('/test-gql') } });
    const m = 'mutation T($id: ID!) { testWebhook(id: $id) { messageId } }';
    const ok = await gql(m, { id: a.body.webhook.id }, alice.writeKey);
    expect(ok.errors).toBeUndefined();
    expect(ok.data.testWebhook.messageId).toMatch(/^msg_[0-9a-f]{32}$/);
    await until('the GraphQL test delivery', () => receiver.to('/test-gql').length === 1);
    expect(verified(a.body.secret, receiver.to('/test-gql')[0]!).type).toBe('webhook.test');

    const readOnly = await call(gw.url, 'POST', `/api/webhooks/${a.body.webhook.id}/test`, { token: alice.readKey });
    expect(readOnly.status).toBe(403);
    expectMatchesOpenApi('post', '/api/webhooks/{id}/test', readOnly.status, readOnly.body, readOnly.headers);
    expect((await gql(m, { id: a.body.webhook.id }, alice.readKey)).errors?.[0]?.extensions?.code).toBe('insufficient_scope');
    for (const id of [a.body.webhook.id, '00000000-0000-4000-8000-000000000000', 'not-a-uuid']) {
      const r = await call(gw.url, 'POST', `/api/webhooks/${id}/test`, { token: bob.writeKey });
      expect(r.status, id).toBe(404);
      expect(r.body.error).toBe('not_found');
      expectMatchesOpenApi('post', '/api/webhooks/{id}/test', r.status, r.body, r.headers);
    }
    expect((await gql(m, { id: a.body.webhook.id }, bob.writeKey)).errors?.[0]?.extensions?.code).toBe('not_found');
    const { rows } = await gw.testDb.raw.query('select count(*)::int as n from webhook_delivery where webhook_id = $1', [a.body.webhook.id]);
    expect(rows[0].n).toBe(1);
  });
});
