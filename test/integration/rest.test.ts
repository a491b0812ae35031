// The tunnel API over real HTTP against real PostgreSQL: every route, every error row of docs/CONTRACTS.md
// "REST errors" that the gateway can produce before the edge agent is wired. Here pricing, the purchase and
// Idempotency-Key; reading tunnels, their lifecycle and the rest of the surface are rest-tunnels.test.ts.
import { describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { seedUser } from '../helpers/fixtures.ts';
import { setRate } from '../../server/domain/settings.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { revokeApiKey } from '../../server/auth/api-keys.ts';
import { addBalance } from '../../server/domain/accounts.ts';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { alice, balanceOf, bob, buy, gw, ledgerSum, ORIGIN, useRestWorld } from './rest-world.ts';

useRestWorld();

describe('GET /api/dedicated/pricing', () => {
  it('needs no credential and reports every field with live availability', async () => {
    const res = await call(gw.url, 'GET', '/api/dedicated/pricing');
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      price: 100,
      currency: 'RUB',
      price_usd: 1.11,
      usd_rub_rate: 90,
      billing: 'one_time',
      includes: ['dedicated_public_ip', 'full_tcp_udp_nat', 'gre_tunnel'],
      admin_ssh_port: 52222,
      availability: { total: 62, available: expect.any(Number), in_stock: true },
    });
    const before = res.body.availability.available;
    const bought = await buy(alice.writeKey);
    expect(bought.status).toBe(201);
    const after = await call(gw.url, 'GET', '/api/dedicated/pricing');
    expect(after.body.availability.available).toBe(before - 1);
  });

  it.each([
    ['92.5', 1.08], // 1.0810... rounds down
    ['160', 0.63], // exactly 0.625: half rounds up
    ['32', 3.13], // exactly 3.125: half rounds up
    ['80', 1.25], // exact
    ['0.6', 166.67], // 166.666...
  ])('rounds the USD price half up to the cent at rate %s', async (rate, expected) => {
    await setRate(gw.testDb.db, rate);
    gw.services.pricing.invalidate();
    const res = await call(gw.url, 'GET', '/api/dedicated/pricing');
    expect(res.body.price_usd).toBe(expected);
    expect(res.body.usd_rub_rate).toBe(Number(rate));
    await setRate(gw.testDb.db, '90');
    gw.services.pricing.invalidate();
  });
});

