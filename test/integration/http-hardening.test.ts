// The HTTP hardening (REST side: client address, limits before lookups, metrics and idempotency) against the real gateway on real PostgreSQL: the client
// address behind proxies (TRUST_PROXY=N), Secure cookies behind https, limits that run before any
// lookup of a made-up key, buckets per key id, /metrics behind METRICS_TOKEN, 503 bodies without
// internal addresses, idempotency records that expire after 7 days.
import net from 'node:net';
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { pkce } from '../helpers/oidc.ts';
import { createClient } from '../../server/domain/clients.ts';
import { setRate } from '../../server/domain/settings.ts';
import { purgeExpiredIdempotency } from '../../server/domain/tunnels/index.ts';
import { createLogger } from '../../common/log.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { until } from '../helpers/wait.ts';

/** Counts the API-key lookups the gateway sends to PostgreSQL (the one prepared read of api-keys.ts). */
function countKeyLookups(gw: RunningGateway): { readonly n: number } {
  const db = gw.services.db;
  const counter = { n: 0 };
  const hot = db.hot.bind(db);
  db.hot = ((name: string, text: string, params: readonly unknown[] = []) => {
    // Concurrent key checks share one statement (server/auth/api-keys.ts): count the keys it looks up.
    if (name === 'api_key_auth_batch') counter.n += (params[1] as readonly unknown[]).length;
    return hot(name, text, params);
  }) as typeof db.hot;
  return counter;
}

// The request gate's rate limits run on a stopped clock (nothing refills while a test runs), so each
// limit's answer is exact whatever the host's speed.
const stopped = Date.now();

const madeUpKey = () => `svc_${randomBytes(16).toString('hex')}_${randomBytes(32).toString('base64url')}`;

describe('TRUST_PROXY=N', () => {
  let gw: RunningGateway;
  beforeAll(async () => {
    // A burst of 5, and the clock stands still.
    gw = await startGateway({ config: { trustProxy: 1, rateLimitPerMinute: 1, rateLimitBurst: 5 }, clock: () => stopped });
  });
  afterAll(async () => gw?.close());

  it('a spoofed left-most X-Forwarded-For neither dodges nor redirects the anonymous limit', async () => {
    // The proxy appends the real client (203.0.113.7); the client writes whatever it likes before it.
    const statuses: number[] = [];
    for (let i = 0; i < 8; i++) {
      const spoof = i % 2 ? `198.51.100.${i}` : '198.51.100.200';
      statuses.push((await call(gw.url, 'GET', '/api/dedicated', { headers: { 'x-forwarded-for': `${spoof}, 203.0.113.7` } })).status);
    }
    // Five anonymous calls fit (401: no credential), then the address is limited however it spoofs.
    expect(statuses).toEqual([401, 401, 401, 401, 401, 429, 429, 429]);
    // The addresses it wrote (198.51.100.200 the most) were never charged: their owners are not blocked.
    const victim = await call(gw.url, 'GET', '/api/dedicated', { headers: { 'x-forwarded-for': '198.51.100.200' } });
    expect(victim.status).toBe(401);
    const limited = await call(gw.url, 'GET', '/api/dedicated', { headers: { 'x-forwarded-for': '203.0.113.7' } });
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  });

  it('with TRUST_PROXY=2 the second entry from the right is the client', async () => {
    const two = await startGateway({ testDb: gw.testDb, config: { trustProxy: 2, rateLimitPerMinute: 1, rateLimitBurst: 2 }, clock: () => stopped });
    try {
      const via = (spoof: string) => call(two.url, 'GET', '/api/dedicated', { headers: { 'x-forwarded-for': `${spoof}, 203.0.113.8, 10.0.0.2` } });
      expect([(await via('1.1.1.1')).status, (await via('1.1.1.2')).status, (await via('1.1.1.3')).status]).toEqual([401, 401, 429]);
      // Another client behind the same two proxies has its own budget.
      expect((await call(two.url, 'GET', '/api/dedicated', { headers: { 'x-forwarded-for': '203.0.113.9, 10.0.0.2' } })).status).toBe(401);
    } finally {
      await two.close();
    }
  });
});

