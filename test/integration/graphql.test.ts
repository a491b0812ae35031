// GraphQL at /graphql over real HTTP against real PostgreSQL: every query and mutation, the REST error
// codes in extensions.code, idempotent purchases, the depth/cost/alias limits, the 401 policy, and
// the drift check of schema/schema.graphql, all through the real gateway app (one block starts a second
// gateway with a captured logger to watch what an unexpected error logs).
import 'reflect-metadata';
import fs from 'node:fs';
import { getIntrospectionQuery } from 'graphql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { setRate } from '../../server/domain/settings.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { buildGraphqlSchema, printGraphqlSchema, QUERY_LIMITS } from '../../server/graphql/index.ts';
import { SCHEMA_FILE } from '../../server/graphql/print-schema.ts';
import { createLogger } from '../../common/log.ts';

let gw: RunningGateway;
let alice: SeededUser;
let bob: SeededUser;
let poor: SeededUser;
let priceUsd: number;
const POOL_SIZE = 14; // 198.18.0.0/28
const ORIGIN = '8.8.4.4';

interface GqlResponse {
  status: number;
  headers: Headers;
  body: { data?: any; errors?: Array<{ message: string; path?: string[]; extensions?: Record<string, any> }> };
}

async function gql(query: string, variables?: Record<string, unknown>, token?: string, headers: Record<string, string> = {}): Promise<GqlResponse> {
  const res = await call(gw.url, 'POST', '/graphql', { token, body: { query, variables }, headers });
  return { status: res.status, headers: res.headers, body: res.body };
}

/** The only error of a response, asserting there is exactly one. */
function onlyError(res: GqlResponse) {
  expect(res.body.errors, JSON.stringify(res.body)).toHaveLength(1);
  return res.body.errors![0]!;
}

const cents = (n: number) => Math.round(n * 100);

async function balanceCents(accountId: string): Promise<number> {
  const { rows } = await gw.testDb.raw.query('select balance_usd from account where id = $1', [accountId]);
  return cents(Number(rows[0].balance_usd));
}

async function purchaseRows(accountId: string): Promise<number> {
  const { rows } = await gw.testDb.raw.query(`select count(*)::int as n from ledger_entry where account_id = $1 and kind = 'purchase'`, [accountId]);
  return rows[0].n;
}

const TUNNEL_FIELDS = 'id name protectedIp originIp ports protocol tunnelName status adminSshPort edgeIp createdAt updatedAt';
const PURCHASE = `mutation Buy($input: PurchaseTunnelInput!, $key: String) {
  purchaseTunnel(input: $input, idempotencyKey: $key) {
    tunnel { ${TUNNEL_FIELDS} }
    charged chargedUsd currency balanceAfter
    nextSteps { setup provision }
  }
}`;

const buy = (token: string, input: Record<string, unknown> = { name: 'web', originIp: ORIGIN }, key?: string) => gql(PURCHASE, { input, key }, token);

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

