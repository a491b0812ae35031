// The issuer's endpoints against the identity-provider document, from the outside over HTTP:
// exactly the listed endpoints, every error of section 7, userinfo by scope, revocation of refresh
// and JWT access tokens, access tokens at the API with role-based permission, and rate limits.
import { randomBytes } from 'node:crypto';
import { jwtVerify, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSecrets } from '../../server/secrets.ts';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { authorizeUrl, exchange, Jar, newClient, newUser, pkcePair, signIn, token, type Client } from '../helpers/oidc-login.ts';

let gw: RunningGateway;
let c: Client;
let owner: Awaited<ReturnType<typeof newUser>>;
let accessKey: Buffer;

beforeAll(async () => {
  gw = await startGateway();
  c = await newClient(gw.testDb.db);
  owner = await newUser(gw.testDb.db, 'owner');
  accessKey = (await loadSecrets(gw.testDb.db, {})).secrets.accessTokenKey;
});
afterAll(async () => {
  await gw?.close();
});

/** A JSON response body, loosely typed for assertions. */
const body = async (r: Response) => (await r.json()) as Record<string, any>;
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });
const basic = (id: string, secret: string) => ({ authorization: `Basic ${Buffer.from(`${encodeURIComponent(id)}:${encodeURIComponent(secret)}`).toString('base64')}` });

async function tokens(client = c, user = owner, scope?: string) {
  const s = await signIn(gw.url, client, user, new Jar(), scope ? { scope } : {});
  const ex = await exchange(gw.url, client, s.code, s.verifier);
  expect(ex.status).toBe(200);
  return ex.body;
}

async function revoke(form: Record<string, string>, headers: Record<string, string> = {}) {
  const res = await fetch(`${gw.url}/oauth/revoke`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json', ...headers },
    body: new URLSearchParams(form).toString(),
  });
  const text = await res.text();
  return { status: res.status, text, body: text ? JSON.parse(text) : null };
}

describe('discovery and key set', () => {
  it('lists exactly the document\'s endpoints and nothing that was switched off', async () => {
    const d = (await (await fetch(`${gw.url}/.well-known/openid-configuration`)).json()) as Record<string, any>;
    expect(d.issuer).toBe(gw.url);
    expect({
      authorization_endpoint: d.authorization_endpoint,
      token_endpoint: d.token_endpoint,
      userinfo_endpoint: d.userinfo_endpoint,
      revocation_endpoint: d.revocation_endpoint,
      jwks_uri: d.jwks_uri,
    }).toEqual({
      authorization_endpoint: `${gw.url}/oauth/authorize`,
      token_endpoint: `${gw.url}/oauth/token`,
      userinfo_endpoint: `${gw.url}/oauth/userinfo`,
      revocation_endpoint: `${gw.url}/oauth/revoke`,
      jwks_uri: `${gw.url}/oauth/jwks`,
    });
    expect(Object.keys(d).filter((k) => k.endsWith('_endpoint')).sort()).toEqual(['authorization_endpoint', 'revocation_endpoint', 'token_endpoint', 'userinfo_endpoint']);
    expect(d.code_challenge_methods_supported).toEqual(['S256']);
    expect(d.response_types_supported).toEqual(['code']);
    expect(d.grant_types_supported.sort()).toEqual(['authorization_code', 'refresh_token']);
    expect(d.scopes_supported.sort()).toEqual(['email', 'openid', 'profile']);
    expect(d.id_token_signing_alg_values_supported).toEqual(['HS256']);
    for (const off of ['dpop_signing_alg_values_supported', 'pushed_authorization_request_endpoint', 'end_session_endpoint', 'introspection_endpoint', 'registration_endpoint']) {
      expect(d[off]).toBeUndefined();
    }
  });

  it('/oauth/jwks is an empty key set', async () => {
    const res = await fetch(`${gw.url}/oauth/jwks`);
    expect(res.status).toBe(200);
    expect(await body(res)).toEqual({ keys: [] });
  });

  it('answers nothing else: other well-known and oidc-provider paths are 404', async () => {
    for (const p of ['/.well-known/oauth-authorization-server', '/oauth/introspect', '/session/end', '/oauth/par', '/request', '/oauth/reg', '/oauth/anything']) {
      const res = await fetch(`${gw.url}${p}`);
      expect([p, res.status]).toEqual([p, 404]);
      expect((await body(res)).error).toBe('not_found');
    }
  });
});

