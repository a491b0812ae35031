// Signing in: the panel is the issuer's first-party public client `panel` (docs/PANEL.md "Signing in"):
// authorization code + PKCE S256, no client secret. Tokens live in this module's memory only, never in
// localStorage, sessionStorage or a cookie script can read; a reload therefore signs in again, silently,
// with `prompt=none` through the issuer's own session cookie. Only the PKCE verifier, the state and the
// page to come back to cross the redirect, in sessionStorage, and are removed when the callback uses them.
//
// The issuer revokes a whole grant when a refresh token is used twice, so refreshes are serialised: one at a
// time per tab, every caller waiting for the same one.
import * as oauth from 'oauth4webapi';
import { loadConfig, type PanelConfig } from './config.ts';

const PENDING_KEY = 'tunnelgate.signin';
export const CALLBACK_PATH = '/callback';
/** Where the issuer sends the browser back after sign-out (a path of PUBLIC_URL). */
export const SIGNED_OUT_PATH = '/signed-out';
/** Refresh this long before the access token expires, so a request never leaves with a dying token. */
const EARLY_REFRESH_MS = 60_000;

interface Tokens {
  access: string;
  refresh: string | undefined;
  expiresAt: number;
}

interface Pending {
  verifier: string;
  state: string;
  returnTo: string;
  silent: boolean;
}

let config: PanelConfig | undefined;
let server: oauth.AuthorizationServer | undefined;
let client: oauth.Client | undefined;
let tokens: Tokens | undefined;
let refreshing: Promise<string> | undefined;

const insecure = () => ({ [oauth.allowInsecureRequests]: new URL(config!.issuer).protocol === 'http:' });

async function discover(): Promise<oauth.AuthorizationServer> {
  if (server) return server;
  config = await loadConfig();
  const issuer = new URL(config.issuer);
  server = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { algorithm: 'oidc', ...insecure() }));
  client = { client_id: config.clientId };
  return server;
}

const redirectUri = () => new URL(CALLBACK_PATH, location.origin).href;

/** Leaves for the issuer's sign-in page (or, `silent`, a prompt=none round trip); comes back to `returnTo`. */
export async function signIn(returnTo: string, silent: boolean): Promise<never> {
  const as = await discover();
  const verifier = oauth.generateRandomCodeVerifier();
  const state = oauth.generateRandomState();
  const pending: Pending = { verifier, state, returnTo: safeReturn(returnTo), silent };
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  const url = new URL(as.authorization_endpoint!);
  url.searchParams.set('client_id', client!.client_id);
  url.searchParams.set('redirect_uri', redirectUri());
  url.searchParams.set('response_type', 'code');
  url.searchParams.set('scope', config!.scope);
  url.searchParams.set('state', state);
  url.searchParams.set('code_challenge', await oauth.calculatePKCECodeChallenge(verifier));
  url.searchParams.set('code_challenge_method', 'S256');
  if (silent) url.searchParams.set('prompt', 'none');
  location.assign(url.href);
  return new Promise<never>(() => {});
}

/** Only a path of this app may be returned to: never another origin, never the callback itself. */
function safeReturn(path: string): string {
  if (!path.startsWith('/') || path.startsWith('//') || path.startsWith(CALLBACK_PATH)) return '/';
  return path;
}

export class SignInError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * On /callback: redeems the code. Answers the page to go back to; `login_required` after a silent attempt
 * becomes an interactive sign-in (the issuer has no session for this browser).
 */
export async function completeSignIn(): Promise<string> {
  const as = await discover();
  const raw = sessionStorage.getItem(PENDING_KEY);
  sessionStorage.removeItem(PENDING_KEY);
  if (!raw) throw new SignInError('no_pending', 'this sign-in was not started here (or was already used)');
  const pending = JSON.parse(raw) as Pending;
  let params: URLSearchParams;
  try {
    params = oauth.validateAuthResponse(as, client!, new URL(location.href), pending.state);
  } catch (err) {
    if (err instanceof oauth.AuthorizationResponseError) {
      const code = err.error;
      if (pending.silent && (code === 'login_required' || code === 'consent_required' || code === 'interaction_required')) {
        return signIn(pending.returnTo, false);
      }
      throw new SignInError(code, err.error_description ?? code);
    }
    throw err;
  }
  const response = await oauth.authorizationCodeGrantRequest(as, client!, oauth.None(), params, redirectUri(), pending.verifier, insecure());
  keep(await oauth.processAuthorizationCodeResponse(as, client!, response, { requireIdToken: false }));
  return pending.returnTo;
}

function keep(r: oauth.TokenEndpointResponse): void {
  tokens = {
    access: r.access_token,
    refresh: r.refresh_token ?? tokens?.refresh,
    expiresAt: Date.now() + (r.expires_in ?? 300) * 1000,
  };
}

export function signedIn(): boolean {
  return tokens !== undefined;
}

/**
 * A usable access token: the one held, or a fresh one from the refresh token when it is about to expire
 * (or `force`, after the API refused it). A refused refresh sends the user to sign in, keeping their place.
 */
export async function accessToken(force = false): Promise<string> {
  if (!tokens) return signIn(currentPlace(), true);
  if (!force && tokens.expiresAt - Date.now() > EARLY_REFRESH_MS) return tokens.access;
  const stale = tokens.access;
  refreshing ??= refresh(stale).finally(() => {
    refreshing = undefined;
  });
  return refreshing;
}

async function refresh(stale: string): Promise<string> {
  // Another caller may have refreshed while this one waited for its turn.
  if (tokens && tokens.access !== stale) return tokens.access;
  const as = await discover();
  if (!tokens?.refresh) return signIn(currentPlace(), true);
  try {
    const response = await oauth.refreshTokenGrantRequest(as, client!, oauth.None(), tokens.refresh, insecure());
    keep(await oauth.processRefreshTokenResponse(as, client!, response));
    return tokens.access;
  } catch (err) {
    if (err instanceof oauth.ResponseBodyError && err.error === 'invalid_grant') {
      tokens = undefined;
      return signIn(currentPlace(), true);
    }
    throw err;
  }
}

const currentPlace = () => location.pathname + location.search;

/**
 * Sign-out: the refresh token is revoked (its grant with it), then the browser goes to the issuer's
 * sign-out endpoint, which ends the issuer session and comes back to the panel's signed-out page.
 */
export async function signOut(): Promise<never> {
  const as = await discover();
  const held = tokens;
  tokens = undefined;
  if (held?.refresh) {
    try {
      const response = await oauth.revocationRequest(as, client!, oauth.None(), held.refresh, insecure());
      // Read the answer to its end before leaving the page: a body still streaming when the form below
      // navigates is aborted, and the browser reports a failed request.
      await response.clone().arrayBuffer();
      await oauth.processRevocationResponse(response);
    } catch {
      // The session still ends below; a refresh token whose revocation failed expires on its own.
    }
  }
  const form = document.createElement('form');
  form.method = 'POST';
  form.action = config!.signOutUrl;
  const back = document.createElement('input');
  back.type = 'hidden';
  back.name = 'return_to';
  back.value = SIGNED_OUT_PATH;
  form.append(back);
  document.body.append(form);
  form.submit();
  return new Promise<never>(() => {});
}