describe('queries', () => {
  it('pricing needs no credential and matches the pricing service', async () => {
    const res = await gql('{ pricing { price currency priceUsd usdRubRate billing includes adminSshPort availability { total available inStock } } }');
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.pricing).toEqual({
      price: 100,
      currency: 'RUB',
      priceUsd: 1.11,
      usdRubRate: 90,
      billing: 'one_time',
      includes: ['dedicated_public_ip', 'full_tcp_udp_nat', 'gre_tunnel'],
      adminSshPort: 52222,
      availability: { total: POOL_SIZE, available: expect.any(Number), inStock: true },
    });
  });

  it('me reports the account, user, role, permission and balance of the credential', async () => {
    const res = await gql('{ me { accountId userId email name role permission balanceUsd } }', undefined, alice.writeKey);
    expect(res.status).toBe(200);
    expect(res.body.data.me).toEqual({
      accountId: alice.accountId,
      userId: alice.userId,
      email: alice.email,
      name: 'Test User',
      role: 'OWNER',
      permission: 'WRITE',
      balanceUsd: (await balanceCents(alice.accountId)) / 100,
    });
    const viewer = await gql('{ me { accountId role permission } }', undefined, bob.readKey);
    expect(viewer.body.data.me).toEqual({ accountId: bob.accountId, role: 'VIEWER', permission: 'READ' });
  });

  it('tunnel, tunnels and tunnelSetup return what was bought, newest first, page by page', async () => {
    const first = await buy(alice.writeKey, { name: 'one', originIp: '8.8.8.8' });
    const second = await buy(alice.writeKey, { name: 'two', originIp: '1.1.1.1' });
    const a = first.body.data.purchaseTunnel.tunnel;
    const b = second.body.data.purchaseTunnel.tunnel;

    const one = await gql(`query T($id: ID!) { tunnel(id: $id) { ${TUNNEL_FIELDS} } }`, { id: a.id }, alice.readKey);
    expect(one.status).toBe(200);
    expect(one.body.data.tunnel).toEqual(a);
    // The same values REST shows, camelCased.
    const rest = await call(gw.url, 'GET', `/api/dedicated/${a.id}`, { token: alice.readKey });
    expect(one.body.data.tunnel).toMatchObject({
      protectedIp: rest.body.tunnel.protected_ip,
      tunnelName: rest.body.tunnel.tunnel_name,
      edgeIp: rest.body.tunnel.edge_ip,
      createdAt: rest.body.tunnel.created_at,
    });

    const page1 = await gql('query P($n: Int!) { tunnels(limit: $n) { tunnels { id name } nextCursor } }', { n: 1 }, alice.readKey);
    expect(page1.body.data.tunnels.tunnels).toEqual([{ id: b.id, name: 'two' }]);
    expect(page1.body.data.tunnels.nextCursor).toEqual(expect.any(String));
    const page2 = await gql('query P($c: String) { tunnels(limit: 1, cursor: $c) { tunnels { id } nextCursor } }', { c: page1.body.data.tunnels.nextCursor }, alice.readKey);
    expect(page2.body.data.tunnels.tunnels).toEqual([{ id: a.id }]);
    const all = await gql('{ tunnels { tunnels { id } nextCursor } }', undefined, alice.readKey);
    const ids = all.body.data.tunnels.tunnels.map((t: { id: string }) => t.id);
    expect(ids.indexOf(b.id)).toBeLessThan(ids.indexOf(a.id));
    expect(all.body.data.tunnels.nextCursor).toBeNull();

    const setup = await gql('query S($id: ID!) { tunnelSetup(id: $id) { tunnelId scripts { origin systemdOrigin } } }', { id: a.id }, alice.readKey);
    expect(setup.status).toBe(200);
    const { tunnelId, scripts } = setup.body.data.tunnelSetup;
    expect(tunnelId).toBe(a.id);
    expect(scripts.origin).toContain(a.tunnelName);
    expect(scripts.origin).toContain('8.8.8.8');
    expect(scripts.origin).toContain(a.edgeIp);
    const restSetup = await call(gw.url, 'GET', `/api/dedicated/${a.id}/setup`, { token: alice.readKey });
    expect(scripts).toEqual({ origin: restSetup.body.scripts.origin, systemdOrigin: restSetup.body.scripts.systemd_origin });
  });

  it('tunnels refuses a limit outside 1-100 and a cursor it did not issue', async () => {
    const big = await gql('{ tunnels(limit: 101) { nextCursor } }', undefined, alice.readKey);
    expect(onlyError(big).extensions).toEqual({ code: 'invalid_request', status: 400 });
    const cursor = await gql('{ tunnels(cursor: "bm9wZQ") { nextCursor } }', undefined, alice.readKey);
    expect(onlyError(cursor).extensions?.code).toBe('invalid_request');
  });
});