describe('authorize', () => {
  const redirectError = async (extra: Record<string, string>, drop: string[] = []) => {
    const u = new URL(authorizeUrl(gw.url, c, pkcePair().challenge, extra));
    for (const d of drop) u.searchParams.delete(d);
    const res = await fetch(u, { redirect: 'manual' });
    const loc = new URL(res.headers.get('location')!, gw.url);
    return loc;
  };

  it('refuses a request without PKCE, and the plain method', async () => {
    const none = await redirectError({}, ['code_challenge', 'code_challenge_method']);
    expect(none.searchParams.get('error')).toBe('invalid_request');
    expect(none.href.startsWith(c.redirectUri)).toBe(true);
    const plain = await redirectError({ code_challenge_method: 'plain' });
    expect(plain.searchParams.get('error')).toBe('invalid_request');
  });

  it('refuses response types other than code, and an unregistered redirect_uri with a page (no redirect)', async () => {
    const tokenType = await redirectError({ response_type: 'token' });
    expect(tokenType.searchParams.get('error') ?? new URLSearchParams(tokenType.hash.slice(1)).get('error')).toMatch(/unsupported_response_type|invalid_request/);
    const res = await fetch(authorizeUrl(gw.url, { ...c, redirectUri: 'http://127.0.0.1:9/not-registered' }, pkcePair().challenge), { redirect: 'manual', headers: { accept: 'text/html' } });
    expect(res.status).toBe(400);
    expect(res.headers.get('location')).toBeNull();
    expect(await res.text()).toMatch(/redirect_uri/);
  });
});

