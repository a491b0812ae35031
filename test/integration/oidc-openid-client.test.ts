// The identity provider seen by openid-client v6 (a second, independent client library) against the
// real gateway on real PostgreSQL: the whole flow as an application would write it, the library's
// view of the section-7 errors, and `client rotate-secret` run through the real admin CLI while a
// client holds tokens and a pending code (a client's access ends at once).
import * as oidc from 'openid-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { CookieJar, driveAuthorize, postForm, type Credentials } from '../helpers/oidc.ts';
import { adminCli, startOidcWorld, type OidcWorld, type TestClient } from '../helpers/oidc-fixture.ts';

let w: OidcWorld;

/** An application's configuration: discovery through the library, credentials in the body or as Basic. */
const configure = (c: Pick<TestClient, 'id' | 'secret'>, auth: 'post' | 'basic' = 'post') =>
  oidc.discovery(new URL(w.issuer), c.id, { client_secret: c.secret }, auth === 'post' ? oidc.ClientSecretPost(c.secret) : oidc.ClientSecretBasic(c.secret), {
    execute: [oidc.allowInsecureRequests],
  });

interface Pending {
  callback: URL;
  verifier: string;
  state: string;
}

/** The application's login redirect, the user's trip through the pages, and the callback URL. */
async function authorize(config: oidc.Configuration, redirectUri: string, user: Credentials, scope = 'openid profile email', jar?: CookieJar): Promise<Pending> {
  const verifier = oidc.randomPKCECodeVerifier();
  const state = oidc.randomState();
  const url = oidc.buildAuthorizationUrl(config, {
    redirect_uri: redirectUri,
    scope,
    state,
    code_challenge: await oidc.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
  });
  const r = await driveAuthorize(url, user, { jar });
  if (!r.callback) throw new Error(`authorize did not redirect: ${r.last?.status} ${r.last?.body.slice(0, 400)}`);
  return { callback: r.callback, verifier, state };
}

const grant = (config: oidc.Configuration, p: Pending) => oidc.authorizationCodeGrant(config, p.callback, { pkceCodeVerifier: p.verifier, expectedState: p.state });

/** The library's error for a refused request: the status, and the error code from the JSON body. */
async function refused(p: Promise<unknown>): Promise<{ status: number; error: string; description?: string }> {
  const e = await p.then(
    () => {
      throw new Error('expected the request to be refused');
    },
    (err: unknown) => err,
  );
  // A 401 with a WWW-Authenticate challenge (HTTP Basic) surfaces as a challenge error whose body is unread.
  if (e instanceof oidc.WWWAuthenticateChallengeError) {
    const body = (await e.response.json()) as { error: string; error_description?: string };
    return { status: e.status, error: body.error, description: body.error_description };
  }
  expect(e).toBeInstanceOf(oidc.ResponseBodyError);
  const r = e as oidc.ResponseBodyError;
  return { status: r.status, error: r.error, description: r.error_description };
}

const userinfoStatus = async (token: string) => {
  const res = await call(w.gw.url, 'GET', new URL(`${w.issuer}/oauth/userinfo`).pathname, { token });
  return { status: res.status, error: res.body?.error };
};
const apiStatus = async (token: string) => {
  const res = await call(w.gw.url, 'GET', '/api/dedicated', { token });
  return { status: res.status, error: res.body?.error };
};

beforeAll(async () => {
  w = await startOidcWorld();
});
afterAll(async () => w?.close());

