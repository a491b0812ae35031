// An application someone registered (in the developer portal, or with `admin client create`), played by an
// independent OAuth library, oauth4webapi, on the test's side: its redirect URI is a small HTTP server here
// that catches the code; the person signs in and consents in the browser; the library redeems the code with
// PKCE and the application's secret and refreshes. A browser test of the portal registers the application
// through the page, then proves with this that the application really works (and that a rotated secret
// turns its refresh token away).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as oauth from 'oauth4webapi';
import type { Page } from 'playwright-core';
import { until } from './wait.ts';

const insecure = { [oauth.allowInsecureRequests]: true } as const;

/** The application's redirect URI: a loopback server that records every request and answers a small page. */
export class RedirectCatcher {
  readonly received: URL[] = [];

  private constructor(
    private readonly server: http.Server,
    /** The URI to register for the application. */
    readonly uri: string,
  ) {}

  static async start(path = '/callback'): Promise<RedirectCatcher> {
    let self: RedirectCatcher | undefined;
    const server = http.createServer((req, res) => {
      self!.received.push(new URL(req.url ?? '/', self!.uri));
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end('<!doctype html><html lang="en"><title>Application</title><main><p>Back at the application.</p></main></html>');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    self = new RedirectCatcher(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`);
    return self;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((r) => this.server.close(() => r()));
  }
}

export interface Application {
  clientId: string;
  /** Absent for a public client (PKCE alone). */
  clientSecret?: string;
}

export interface CodeFlowResult {
  tokens: oauth.TokenEndpointResponse;
  /** Whether the issuer showed its consent page on the way (and the test approved it). */
  consented: boolean;
}

/** The issuer's metadata, read the way a client does (discovery). */
export async function discover(issuer: string): Promise<oauth.AuthorizationServer> {
  const u = new URL(issuer);
  return oauth.processDiscoveryResponse(u, await oauth.discoveryRequest(u, { algorithm: 'oidc', ...insecure }));
}

const auth = (app: Application): oauth.ClientAuth => (app.clientSecret === undefined ? oauth.None() : oauth.ClientSecretPost(app.clientSecret));

/**
 * The authorization code flow of `app` in `page`'s browser: the page goes to the issuer's authorize endpoint;
 * if the issuer asks for the password, `who` is entered; its consent page is approved; the code that reaches
 * `catcher` is validated and redeemed by oauth4webapi (PKCE S256). Throws with the issuer's error when the
 * flow ends in one.
 */
export async function codeFlow(
  page: Page,
  issuer: string,
  app: Application,
  catcher: RedirectCatcher,
  who: { email: string; password: string },
  scope = 'openid profile email',
): Promise<CodeFlowResult> {
  const as = await discover(issuer);
  const client: oauth.Client = { client_id: app.clientId };
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const url = new URL(as.authorization_endpoint!);
  for (const [k, v] of Object.entries({
    client_id: app.clientId,
    redirect_uri: catcher.uri,
    response_type: 'code',
    scope,
    state,
    code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
    code_challenge_method: 'S256',
  })) {
    url.searchParams.set(k, v);
  }
  const from = catcher.received.length;
  await page.goto(url.href);
  let consented = false;
  const arrived = () => catcher.received.slice(from).find((u) => u.pathname === new URL(catcher.uri).pathname);
  // The pages the issuer shows, in whatever order it shows them, until the browser is back at the application.
  await until('the browser back at the application', async () => {
    if (arrived()) return true;
    if (await page.locator('form input[name=password]').isVisible()) {
      await page.getByLabel('Email').fill(who.email);
      await page.getByLabel('Password').fill(who.password);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForLoadState('load');
    } else if (await page.getByRole('button', { name: 'Allow' }).isVisible()) {
      consented = true;
      await page.getByRole('button', { name: 'Allow' }).click();
      await page.waitForLoadState('load');
    }
    return false;
  });
  const callback = arrived()!;
  const params = oauth.validateAuthResponse(as, client, callback, state);
  const response = await oauth.authorizationCodeGrantRequest(as, client, auth(app), params, catcher.uri, verifier, insecure);
  return { tokens: await oauth.processAuthorizationCodeResponse(as, client, response, { requireIdToken: scope.split(' ').includes('openid') }), consented };
}

/**
 * A refresh as the application makes it: the new tokens, or the OAuth error the issuer answered
 * (invalid_grant for a refused refresh token, invalid_client for a refused secret).
 */
export async function refresh(issuer: string, app: Application, refreshToken: string): Promise<{ tokens: oauth.TokenEndpointResponse } | { error: string }> {
  const as = await discover(issuer);
  const client: oauth.Client = { client_id: app.clientId };
  try {
    const response = await oauth.refreshTokenGrantRequest(as, client, auth(app), refreshToken, insecure);
    return { tokens: await oauth.processRefreshTokenResponse(as, client, response) };
  } catch (e) {
    if (e instanceof oauth.ResponseBodyError) return { error: e.error };
    throw e;
  }
}