describe('token endpoint errors (section 7)', () => {
  it('invalid_grant: code exchanged twice, redirect_uri differs, client differs, expired, PKCE fails', async () => {
    const other = await newClient(gw.testDb.db);
    const s = await signIn(gw.url, c, owner);
    // PKCE first: a failed redemption does not burn the code.
    const wrongVerifier = await exchange(gw.url, c, s.code, pkcePair().verifier);
    expect([wrongVerifier.status, wrongVerifier.body.error]).toEqual([400, 'invalid_grant']);
    expect(wrongVerifier.body.error_description).toMatch(/^PKCE verification failed/);
    const shortVerifier = await exchange(gw.url, c, s.code, 'short');
    expect([shortVerifier.status, shortVerifier.body.error]).toEqual([400, 'invalid_grant']);
    expect(shortVerifier.body.error_description).toMatch(/^PKCE verification failed/);
    const lost = await token(gw.url, c, { grant_type: 'authorization_code', code: s.code, redirect_uri: c.redirectUri });
    expect([lost.status, lost.body.error]).toEqual([400, 'invalid_grant']);
    expect(lost.body.error_description).toMatch(/^PKCE verification failed/);
    const uri = await token(gw.url, c, { grant_type: 'authorization_code', code: s.code, redirect_uri: `${c.redirectUri}/x`, code_verifier: s.verifier });
    expect([uri.status, uri.body.error]).toEqual([400, 'invalid_grant']);
    const wrongClient = await exchange(gw.url, { ...other, redirectUri: c.redirectUri }, s.code, s.verifier);
    expect([wrongClient.status, wrongClient.body.error]).toEqual([400, 'invalid_grant']);
    const ok = await exchange(gw.url, c, s.code, s.verifier);
    expect(ok.status).toBe(200);
    const twice = await exchange(gw.url, c, s.code, s.verifier);
    expect([twice.status, twice.body.error]).toEqual([400, 'invalid_grant']);
    // Reusing a code revokes what it issued.
    expect((await fetch(`${gw.url}/oauth/userinfo`, { headers: bearer(ok.body.access_token!) })).status).toBe(401);

    const late = await signIn(gw.url, c, owner);
    await gw.testDb.raw.query(
      `update oidc_payload set payload = jsonb_set(payload, '{exp}', to_jsonb(extract(epoch from now())::int - 1)) where kind = 'AuthorizationCode' and id = $1`,
      [late.code],
    );
    const expired = await exchange(gw.url, c, late.code, late.verifier);
    expect([expired.status, expired.body.error]).toEqual([400, 'invalid_grant']);
  });

  it('invalid_grant for a refresh token reused after rotation (and the whole grant goes), or revoked', async () => {
    const t = await tokens();
    const rotated = await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: t.refresh_token! });
    expect(rotated.status).toBe(200);
    expect(rotated.body.refresh_token).toMatch(/^rt_[A-Za-z0-9_-]{40,}$/);
    const reuse = await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: t.refresh_token! });
    expect([reuse.status, reuse.body.error]).toEqual([400, 'invalid_grant']);
    // The reuse revoked the grant: the rotated refresh token and the new access token are dead too.
    const next = await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: rotated.body.refresh_token! });
    expect(next.body.error).toBe('invalid_grant');
    expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(rotated.body.access_token!) })).status).toBe(401);
  });

  it('invalid_client: wrong secret, unknown client, another application\'s secret (body or Basic)', async () => {
    const other = await newClient(gw.testDb.db);
    const form = { grant_type: 'refresh_token', refresh_token: 'rt_x' };
    const wrong = await token(gw.url, c, form, 'not-the-secret');
    expect([wrong.status, wrong.body.error]).toEqual([401, 'invalid_client']);
    const unknown = await token(gw.url, { ...c, id: 'cl_aaaaaaaaaaaaaaaa' }, form);
    expect([unknown.status, unknown.body.error]).toEqual([401, 'invalid_client']);
    const crossed = await token(gw.url, c, form, other.secret);
    expect([crossed.status, crossed.body.error]).toEqual([401, 'invalid_client']);
    const res = await fetch(`${gw.url}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...basic(c.id, other.secret) },
      body: new URLSearchParams(form).toString(),
    });
    expect([res.status, (await body(res)).error]).toEqual([401, 'invalid_client']);
  });

  it('invalid_client (401) when no credentials are sent, or Basic with an empty secret (RFC 6749 5.2)', async () => {
    const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'rt_x' }).toString();
    for (const [path, headers] of [
      ['/oauth/token', {}],
      ['/oauth/token', basic(c.id, '')],
      ['/oauth/revoke', {}],
      ['/oauth/revoke', basic(c.id, '')],
    ] as const) {
      const res = await fetch(`${gw.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
        body: path === '/oauth/revoke' ? new URLSearchParams({ token: 'rt_x' }).toString() : form,
      });
      expect([path, res.status, (await body(res)).error]).toEqual([path, 401, 'invalid_client']);
      expect(res.headers.get('www-authenticate')).toMatch(/^Basic/);
    }
  });

  it('unsupported_grant_type and invalid_request', async () => {
    for (const gt of ['client_credentials', 'password', 'urn:ietf:params:oauth:grant-type:device_code', 'implicit']) {
      const r = await token(gw.url, c, { grant_type: gt });
      expect([gt, r.status, r.body.error]).toEqual([gt, 400, 'unsupported_grant_type']);
    }
    const missing = await token(gw.url, c, { grant_type: 'authorization_code', redirect_uri: c.redirectUri });
    expect([missing.status, missing.body.error]).toEqual([400, 'invalid_request']);
    const noType = await token(gw.url, c, {});
    expect([noType.status, noType.body.error]).toEqual([400, 'invalid_request']);
  });

  it('Basic credentials work as well as body credentials', async () => {
    const s = await signIn(gw.url, c, owner);
    const res = await fetch(`${gw.url}/oauth/token`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', ...basic(c.id, c.secret) },
      body: new URLSearchParams({ grant_type: 'authorization_code', code: s.code, redirect_uri: c.redirectUri, code_verifier: s.verifier }).toString(),
    });
    expect(res.status).toBe(200);
  });
});