describe('Secure cookies when PUBLIC_URL is https', () => {
  /** The Set-Cookie lines of the issuer's first answer to an authorization request. */
  async function authorizeCookies(gw: RunningGateway, headers: Record<string, string> = {}): Promise<string[]> {
    const { secretEncryptionKey } = (await loadSecrets(gw.testDb.db, {})).secrets;
    const redirectUri = `http://127.0.0.1:9/cb/${randomBytes(3).toString('hex')}`;
    const client = await createClient(gw.testDb.db, secretEncryptionKey, { name: 'Cookie check', redirectUris: [redirectUri] });
    const q = new URLSearchParams({
      client_id: client.client_id,
      redirect_uri: redirectUri,
      response_type: 'code',
      scope: 'openid',
      code_challenge: pkce().challenge,
      code_challenge_method: 'S256',
      state: 'st',
    });
    const res = await fetch(`${gw.url}/oauth/authorize?${q}`, { redirect: 'manual', headers });
    expect(res.status, await res.text()).toBeGreaterThanOrEqual(300);
    expect(res.status).toBeLessThan(400);
    return res.headers.getSetCookie();
  }

  it('behind a TLS-terminating proxy (plain HTTP to the gateway, no X-Forwarded-Proto) every cookie is Secure', async () => {
    const gw = await startGateway({ config: { publicUrl: 'https://gateway.example.test', issuerUrl: 'https://gateway.example.test', trustProxy: 1 } });
    try {
      for (const headers of [{}, { 'x-forwarded-proto': 'http' }] as Record<string, string>[]) {
        const cookies = await authorizeCookies(gw, headers);
        expect(cookies.length).toBeGreaterThan(0);
        for (const c of cookies) expect(c.toLowerCase().split(/;\s*/)).toContain('secure');
      }
    } finally {
      await gw.close();
    }
  });

  it('with an http PUBLIC_URL (a lab) cookies carry no Secure flag, so plain-HTTP browsers keep them', async () => {
    const gw = await startGateway();
    try {
      const cookies = await authorizeCookies(gw);
      expect(cookies.length).toBeGreaterThan(0);
      for (const c of cookies) expect(c.toLowerCase().split(/;\s*/)).not.toContain('secure');
    } finally {
      await gw.close();
    }
  });
});

