// The identity provider seen by an independent client library, oauth4webapi, against the real gateway
// on real PostgreSQL: discovery, authorize (login and consent pages driven over HTTP), code exchange
// with PKCE S256, refresh rotation and reuse detection, userinfo per scope, revocation (RFC 7009),
// the tunnel API accepting the access token (every error condition of the identity-provider document's
// section 7, with its exact status, is oidc-oauth4webapi-errors.test.ts). Raw requests are used where a
// status or body must be seen exactly; the library is used where a real client's validation is the point.
import * as oauth from 'oauth4webapi';
import { jwtVerify, SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { authorizeUrl, driveAuthorize, jwtHeader, jwtPayload, pkce, postForm } from '../helpers/oidc.ts';
import { A, api, as, B, client, ep, exchange, expectError, getCode, insecure, INVALID_TOKEN, login, refresh, useOauthWorld, userinfo, w, type Tokens } from './oidc-oauth4webapi-world.ts';

useOauthWorld();

describe('discovery and key set', () => {
  it('lists exactly the endpoints, scopes, response types and PKCE method of the document', async () => {
    const res = await call(w.gw.url, 'GET', `${new URL(w.issuer).pathname.replace(/\/$/, '')}/.well-known/openid-configuration`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const d = res.body as Record<string, unknown>;
    expect(d.issuer).toBe(w.issuer);
    const endpoints = Object.fromEntries(Object.entries(d).filter(([k]) => k.endsWith('_endpoint') || k === 'jwks_uri'));
    expect(endpoints).toEqual({
      authorization_endpoint: ep('authorize'),
      token_endpoint: ep('token'),
      userinfo_endpoint: ep('userinfo'),
      revocation_endpoint: ep('revoke'),
      jwks_uri: ep('jwks'),
    });
    expect(d.response_types_supported).toEqual(['code']);
    expect(d.code_challenge_methods_supported).toEqual(['S256']);
    expect([...(d.scopes_supported as string[])].sort()).toEqual(['email', 'openid', 'profile']);
    if (d.grant_types_supported !== undefined) expect([...(d.grant_types_supported as string[])].sort()).toEqual(['authorization_code', 'refresh_token']);
    expect(d.id_token_signing_alg_values_supported).toEqual(['HS256']);
    // Switched off: DPoP, PAR, RP-initiated logout, dynamic registration, introspection, device flow.
    for (const k of ['dpop_signing_alg_values_supported', 'require_pushed_authorization_requests', 'end_session_endpoint', 'registration_endpoint']) {
      expect(d).not.toHaveProperty(k);
    }
    expect(as.issuer).toBe(w.issuer); // oauth4webapi accepted it too
  });

  it('GET /oauth/jwks is {"keys": []}', async () => {
    const res = await call(w.gw.url, 'GET', new URL(ep('jwks')).pathname);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ keys: [] });
  });

  it('the endpoints that are switched off are not served', async () => {
    const base = new URL(w.issuer).pathname.replace(/\/$/, '');
    for (const p of ['/oauth/par', '/request', '/oauth/session/end', '/session/end', '/oauth/token/introspection', '/oauth/reg', '/oauth/device/auth']) {
      const res = await call(w.gw.url, 'POST', `${base}${p}`, { raw: 'x=1', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
      expect(res.status, p).toBeGreaterThanOrEqual(400);
      expect(res.status, p).toBeLessThan(500);
    }
  });
});

describe('code flow with PKCE S256', () => {
  it('issues the documented token response; the ID token is HS256 with the client secret', async () => {
    const t = await login(A, w.owner);
    // oauth4webapi lower-cases token_type; the wire value is checked in the Basic test below.
    expect(t.token_type).toBe('bearer');
    expect(Number.isInteger(t.expires_in) && t.expires_in > 0).toBe(true);
    expect(t.refresh_token).toMatch(/^rt_[\x21-\x7e]+$/);
    expect(t.scope.split(' ').sort()).toEqual(['email', 'openid', 'profile']);
    // Access token: a JWT, HS256 under the server's key, audience the API (not the client).
    expect(t.access_token.split('.')).toHaveLength(3);
    expect(jwtHeader(t.access_token).alg).toBe('HS256');
    const at = await jwtVerify(t.access_token, await w.accessTokenKey(), { algorithms: ['HS256'] });
    expect(at.payload.aud).toBeDefined();
    expect([at.payload.aud].flat()).not.toContain(A.id);
    expect(at.payload.exp! - at.payload.iat!).toBe(t.expires_in);
    // ID token: HS256 keyed with the client secret (OIDC Core 10.1), iss, aud, exp checked by jose.
    expect(jwtHeader(t.id_token).alg).toBe('HS256');
    const id = await jwtVerify(t.id_token, new TextEncoder().encode(A.secret), { issuer: w.issuer, audience: A.id, algorithms: ['HS256'], requiredClaims: ['exp', 'iat', 'sub'] });
    expect(id.payload.exp! > Date.now() / 1000).toBe(true);
    expect(id.payload.sub).toBe(w.owner.userId);
    // The other client's secret does not verify it, nor does the access-token key.
    await expect(jwtVerify(t.id_token, new TextEncoder().encode(B.secret))).rejects.toThrow();
    await expect(jwtVerify(t.id_token, await w.accessTokenKey())).rejects.toThrow();
  });

  it('the redirect carries state unchanged and a fresh code each time', async () => {
    const a = await getCode(A, w.owner);
    const b = await getCode(A, w.owner);
    expect(a.callback.searchParams.get('state')).toBe(a.params.get('state'));
    expect(a.code).not.toBe(b.code);
  });

  it('HTTP Basic client authentication works for the code exchange and the refresh', async () => {
    const { code, verifier, redirectUri } = await getCode(A, w.owner);
    const res = await postForm(ep('token'), { grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: redirectUri }, { basic: { id: A.id, secret: A.secret } });
    expect(res.status).toBe(200);
    expect(Object.keys(res.body).sort()).toEqual(['access_token', 'expires_in', 'id_token', 'refresh_token', 'scope', 'token_type']);
    expect(res.body.token_type).toBe('Bearer');
    expect(res.headers.get('cache-control')).toMatch(/no-store/);
    const r2 = await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: res.body.refresh_token as string }, { basic: { id: A.id, secret: A.secret } });
    expect(r2.status).toBe(200);
    expect(r2.body.refresh_token).toMatch(/^rt_/);
  });

  it('a code or a refresh token redeemed 10 times at once succeeds exactly once', async () => {
    const { code, verifier, redirectUri } = await getCode(A, w.owner);
    const codeRuns = await Promise.all(Array.from({ length: 10 }, () => exchange(A, code, verifier, redirectUri)));
    expect(codeRuns.filter((r) => r.status === 200)).toHaveLength(1);
    for (const r of codeRuns.filter((x) => x.status !== 200)) expectError(r, 400, 'invalid_grant');
    // The losers' reuse of the code may revoke what the winner got (RFC 6749 4.1.2), so the refresh
    // race runs on a grant of its own.
    const rt = (await login(A, w.owner)).refresh_token;
    const rtRuns = await Promise.all(Array.from({ length: 10 }, () => refresh(A, rt)));
    expect(rtRuns.filter((r) => r.status === 200)).toHaveLength(1);
    for (const r of rtRuns.filter((x) => x.status !== 200)) expectError(r, 400, 'invalid_grant');
  });
});