describe('tokens', () => {
  it('access token: HS256 JWT for the API with the grant id; ID token: HS256 under the client secret', async () => {
    const t = await tokens();
    expect(t.token_type).toBe('Bearer');
    expect(Number(t.expires_in)).toBeGreaterThan(0);
    expect(t.scope).toBe('openid profile email');
    const at = await jwtVerify(t.access_token!, accessKey, { issuer: gw.url, audience: `${gw.services.config.publicUrl}/api`, algorithms: ['HS256'] });
    expect(at.payload.sub).toBe(owner.id);
    expect(at.payload.client_id).toBe(c.id);
    expect(typeof at.payload.gid).toBe('string');
    const id = await jwtVerify(t.id_token!, Buffer.from(c.secret), { issuer: gw.url, audience: c.id, algorithms: ['HS256'] });
    expect(id.payload.sub).toBe(owner.id);
    expect(typeof id.payload.exp).toBe('number');
  });
});

describe('userinfo', () => {
  it('returns the claims of the granted scopes', async () => {
    const all = await tokens();
    const res = await fetch(`${gw.url}/oauth/userinfo`, { headers: bearer(all.access_token!) });
    expect(res.status).toBe(200);
    expect(await body(res)).toEqual({ sub: owner.id, name: 'Focused User', picture: 'https://pictures.example.test/a.png', email: owner.email, email_verified: true });

    const u = await newUser(gw.testDb.db);
    const openidOnly = await tokens(c, u, 'openid');
    expect(openidOnly.scope).toBe('openid');
    expect(await (await fetch(`${gw.url}/oauth/userinfo`, { headers: bearer(openidOnly.access_token!) })).json()).toEqual({ sub: u.id });
    const u2 = await newUser(gw.testDb.db);
    const emailOnly = await tokens(c, u2, 'openid email');
    expect(await (await fetch(`${gw.url}/oauth/userinfo`, { headers: bearer(emailOnly.access_token!) })).json()).toEqual({ sub: u2.id, email: u2.email, email_verified: true });
  });

  it('401 invalid_token for a missing, malformed, forged, expired or revoked token', async () => {
    const t = await tokens();
    const expired = await new SignJWT({ client_id: c.id, scope: 'openid', gid: 'x' })
      .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt' })
      .setSubject(owner.id)
      .setIssuer(gw.url)
      .setAudience(`${gw.services.config.publicUrl}/api`)
      .setIssuedAt(Math.floor(Date.now() / 1000) - 3600)
      .setExpirationTime(Math.floor(Date.now() / 1000) - 60)
      .sign(accessKey);
    const forged = `${t.access_token!.split('.').slice(0, 2).join('.')}.${randomBytes(32).toString('base64url')}`;
    await revoke({ token: t.access_token!, client_id: c.id, client_secret: c.secret });
    for (const [what, headers] of [
      ['missing', {}],
      ['malformed', bearer('nonsense')],
      ['forged', bearer(forged)],
      ['expired', bearer(expired)],
      ['revoked', bearer(t.access_token!)],
    ] as const) {
      const res = await fetch(`${gw.url}/oauth/userinfo`, { headers });
      expect([what, res.status]).toEqual([what, 401]);
      expect((await body(res)).error).toBe('invalid_token');
      expect(res.headers.get('www-authenticate')).toMatch(/^Bearer/);
    }
  });
});

