// The tunnel API over real HTTP against real PostgreSQL: every route, every error row of docs/CONTRACTS.md
// "REST errors" that the gateway can produce before the edge agent is wired.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { setRate } from '../../server/domain/settings.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { revokeApiKey } from '../../server/auth/api-keys.ts';
import { addBalance } from '../../server/domain/accounts.ts';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { VERSION } from '../../server/version.ts';

let gw: RunningGateway;
let alice: SeededUser;
let bob: SeededUser;
const ORIGIN = '8.8.4.4';

async function balanceOf(accountId: string): Promise<string> {
  const { rows } = await gw.testDb.raw.query('select balance_usd from account where id = $1', [accountId]);
  return rows[0].balance_usd;
}

async function ledgerSum(accountId: string): Promise<string> {
  const { rows } = await gw.testDb.raw.query('select coalesce(sum(amount_usd), 0)::numeric(14,2) as s from ledger_entry where account_id = $1', [accountId]);
  return rows[0].s;
}

const buy = (token: string, body: unknown = { name: 'web', origin_ip: ORIGIN }, headers: Record<string, string> = {}) =>
  call(gw.url, 'POST', '/api/dedicated', { token, body, headers });

beforeAll(async () => {
  gw = await startGateway();
  await seedNode(gw.testDb.db, '198.18.0.0/26'); // 62 protected IPs
  await setRate(gw.testDb.db, '90');
  alice = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
  bob = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
});
afterAll(async () => gw?.close());

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

describe('reading tunnels', () => {
  it('lists newest first with cursor pagination, leaving out deleted tunnels', async () => {
    const u = await seedUser(gw.testDb.db);
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await buy(u.writeKey, { name: `t${i}`, origin_ip: ORIGIN })).body.tunnel.id);
    expect((await call(gw.url, 'DELETE', `/api/dedicated/${ids[2]}`, { token: u.writeKey })).status).toBe(200);
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const q: string = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : '?limit=2';
      const page = await call(gw.url, 'GET', `/api/dedicated${q}`, { token: u.readKey });
      expect(page.status).toBe(200);
      expect(page.body.tunnels.length).toBeLessThanOrEqual(2);
      seen.push(...page.body.tunnels.map((t: { id: string }) => t.id));
      cursor = page.body.next_cursor;
      pages++;
    } while (cursor);
    expect(seen).toEqual([ids[4], ids[3], ids[1], ids[0]]);
    expect(pages).toBe(2);
    const all = await call(gw.url, 'GET', '/api/dedicated', { token: u.readKey });
    expect(Object.keys(all.body).sort()).toEqual(['next_cursor', 'tunnels']);
    expect(all.body.next_cursor).toBeNull();
  });

  it('lists each tunnel exactly as GET /api/dedicated/{id} shows it (same fields, order and times)', async () => {
    const u = await seedUser(gw.testDb.db);
    for (let i = 0; i < 3; i++) await buy(u.writeKey, { name: `same-${i}`, origin_ip: ORIGIN });
    const list = await call(gw.url, 'GET', '/api/dedicated', { token: u.readKey });
    expect(list.body.tunnels).toHaveLength(3);
    for (const t of list.body.tunnels) {
      const one = await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: u.readKey });
      expect(JSON.stringify(t)).toBe(JSON.stringify(one.body.tunnel));
      expect(t.created_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }
  });

  it('concurrent lists of several accounts (read together in shared statements) each get their own pages', async () => {
    const users = await Promise.all([0, 1, 2].map(() => seedUser(gw.testDb.db)));
    const own: string[][] = [];
    for (const u of users) {
      const ids: string[] = [];
      for (let i = 0; i < 2; i++) ids.push((await buy(u.writeKey, { name: `mine-${i}`, origin_ip: ORIGIN })).body.tunnel.id);
      own.push(ids.reverse()); // newest first
    }
    const list = (u: SeededUser, q = '') => call(gw.url, 'GET', `/api/dedicated${q}`, { token: u.readKey });
    const idsOf = (r: Awaited<ReturnType<typeof list>>) => [r.status, r.body.tunnels.map((t: { id: string }) => t.id)];
    // First with keys never used before, then again once each has authenticated (the gateway may start
    // the page of a recently valid key while it checks the key: server/http/rest/routes.ts prefetchList).
    for (const round of ['fresh keys', 'recently used keys']) {
      const [full, first] = await Promise.all([
        Promise.all(users.flatMap((u) => [list(u), list(u), list(u)])),
        Promise.all(users.map((u) => list(u, '?limit=1'))),
      ]);
      expect([round, full.map(idsOf)]).toEqual([round, users.flatMap((_, i) => [0, 1, 2].map(() => [200, own[i]]))]);
      expect([round, first.map(idsOf)]).toEqual([round, own.map((ids) => [200, [ids[0]]])]);
      const second = await Promise.all(users.map((u, i) => list(u, `?limit=1&cursor=${encodeURIComponent(first[i]!.body.next_cursor)}`)));
      expect([round, second.map(idsOf), second.map((r) => r.body.next_cursor)]).toEqual([round, own.map((ids) => [200, [ids[1]]]), [null, null, null]]);
    }
  });

  it('rejects bad list parameters with 400 invalid_request', async () => {
    for (const q of ['?limit=0', '?limit=101', '?limit=abc', '?cursor=nonsense', '?limit=1&limit=2', '?colour=red']) {
      const res = await call(gw.url, 'GET', `/api/dedicated${q}`, { token: alice.readKey });
      expect(res.status, q).toBe(400);
      expect(res.body.error).toBe('invalid_request');
    }
  });

  it('GET /api/dedicated/{id} wraps the tunnel; another account gets 404, as does garbage', async () => {
    const t = (await buy(alice.writeKey)).body.tunnel;
    const mine = await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: alice.readKey });
    expect(mine.status).toBe(200);
    expect(mine.body).toEqual({ tunnel: t });
    for (const [token, id] of [[bob.readKey, t.id], [alice.readKey, '00000000-0000-4000-8000-000000000000'], [alice.readKey, 'not-a-uuid']]) {
      const res = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token });
      expect(res.status).toBe(404);
      expect(res.body.error).toBe('not_found');
    }
  });

  it('GET setup returns this tunnel\'s scripts; 404 for another account', async () => {
    const t = (await buy(alice.writeKey)).body.tunnel;
    const res = await call(gw.url, 'GET', `/api/dedicated/${t.id}/setup`, { token: alice.readKey });
    expect(res.status).toBe(200);
    expect(res.body.tunnel_id).toBe(t.id);
    expect(res.body.scripts.origin).toContain(t.tunnel_name);
    expect(res.body.scripts.origin).toContain(ORIGIN);
    expect(res.body.scripts.origin).toContain('192.0.2.1'); // the edge's underlay address
    expect(res.body.scripts.origin).toMatch(/^#!\/.*bash/);
    expect(res.body.scripts.systemd_origin).toContain('[Service]');
    expect((await call(gw.url, 'GET', `/api/dedicated/${t.id}/setup`, { token: bob.readKey })).status).toBe(404);
  });
});