describe('refresh rotation', () => {
  it('returns a new rt_ token each time; reusing an old one revokes the whole grant', async () => {
    const t0 = await login(A, w.owner);
    const seen = new Set([t0.refresh_token]);
    let rt = t0.refresh_token;
    let at = t0.access_token;
    for (let i = 0; i < 3; i++) {
      const res = await oauth.refreshTokenGrantRequest(as, client(A), oauth.ClientSecretPost(A.secret), rt, insecure);
      const t = (await oauth.processRefreshTokenResponse(as, client(A), res)) as unknown as Tokens;
      expect(t.refresh_token).toMatch(/^rt_/);
      expect(seen.has(t.refresh_token)).toBe(false);
      seen.add(t.refresh_token);
      expect(t.access_token).not.toBe(at);
      expect(t.scope.split(' ').sort()).toEqual(['email', 'openid', 'profile']);
      // A refresh answers the whole token response, with a new ID token under the client secret.
      await jwtVerify(t.id_token, new TextEncoder().encode(A.secret), { issuer: w.issuer, audience: A.id, algorithms: ['HS256'], requiredClaims: ['exp'] });
      // The previous refresh token is revoked immediately (checked on a copy below).
      rt = t.refresh_token;
      at = t.access_token;
    }
    expect((await userinfo(at)).status).toBe(200);
    expect((await api(at)).status).toBe(200);
    // Reuse of the first (rotated) refresh token: invalid_grant ...
    expectError(await refresh(A, t0.refresh_token), 400, 'invalid_grant');
    // ... and the whole grant is gone: the newest refresh token and the newest access token die too.
    expectError(await refresh(A, rt), 400, 'invalid_grant');
    INVALID_TOKEN(await userinfo(at));
    INVALID_TOKEN(await api(at));
  });

  it('the refresh through oauth4webapi surfaces invalid_grant with status 400', async () => {
    const t = await login(A, w.owner);
    await refresh(A, t.refresh_token);
    const res = await oauth.refreshTokenGrantRequest(as, client(A), oauth.ClientSecretBasic(A.secret), t.refresh_token, insecure);
    const err = await oauth.processRefreshTokenResponse(as, client(A), res).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(oauth.ResponseBodyError);
    expect({ status: (err as oauth.ResponseBodyError).status, error: (err as oauth.ResponseBodyError).error }).toEqual({ status: 400, error: 'invalid_grant' });
  });
});