describe('revoke (RFC 7009)', () => {
  it('200 for an unknown token; refresh tokens; JWT access tokens by their grant; Basic or body auth', async () => {
    expect((await revoke({ token: 'rt_unknown', client_id: c.id, client_secret: c.secret })).status).toBe(200);
    expect((await revoke({ token: 'eyJhbGciOiJIUzI1NiJ9.e30.AAAA', client_id: c.id, client_secret: c.secret })).status).toBe(200);

    const a = await tokens();
    const r1 = await revoke({ token: a.refresh_token! }, basic(c.id, c.secret));
    expect([r1.status, r1.text]).toEqual([200, '']);
    expect((await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: a.refresh_token! })).body.error).toBe('invalid_grant');

    const b = await tokens();
    const r2 = await revoke({ token: b.access_token!, client_id: c.id, client_secret: c.secret });
    expect(r2.status).toBe(200);
    expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(b.access_token!) })).status).toBe(401);
    expect((await fetch(`${gw.url}/oauth/userinfo`, { headers: bearer(b.access_token!) })).status).toBe(401);
    expect((await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: b.refresh_token! })).body.error).toBe('invalid_grant');
  });

  it('invalid_client for bad credentials; another client cannot revoke this client\'s tokens', async () => {
    const t = await tokens();
    const bad = await revoke({ token: t.access_token!, client_id: c.id, client_secret: 'wrong' });
    expect([bad.status, bad.body.error]).toEqual([401, 'invalid_client']);
    const other = await newClient(gw.testDb.db);
    // RFC 7009 2.1: the token was not issued to the caller, so the request is refused.
    const foreign = await revoke({ token: t.access_token!, client_id: other.id, client_secret: other.secret });
    expect([foreign.status, foreign.body.error]).toEqual([400, 'invalid_request']);
    const foreignRt = await revoke({ token: t.refresh_token!, client_id: other.id, client_secret: other.secret });
    expect([foreignRt.status, foreignRt.body.error]).toEqual([400, 'invalid_request']);
    expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(t.access_token!) })).status).toBe(200);
    expect((await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: t.refresh_token! })).status).toBe(200);
  });
});

describe('access tokens at the API', () => {
  it('owner may write, viewer may only read (REST and GraphQL)', async () => {
    const viewer = await newUser(gw.testDb.db, 'viewer');
    const v = await tokens(c, viewer);
    const o = await tokens();
    const del = (t: string) => fetch(`${gw.url}/api/dedicated/00000000-0000-4000-8000-000000000000`, { method: 'DELETE', headers: bearer(t) });
    expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(v.access_token!) })).status).toBe(200);
    const vDel = await del(v.access_token!);
    expect([vDel.status, (await body(vDel)).error]).toEqual([403, 'insufficient_scope']);
    const oDel = await del(o.access_token!);
    expect([oDel.status, (await body(oDel)).error]).toEqual([404, 'not_found']);
    const me = await fetch(`${gw.url}/graphql`, {
      method: 'POST',
      headers: { ...bearer(v.access_token!), 'content-type': 'application/json' },
      body: JSON.stringify({ query: '{ me { accountId role } }' }),
    });
    expect((await body(me)).data.me).toEqual({ accountId: viewer.accountId, role: 'VIEWER' });
  });

  it('a token signed with another key, for another audience, or from another issuer is refused', async () => {
    const make = (key: Buffer, aud: string, iss: string) =>
      new SignJWT({ client_id: c.id, scope: 'openid', gid: 'g' })
        .setProtectedHeader({ alg: 'HS256', typ: 'at+jwt' })
        .setSubject(owner.id)
        .setIssuer(iss)
        .setAudience(aud)
        .setIssuedAt()
        .setExpirationTime('5m')
        .sign(key);
    const aud = `${gw.services.config.publicUrl}/api`;
    for (const t of [await make(randomBytes(32), aud, gw.url), await make(accessKey, 'https://elsewhere.example/api', gw.url), await make(accessKey, aud, 'https://other-issuer.example')]) {
      expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(t) })).status).toBe(401);
    }
  });
});