describe('limits before lookups, buckets per key id', () => {
  let gw: RunningGateway;
  beforeAll(async () => {
    gw = await startGateway({ config: { rateLimitPerMinute: 60, rateLimitBurst: 40 }, clock: () => stopped });
  });
  afterAll(async () => gw?.close());

  it('made-up svc_ keys from one address stop reaching the database once its failure budget is spent', async () => {
    const lookups = countKeyLookups(gw);
    const statuses: number[] = [];
    for (let i = 0; i < 60; i++) statuses.push((await call(gw.url, 'GET', '/api/dedicated', { token: madeUpKey() })).status);
    // The failure budget is 20 (refilling one per 3 s, but the clock stands still): 20 guesses are looked up
    // and refused, the other 40 are refused with 429 before any lookup.
    expect(statuses).toEqual([...Array<number>(20).fill(401), ...Array<number>(40).fill(429)]);
    // Every 401 cost one lookup, every 429 none.
    expect(lookups.n).toBe(20);
  });

  it('... also when the made-up keys arrive all at once', async () => {
    const flood = await startGateway({ testDb: gw.testDb, config: { rateLimitPerMinute: 60, rateLimitBurst: 40, trustProxy: 1 }, clock: () => stopped });
    try {
      const lookups = countKeyLookups(flood);
      const guess = () => call(flood.url, 'GET', '/api/dedicated', { token: madeUpKey(), headers: { 'x-forwarded-for': '198.51.100.77' } });
      const statuses = (await Promise.all(Array.from({ length: 60 }, guess))).map((r) => r.status);
      expect(statuses.every((s) => s === 401 || s === 429)).toBe(true);
      expect(lookups.n).toBe(statuses.filter((s) => s === 401).length);
      expect(lookups.n).toBeLessThanOrEqual(20);
      // A real key's first burst (from another address) is one lookup, not 30 guesses.
      const u = await seedUser(flood.testDb.db);
      const fresh = await Promise.all(
        Array.from({ length: 30 }, () => call(flood.url, 'GET', '/api/dedicated', { token: u.readKey, headers: { 'x-forwarded-for': '203.0.113.50' } })),
      );
      expect(fresh.map((r) => r.status)).toEqual(Array(30).fill(200));
    } finally {
      await flood.close();
    }
  });

  it('one key spelled differently in the header still spends one bucket (per key id)', async () => {
    const limited = await startGateway({ testDb: gw.testDb, config: { rateLimitPerMinute: 1, rateLimitBurst: 6 }, clock: () => stopped });
    try {
      const u = await seedUser(limited.testDb.db);
      const spellings = [`Bearer ${u.readKey}`, `bearer ${u.readKey}`, `BEARER ${u.readKey}`, `Bearer   ${u.readKey}`, ` Bearer ${u.readKey}`, `Bearer ${u.readKey} `];
      for (const authorization of spellings) expect((await call(limited.url, 'GET', '/api/dedicated', { headers: { authorization } })).status).toBe(200);
      // The burst of 6 is spent, whichever spelling comes next.
      for (const authorization of [`bEaReR ${u.readKey}`, `Bearer ${u.readKey}`]) {
        const res = await call(limited.url, 'GET', '/api/dedicated', { headers: { authorization } });
        expect(res.status).toBe(429);
        expect(res.body.error).toBe('rate_limited');
      }
      // The same user's other key has its own bucket.
      expect((await call(limited.url, 'GET', '/api/dedicated', { token: u.writeKey })).status).toBe(200);
    } finally {
      await limited.close();
    }
  });
});

describe('/metrics behind METRICS_TOKEN', () => {
  it('401 without or with a wrong bearer token, 200 with the right one', async () => {
    const token = randomBytes(24).toString('base64url');
    const gw = await startGateway({ config: { metricsToken: token } });
    try {
      for (const headers of [{}, { authorization: `Bearer ${token}x` }, { authorization: `Bearer ${token.slice(0, -1)}` }, { authorization: token }, { authorization: `Basic ${token}` }] as Record<string, string>[]) {
        const res = await call(gw.url, 'GET', '/metrics', { headers });
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ error: 'invalid_token', error_description: expect.any(String) });
        expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
        expect(res.text).not.toContain('tunnelgate_http_requests_total');
      }
      const ok = await call(gw.url, 'GET', '/metrics', { headers: { authorization: `Bearer ${token}` } });
      expect(ok.status).toBe(200);
      expect(ok.text).toContain('tunnelgate_http_requests_total');
    } finally {
      await gw.close();
    }
  });
});

describe('503 edge_unavailable names no internal address', () => {
  it('the body says the edge is unavailable; the SSH host and port go to the log with the request id', async () => {
    const lines: string[] = [];
    const gw = await startGateway({ log: createLogger('info', {}, (l) => lines.push(l)), config: { edgeJobTimeoutMs: 2000 } });
    try {
      // A port nobody listens on: the probe's SSH connection is refused.
      const port = await new Promise<number>((resolve) => {
        const s = net.createServer().listen(0, '127.0.0.1', () => {
          const p = (s.address() as net.AddressInfo).port;
          s.close(() => resolve(p));
        });
      });
      await gw.services.provisioning.start((await loadSecrets(gw.testDb.db, {})).secrets, { worker: false });
      const node = await seedNode(gw.testDb.db, '198.18.7.0/29');
      await gw.testDb.raw.query('update edge_node set ssh_port = $1, host_key = $2 where id = $3', [port, `SHA256:${'A'.repeat(43)}`, node.node_id]);
      await setRate(gw.testDb.db, '90');
      const u = await seedUser(gw.testDb.db);
      const bought = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
      expect(bought.status).toBe(201);
      const id = bought.body.tunnel.id as string;
      await gw.testDb.raw.query(`update tunnel set status = 'provisioned' where id = $1`, [id]);
      const res = await call(gw.url, 'POST', `/api/dedicated/${id}/activate`, { token: u.writeKey, headers: { 'x-request-id': 'probe-503-test' } });
      expect(res.status).toBe(503);
      expect(res.body).toEqual({ error: 'edge_unavailable', error_description: expect.any(String) });
      expect(res.text).not.toContain(String(port));
      expect(res.text).not.toMatch(/127\.0\.0\.1|ECONNREFUSED/);
      const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.request_id === 'probe-503-test' && l.error === 'edge_unavailable');
      expect(logged?.detail).toContain(`127.0.0.1:${port}`);
    } finally {
      await gw.close();
    }
  });
});

