// Public clients and the first-party panel against the real gateway on real PostgreSQL, seen by an
// independent client library (oauth4webapi with None() client authentication): a public client's code
// flow with PKCE alone and its refresh rotation; `openid` refused for a client without a secret; the
// gateway's own `panel` client registered at start, never shown a consent page while another client is;
// silent sign-in with prompt=none with and without an issuer session; and sign-out (docs/CONTRACTS.md
// "Identity provider"): the refresh token revoked with client_id alone, the session ended, CSRF refused.
import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway } from '../helpers/gateway.ts';
import { createClient } from '../../server/domain/clients.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { authorizeUrl, CookieJar, driveAuthorize, pkce, postForm, type Credentials } from '../helpers/oidc.ts';
import { adminCli, startOidcWorld, type OidcWorld } from '../helpers/oidc-fixture.ts';

let w: OidcWorld;
let as: oauth.AuthorizationServer;
let panelCallback: string;
const insecure = { [oauth.allowInsecureRequests]: true } as const;
const ep = (name: 'token' | 'revoke' | 'authorize' | 'logout') => `${w.issuer}/oauth/${name}`;

interface PublicClient {
  id: string;
  redirectUri: string;
}

/** Runs authorize like a browser with `jar`; returns the callback URL the issuer sent the browser to and the pages on the way. */
async function authorize(c: PublicClient, user: Credentials | null, o: { jar?: CookieJar; scope?: string; prompt?: string } = {}) {
  const p = pkce();
  const state = oauth.generateRandomState();
  const url = authorizeUrl(ep('authorize'), {
    clientId: c.id,
    redirectUri: c.redirectUri,
    scope: o.scope ?? 'profile email',
    state,
    challenge: p.challenge,
    method: 'S256',
    extra: o.prompt ? { prompt: o.prompt } : {},
  });
  const r = await driveAuthorize(url, user, { jar: o.jar, callback: c.redirectUri });
  if (!r.callback) throw new Error(`authorize did not redirect: ${r.last?.status} ${r.last?.body.slice(0, 400)}`);
  return { ...r, callback: r.callback, state, verifier: p.verifier };
}

/** Code flow with oauth4webapi and no client authentication at all (a public client). */
async function login(c: PublicClient, user: Credentials | null, o: { jar?: CookieJar; prompt?: string } = {}) {
  const a = await authorize(c, user, o);
  const client: oauth.Client = { client_id: c.id };
  const params = oauth.validateAuthResponse(as, client, a.callback, a.state);
  const res = await oauth.authorizationCodeGrantRequest(as, client, oauth.None(), params, c.redirectUri, a.verifier, insecure);
  const tokens = await oauth.processAuthorizationCodeResponse(as, client, res);
  return { tokens, pages: a.pages };
}

const refreshWith = (c: PublicClient, rt: string) => postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: rt, client_id: c.id });
const me = (token: string) => call(w.gw.url, 'POST', '/graphql', { token, body: { query: '{ me { userId permission } }' } });
/** A consent page is a page with a form posting to the interaction's /consent. */
const sawConsent = (pages: Array<{ html: string }>) => pages.some((p) => /action="[^"]*\/consent"/.test(p.html));

beforeAll(async () => {
  w = await startOidcWorld();
  panelCallback = `${w.gw.services.config.publicUrl}/callback`;
  as = await oauth.processDiscoveryResponse(new URL(w.issuer), await oauth.discoveryRequest(new URL(w.issuer), insecure));
});
afterAll(async () => w?.close());

