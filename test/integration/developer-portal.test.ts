// The developer portal in GraphQL (docs/CONTRACTS.md "Developer portal") against the real gateway on real
// PostgreSQL, with the panel's own sign-in as the caller's credential: an owner registers an application,
// sees its secret once, and the application completes a code flow with oauth4webapi at once; the list,
// the redirect-URI rules, the 20-per-account cap under two concurrent creates, a viewer refused, the
// secret rotation ending the old refresh and access tokens, deletion, the grants list, and another
// account's application answered not_found.
import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { authorizeUrl, CookieJar, driveAuthorize, pkce, postForm, type Credentials } from '../helpers/oidc.ts';
import { startOidcWorld, type OidcWorld, type TestUser } from '../helpers/oidc-fixture.ts';

let w: OidcWorld;
let as: oauth.AuthorizationServer;
const insecure = { [oauth.allowInsecureRequests]: true } as const;
const ep = (name: 'token' | 'authorize' | 'userinfo') => `${w.issuer}/oauth/${name}`;

/** Signs `user` in through the first-party panel client (no consent) and returns its access token. */
async function panelToken(user: Credentials): Promise<string> {
  return (await codeFlow({ id: 'panel', redirectUri: `${w.gw.services.config.publicUrl}/callback` }, user, { scope: 'profile email' })).access_token;
}

/** A code flow for `client` through oauth4webapi: None() for a public client, else the secret in the body. */
async function codeFlow(client: { id: string; secret?: string; redirectUri: string }, user: Credentials, o: { scope?: string; jar?: CookieJar } = {}) {
  const p = pkce();
  const state = oauth.generateRandomState();
  const url = authorizeUrl(ep('authorize'), { clientId: client.id, redirectUri: client.redirectUri, scope: o.scope ?? 'openid profile email', state, challenge: p.challenge, method: 'S256' });
  const r = await driveAuthorize(url, user, { jar: o.jar ?? new CookieJar(), callback: client.redirectUri });
  if (!r.callback) throw new Error(`authorize did not redirect: ${r.last?.status} ${r.last?.body.slice(0, 300)}`);
  const c: oauth.Client = { client_id: client.id };
  const params = oauth.validateAuthResponse(as, c, r.callback, state);
  const auth = client.secret ? oauth.ClientSecretPost(client.secret) : oauth.None();
  const res = await oauth.authorizationCodeGrantRequest(as, c, auth, params, client.redirectUri, p.verifier, insecure);
  const tokens = await oauth.processAuthorizationCodeResponse(as, c, res);
  return Object.assign(tokens as oauth.TokenEndpointResponse & { refresh_token: string }, { pages: r.pages });
}

interface GqlResult {
  status: number;
  data: Record<string, any> | null;
  errors?: Array<{ message: string; extensions: { code: string; status?: number } }>;
}

async function gql(token: string, query: string, variables: Record<string, unknown> = {}): Promise<GqlResult> {
  const res = await call(w.gw.url, 'POST', '/graphql', { token, body: { query, variables } });
  return { status: res.status, data: res.body?.data ?? null, errors: res.body?.errors };
}

const codeOf = (r: GqlResult) => r.errors?.[0]?.extensions.code;

const APP_FIELDS = 'id name redirectUris public apiAccess createdAt secretRotatedAt';
const CREATE = `mutation($input: CreateApplicationInput!) { createApplication(input: $input) { application { ${APP_FIELDS} } clientSecret } }`;
const create = (token: string, input: Partial<{ name: string; redirectUris: string[]; public: boolean; apiAccess: string }> = {}) =>
  gql(token, CREATE, { input: { name: 'My integration', redirectUris: ['http://127.0.0.1:9/portal/cb'], public: false, apiAccess: 'READ', ...input } });

let owner: TestUser;
let ownerToken: string;

beforeAll(async () => {
  w = await startOidcWorld();
  as = await oauth.processDiscoveryResponse(new URL(w.issuer), await oauth.discoveryRequest(new URL(w.issuer), insecure));
  owner = await w.newUser('owner');
  ownerToken = await panelToken(owner);
});
afterAll(async () => w?.close());

