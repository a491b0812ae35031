// GraphQL at /graphql over real HTTP against real PostgreSQL: every query and mutation, the REST error
// codes in extensions.code, idempotent purchases and the lifecycle, all through the real gateway app. The
// 401 policy, the depth/cost/alias limits, unexpected errors and the drift check of schema/schema.graphql are
// graphql-limits.test.ts.
import 'reflect-metadata';
import { beforeAll, describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { alice, balanceCents, bob, buy, cents, gql, gw, onlyError, ORIGIN, POOL_SIZE, poor, priceUsd, purchaseRows, TUNNEL_FIELDS, useGraphqlWorld } from './graphql-world.ts';

useGraphqlWorld();

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
