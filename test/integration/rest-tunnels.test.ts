// The tunnel API over real HTTP against real PostgreSQL, continued from rest.test.ts: reading tunnels, their
// lifecycle with no edge agent answering, the rest of the surface (404/405, health, request ids) and the rate
// limits, every error row of docs/CONTRACTS.md "REST errors" these can produce.
import { describe, expect, it } from 'vitest';
import { call, startGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { VERSION } from '../../server/version.ts';
import { alice, bob, buy, gw, ORIGIN, useRestWorld } from './rest-world.ts';

useRestWorld();

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