describe('registering an application', () => {
  it('shows a confidential application its secret once, and the application completes a code flow at once', async () => {
    const redirectUri = 'https://app.example.test/oauth/callback';
    const loopback = 'http://127.0.0.1:9/portal/cb';
    const r = await create(ownerToken, { redirectUris: [loopback, redirectUri], apiAccess: 'READ' });
    expect(r.errors).toBeUndefined();
    const { application, clientSecret } = r.data!.createApplication;
    expect(application).toMatchObject({ name: 'My integration', redirectUris: [loopback, redirectUri], public: false, apiAccess: 'READ' });
    expect(application.id).toMatch(/^cl_[a-z2-7]{16}$/);
    expect(clientSecret).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(application.secretRotatedAt).not.toBeNull();

    // The list never shows a secret (there is no field for one), and shows this application.
    const list = await gql(ownerToken, `{ applications { ${APP_FIELDS} } }`);
    expect(list.data!.applications).toContainEqual(application);

    // Another user of the issuer signs in to it at once (consent page included), and its token reads the API.
    const user = await w.newUser('owner');
    const tokens = await codeFlow({ id: application.id, secret: clientSecret, redirectUri: loopback }, user);
    expect(tokens.id_token).toBeTruthy();
    // Its name is the customer's choice: the consent page says who registered it.
    const consent = tokens.pages.find((p) => /action="[^"]*\/consent"/.test(p.html));
    expect(consent?.html).toContain('registered by a customer of this service');
    const me = await gql(tokens.access_token, '{ me { userId permission } }');
    expect(me.data!.me).toEqual({ userId: user.userId, permission: 'READ' });
  });

  it('a public application has no secret and completes a code flow with PKCE alone', async () => {
    const r = await create(ownerToken, { name: 'SPA', public: true, apiAccess: 'NONE', redirectUris: ['http://localhost:5173/callback'] });
    expect(r.errors).toBeUndefined();
    expect(r.data!.createApplication.clientSecret).toBeNull();
    expect(r.data!.createApplication.application).toMatchObject({ public: true, apiAccess: 'NONE', secretRotatedAt: null });
    const user = await w.newUser('owner');
    const tokens = await codeFlow({ id: r.data!.createApplication.application.id, redirectUri: 'http://localhost:5173/callback' }, user, { scope: 'profile' });
    expect(tokens.refresh_token).toMatch(/^rt_/);
    // A public application cannot have its (absent) secret rotated.
    const rot = await gql(ownerToken, `mutation($id: ID!) { rotateApplicationSecret(id: $id) { clientSecret } }`, { id: r.data!.createApplication.application.id });
    expect(codeOf(rot)).toBe('invalid_request');
  });

  it('refuses redirect URIs that are not https (other than loopback), relative, or carry a fragment', async () => {
    for (const uri of ['http://app.example.test/cb', 'https://app.example.test/cb#x', '/callback', 'javascript:alert(1)', 'http://10.0.0.1/cb']) {
      const r = await create(ownerToken, { redirectUris: [uri] });
      expect(codeOf(r), uri).toBe('invalid_request');
    }
    for (const uri of ['http://[::1]:8080/cb', 'http://localhost/cb', 'http://127.0.0.1:53682/']) {
      const r = await create(ownerToken, { redirectUris: [uri] });
      expect(r.errors, uri).toBeUndefined();
      await gql(ownerToken, 'mutation($id: ID!) { deleteApplication(id: $id) }', { id: r.data!.createApplication.application.id });
    }
  });

  it('refuses a viewer: write access above the role, and any management at all', async () => {
    const viewerToken = await panelToken(w.viewer);
    const write = await create(viewerToken, { apiAccess: 'WRITE' });
    expect(codeOf(write)).toBe('insufficient_scope');
    expect(write.errors![0]!.message).toMatch(/above what your role \(viewer\)/);
    expect(codeOf(await create(viewerToken, { apiAccess: 'READ' }))).toBe('insufficient_scope');
    expect(codeOf(await gql(viewerToken, '{ applications { id } }'))).toBe('insufficient_scope');
  });
});

describe('the cap of 20 applications per account', () => {
  it('holds under two concurrent creates at 19', async () => {
    const someone = await w.newUser('owner');
    const token = await panelToken(someone);
    for (let i = 0; i < 19; i++) {
      const r = await create(token, { name: `app ${i}` });
      expect(r.errors).toBeUndefined();
    }
    const both = await Promise.all([create(token, { name: 'race a' }), create(token, { name: 'race b' })]);
    const ok = both.filter((r) => !r.errors);
    const refused = both.filter((r) => r.errors);
    expect(ok).toHaveLength(1);
    expect(refused.map(codeOf)).toEqual(['invalid_request']);
    expect(refused[0]!.errors![0]!.message).toMatch(/at most 20 applications/);
    const list = await gql(token, '{ applications { id } }');
    expect(list.data!.applications).toHaveLength(20);
    const { rows } = await w.gw.testDb.raw.query('select count(*)::int as n from oauth_client where owner_account_id = $1', [someone.accountId]);
    expect(rows[0].n).toBe(20);
    // Deleting one makes room for one.
    await gql(token, 'mutation($id: ID!) { deleteApplication(id: $id) }', { id: list.data!.applications[0].id });
    expect((await create(token, { name: 'after delete' })).errors).toBeUndefined();
    expect(codeOf(await create(token, { name: 'one too many' }))).toBe('invalid_request');
  });
});