describe('openid-client v6: the whole flow', () => {
  it.each(['post', 'basic'] as const)('discovery, authorize, token, userinfo, refresh, revoke (client auth: %s)', async (auth) => {
    const c = await w.newClient();
    const config = await configure(c, auth);
    const meta = config.serverMetadata();
    expect(meta.issuer).toBe(w.issuer);
    expect(meta.token_endpoint).toBe(`${w.issuer}/oauth/token`);

    const tokens = await grant(config, await authorize(config, c.redirectUris[0]!, w.owner));
    expect(tokens.token_type.toLowerCase()).toBe('bearer');
    expect(tokens.refresh_token).toMatch(/^rt_/);
    // openid-client validated the ID token's iss, aud, exp, iat and sub itself.
    const claims = tokens.claims()!;
    expect(claims.iss).toBe(w.issuer);
    expect(claims.aud === c.id || (Array.isArray(claims.aud) && claims.aud.includes(c.id))).toBe(true);
    expect(claims.sub).toBe(w.owner.userId);

    const info = await oidc.fetchUserInfo(config, tokens.access_token, claims.sub);
    expect(info).toMatchObject({ sub: w.owner.userId, name: w.owner.name, email: w.owner.email, picture: w.owner.picture });
    expect(typeof info.email_verified).toBe('boolean');

    const api = await oidc.fetchProtectedResource(config, tokens.access_token, new URL(`${w.gw.url}/api/dedicated`), 'GET');
    expect(api.status).toBe(200);

    const r1 = await oidc.refreshTokenGrant(config, tokens.refresh_token!);
    expect(r1.refresh_token).toMatch(/^rt_/);
    expect(r1.refresh_token).not.toBe(tokens.refresh_token);
    expect(r1.access_token).not.toBe(tokens.access_token);
    expect(await refused(oidc.refreshTokenGrant(config, tokens.refresh_token!))).toMatchObject({ status: 400, error: 'invalid_grant' });
    // The reuse revoked the grant: the newest refresh token is dead too.
    expect(await refused(oidc.refreshTokenGrant(config, r1.refresh_token!))).toMatchObject({ status: 400, error: 'invalid_grant' });
    expect(await userinfoStatus(r1.access_token)).toEqual({ status: 401, error: 'invalid_token' });

    // A second login; revoke its refresh token, then (another login) its access token.
    const t2 = await grant(config, await authorize(config, c.redirectUris[0]!, w.owner));
    await oidc.tokenRevocation(config, t2.refresh_token!);
    expect(await refused(oidc.refreshTokenGrant(config, t2.refresh_token!))).toMatchObject({ status: 400, error: 'invalid_grant' });
    const t3 = await grant(config, await authorize(config, c.redirectUris[0]!, w.owner));
    await oidc.tokenRevocation(config, t3.access_token);
    expect(await userinfoStatus(t3.access_token)).toEqual({ status: 401, error: 'invalid_token' });
    expect(await apiStatus(t3.access_token)).toEqual({ status: 401, error: 'invalid_token' });
    await oidc.tokenRevocation(config, 'rt_never_issued'); // RFC 7009: 200 for unknown tokens
  });

  it('rejects a callback whose state differs (client-side rule), without spending the code', async () => {
    const c = await w.newClient();
    const config = await configure(c);
    const p = await authorize(config, c.redirectUris[0]!, w.owner);
    await expect(oidc.authorizationCodeGrant(config, p.callback, { pkceCodeVerifier: p.verifier, expectedState: 'another-state' })).rejects.toThrow();
    expect((await grant(config, p)).refresh_token).toMatch(/^rt_/);
  });

  it('surfaces the section-7 errors with their statuses', async () => {
    const c = await w.newClient();
    const other = await w.newClient();
    const config = await configure(c);
    // Wrong verifier: invalid_grant, PKCE verification failed.
    const p1 = await authorize(config, c.redirectUris[0]!, w.owner);
    const e1 = await refused(oidc.authorizationCodeGrant(config, p1.callback, { pkceCodeVerifier: oidc.randomPKCECodeVerifier(), expectedState: p1.state }));
    expect(e1).toMatchObject({ status: 400, error: 'invalid_grant' });
    expect(e1.description).toMatch(/PKCE verification failed/i);
    // Code used twice.
    const p2 = await authorize(config, c.redirectUris[0]!, w.owner);
    await grant(config, p2);
    expect(await refused(grant(config, p2))).toMatchObject({ status: 400, error: 'invalid_grant' });
    // A code issued to `c` redeemed by `other` through its own configuration.
    const p3 = await authorize(config, c.redirectUris[0]!, w.owner);
    const code = p3.callback.searchParams.get('code')!;
    const r = await postForm(`${w.issuer}/oauth/token`, { grant_type: 'authorization_code', code, code_verifier: p3.verifier, redirect_uri: c.redirectUris[0], client_id: other.id, client_secret: other.secret });
    expect({ status: r.status, error: r.body.error }).toEqual({ status: 400, error: 'invalid_grant' });
    // Wrong secret: invalid_client 401, in the body and as Basic.
    for (const auth of ['post', 'basic'] as const) {
      const bad = await configure({ id: c.id, secret: other.secret }, auth);
      const p4 = await authorize(config, c.redirectUris[0]!, w.owner);
      expect(await refused(grant(bad, p4))).toMatchObject({ status: 401, error: 'invalid_client' });
    }
  });
});