describe('metrics', () => {
  it('label issuer requests by route, with uids folded', async () => {
    await tokens();
    const text = await (await fetch(`${gw.url}/metrics`)).text();
    for (const route of ['/oauth/authorize', '/oauth/authorize/:uid', '/interaction/:uid', '/interaction/:uid/login', '/interaction/:uid/consent', '/oauth/token']) {
      expect(text).toContain(`route="${route}"`);
    }
    expect(text).not.toMatch(/route="\/interaction\/[A-Za-z0-9_-]{20,}/);
  });
});

describe('rate limits on the token endpoint', () => {
  it('per client address: 429 with Retry-After once the budget is spent', async () => {
    const small = await startGateway({ config: { rateLimitPerMinute: 1, rateLimitBurst: 3 } });
    try {
      const client = await newClient(small.testDb.db);
      const statuses: number[] = [];
      let retryAfter: string | null = null;
      for (let i = 0; i < 5; i++) {
        const r = await token(small.url, client, { grant_type: 'refresh_token', refresh_token: 'rt_nothing' });
        statuses.push(r.status);
        if (r.status === 429) retryAfter = r.headers.get('retry-after');
      }
      expect(statuses).toEqual([400, 400, 400, 429, 429]);
      expect(Number(retryAfter)).toBeGreaterThan(0);
    } finally {
      await small.close();
    }
  });

  it('failed client authentications: an address that keeps failing is refused before any secret is checked', async () => {
    const saved = process.env.TRUST_PROXY;
    process.env.TRUST_PROXY = '1';
    // Failures allowed per address: max(20, burst / 5) = 20 here, refilling 20 a minute.
    const small = await startGateway({ config: { rateLimitPerMinute: 60, rateLimitBurst: 100, trustProxy: 1 } });
    try {
      const client = await newClient(small.testDb.db);
      const call = (secret: string, ip: string) =>
        fetch(`${small.url}/oauth/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': ip },
          body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'rt_nothing', client_id: client.id, client_secret: secret }).toString(),
        });
      const statuses: number[] = [];
      for (let i = 0; i < 60 && statuses.at(-1) !== 429; i++) statuses.push((await call(`guess-${i}`, '198.51.100.9')).status);
      // 20 failures spend the budget (refills only add more); the 21st or a later one, still answered
      // 401, blocks the address, and the next attempt is refused.
      expect(statuses.at(-1)).toBe(429);
      expect(statuses.length).toBeGreaterThanOrEqual(22);
      expect(statuses.slice(0, -1).every((x) => x === 401)).toBe(true);
      // Even the right secret is refused from there now (the guess is not evaluated)...
      const right = await call(client.secret, '198.51.100.9');
      expect(right.status).toBe(429);
      expect(Number(right.headers.get('retry-after'))).toBeGreaterThan(0);
      // ...while the real client from its own address goes on.
      expect((await call(client.secret, '192.0.2.9')).status).toBe(400);
    } finally {
      await small.close();
      if (saved === undefined) delete process.env.TRUST_PROXY;
      else process.env.TRUST_PROXY = saved;
    }
  });

  it('per client: the same budget once the client is authenticated, from whatever address', async () => {
    const saved = process.env.TRUST_PROXY;
    process.env.TRUST_PROXY = '1';
    const small = await startGateway({ config: { rateLimitPerMinute: 1, rateLimitBurst: 3, trustProxy: 1 } });
    try {
      const client = await newClient(small.testDb.db);
      const other = await newClient(small.testDb.db);
      const call = (cl: Client, i: number) =>
        fetch(`${small.url}/oauth/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': `198.51.100.${i + 1}` },
          body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: 'rt_nothing', client_id: cl.id, client_secret: cl.secret }).toString(),
        });
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await call(client, i);
        statuses.push(r.status);
        const b = await body(r);
        if (r.status === 429) {
          expect(b.error).toBe('rate_limited');
          expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
        }
      }
      expect(statuses).toEqual([400, 400, 400, 429, 429]);
      // Another client is unaffected.
      expect((await call(other, 10)).status).toBe(400);
    } finally {
      await small.close();
      if (saved === undefined) delete process.env.TRUST_PROXY;
      else process.env.TRUST_PROXY = saved;
    }
  });
});