describe('userinfo', () => {
  const cases: Array<[string, string[]]> = [
    ['openid', ['sub']],
    ['openid profile', ['name', 'picture', 'sub']],
    ['openid email', ['email', 'email_verified', 'sub']],
    ['openid profile email', ['email', 'email_verified', 'name', 'picture', 'sub']],
  ];
  it.each(cases)('scope %s gives exactly %j', async (scope, claims) => {
    const u = await w.newUser();
    const t = await login(A, u, scope);
    expect(t.scope.split(' ').sort()).toEqual(scope.split(' ').sort());
    const res = await oauth.userInfoRequest(as, client(A), t.access_token, insecure);
    const info = await oauth.processUserInfoResponse(as, client(A), u.userId, res);
    expect(Object.keys(info).sort()).toEqual(claims);
    const expected: Record<string, unknown> = { sub: u.userId, name: u.name, picture: u.picture, email: u.email };
    for (const k of claims) if (k !== 'email_verified') expect(info[k], k).toBe(expected[k]);
    if (claims.includes('email_verified')) expect(typeof info.email_verified).toBe('boolean');
  });

  it('401 invalid_token for a missing, malformed, tampered, foreign-key, expired or revoked token', async () => {
    const t = await login(A, w.owner);
    INVALID_TOKEN(await userinfo(undefined));
    INVALID_TOKEN(await userinfo('garbage'));
    INVALID_TOKEN(await userinfo(t.access_token, 'Basic'));
    // One flipped character of the signature.
    const sig = t.access_token.slice(-10);
    INVALID_TOKEN(await userinfo(t.access_token.slice(0, -10) + [...sig].reverse().join('')));
    // The ID token and the refresh token are not access tokens.
    INVALID_TOKEN(await userinfo(t.id_token));
    INVALID_TOKEN(await userinfo(t.refresh_token));
    // The same claims signed with another key, and with the right key but already expired.
    const claims = jwtPayload(t.access_token);
    const now = Math.floor(Date.now() / 1000);
    const resign = (payload: Record<string, unknown>, key: Uint8Array) => new SignJWT(payload).setProtectedHeader(jwtHeader(t.access_token) as { alg: string }).sign(key);
    INVALID_TOKEN(await userinfo(await resign(claims, new Uint8Array(32).fill(7))));
    const expired = await resign({ ...claims, iat: now - 7200, exp: now - 3600 }, await w.accessTokenKey());
    INVALID_TOKEN(await userinfo(expired));
    INVALID_TOKEN(await api(expired));
    // Positive control: re-signing the unchanged claims with the real key is accepted, so the two
    // refusals above are about the key and the expiry, not about re-signing.
    expect((await userinfo(await resign(claims, await w.accessTokenKey()))).status).toBe(200);
    // Revoked (through its grant).
    expect((await postForm(ep('revoke'), { token: t.access_token, client_id: A.id, client_secret: A.secret })).status).toBe(200);
    INVALID_TOKEN(await userinfo(t.access_token));
  });
});