describe('a public client (admin CLI client create --public)', () => {
  let pub: PublicClient;
  beforeAll(async () => {
    const redirectUri = 'http://127.0.0.1:9/spa/callback';
    const created = await adminCli(w.gw.testDb.url, ['client', 'create', '--name', 'Browser app', '--redirect-uri', redirectUri, '--api-access', 'read', '--public']);
    expect(created).toMatchObject({ client_secret: null, api_access: 'read', public: true });
    pub = { id: created.client_id as string, redirectUri };
    const { rows } = await w.gw.testDb.raw.query('select secret_ciphertext, is_public from oauth_client where client_id = $1', [pub.id]);
    expect(rows).toEqual([{ secret_ciphertext: null, is_public: true }]);
  });

  it('discovery lists token endpoint authentication method none beside the secret methods', () => {
    expect([...(as.token_endpoint_auth_methods_supported ?? [])].sort()).toEqual(['client_secret_basic', 'client_secret_post', 'none']);
  });

  it('completes the code flow with PKCE and no secret, and rotates its refresh token on every use', async () => {
    const { tokens, pages } = await login(pub, w.owner);
    // A third-party public client is still asked for consent; the operator registered this one.
    expect(sawConsent(pages)).toBe(true);
    expect(pages.map((p) => p.html).join('')).not.toContain('registered by a customer');
    expect(tokens.id_token).toBeUndefined();
    expect(tokens.refresh_token).toMatch(/^rt_/);
    expect((await me(tokens.access_token)).body.data.me).toEqual({ userId: w.owner.userId, permission: 'READ' });

    const first = await refreshWith(pub, tokens.refresh_token!);
    expect(first.status).toBe(200);
    const second = first.body.refresh_token as string;
    expect(second).toMatch(/^rt_/);
    expect(second).not.toBe(tokens.refresh_token);
    // The previous refresh token is revoked at once; reusing it is invalid_grant (section 3).
    const reused = await refreshWith(pub, tokens.refresh_token!);
    expect({ status: reused.status, error: reused.body.error }).toEqual({ status: 400, error: 'invalid_grant' });
  });

  it('is refused without PKCE, and refused openid (it has no secret to sign an ID token with)', async () => {
    const noPkce = authorizeUrl(ep('authorize'), { clientId: pub.id, redirectUri: pub.redirectUri, scope: 'profile', state: 's1' });
    const r1 = await driveAuthorize(noPkce, w.owner, { callback: pub.redirectUri });
    expect(r1.callback?.searchParams.get('error')).toBe('invalid_request');
    const r2 = await authorize(pub, w.owner, { scope: 'openid profile' });
    expect(r2.callback.searchParams.get('error')).toBe('invalid_scope');
  });

  it('a secret sent by a public client does not make it confidential: the token endpoint refuses it', async () => {
    const { tokens } = await login(pub, w.owner);
    const res = await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: pub.id, client_secret: 'made-up' });
    expect(res.status).toBeGreaterThanOrEqual(400);
    expect(['invalid_client', 'invalid_request']).toContain(res.body.error);
  });

  it('cannot have its secret rotated (it has none)', async () => {
    await expect(adminCli(w.gw.testDb.url, ['client', 'rotate-secret', '--client-id', pub.id])).rejects.toThrow(/invalid_request/);
  });
});