describe('purchaseTunnel', () => {
  it('creates a pending tunnel, debits the exact price once and writes one ledger row', async () => {
    const before = await balanceCents(alice.accountId);
    const rowsBefore = await purchaseRows(alice.accountId);
    const res = await buy(alice.writeKey, { name: '  game server ', originIp: ORIGIN });
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    const p = res.body.data.purchaseTunnel;
    expect(p.tunnel).toMatchObject({
      name: 'game server',
      originIp: ORIGIN,
      ports: '*',
      protocol: 'both',
      status: 'PENDING',
      adminSshPort: 52222,
      edgeIp: '192.0.2.1',
    });
    expect(p.tunnel.protectedIp).toMatch(/^198\.18\.0\.(\d+)$/);
    expect(p.tunnel.tunnelName).toMatch(/^tg-[a-z2-7]{10}$/);
    expect(new Date(p.tunnel.createdAt).toISOString()).toBe(p.tunnel.createdAt);
    expect(p.charged).toBe(100);
    expect(p.currency).toBe('RUB');
    expect(p.chargedUsd).toBe(priceUsd);
    expect(cents(p.balanceAfter)).toBe(before - cents(priceUsd));
    expect(p.nextSteps).toEqual({ setup: `/api/dedicated/${p.tunnel.id}/setup`, provision: `/api/dedicated/${p.tunnel.id}/provision` });
    expect(await balanceCents(alice.accountId)).toBe(before - cents(priceUsd));
    expect(await purchaseRows(alice.accountId)).toBe(rowsBefore + 1);
  });

  it('applies a promocode', async () => {
    await createPromocode(gw.testDb.db, { code: 'HALF', percent: 50 });
    const res = await buy(alice.writeKey, { originIp: ORIGIN, promocode: 'half' });
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.purchaseTunnel.charged).toBe(50);
    expect(res.body.data.purchaseTunnel.tunnel.name).toBeNull();
  });

  it('replays an idempotencyKey without charging again, and refuses the key with other input', async () => {
    const before = await balanceCents(alice.accountId);
    const rowsBefore = await purchaseRows(alice.accountId);
    const key = `gql-${Date.now()}`;
    const first = await buy(alice.writeKey, { name: 'once', originIp: ORIGIN }, key);
    const again = await buy(alice.writeKey, { name: 'once', originIp: ORIGIN }, key);
    expect(first.body.errors).toBeUndefined();
    expect(again.body.errors).toBeUndefined();
    expect(again.body.data.purchaseTunnel).toEqual(first.body.data.purchaseTunnel);
    expect(await balanceCents(alice.accountId)).toBe(before - cents(priceUsd));
    expect(await purchaseRows(alice.accountId)).toBe(rowsBefore + 1);

    const other = await buy(alice.writeKey, { name: 'twice', originIp: ORIGIN }, key);
    // Like REST: invalid_request with status 422.
    expect(onlyError(other).extensions).toEqual({ code: 'invalid_request', status: 422 });
    expect(other.body.data).toBeNull();
    expect(await purchaseRows(alice.accountId)).toBe(rowsBefore + 1);

    const badKey = await buy(alice.writeKey, { originIp: ORIGIN }, 'has space');
    expect(onlyError(badKey).extensions?.code).toBe('invalid_request');
  });

  it.each([
    ['10.0.0.1', 'a private address'],
    ['203.0.113.7', 'a documentation address'],
    ['8.8.8', 'not a dotted quad'],
    ['224.0.0.1', 'multicast'],
  ])('refuses origin %s (%s) with invalid_origin_ip and charges nothing', async (originIp) => {
    const before = await balanceCents(alice.accountId);
    const res = await buy(alice.writeKey, { originIp });
    expect(res.status).toBe(200);
    const err = onlyError(res);
    expect(err.extensions).toEqual({ code: 'invalid_origin_ip', status: 400 });
    expect(err.path).toEqual(['purchaseTunnel']);
    expect(await balanceCents(alice.accountId)).toBe(before);
  });

  it('refuses an unknown promocode with invalid_promocode', async () => {
    const res = await buy(alice.writeKey, { originIp: ORIGIN, promocode: 'NOPE' });
    expect(onlyError(res).extensions).toEqual({ code: 'invalid_promocode', status: 400 });
  });

  it('refuses a read-only key with insufficient_scope', async () => {
    const before = await balanceCents(alice.accountId);
    const res = await buy(alice.readKey);
    expect(onlyError(res).extensions).toEqual({ code: 'insufficient_scope', status: 403 });
    expect(await balanceCents(alice.accountId)).toBe(before);
  });

  it('refuses a short balance with insufficient_balance and debits nothing', async () => {
    const res = await buy(poor.writeKey);
    expect(res.status).toBe(200);
    expect(onlyError(res).extensions).toEqual({ code: 'insufficient_balance', status: 402 });
    expect(await balanceCents(poor.accountId)).toBe(50);
    expect(await purchaseRows(poor.accountId)).toBe(0);
  });

  it('refuses a missing originIp before any resolver runs', async () => {
    const res = await gql('mutation { purchaseTunnel(input: { name: "x" }) { charged } }', undefined, alice.writeKey);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
  });
});