describe('revocation (RFC 7009)', () => {
  it('answers 200 for unknown tokens, with client authentication in the body or as Basic', async () => {
    for (const token of ['rt_unknown', 'not-a-token', 'eyJhbGciOiJIUzI1NiJ9.e30.xxxx']) {
      expect((await postForm(ep('revoke'), { token, client_id: A.id, client_secret: A.secret })).status).toBe(200);
      expect((await postForm(ep('revoke'), { token }, { basic: { id: A.id, secret: A.secret } })).status).toBe(200);
    }
    // oauth4webapi's own revocation request and response processing, both auth methods.
    for (const auth of [oauth.ClientSecretPost(A.secret), oauth.ClientSecretBasic(A.secret)]) {
      await expect(oauth.processRevocationResponse(await oauth.revocationRequest(as, client(A), auth, 'rt_nothing', insecure))).resolves.toBeUndefined();
    }
  });

  it.each(['body', 'basic'] as const)('revokes a refresh token (client auth in the %s)', async (how) => {
    const t = await login(A, w.owner);
    const res = how === 'body'
      ? await postForm(ep('revoke'), { token: t.refresh_token, token_type_hint: 'refresh_token', client_id: A.id, client_secret: A.secret })
      : await postForm(ep('revoke'), { token: t.refresh_token }, { basic: { id: A.id, secret: A.secret } });
    expect(res.status).toBe(200);
    expectError(await refresh(A, t.refresh_token), 400, 'invalid_grant');
    // RFC 7009 2.1: revoking a refresh token also invalidates the access tokens of its grant.
    INVALID_TOKEN(await userinfo(t.access_token));
  });

  it('revokes a JWT access token by revoking its grant: userinfo and the tunnel API answer 401', async () => {
    const t = await login(A, w.owner);
    expect((await api(t.access_token)).status).toBe(200);
    const res = await oauth.revocationRequest(as, client(A), oauth.ClientSecretBasic(A.secret), t.access_token, { ...insecure, additionalParameters: { token_type_hint: 'access_token' } });
    await oauth.processRevocationResponse(res);
    INVALID_TOKEN(await userinfo(t.access_token));
    INVALID_TOKEN(await api(t.access_token));
    // The grant is gone, so its refresh token is too.
    expectError(await refresh(A, t.refresh_token), 400, 'invalid_grant');
  });

  it('another client cannot revoke a token it was not issued', async () => {
    const t = await login(A, w.owner);
    const res = await postForm(ep('revoke'), { token: t.refresh_token, client_id: B.id, client_secret: B.secret });
    expect(res.status).toBeLessThan(500);
    const res2 = await postForm(ep('revoke'), { token: t.access_token, client_id: B.id, client_secret: B.secret });
    expect(res2.status).toBeLessThan(500);
    expect((await userinfo(t.access_token)).status).toBe(200);
    expect((await refresh(A, t.refresh_token)).status).toBe(200);
  });

  it('refuses a revocation with wrong client credentials (the token stays valid)', async () => {
    const t = await login(A, w.owner);
    const res = await postForm(ep('revoke'), { token: t.refresh_token, client_id: A.id, client_secret: B.secret });
    expectError(res, 401, 'invalid_client');
    expect((await refresh(A, t.refresh_token)).status).toBe(200);
  });
});

describe('the tunnel API accepts the access token', () => {
  it('role owner reads and buys; role viewer reads and gets 403 insufficient_scope on writes', async () => {
    const owner = await login(A, w.owner);
    const list = await api(owner.access_token);
    expect(list.status).toBe(200);
    const bought = await api(owner.access_token, 'POST', { name: 'oidc', origin_ip: '8.8.4.4' });
    expect(bought.status).toBe(201);
    const mine = await api(owner.access_token);
    expect(JSON.stringify(mine.body)).toContain(bought.body.tunnel.id);

    const viewer = await login(A, w.viewer);
    expect((await api(viewer.access_token)).status).toBe(200);
    const refused = await api(viewer.access_token, 'POST', { name: 'nope', origin_ip: '8.8.4.4' });
    expectError(refused, 403, 'insufficient_scope');
    // The viewer belongs to another account: the owner's tunnel is not visible to it.
    expect(JSON.stringify((await api(viewer.access_token)).body)).not.toContain(bought.body.tunnel.id);
  });

  it('GraphQL takes the same token: me names the signed-in user; a viewer mutation is insufficient_scope', async () => {
    const gql = (token: string, query: string) => call(w.gw.url, 'POST', '/graphql', { token, body: { query } });
    const owner = await login(A, w.owner);
    const me = await gql(owner.access_token, '{ me { userId email role permission } }');
    expect(me.body).toEqual({ data: { me: { userId: w.owner.userId, email: w.owner.email, role: 'OWNER', permission: 'WRITE' } } });
    const viewer = await login(A, w.viewer);
    expect((await gql(viewer.access_token, '{ me { userId permission } }')).body.data.me).toEqual({ userId: w.viewer.userId, permission: 'READ' });
    const refused = await gql(viewer.access_token, 'mutation { purchaseTunnel(input: { originIp: "8.8.4.4" }) { tunnel { id } } }');
    expect(refused.body.errors?.[0]?.extensions?.code).toBe('insufficient_scope');
    // Revoked: the token stops working on GraphQL too.
    await postForm(ep('revoke'), { token: owner.access_token, client_id: A.id, client_secret: A.secret });
    const after = await gql(owner.access_token, '{ me { userId } }');
    expect(after.status === 401 || after.body.errors?.[0]?.extensions?.code === 'invalid_token').toBe(true);
  });
});

