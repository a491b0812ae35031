// The oauth4webapi tests' world (oidc-oauth4webapi.test.ts: discovery, flows, userinfo, revocation, the API;
// oidc-oauth4webapi-errors.test.ts: every invalid_grant and invalid_client condition): the identity provider of a
// real gateway on real PostgreSQL, two registered clients, the server's metadata as the library discovered it,
// and the calls both use. A test file calls useOauthWorld() once, at its top.
import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, expect } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { authorizeUrl, CookieJar, driveAuthorize, pkce, postForm, type Credentials } from '../helpers/oidc.ts';
import { startOidcWorld, type OidcWorld, type TestClient } from '../helpers/oidc-fixture.ts';

export let w: OidcWorld;
export let as: oauth.AuthorizationServer;
export let A: TestClient;
export let B: TestClient;
export const insecure = { [oauth.allowInsecureRequests]: true } as const;

export const client = (c: TestClient): oauth.Client => ({ client_id: c.id });
export const ep = (name: 'token' | 'revoke' | 'userinfo' | 'authorize' | 'jwks') => `${w.issuer}/oauth/${name}`;

export interface Tokens {
  access_token: string;
  refresh_token: string;
  id_token: string;
  expires_in: number;
  token_type: string;
  scope: string;
}

/** Runs authorize for `user` and returns the code, or the whole callback for tests that need it. */
export async function getCode(c: TestClient, user: Credentials, opts: { scope?: string; redirectUri?: string; jar?: CookieJar } = {}) {
  const p = pkce();
  const state = oauth.generateRandomState();
  const redirectUri = opts.redirectUri ?? c.redirectUris[0]!;
  const url = authorizeUrl(ep('authorize'), { clientId: c.id, redirectUri, scope: opts.scope, state, challenge: p.challenge, method: 'S256' });
  const r = await driveAuthorize(url, user, { jar: opts.jar });
  if (!r.callback) throw new Error(`authorize did not redirect: ${r.last?.status} ${r.last?.body.slice(0, 400)}`);
  expect(r.callback.origin + r.callback.pathname).toBe(redirectUri);
  const params = oauth.validateAuthResponse(as, client(c), r.callback, state);
  return { code: params.get('code')!, verifier: p.verifier, redirectUri, params, callback: r.callback };
}

/** Code exchange through the raw token endpoint; returns the raw response. */
export const exchange = (c: Pick<TestClient, 'id' | 'secret'>, code: string, verifier: string | undefined, redirectUri: string | undefined, extra: Record<string, string> = {}) =>
  postForm(ep('token'), { grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: redirectUri, client_id: c.id, client_secret: c.secret, ...extra });

export const refresh = (c: Pick<TestClient, 'id' | 'secret'>, rt: string) =>
  postForm(ep('token'), { grant_type: 'refresh_token', refresh_token: rt, client_id: c.id, client_secret: c.secret });

/** A full login through oauth4webapi's own token request and response validation. */
export async function login(c: TestClient, user: Credentials, scope = 'openid profile email'): Promise<Tokens> {
  const { verifier, redirectUri, params } = await getCode(c, user, { scope });
  const res = await oauth.authorizationCodeGrantRequest(as, client(c), oauth.ClientSecretPost(c.secret), params, redirectUri, verifier, insecure);
  const t = await oauth.processAuthorizationCodeResponse(as, client(c), res);
  return t as unknown as Tokens;
}

export const userinfo = (token: string | undefined, scheme = 'Bearer') =>
  call(w.gw.url, 'GET', new URL(ep('userinfo')).pathname, { headers: token === undefined ? {} : { authorization: `${scheme} ${token}` } });

export const api = (token: string, method = 'GET', body?: unknown) => call(w.gw.url, method, '/api/dedicated', { token, body });

export function expectError(res: { status: number; body: Record<string, unknown> }, status: number, error: string, description?: RegExp) {
  expect({ status: res.status, error: res.body.error }).toEqual({ status, error });
  if (res.body.error_description !== undefined) expect(typeof res.body.error_description).toBe('string');
  if (description) expect(res.body.error_description).toMatch(description);
}

export const INVALID_TOKEN = (res: { status: number; body: Record<string, unknown> }) => expectError(res, 401, 'invalid_token');

/** Starts the world before the file's tests and closes it after them. */
export function useOauthWorld(): void {
  beforeAll(async () => {
    w = await startOidcWorld();
    A = await w.newClient();
    B = await w.newClient();
    as = await oauth.processDiscoveryResponse(new URL(w.issuer), await oauth.discoveryRequest(new URL(w.issuer), insecure));
  });
  afterAll(async () => w?.close());
}