describe('provisionTunnel, activateTunnel, deleteTunnel', () => {
  let id: string;
  beforeAll(async () => {
    id = (await buy(alice.writeKey, { name: 'short-lived', originIp: ORIGIN })).body.data.purchaseTunnel.tunnel.id;
  });

  it('activate of a pending tunnel is invalid_state; provision with no agent answering returns it PROVISIONING; read keys are refused', async () => {
    for (const m of ['provisionTunnel', 'activateTunnel']) {
      const readOnly = await gql(`mutation M($id: ID!) { ${m}(id: $id) { id } }`, { id }, alice.readKey);
      expect(onlyError(readOnly).extensions?.code).toBe('insufficient_scope');
    }
    const early = await gql('mutation M($id: ID!) { activateTunnel(id: $id) { id status } }', { id }, alice.writeKey);
    const err = onlyError(early);
    expect(err.extensions).toEqual({ code: 'invalid_state', status: 409 });
    expect(err.message).toMatch(/provision it first/);
    // A second tunnel: this gateway runs no worker, so the queued job is not taken and the answer is PROVISIONING.
    const other = (await buy(alice.writeKey, { name: 'queued', originIp: ORIGIN })).body.data.purchaseTunnel.tunnel.id as string;
    const p = await gql('mutation M($id: ID!) { provisionTunnel(id: $id) { id status } }', { id: other }, alice.writeKey);
    expect(p.body.errors).toBeUndefined();
    expect(p.body.data.provisionTunnel).toEqual({ id: other, status: 'PROVISIONING' });
  });

  it("another account's tunnel is not_found everywhere", async () => {
    const q = (op: string) => gql(op, { id }, bob.writeKey);
    for (const op of [
      'query Q($id: ID!) { tunnel(id: $id) { id } }',
      'query Q($id: ID!) { tunnelSetup(id: $id) { tunnelId } }',
      'mutation M($id: ID!) { deleteTunnel(id: $id) { id } }',
      'mutation M($id: ID!) { provisionTunnel(id: $id) { id } }',
    ]) {
      const res = await q(op);
      expect(res.status).toBe(200);
      expect(onlyError(res).extensions).toEqual({ code: 'not_found', status: 404 });
    }
    const malformed = await gql('{ tunnel(id: "nope") { id } }', undefined, alice.readKey);
    expect(onlyError(malformed).extensions?.code).toBe('not_found');
  });

  it('a read-only key cannot delete', async () => {
    const res = await gql('mutation M($id: ID!) { deleteTunnel(id: $id) { id } }', { id }, alice.readKey);
    expect(onlyError(res).extensions).toEqual({ code: 'insufficient_scope', status: 403 });
  });

  it('delete returns the deleted tunnel, frees its IP and hides it from the list; twice is invalid_state', async () => {
    const available = async () => (await gql('{ pricing { availability { available } } }')).body.data.pricing.availability.available as number;
    const freeBefore = await available();
    const res = await gql('mutation M($id: ID!) { deleteTunnel(id: $id) { id status } }', { id }, alice.writeKey);
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.deleteTunnel).toEqual({ id, status: 'DELETED' });
    expect(await available()).toBe(freeBefore + 1);
    const list = await gql('{ tunnels(limit: 100) { tunnels { id } } }', undefined, alice.readKey);
    expect(list.body.data.tunnels.tunnels.map((t: { id: string }) => t.id)).not.toContain(id);
    const again = await gql('mutation M($id: ID!) { deleteTunnel(id: $id) { id } }', { id }, alice.writeKey);
    expect(onlyError(again).extensions).toEqual({ code: 'invalid_state', status: 409 });
  });
});