describe('Idempotency-Key records expire after 7 days', () => {
  let gw: RunningGateway;
  beforeAll(async () => {
    gw = await startGateway();
    await seedNode(gw.testDb.db, '198.18.9.0/28');
    await setRate(gw.testDb.db, '90');
  });
  afterAll(async () => gw?.close());

  const age = (accountId: string, key: string, days: number) =>
    gw.testDb.raw.query(`update idempotency_record set created_at = now() - make_interval(days => $3) where account_id = $1 and key = $2`, [accountId, key, days]);

  it('a replay within 7 days answers the first purchase; after 7 days the key is new again', async () => {
    const u = await seedUser(gw.testDb.db);
    const body = { name: 'idem-ttl', origin_ip: '8.8.4.4' };
    const buy = () => call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body, headers: { 'idempotency-key': 'order-1' } });
    const first = await buy();
    expect(first.status).toBe(201);
    await age(u.accountId, 'order-1', 6);
    const replay = await buy();
    expect(replay.status).toBe(201);
    expect(replay.body.tunnel.id).toBe(first.body.tunnel.id);
    await age(u.accountId, 'order-1', 8);
    const fresh = await buy();
    expect(fresh.status).toBe(201);
    expect(fresh.body.tunnel.id).not.toBe(first.body.tunnel.id);
    const { rows } = await gw.testDb.raw.query(`select count(*)::int as n from ledger_entry where account_id = $1 and kind = 'purchase'`, [u.accountId]);
    expect(rows[0].n).toBe(2);
    // And the new record is the one replayed from now on.
    expect((await buy()).body.tunnel.id).toBe(fresh.body.tunnel.id);
  });

  it('the purge drops records older than 7 days (by their age index) and keeps the rest', async () => {
    const u = await seedUser(gw.testDb.db);
    for (const key of ['old-1', 'old-2', 'young']) {
      expect((await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4', name: key }, headers: { 'idempotency-key': key } })).status).toBe(201);
    }
    await age(u.accountId, 'old-1', 8);
    await age(u.accountId, 'old-2', 30);
    await age(u.accountId, 'young', 6);
    expect(await purgeExpiredIdempotency(gw.testDb.db)).toBeGreaterThanOrEqual(2);
    const { rows } = await gw.testDb.raw.query('select key from idempotency_record where account_id = $1 order by key', [u.accountId]);
    expect(rows.map((r: { key: string }) => r.key)).toEqual(['young']);
    const idx = await gw.testDb.raw.query(`select indexdef from pg_indexes where tablename = 'idempotency_record' and indexname = 'idempotency_record_created_idx'`);
    expect(idx.rows[0]?.indexdef).toMatch(/\(created_at\)/);
  });

  it('the gateway runs that purge on its own timer, not only at start', async () => {
    const ticking = await startGateway({ testDb: gw.testDb, idempotencyPurgeMs: 200 });
    try {
      const u = await seedUser(gw.testDb.db);
      // Bought after the gateway started (its purge at start is over), then aged past the 7 days.
      expect((await call(ticking.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'stale' } })).status).toBe(201);
      await age(u.accountId, 'stale', 8);
      await until('the timer purged the stale record', async () => (await gw.testDb.raw.query('select 1 from idempotency_record where account_id = $1', [u.accountId])).rowCount === 0);
    } finally {
      await ticking.close();
    }
  });
});