describe('client rotate-secret (admin CLI) as an independent client sees it', () => {
  it('old refresh token invalid_grant, old access token 401, pending code invalid_grant, old secret invalid_client', async () => {
    const c = await w.newClient();
    const oldConfig = await configure(c);
    const jar = new CookieJar();
    const before = await grant(oldConfig, await authorize(oldConfig, c.redirectUris[0]!, w.owner, 'openid profile email', jar));
    const pending = await authorize(oldConfig, c.redirectUris[0]!, w.owner, 'openid profile email', jar);
    expect(await userinfoStatus(before.access_token)).toEqual({ status: 200, error: undefined });
    expect(await apiStatus(before.access_token)).toEqual({ status: 200, error: undefined });
    // Another client's tokens must survive this client's rotation.
    const bystander = await w.newClient();
    const bystanderConfig = await configure(bystander);
    const kept = await grant(bystanderConfig, await authorize(bystanderConfig, bystander.redirectUris[0]!, w.owner, 'openid profile email', jar));

    const rotated = await adminCli(w.gw.testDb.url, ['client', 'rotate-secret', '--client-id', c.id]);
    expect(rotated.client_id).toBe(c.id);
    const newSecret = rotated.client_secret as string;
    expect(newSecret).not.toBe(c.secret);
    const newConfig = await configure({ id: c.id, secret: newSecret });

    // Old refresh token, presented with the new secret: invalid_grant.
    expect(await refused(oidc.refreshTokenGrant(newConfig, before.refresh_token!))).toMatchObject({ status: 400, error: 'invalid_grant' });
    // Old access token: 401 at the API and at userinfo.
    expect(await apiStatus(before.access_token)).toEqual({ status: 401, error: 'invalid_token' });
    expect(await userinfoStatus(before.access_token)).toEqual({ status: 401, error: 'invalid_token' });
    // The code issued before the rotation and never exchanged: invalid_grant with the new secret.
    expect(await refused(grant(newConfig, pending))).toMatchObject({ status: 400, error: 'invalid_grant' });
    // The old secret: invalid_client, whatever the grant.
    const p = await authorize(newConfig, c.redirectUris[0]!, w.owner);
    expect(await refused(grant(oldConfig, p))).toMatchObject({ status: 401, error: 'invalid_client' });
    expect(await refused(oidc.refreshTokenGrant(oldConfig, before.refresh_token!))).toMatchObject({ status: 401, error: 'invalid_client' });

    // The new secret works end to end, and its ID token verifies under the new secret (checked by the library).
    const fresh = await grant(newConfig, await authorize(newConfig, c.redirectUris[0]!, w.owner));
    expect(fresh.claims()!.aud).toContain(c.id);
    expect(await apiStatus(fresh.access_token)).toEqual({ status: 200, error: undefined });
    // The bystander client was not touched.
    expect(await apiStatus(kept.access_token)).toEqual({ status: 200, error: undefined });
    expect((await oidc.refreshTokenGrant(bystanderConfig, kept.refresh_token!)).refresh_token).toMatch(/^rt_/);
    // A CLI process starts (TypeScript through the loader) inside this test: slow on a busy machine.
  }, 120_000);
});