describe('lifecycle with no edge agent answering (this gateway runs no worker)', () => {
  it('activate of a pending tunnel is 409; provision and delete queue durable jobs and answer 202; 403 read key, 404 other account', async () => {
    const t = (await buy(alice.writeKey)).body.tunnel;
    for (const op of ['provision', 'activate']) {
      expect((await call(gw.url, 'POST', `/api/dedicated/${t.id}/${op}`, { token: alice.readKey })).status).toBe(403);
      expect((await call(gw.url, 'POST', `/api/dedicated/${t.id}/${op}`, { token: bob.writeKey })).status).toBe(404);
    }
    const early = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: alice.writeKey });
    expect([early.status, early.body.error]).toEqual([409, 'invalid_state']);
    expect((await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: alice.readKey })).body.tunnel.status).toBe('pending');

    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: alice.writeKey });
    expect(p.status).toBe(202);
    expect(p.body.tunnel).toMatchObject({ id: t.id, status: 'provisioning' });
    // Still not provisioned: activate stays refused.
    const a = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: alice.writeKey });
    expect([a.status, a.body.error]).toEqual([409, 'invalid_state']);
    // The job sits in the durable queue until a worker takes it.
    const jobs = await gw.testDb.raw.query(`select state from pgboss.job where name = 'edge-job' and data->>'tunnelId' = $1`, [t.id]);
    expect(jobs.rows.map((r) => r.state)).toEqual(['created']);

    const d = await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: alice.writeKey });
    expect(d.status).toBe(202);
    expect(d.body.tunnel).toMatchObject({ id: t.id, status: 'deleting' });
    // The IP stays taken until the edge confirms the removal.
    const { rows } = await gw.testDb.raw.query('select tunnel_id from protected_ip where ip = $1', [t.protected_ip]);
    expect(rows[0].tunnel_id).toBe(t.id);
  });

  it('DELETE of a pending tunnel is immediate and returns its IP to the pool', async () => {
    const t = (await buy(alice.writeKey)).body.tunnel;
    const free = (await call(gw.url, 'GET', '/api/dedicated/pricing')).body.availability.available;
    expect((await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: alice.readKey })).status).toBe(403);
    expect((await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: bob.writeKey })).status).toBe(404);
    const res = await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: alice.writeKey });
    expect(res.status).toBe(200);
    expect(res.body.tunnel).toMatchObject({ id: t.id, status: 'deleted' });
    expect((await call(gw.url, 'GET', '/api/dedicated/pricing')).body.availability.available).toBe(free + 1);
    const { rows } = await gw.testDb.raw.query('select tunnel_id from protected_ip where ip = $1', [t.protected_ip]);
    expect(rows[0].tunnel_id).toBeNull();
    const again = await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: alice.writeKey });
    expect([again.status, again.body.error]).toEqual([409, 'invalid_state']);
    const read = await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: alice.readKey });
    expect(read.body.tunnel.status).toBe('deleted');
  });
});