describe('POST /api/dedicated', () => {
  it('creates a pending tunnel, debits the exact price and writes one ledger row', async () => {
    await setRate(gw.testDb.db, '92.5');
    const before = await balanceOf(alice.accountId);
    const res = await buy(alice.writeKey, { name: 'game server', origin_ip: ORIGIN });
    await setRate(gw.testDb.db, '90');
    expect(res.status).toBe(201);
    const t = res.body.tunnel;
    expect(t).toMatchObject({ name: 'game server', origin_ip: ORIGIN, ports: '*', protocol: 'both', status: 'pending', admin_ssh_port: 52222 });
    expect(t.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(t.protected_ip).toMatch(/^198\.18\.0\.\d+$/);
    expect(t.tunnel_name).toMatch(/^tg-[a-z2-7]{10}$/);
    expect(t.tunnel_name.length).toBeLessThanOrEqual(15);
    expect(res.body.charged).toBe(100);
    expect(res.body.currency).toBe('RUB');
    expect(res.body.charged_usd).toBe(1.08);
    expect(res.body.balance_after).toBe(Math.round((Number(before) - 1.08) * 100) / 100);
    expect(await balanceOf(alice.accountId)).toBe((Number(before) - 1.08).toFixed(2));
    expect(res.body.next_steps).toEqual({ setup: `/api/dedicated/${t.id}/setup`, provision: `/api/dedicated/${t.id}/provision` });
    const { rows } = await gw.testDb.raw.query('select amount_usd, balance_after, kind from ledger_entry where tunnel_id = $1', [t.id]);
    expect(rows).toEqual([{ amount_usd: '-1.08', balance_after: (Number(before) - 1.08).toFixed(2), kind: 'purchase' }]);
    expect(await ledgerSum(alice.accountId)).toBe(await balanceOf(alice.accountId));
  });

  it('accepts a purchase without a name', async () => {
    const res = await buy(alice.writeKey, { origin_ip: ORIGIN });
    expect(res.status).toBe(201);
    expect(res.body.tunnel.name).toBeNull();
  });

  it('401 invalid_token with WWW-Authenticate for missing, garbage and revoked credentials', async () => {
    for (const token of [undefined, 'garbage', 'svc_00000000000000000000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', alice.writeKey.slice(0, -2) + 'xx']) {
      const res = await buy(token as string);
      expect(res.status, String(token)).toBe(401);
      expect(res.body.error).toBe('invalid_token');
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
    }
    const raw = await call(gw.url, 'GET', '/api/dedicated', { headers: { authorization: 'Basic Zm9vOmJhcg==' } });
    expect(raw.status).toBe(401);
    const u = await seedUser(gw.testDb.db);
    const id = (await gw.testDb.raw.query('select id from api_key where account_id = $1 and permission = $2', [u.accountId, 'write'])).rows[0].id;
    expect((await buy(u.writeKey)).status).toBe(201);
    await revokeApiKey(gw.testDb.db, id);
    const revoked = await buy(u.writeKey);
    expect(revoked.status).toBe(401);
    expect(revoked.body.error).toBe('invalid_token');
  });

  it('a key revoked by another process (the admin CLI) stops working at once, despite the verification cache', async () => {
    const u = await seedUser(gw.testDb.db);
    expect((await call(gw.url, 'GET', '/api/dedicated', { token: u.readKey })).status).toBe(200); // now cached
    const other = new Database(await openOrm({ databaseUrl: gw.testDb.url, dataDir: '' }));
    try {
      const id = (await gw.testDb.raw.query('select id from api_key where account_id = $1 and permission = $2', [u.accountId, 'read'])).rows[0].id;
      expect(await revokeApiKey(other, id)).toBe(true);
    } finally {
      await other.close();
    }
    // Revocation takes effect at once: the very next request with the key is refused, whatever
    // the cache held and however the notice travels. No polling: a loop would only measure how fast it arrives.
    const next = await call(gw.url, 'GET', '/api/dedicated', { token: u.readKey });
    expect(next.status).toBe(401);
    expect(next.body.error).toBe('invalid_token');
  });

  it('403 insufficient_scope for a read-only key, and nothing is charged', async () => {
    const before = await balanceOf(alice.accountId);
    const res = await buy(alice.readKey);
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ error: 'insufficient_scope', error_description: expect.any(String) });
    expect(await balanceOf(alice.accountId)).toBe(before);
  });

  it.each([
    ['10.0.0.1', 'private'],
    ['192.168.1.1', 'private'],
    ['127.0.0.1', 'loopback'],
    ['100.64.0.2', 'CGNAT'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['0.0.0.0', 'this network'],
    ['203.0.113.5', 'documentation'],
    ['1.2.3', 'three octets'],
    ['256.1.1.1', 'octet out of range'],
    ['01.2.3.4', 'leading zero'],
    ['8.8.8.8 ', 'trailing space'],
    ['::1', 'IPv6'],
    ['example.com', 'a name'],
  ])('400 invalid_origin_ip for %s (%s)', async (ip) => {
    const res = await buy(alice.writeKey, { origin_ip: ip });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_origin_ip');
    expect(res.body.error_description).toEqual(expect.any(String));
  });

  it.each([
    [{}, 'missing origin_ip'],
    [{ origin_ip: 8 }, 'origin_ip not a string'],
    [{ origin_ip: ORIGIN, name: 5 }, 'name not a string'],
    [{ origin_ip: ORIGIN, name: 'x'.repeat(101) }, 'name too long'],
    [{ origin_ip: ORIGIN, promocode: 7 }, 'promocode not a string'],
    [{ origin_ip: ORIGIN, colour: 'blue' }, 'unknown field'],
    [[{ origin_ip: ORIGIN }], 'an array'],
    ['8.8.4.4', 'a string'],
    [null, 'null'],
  ])('400 invalid_request for %j (%s)', async (body, _why) => {
    const before = await balanceOf(alice.accountId);
    const res = await call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, raw: JSON.stringify(body), headers: { 'content-type': 'application/json' } });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
    expect(await balanceOf(alice.accountId)).toBe(before);
  });

  it('400 for malformed JSON and an empty body, 415 for another media type, 413 for a huge body', async () => {
    const post = (raw: string | Uint8Array, type?: string) =>
      call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, raw, headers: type ? { 'content-type': type } : {} });
    const malformed = await post('{"origin_ip": ', 'application/json');
    expect([malformed.status, malformed.body.error]).toEqual([400, 'invalid_request']);
    const empty = await post('', 'application/json');
    expect([empty.status, empty.body.error]).toEqual([400, 'invalid_request']);
    const text = await post('origin_ip=8.8.4.4', 'application/x-www-form-urlencoded');
    expect([text.status, text.body.error]).toEqual([415, 'invalid_request']);
    const none = await post(JSON.stringify({ origin_ip: ORIGIN }));
    expect(none.status).toBe(415);
    const huge = await post(JSON.stringify({ origin_ip: ORIGIN, name: 'x'.repeat(2 * 1024 * 1024) }), 'application/json');
    expect([huge.status, huge.body.error]).toEqual([413, 'invalid_request']);
    const charset = await post(JSON.stringify({ origin_ip: ORIGIN }), 'application/json; charset=utf-8');
    expect(charset.status).toBe(201);
  });

  it('400 invalid_promocode for unknown, expired and used-up codes, charging nothing', async () => {
    await createPromocode(gw.testDb.db, { code: 'OLD', percent: 50, expiresAt: new Date(Date.now() - 60_000) });
    await createPromocode(gw.testDb.db, { code: 'ONCE', percent: 50, maxUses: 1 });
    const before = await balanceOf(bob.accountId);
    for (const code of ['NOPE', 'old']) {
      const res = await buy(bob.writeKey, { origin_ip: ORIGIN, promocode: code });
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_promocode');
    }
    expect(await balanceOf(bob.accountId)).toBe(before);
    const first = await buy(bob.writeKey, { origin_ip: ORIGIN, promocode: 'once' });
    expect(first.status).toBe(201);
    expect(first.body.charged).toBe(50);
    expect(first.body.charged_usd).toBe(0.56); // 50 RUB / 90 = 0.5555...
    const second = await buy(bob.writeKey, { origin_ip: ORIGIN, promocode: 'ONCE' });
    expect(second.status).toBe(400);
    expect(second.body.error).toBe('invalid_promocode');
  });

  it('applies a fixed RUB discount and never charges below zero', async () => {
    await createPromocode(gw.testDb.db, { code: 'MINUS30', amountRub: '30' });
    await createPromocode(gw.testDb.db, { code: 'FREE', amountRub: '500' });
    const a = await buy(bob.writeKey, { origin_ip: ORIGIN, promocode: 'minus30' });
    expect([a.status, a.body.charged, a.body.charged_usd]).toEqual([201, 70, 0.78]);
    const before = await balanceOf(bob.accountId);
    const b = await buy(bob.writeKey, { origin_ip: ORIGIN, promocode: 'FREE' });
    expect([b.status, b.body.charged, b.body.charged_usd]).toEqual([201, 0, 0]);
    expect(await balanceOf(bob.accountId)).toBe(before);
    expect(await ledgerSum(bob.accountId)).toBe(await balanceOf(bob.accountId));
  });

  it('402 insufficient_balance when the balance is below the price; nothing is debited or reserved', async () => {
    const poor = await seedUser(gw.testDb.db, { balanceUsd: '1.10' });
    const free = (await call(gw.url, 'GET', '/api/dedicated/pricing')).body.availability.available;
    const res = await buy(poor.writeKey);
    expect(res.status).toBe(402);
    expect(res.body.error).toBe('insufficient_balance');
    expect(await balanceOf(poor.accountId)).toBe('1.10');
    gw.services.pricing.invalidate();
    expect((await call(gw.url, 'GET', '/api/dedicated/pricing')).body.availability.available).toBe(free);
    await addBalance(gw.testDb.db, poor.email, '0.01');
    const ok = await buy(poor.writeKey);
    expect(ok.status).toBe(201);
    expect(ok.body.balance_after).toBe(0);
  });
});