describe('PKCE', () => {
  it('authorize refuses code_challenge_method=plain and a missing challenge: no code reaches the client', async () => {
    const p = pkce();
    for (const [challenge, method] of [[p.verifier, 'plain'], [undefined, undefined], [p.challenge, undefined], [p.challenge, 'S512']] as const) {
      const url = authorizeUrl(ep('authorize'), { clientId: A.id, redirectUri: A.redirectUris[0]!, state: 's1', challenge, method });
      const r = await driveAuthorize(url, w.owner);
      const label = `challenge=${challenge ? 'set' : 'none'} method=${method}`;
      if (r.callback) {
        expect(r.callback.searchParams.get('code'), label).toBeNull();
        expect(r.callback.searchParams.get('error'), label).toBe('invalid_request');
      } else {
        expect(r.last!.status, label).toBeGreaterThanOrEqual(400);
      }
    }
  });

  it('an unregistered redirect_uri never receives a redirect (no code, no error redirect)', async () => {
    for (const redirectUri of ['https://attacker.example/cb', `${A.redirectUris[0]}/extra`, A.redirectUris[0]!.toUpperCase()]) {
      const p = pkce();
      const url = authorizeUrl(ep('authorize'), { clientId: A.id, redirectUri, state: 's', challenge: p.challenge, method: 'S256' });
      const res = await fetch(url, { redirect: 'manual' });
      expect(res.status, redirectUri).toBe(400);
      expect(res.headers.get('location'), redirectUri).toBeNull();
    }
  });

  it('a wrong or missing code_verifier is invalid_grant: PKCE verification failed', async () => {
    const a = await getCode(A, w.owner);
    expectError(await exchange(A, a.code, pkce().verifier, a.redirectUri), 400, 'invalid_grant', /PKCE verification failed/i);
    const b = await getCode(A, w.owner);
    expectError(await exchange(A, b.code, undefined, b.redirectUri), 400, 'invalid_grant', /PKCE verification failed/i);
    // The challenge itself is not the verifier (what a `plain` client would send).
    const c = await getCode(A, w.owner);
    const challenge = (await import('node:crypto')).createHash('sha256').update(c.verifier).digest('base64url');
    expectError(await exchange(A, c.code, challenge, c.redirectUri), 400, 'invalid_grant', /PKCE verification failed/i);
  });
});

describe('grant types', () => {
  it.each(['client_credentials', 'password', 'implicit', 'urn:ietf:params:oauth:grant-type:device_code', 'urn:ietf:params:oauth:grant-type:token-exchange', 'urn:openid:params:grant-type:ciba', 'urn:ietf:params:oauth:grant-type:jwt-bearer', 'nonsense'])(
    '%s is unsupported_grant_type (400)',
    async (grant) => {
      const res = await postForm(ep('token'), { grant_type: grant, client_id: A.id, client_secret: A.secret, username: w.owner.email, password: w.owner.password, scope: 'openid' });
      expectError(res, 400, 'unsupported_grant_type');
    },
  );

  it('a missing grant_type or code is invalid_request (400)', async () => {
    expectError(await postForm(ep('token'), { client_id: A.id, client_secret: A.secret }), 400, 'invalid_request');
    expectError(await postForm(ep('token'), { grant_type: 'authorization_code', redirect_uri: A.redirectUris[0], code_verifier: pkce().verifier, client_id: A.id, client_secret: A.secret }), 400, 'invalid_request');
    expectError(await postForm(ep('token'), { grant_type: 'refresh_token', client_id: A.id, client_secret: A.secret }), 400, 'invalid_request');
  });
});