describe('authentication', () => {
  it.each([
    ['no credential', undefined, 'Bearer'],
    ['a garbage svc_ key', 'svc_garbage', 'Bearer error="invalid_token"'],
    ['an unknown token kind', 'eyJhbGciOiJub25lIn0.e30.', 'Bearer error="invalid_token"'],
  ])('%s gets invalid_token and, with no data at all, HTTP 401', async (_what, token, challenge) => {
    const res = await gql('{ me { accountId } }', undefined, token);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe(challenge);
    expect(onlyError(res).extensions).toEqual({ code: 'invalid_token', status: 401 });
    expect(res.body.data).toBeNull();
  });

  it('a malformed Authorization header is invalid_token', async () => {
    const res = await gql('mutation { deleteTunnel(id: "x") { id } }', undefined, undefined, { authorization: 'Basic dXNlcjpwdw==' });
    expect(res.status).toBe(401);
    expect(onlyError(res).extensions?.code).toBe('invalid_token');
  });

  it('authenticates once per request however many fields need it', async () => {
    const spy = vi.spyOn(gw.services.auth, 'authenticate');
    try {
      const res = await gql('{ me { accountId } tunnels { nextCursor } a: tunnels(limit: 1) { nextCursor } }', undefined, alice.readKey);
      expect(res.body.errors).toBeUndefined();
      expect(spy).toHaveBeenCalledTimes(1);
    } finally {
      spy.mockRestore();
    }
  });

  it('is 401 only when there is no data and every error is invalid_token', async () => {
    const res = await gql('{ pricing { price } me { accountId } }');
    // me is non-null, so data is null and the only error is invalid_token: 401.
    expect(res.status).toBe(401);
    // A refusal that is not about the credential keeps the GraphQL default.
    const notFound = await gql('{ tunnel(id: "00000000-0000-4000-8000-000000000000") { id } }', undefined, alice.readKey);
    expect(notFound.status).toBe(200);
    expect(onlyError(notFound).extensions?.code).toBe('not_found');
    expect(notFound.headers.get('www-authenticate')).toBeNull();
  });
});