describe('the rest of the surface', () => {
  it('unknown routes are 404 not_found and wrong methods 405 with Allow, as JSON', async () => {
    const nf = await call(gw.url, 'GET', '/api/nothing-here', { token: alice.readKey });
    expect([nf.status, nf.body.error]).toEqual([404, 'not_found']);
    const root = await call(gw.url, 'GET', '/nothing');
    expect([root.status, root.body.error]).toEqual([404, 'not_found']);
    const wrong = await call(gw.url, 'PUT', '/api/dedicated/pricing');
    expect(wrong.status).toBe(405);
    expect(wrong.body.error).toBe('invalid_request');
    expect(wrong.headers.get('allow')).toContain('GET');
  });

  it('serves health, readiness, metrics and the OpenAPI document', async () => {
    expect((await call(gw.url, 'GET', '/healthz')).body).toEqual({ status: 'ok', version: VERSION });
    const ready = await call(gw.url, 'GET', '/readyz');
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ status: 'ready', database: 'ok', migrations_pending: 0 });
    const metrics = await call(gw.url, 'GET', '/metrics');
    expect(metrics.text).toMatch(/tunnelgate_http_requests_total\{method="POST",route="\/api\/dedicated",status="201"\} \d+/);
    expect(metrics.text).toMatch(/tunnelgate_purchases_total\{outcome="created"\} \d+/);
    const doc = await call(gw.url, 'GET', '/api/openapi.json');
    expect(doc.status).toBe(200);
    expect(doc.body.openapi).toMatch(/^3\.1\./);
  });

  it('echoes a sane X-Request-Id and makes one otherwise', async () => {
    const given = await call(gw.url, 'GET', '/healthz', { headers: { 'x-request-id': 'abc-123' } });
    expect(given.headers.get('x-request-id')).toBe('abc-123');
    const made = await call(gw.url, 'GET', '/healthz', { headers: { 'x-request-id': 'bad id with spaces' } });
    expect(made.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('rate limits', () => {
  it('429 rate_limited with Retry-After once a credential spends its burst, others unaffected', async () => {
    // One token a minute: nothing refills while the test runs, however slow the machine.
    const limited = await startGateway({ config: { rateLimitPerMinute: 1, rateLimitBurst: 40 } });
    try {
      await seedNode(limited.testDb.db, '198.18.1.0/30');
      const u = await seedUser(limited.testDb.db);
      const v = await seedUser(limited.testDb.db);
      // 40 concurrent requests fit the burst; the 41st does not.
      const burst = await Promise.all(Array.from({ length: 40 }, () => call(limited.url, 'GET', '/api/dedicated', { token: u.readKey })));
      expect(burst.every((r) => r.status === 200)).toBe(true);
      const over = await call(limited.url, 'GET', '/api/dedicated', { token: u.readKey });
      expect(over.status).toBe(429);
      expect(over.body.error).toBe('rate_limited');
      expect(Number(over.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect((await call(limited.url, 'GET', '/api/dedicated', { token: v.readKey })).status).toBe(200);
      // Garbage credentials are limited too, so guessing keys is slow.
      const guesses = await Promise.all(Array.from({ length: 45 }, () => call(limited.url, 'GET', '/api/dedicated', { token: 'svc_guess' })));
      expect(guesses.some((r) => r.status === 429)).toBe(true);
      expect((await call(limited.url, 'GET', '/api/dedicated/pricing')).status).toBe(200);
    } finally {
      await limited.close();
    }
  });
});

describe('failed authentications', () => {
  it('are limited per client address even when every guess is a different token', async () => {
    // The gate's clock is the test's: time moves only when the test moves it, however slow the requests.
    let now = Date.UTC(2030, 0, 1);
    const limited = await startGateway({ config: { rateLimitPerMinute: 60, rateLimitBurst: 40 }, clock: () => now });
    try {
      const u = await seedUser(limited.testDb.db);
      // An integration already in use from this address (its key was valid here before the guessing).
      expect((await call(limited.url, 'GET', '/api/dedicated', { token: u.readKey })).status).toBe(200);
      const guesses = [];
      for (let i = 0; i < 25; i++) guesses.push(await call(limited.url, 'GET', '/api/dedicated', { token: `svc_guess${i}` }));
      // The failure budget (20, refilled at 20 a minute: one per 3 s) is spent by the first 20 guesses; with
      // no time passing, all of the next 5 are refused before any lookup.
      expect(guesses.slice(0, 20).map((r) => r.status)).toEqual(Array(20).fill(401));
      const blocked = guesses.slice(20);
      expect(blocked.map((r) => r.status)).toEqual(Array(5).fill(429));
      expect(blocked.every((r) => r.body.error === 'rate_limited' && Number(r.headers.get('retry-after')) >= 1)).toBe(true);
      // 3 s later exactly one more guess has refilled: it is looked up (401), the one after is refused again.
      now += 3000;
      expect((await call(limited.url, 'GET', '/api/dedicated', { token: 'svc_guess_late1' })).status).toBe(401);
      expect((await call(limited.url, 'GET', '/api/dedicated', { token: 'svc_guess_late2' })).status).toBe(429);
      // The key that was valid here before still works from the same address.
      expect((await call(limited.url, 'GET', '/api/dedicated', { token: u.readKey })).status).toBe(200);
    } finally {
      await limited.close();
    }
  });
});
