// After any revocation of a user's grant (refresh-token reuse, revoking a token at
// /oauth/revoke, rotating the client's secret with the admin CLI) the same browser, keeping every
// cookie it has, signs in again and gets a code whose exchange works and whose access token works
// on the tunnel API. Driven over HTTP by the independent user agent of test/helpers/oidc.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { authorizeUrl, CookieJar, driveAuthorize, pkce, postForm } from '../helpers/oidc.ts';
import { adminCli, startOidcWorld, type OidcWorld, type TestClient, type TestUser } from '../helpers/oidc-fixture.ts';

let w: OidcWorld;
beforeAll(async () => {
  w = await startOidcWorld();
});
afterAll(async () => w?.close());

const ep = (name: string) => `${w.issuer}/oauth/${name}`;

/** authorize -> (login) -> (consent) -> code -> tokens, all in `jar`; returns the token response. */
async function signIn(c: TestClient, u: TestUser, jar: CookieJar) {
  const p = pkce();
  const redirectUri = c.redirectUris[0]!;
  const r = await driveAuthorize(authorizeUrl(ep('authorize'), { clientId: c.id, redirectUri, state: 's', challenge: p.challenge, method: 'S256' }), u, { jar });
  if (!r.callback) throw new Error(`authorize did not redirect: ${r.last?.status} ${r.last?.body.slice(0, 400)}`);
  const code = r.callback.searchParams.get('code');
  expect(code, `callback ${r.callback.href}`).toBeTruthy();
  return postForm(ep('token'), { grant_type: 'authorization_code', code: code!, code_verifier: p.verifier, redirect_uri: redirectUri, client_id: c.id, client_secret: c.secret });
}

async function expectWorkingTokens(res: Awaited<ReturnType<typeof signIn>>) {
  expect({ status: res.status, error: res.body.error, description: res.body.error_description }).toEqual({ status: 200, error: undefined, description: undefined });
  const api = await call(w.gw.url, 'GET', '/api/dedicated', { token: res.body.access_token as string });
  expect(api.status).toBe(200);
}

describe('a new sign-in after a revocation works in the same browser', () => {
  it('after refresh-token reuse', async () => {
    const c = await w.newClient();
    const u = await w.newUser();
    const jar = new CookieJar();
    const first = await signIn(c, u, jar);
    await expectWorkingTokens(first);
    const rt = first.body.refresh_token as string;
    const rotated = await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: rt, client_id: c.id, client_secret: c.secret });
    expect(rotated.status).toBe(200);
    // Reusing the old refresh token revokes the whole grant.
    const reuse = await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: rt, client_id: c.id, client_secret: c.secret });
    expect([reuse.status, reuse.body.error]).toEqual([400, 'invalid_grant']);
    expect((await call(w.gw.url, 'GET', '/api/dedicated', { token: rotated.body.access_token as string })).status).toBe(401);
    await expectWorkingTokens(await signIn(c, u, jar));
  });

  it('after revoking the refresh token', async () => {
    const c = await w.newClient();
    const u = await w.newUser();
    const jar = new CookieJar();
    const first = await signIn(c, u, jar);
    await expectWorkingTokens(first);
    const r = await postForm(ep('revoke'), { token: first.body.refresh_token as string, client_id: c.id, client_secret: c.secret });
    expect(r.status).toBe(200);
    expect((await call(w.gw.url, 'GET', '/api/dedicated', { token: first.body.access_token as string })).status).toBe(401);
    await expectWorkingTokens(await signIn(c, u, jar));
  });

  it('after revoking the access token', async () => {
    const c = await w.newClient();
    const u = await w.newUser();
    const jar = new CookieJar();
    const first = await signIn(c, u, jar);
    await expectWorkingTokens(first);
    const r = await postForm(ep('revoke'), { token: first.body.access_token as string, client_id: c.id, client_secret: c.secret });
    expect(r.status).toBe(200);
    expect((await call(w.gw.url, 'GET', '/api/dedicated', { token: first.body.access_token as string })).status).toBe(401);
    await expectWorkingTokens(await signIn(c, u, jar));
  });

  it('after rotating the client secret with the admin CLI', async () => {
    const c = await w.newClient();
    const u = await w.newUser();
    const jar = new CookieJar();
    const first = await signIn(c, u, jar);
    await expectWorkingTokens(first);
    const rotated = (await adminCli(w.gw.testDb.url, ['client', 'rotate-secret', '--client-id', c.id])) as { client_secret: string };
    expect((await call(w.gw.url, 'GET', '/api/dedicated', { token: first.body.access_token as string })).status).toBe(401);
    await expectWorkingTokens(await signIn({ ...c, secret: rotated.client_secret }, u, jar));
  }, 120_000);
});