describe('rotation, deletion, grants and other accounts', () => {
  let app: { id: string; secret: string; redirectUri: string };
  beforeAll(async () => {
    const redirectUri = 'http://127.0.0.1:9/rotate/cb';
    const r = await create(ownerToken, { name: 'Rotated', redirectUris: [redirectUri], apiAccess: 'READ' });
    app = { id: r.data!.createApplication.application.id, secret: r.data!.createApplication.clientSecret, redirectUri };
  });

  it('lists the users who allowed it, with what the scopes they granted reveal', async () => {
    const a = await w.newUser('owner');
    const b = await w.newUser('viewer');
    await codeFlow(app, a, { scope: 'openid profile email' });
    await codeFlow(app, b, { scope: 'openid' });
    const r = await gql(ownerToken, `query($id: ID!) { application(id: $id) { id grants { user { id name email } createdAt scopes } } }`, { id: app.id });
    expect(r.errors).toBeUndefined();
    const grants = r.data!.application.grants as Array<{ user: { id: string; name: string | null; email: string | null }; createdAt: string; scopes: string[] }>;
    expect(grants.map((g) => g.user).sort((x, y) => (x.id < y.id ? -1 : 1))).toEqual(
      [
        { id: a.userId, name: a.name, email: a.email },
        { id: b.userId, name: null, email: null },
      ].sort((x, y) => (x.id < y.id ? -1 : 1)),
    );
    for (const g of grants) expect(Number.isNaN(Date.parse(g.createdAt))).toBe(false);
    expect(grants.find((g) => g.user.id === a.userId)!.scopes).toEqual(['email', 'openid', 'profile']);
  });

  it('another account gets not_found for it, for its rotation and for its deletion', async () => {
    const other = await panelToken(await w.newUser('owner'));
    const q = await gql(other, 'query($id: ID!) { application(id: $id) { id } }', { id: app.id });
    expect(codeOf(q)).toBe('not_found');
    expect(codeOf(await gql(other, 'mutation($id: ID!) { rotateApplicationSecret(id: $id) { clientSecret } }', { id: app.id }))).toBe('not_found');
    expect(codeOf(await gql(other, 'mutation($id: ID!) { deleteApplication(id: $id) }', { id: app.id }))).toBe('not_found');
    expect((await gql(other, '{ applications { id } }')).data!.applications).toEqual([]);
    // The operator's panel client is nobody's application either.
    expect(codeOf(await gql(ownerToken, 'query { application(id: "panel") { id } }'))).toBe('not_found');
    // Still there for its owner.
    expect((await gql(ownerToken, 'query($id: ID!) { application(id: $id) { id } }', { id: app.id })).data!.application.id).toBe(app.id);
  });

  it('rotating the secret ends the old refresh token and access token at once; the new secret works', async () => {
    const user = await w.newUser('owner');
    const tokens = await codeFlow(app, user);
    expect((await call(w.gw.url, 'GET', new URL(ep('userinfo')).pathname, { token: tokens.access_token })).status).toBe(200);
    const r = await gql(ownerToken, 'mutation($id: ID!) { rotateApplicationSecret(id: $id) { application { id secretRotatedAt } clientSecret } }', { id: app.id });
    expect(r.errors).toBeUndefined();
    const fresh = r.data!.rotateApplicationSecret.clientSecret as string;
    expect(fresh).not.toBe(app.secret);
    // The access token is refused by the API and by userinfo.
    expect((await gql(tokens.access_token, '{ me { userId } }')).status).toBe(401);
    expect((await call(w.gw.url, 'GET', new URL(ep('userinfo')).pathname, { token: tokens.access_token })).status).toBe(401);
    // The old refresh token: with the old secret the client is unknown; with the new one the token is gone.
    const withOld = await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: app.id, client_secret: app.secret });
    expect({ status: withOld.status, error: withOld.body.error }).toEqual({ status: 401, error: 'invalid_client' });
    const withNew = await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: app.id, client_secret: fresh });
    expect({ status: withNew.status, error: withNew.body.error }).toEqual({ status: 400, error: 'invalid_grant' });
    // The grants ended with it.
    const g = await gql(ownerToken, 'query($id: ID!) { application(id: $id) { grants { user { id } } } }', { id: app.id });
    expect(g.data!.application.grants).toEqual([]);
    app.secret = fresh;
    const again = await codeFlow(app, user);
    expect(again.access_token).toBeTruthy();
  });

  it('deleting it ends its tokens and removes it from the list', async () => {
    const user = await w.newUser('owner');
    const tokens = await codeFlow(app, user);
    const d = await gql(ownerToken, 'mutation($id: ID!) { deleteApplication(id: $id) }', { id: app.id });
    expect(d.data).toEqual({ deleteApplication: true });
    expect((await gql(tokens.access_token, '{ me { userId } }')).status).toBe(401);
    const rt = await postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: tokens.refresh_token, client_id: app.id, client_secret: app.secret });
    expect(rt.body.error).toBe('invalid_client');
    expect((await gql(ownerToken, '{ applications { id } }')).data!.applications.map((a: { id: string }) => a.id)).not.toContain(app.id);
    expect(codeOf(await gql(ownerToken, 'mutation($id: ID!) { deleteApplication(id: $id) }', { id: app.id }))).toBe('not_found');
    const { rows } = await w.gw.testDb.raw.query('select count(*)::int as n from oidc_payload where client_id = $1', [app.id]);
    expect(rows[0].n).toBe(0);
  });
});