describe('limits against abusive queries', () => {
  const fullPage = (alias: string, limit: string) => `${alias}: tunnels(limit: ${limit}) { tunnels { ${TUNNEL_FIELDS} } nextCursor }`;

  it('the standard introspection query passes the limits', async () => {
    const res = await gql(getIntrospectionQuery());
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    const names = res.body.data.__schema.types.map((t: { name: string }) => t.name);
    expect(names).toEqual(expect.arrayContaining(['Tunnel', 'TunnelStatus', 'PurchaseResult', 'Pricing']));
  });

  it('refuses a query nested deeper than the limit', async () => {
    // 9 levels without tripping graphql-js's own introspection list rule (two inputFields).
    const deep = '{ __schema { directives { args { type { inputFields { type { inputFields { type { name } } } } } } } } }';
    const res = await gql(deep);
    expect(res.status).toBe(400);
    const err = onlyError(res);
    expect(err.extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', limit: 'max_depth', actual: 9, max: QUERY_LIMITS.maxDepth });
    // One level less is fine.
    const ok = await gql('{ __schema { directives { args { type { inputFields { type { inputFields { name } } } } } } } }');
    expect(ok.status).toBe(200);
    expect(ok.body.errors).toBeUndefined();
  });

  it('a full page of 100 tunnels fits the cost limit, two do not', async () => {
    const one = await gql(`{ ${fullPage('a', '100')} }`, undefined, alice.readKey);
    expect(one.status).toBe(200);
    expect(one.body.errors).toBeUndefined();
    const two = await gql(`{ ${fullPage('a', '100')} ${fullPage('b', '100')} }`, undefined, alice.readKey);
    expect(two.status).toBe(400);
    expect(onlyError(two).extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', limit: 'max_cost', max: QUERY_LIMITS.maxCost });
    expect(two.body.data).toBeUndefined();
  });

  it('a limit given by a variable is costed at the maximum page size', async () => {
    const res = await gql(`query P($n: Int!) { ${fullPage('a', '$n')} ${fullPage('b', '$n')} }`, { n: 1 }, alice.readKey);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions?.limit).toBe('max_cost');
  });

  it('counts fragments at every place they are spread', async () => {
    const frag = `fragment F on TunnelPage { tunnels { ${TUNNEL_FIELDS} } }`;
    const res = await gql(`{ a: tunnels(limit: 100) { ...F } b: tunnels(limit: 100) { ...F } } ${frag}`, undefined, alice.readKey);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions?.limit).toBe('max_cost');
  });

  it('refuses more aliases than the limit', async () => {
    const fields = Array.from({ length: QUERY_LIMITS.maxAliases + 1 }, (_, i) => `p${i}: pricing { price }`).join(' ');
    const res = await gql(`{ ${fields} }`);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions).toMatchObject({ limit: 'max_aliases', actual: QUERY_LIMITS.maxAliases + 1 });
  });

  it('refuses more mutations per request than the limit, before charging anything', async () => {
    const before = await balanceCents(alice.accountId);
    const fields = Array.from({ length: QUERY_LIMITS.maxRootMutations + 1 }, (_, i) => `b${i}: purchaseTunnel(input: { originIp: "${ORIGIN}" }) { charged }`).join(' ');
    const res = await gql(`mutation { ${fields} }`, undefined, alice.writeKey);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions).toMatchObject({ limit: 'max_mutations' });
    expect(await balanceCents(alice.accountId)).toBe(before);
  });

  it('a purchase cannot share its operation with another mutation, whose failure would hide the charge (fuzz finding)', async () => {
    const before = await balanceCents(alice.accountId);
    const res = await gql(
      `mutation { a: purchaseTunnel(input: { originIp: "${ORIGIN}" }) { charged } b: provisionTunnel(id: "00000000-0000-4000-8000-000000000000") { id } }`,
      undefined,
      alice.writeKey,
    );
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions).toMatchObject({ limit: 'max_mutations', actual: 2 });
    expect(await balanceCents(alice.accountId)).toBe(before);
  });

  it('refuses batched requests, parse errors and unknown fields with Apollo codes', async () => {
    const batch = await call(gw.url, 'POST', '/graphql', { body: [{ query: '{ pricing { price } }' }, { query: '{ pricing { price } }' }] });
    expect(batch.status).toBe(400);
    expect(batch.text).toMatch(/batch/i);
    const parse = await gql('{ pricing { price ');
    expect(parse.status).toBe(400);
    expect(onlyError(parse).extensions?.code).toBe('GRAPHQL_PARSE_FAILED');
    const unknown = await gql('{ pricing { cost } }');
    expect(unknown.status).toBe(400);
    expect(onlyError(unknown).extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
  });
});