describe('the first-party panel client', () => {
  let panel: PublicClient;
  beforeAll(() => {
    panel = { id: 'panel', redirectUri: panelCallback };
  });

  it('is registered by the gateway at start: public, write access, redirect URI $PUBLIC_URL/callback', async () => {
    const { rows } = await w.gw.testDb.raw.query('select redirect_uris, api_access, is_public, secret_ciphertext, owner_account_id from oauth_client where client_id = $1', ['panel']);
    expect(rows).toEqual([{ redirect_uris: [panelCallback], api_access: 'write', is_public: true, secret_ciphertext: null, owner_account_id: null }]);
  });

  it('signs in without a consent page, while another client of the same user in the same browser is asked', async () => {
    const jar = new CookieJar();
    const { tokens, pages } = await login(panel, w.owner, { jar });
    expect(pages.some((p) => /type="password"|name="password"/.test(p.html))).toBe(true);
    expect(sawConsent(pages)).toBe(false);
    // The owner's own role: write.
    expect((await me(tokens.access_token)).body.data.me).toEqual({ userId: w.owner.userId, permission: 'WRITE' });

    const other = await w.newClient();
    const again = await driveAuthorize(
      authorizeUrl(ep('authorize'), { clientId: other.id, redirectUri: other.redirectUris[0]!, scope: 'openid profile', state: 's', challenge: pkce().challenge, method: 'S256' }),
      null,
      { jar },
    );
    // Signed in already (no login page), but the other client shows its consent page.
    expect(again.callback).not.toBeNull();
    expect(sawConsent(again.pages)).toBe(true);
    expect(again.pages.some((p) => /name="password"/.test(p.html))).toBe(false);
  });

  it("carries the user's own role: a viewer's panel token reads but does not write", async () => {
    const { tokens } = await login(panel, w.viewer);
    expect((await me(tokens.access_token)).body.data.me).toEqual({ userId: w.viewer.userId, permission: 'READ' });
  });

  it('prompt=none signs in silently through the issuer session, and answers login_required without one', async () => {
    const jar = new CookieJar();
    const none = await authorize(panel, null, { jar, prompt: 'none' });
    expect(none.callback.searchParams.get('error')).toBe('login_required');
    expect(none.callback.searchParams.get('state')).toBe(none.state);

    await login(panel, w.owner, { jar });
    const silent = await login(panel, null, { jar, prompt: 'none' });
    expect(silent.pages).toEqual([]);
    expect((await me(silent.tokens.access_token)).body.data.me.userId).toBe(w.owner.userId);
  });

  it('signs out: the refresh token is revoked with client_id alone, and the session ends (prompt=none is login_required)', async () => {
    const jar = new CookieJar();
    const { tokens } = await login(panel, w.owner, { jar });
    const revoked = await postForm(ep('revoke'), { token: tokens.refresh_token, token_type_hint: 'refresh_token', client_id: 'panel' });
    expect(revoked.status).toBe(200);
    expect((await refreshWith(panel, tokens.refresh_token!)).body.error).toBe('invalid_grant');
    // Revoking the refresh token revokes its grant: the access token ends with it.
    expect((await me(tokens.access_token)).status).toBe(401);

    // The session still signs the panel in silently until the browser signs out.
    const before = await login(panel, null, { jar, prompt: 'none' });
    const staleCookies = jar.header(new URL(ep('authorize'))) ?? '';
    expect(staleCookies).toMatch(/_session=/);
    const res = await fetch(ep('logout'), {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: new URL(w.issuer).origin, cookie: jar.header(new URL(ep('logout'))) ?? '' },
      body: 'return_to=%2Fsigned-out',
      redirect: 'manual',
    });
    jar.store(res, new URL(ep('logout')));
    expect(res.status).toBe(303);
    expect(res.headers.get('location')).toBe(`${w.gw.services.config.publicUrl}/signed-out`);
    // The sign-out also ended the panel's grant of this session: the tokens of that silent sign-in are refused.
    expect((await refreshWith(panel, before.tokens.refresh_token!)).body.error).toBe('invalid_grant');
    expect((await me(before.tokens.access_token)).status).toBe(401);

    const after = await authorize(panel, null, { jar, prompt: 'none' });
    expect(after.callback.searchParams.get('error')).toBe('login_required');
    // Even with the old session cookie replayed (a copy kept before the sign-out), the session is gone.
    const replay = await fetch(authorizeUrl(ep('authorize'), { clientId: 'panel', redirectUri: panelCallback, scope: 'profile', state: 'r', challenge: pkce().challenge, method: 'S256', extra: { prompt: 'none' } }), {
      headers: { cookie: staleCookies },
      redirect: 'manual',
    });
    expect(replay.status).toBe(303);
    expect(new URL(replay.headers.get('location')!).searchParams.get('error')).toBe('login_required');
  });

  it('refuses a sign-out without a matching Origin, and a return_to that leaves the site', async () => {
    const jar = new CookieJar();
    await login(panel, w.owner, { jar });
    const cookie = jar.header(new URL(ep('logout'))) ?? '';
    const post = (headers: Record<string, string>, body = 'return_to=%2F') =>
      fetch(ep('logout'), { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', cookie, ...headers }, body, redirect: 'manual' });
    for (const headers of [{} as Record<string, string>, { origin: 'https://evil.example' }, { origin: new URL(w.issuer).origin, 'sec-fetch-site': 'cross-site' }]) {
      const r = await post(headers);
      expect(r.status).toBe(403);
      expect(((await r.json()) as { error: string }).error).toBe('invalid_request');
    }
    for (const bad of ['//evil.example/x', 'https://evil.example/', '/\\evil.example', 'relative']) {
      const r = await post({ origin: new URL(w.issuer).origin }, `return_to=${encodeURIComponent(bad)}`);
      expect(r.status).toBe(400);
    }
    // None of those ended the session.
    const silent = await authorize(panel, null, { jar, prompt: 'none' });
    expect(silent.callback.searchParams.get('code')).toBeTruthy();
    const get = await fetch(ep('logout'), { redirect: 'manual' });
    expect(get.status).toBe(405);
  });
});

describe('token-endpoint budgets', () => {
  it("a confidential client has a budget of its own across addresses; the panel's users do not share one", async () => {
    // Burst 3, and each request from its own address (one trusted proxy), so only a per-client budget can refuse.
    const gw = await startGateway({ config: { rateLimitPerMinute: 1, rateLimitBurst: 3, trustProxy: 1 } });
    try {
      const { secretEncryptionKey } = (await loadSecrets(gw.testDb.db, {})).secrets;
      const c = await createClient(gw.testDb.db, secretEncryptionKey, { name: 'Budgeted', redirectUris: ['http://127.0.0.1:9/cb'] });
      let address = 0;
      const post = async (form: Record<string, string>) => {
        address++;
        const res = await fetch(`${gw.url}/oauth/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-for': `198.51.100.${address}` },
          body: new URLSearchParams(form).toString(),
        });
        return res.status;
      };
      const confidential: number[] = [];
      for (let i = 0; i < 5; i++) confidential.push(await post({ grant_type: 'refresh_token', refresh_token: 'rt_unknown', client_id: c.client_id, client_secret: c.client_secret }));
      expect(confidential.slice(0, 3)).toEqual([400, 400, 400]);
      expect(confidential.slice(3)).toEqual([429, 429]);
      const panel: number[] = [];
      for (let i = 0; i < 8; i++) panel.push(await post({ grant_type: 'refresh_token', refresh_token: 'rt_unknown', client_id: 'panel' }));
      expect(panel).toEqual(new Array(8).fill(400));
    } finally {
      await gw.close();
    }
  });
});