describe('Idempotency-Key', () => {
  it('replays the first response for the same body and charges once', async () => {
    const before = await balanceOf(alice.accountId);
    const key = `order-${Date.now()}`;
    const first = await buy(alice.writeKey, { name: 'idem', origin_ip: ORIGIN }, { 'idempotency-key': key });
    const again = await buy(alice.writeKey, { name: 'idem', origin_ip: ORIGIN }, { 'idempotency-key': key });
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.body).toEqual(first.body);
    expect([first.headers.get('idempotent-replayed'), again.headers.get('idempotent-replayed')]).toEqual([null, 'true']);
    expect(await balanceOf(alice.accountId)).toBe((Number(before) - 1.11).toFixed(2));
    const { rows } = await gw.testDb.raw.query('select count(*)::int as n from tunnel where name = $1 and account_id = $2', ['idem', alice.accountId]);
    expect(rows[0].n).toBe(1);
  });

  it('422 invalid_request when the key is reused with another body', async () => {
    const key = `order-b-${Date.now()}`;
    expect((await buy(alice.writeKey, { origin_ip: ORIGIN }, { 'idempotency-key': key })).status).toBe(201);
    const other = await buy(alice.writeKey, { origin_ip: '8.8.8.8' }, { 'idempotency-key': key });
    expect(other.status).toBe(422);
    expect(other.body.error).toBe('invalid_request');
  });

  it('keys are scoped to the account', async () => {
    const key = `shared-${Date.now()}`;
    const a = await buy(alice.writeKey, { origin_ip: ORIGIN }, { 'idempotency-key': key });
    const b = await buy(bob.writeKey, { origin_ip: '8.8.8.8' }, { 'idempotency-key': key });
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(b.body.tunnel.id).not.toBe(a.body.tunnel.id);
  });

  it('concurrent duplicates create one tunnel and all get the same answer', async () => {
    const before = await balanceOf(bob.accountId);
    const key = `burst-${Date.now()}`;
    const results = await Promise.all(Array.from({ length: 8 }, () => buy(bob.writeKey, { origin_ip: ORIGIN }, { 'idempotency-key': key })));
    expect(new Set(results.map((r) => r.status))).toEqual(new Set([201]));
    expect(new Set(results.map((r) => r.body.tunnel.id)).size).toBe(1);
    expect(await balanceOf(bob.accountId)).toBe((Number(before) - 1.11).toFixed(2));
  });

  it('does not keep a refusal (the same key buys once its cause is gone), and rejects a malformed key', async () => {
    const poor = await seedUser(gw.testDb.db, { balanceUsd: '0.50' });
    const key = 'refused-1';
    const first = await buy(poor.writeKey, { origin_ip: ORIGIN }, { 'idempotency-key': key });
    expect(first.status).toBe(402);
    await addBalance(gw.testDb.db, poor.email, '10');
    const retry = await buy(poor.writeKey, { origin_ip: ORIGIN }, { 'idempotency-key': key });
    expect([retry.status, retry.headers.get('idempotent-replayed')]).toEqual([201, null]);
    const replay = await buy(poor.writeKey, { origin_ip: ORIGIN }, { 'idempotency-key': key });
    expect([replay.status, replay.headers.get('idempotent-replayed')]).toEqual([201, 'true']);
    expect(replay.body).toEqual(retry.body);
    expect(await balanceOf(poor.accountId)).toBe('9.39');
    const bad = await buy(poor.writeKey, { origin_ip: ORIGIN }, { 'idempotency-key': 'x'.repeat(300) });
    expect([bad.status, bad.body.error]).toEqual([400, 'invalid_request']);
  });
});