describe('HTTP surface', () => {
  it('refuses a GET query without a CSRF preflight header, and serves no landing page', async () => {
    const q = encodeURIComponent('{ pricing { price } }');
    const plain = await call(gw.url, 'GET', `/graphql?query=${q}`);
    expect(plain.status).toBe(400);
    expect(plain.text).toMatch(/CSRF/);
    const preflighted = await call(gw.url, 'GET', `/graphql?query=${q}`, { headers: { 'apollo-require-preflight': 'true' } });
    expect(preflighted.status).toBe(200);
    expect(preflighted.body.data.pricing.price).toBe(100);
    // A browser opening /graphql is sent to the panel's explorer page (server/http/panel.ts), not shown Apollo's.
    const browser = await fetch(`${gw.url}/graphql`, { headers: { accept: 'text/html' }, redirect: 'manual' });
    expect(browser.status).toBe(302);
    expect(browser.headers.get('location')).toBe('/developers/graphql');
    expect(await browser.text()).not.toMatch(/<html/i);
  });

  it('answers a JSON body that is not an object with 400, not 500', async () => {
    for (const raw of ['null', 'false', '0', '"{ pricing { price } }"']) {
      const res = await call(gw.url, 'POST', '/graphql', { raw, headers: { 'content-type': 'application/json' } });
      expect(res.status, raw).toBe(400);
    }
  });
});

describe('unexpected errors', () => {
  // The gateway's own app (the same createGateway as npm start), with its log lines captured.
  let logged: RunningGateway;
  const lines: string[] = [];

  beforeAll(async () => {
    logged = await startGateway({ testDb: gw.testDb, log: createLogger('error', {}, (l) => lines.push(l)) });
  });
  afterAll(async () => {
    await logged?.close();
  });

  it('become server_error with no internals in the response, and are logged', async () => {
    const spy = vi.spyOn(logged.services.pricing, 'get').mockRejectedValueOnce(new Error('connect ECONNREFUSED postgres://tunnelgate:hunter2@db'));
    try {
      const res = await call(logged.url, 'POST', '/graphql', { body: { query: '{ pricing { price } }' } });
      expect(res.status).toBe(200);
      const err = res.body.errors[0];
      expect(err.extensions).toEqual({ code: 'server_error', status: 500 });
      expect(res.text).not.toMatch(/hunter2|ECONNREFUSED|stack/i);
      const line = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'graphql error');
      expect(line).toBeDefined();
      expect(line.err.message).toMatch(/ECONNREFUSED/);
      expect(line.path).toBe('pricing');
      expect(typeof line.request_id).toBe('string');
      expect(lines.join('\n')).not.toMatch(/hunter2/);
    } finally {
      spy.mockRestore();
    }
  });
});

describe('out of stock', () => {
  it('once every protected IP is taken, purchaseTunnel is out_of_stock and charges nothing', async () => {
    const rich = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
    const { available } = (await gw.services.pricing.get()).availability;
    for (let i = 0; i < available; i++) {
      const res = await buy(rich.writeKey);
      expect(res.body.errors, JSON.stringify(res.body.errors)).toBeUndefined();
    }
    const before = await balanceCents(rich.accountId);
    const res = await buy(rich.writeKey);
    expect(onlyError(res).extensions).toEqual({ code: 'out_of_stock', status: 409 });
    expect(await balanceCents(rich.accountId)).toBe(before);
    const pricing = await gql('{ pricing { availability { available inStock } } }');
    expect(pricing.body.data.pricing.availability).toEqual({ available: 0, inStock: false });
  });
});

describe('schema/schema.graphql', () => {
  it('is what the code generates (run `npm run schema:graphql` after changing the schema)', async () => {
    const generated = printGraphqlSchema(await buildGraphqlSchema());
    const checkedIn = fs.existsSync(SCHEMA_FILE) ? fs.readFileSync(SCHEMA_FILE, 'utf8') : '';
    expect(checkedIn, 'schema/schema.graphql is out of date: run `npm run schema:graphql` and commit the result').toBe(generated);
  });
});
