// The OIDC issuer inside the gateway's one Koa app. Only the document's endpoints reach
// oidc-provider; the login and consent pages and userinfo are ours; token and revoke are rate
// limited per client address. Expired artifacts are purged at start and every few minutes. At start the
// gateway registers its own first-party public client `panel`; the panel signs out through
// `POST /oauth/logout` (sign-out.ts).
import type { Context, Middleware, Next } from 'koa';
import { errors, type KoaContextWithOIDC } from 'oidc-provider';
import type { Database } from '../db/database.ts';
import { ApiError } from '../domain/errors.ts';
import { databaseUnavailable, isDatabaseUnavailable } from '../db/unavailable.ts';
import { RateLimiter } from '../http/middleware/rate-limit.ts';
import type { Logger } from '../../common/log.ts';
import { AccessTokenVerifier, looksLikeJwt } from './access-tokens.ts';
import { DatabaseClientSource, consumePending, purgeExpired } from './adapter.ts';
import { requestScope, type RequestScope } from './request-scope.ts';
import { revokeJwtAfterProvider, userinfo } from './endpoints.ts';
import { interactionRoutes } from './interactions.ts';
import { addressKey, LoginLimiter, type Limit } from './login-limits.ts';
import { createProvider } from './provider.ts';
import { avatarBase, avatarRoute } from './avatars.ts';
import { signOutRoute } from './sign-out.ts';
import { ensurePanelClient } from '../domain/clients.ts';

const PURGE_INTERVAL_MS = 10 * 60_000;

export interface IssuerConfig {
  issuerUrl: string;
  /** The access tokens' audience: `<PUBLIC_URL>/api`. */
  audience: string;
  db: Database;
  log: Logger;
  accessTokenKey: Buffer;
  cookieKeys: string[];
  secretEncryptionKey: Buffer;
  /** Token and revoke requests per client address. */
  rateLimitPerMinute: number;
  rateLimitBurst: number;
  loginLimits?: { accountAddress: Limit; address: Limit };
  /** PUBLIC_URL: the generated avatars are served under it (docs/CONTRACTS.md "REST shapes"); defaults to the issuer URL. */
  publicUrl?: string;
  /** Milliseconds now for every rate limit here (sign-in, token, revoke) and for access tokens' expiry; Date.now unless a test drives the time. */
  clock?: () => number;
}

export interface Issuer {
  middleware: Middleware;
  /** For the Authenticator: API calls with the issuer's access tokens. */
  accessTokens: AccessTokenVerifier;
  stop(): void;
}

/** Paths (below the issuer's own path) that oidc-provider answers. */
const PROVIDER_PATHS = /^\/(?:\.well-known\/openid-configuration|oauth\/(?:authorize(?:\/[A-Za-z0-9_-]{1,64})?|token|revoke|jwks))$/;

/**
 * RFC 6749 5.2 counts "no client authentication included" as invalid_client (401). oidc-provider
 * answers a request without credentials, or with HTTP Basic and an empty secret, with 400
 * invalid_request, while the same empty secret in the body is already 401 invalid_client.
 */
const NO_CREDENTIALS = new Set(['no client authentication mechanism provided', 'client_secret must be provided in the Authorization header']);

/**
 * oidc-provider answers any failure of its storage as 500 server_error; when the cause was the database out
 * of reach (a switch-over to the standby), the answer is the API's: 503 with Retry-After, and for the JSON
 * endpoints (token, userinfo, revocation ...) the body {"error":"unavailable", ...} (docs/CONTRACTS.md "REST
 * errors"). An HTML error page keeps its text under the 503.
 */
function databaseOutOfReach(ctx: Context): void {
  if (ctx.state.databaseUnavailable !== true || ctx.status !== 500) return;
  const refusal = databaseUnavailable();
  ctx.status = refusal.status;
  ctx.set(refusal.headers);
  const body = ctx.body as { error?: unknown } | undefined;
  if (body && typeof body === 'object' && !Buffer.isBuffer(body) && body.error === 'server_error') ctx.body = refusal.body;
}

function missingCredentialsAreInvalidClient(ctx: Context): void {
  const body = ctx.body as { error?: string; error_description?: string } | undefined;
  if (ctx.status !== 400 || body?.error !== 'invalid_request' || !NO_CREDENTIALS.has(body.error_description ?? '')) return;
  ctx.status = 401;
  ctx.body = { error: 'invalid_client', error_description: 'client authentication failed: send client_id and client_secret in the body or as HTTP Basic.' };
  ctx.set('WWW-Authenticate', 'Basic realm="oauth", error="invalid_client"');
}

export async function createIssuer(c: IssuerConfig): Promise<Issuer> {
  const issuer = new URL(c.issuerUrl);
  const prefix = issuer.pathname.replace(/\/+$/, '');
  const interactionBase = `${prefix}/interaction`;
  const clock = c.clock ?? Date.now;
  const accessTokens = new AccessTokenVerifier(c.db, { key: c.accessTokenKey, issuer: c.issuerUrl, audience: c.audience, clock });
  const avatars = avatarBase(c.publicUrl ?? c.issuerUrl);
  const serveAvatar = avatarRoute(c.db, new URL(avatars).pathname);
  const clients = new DatabaseClientSource(c.db, c.secretEncryptionKey);
  await ensurePanelClient(c.db, c.publicUrl ?? c.issuerUrl);
  const provider = createProvider({
    issuer: c.issuerUrl,
    audience: c.audience,
    db: c.db,
    accessTokenKey: c.accessTokenKey,
    cookieKeys: c.cookieKeys,
    clients,
    interactionPath: interactionBase,
    avatars,
  });
  // oidc-provider answers its own failures with server_error; the cause goes to our log (never the token values).
  // The database out of reach (a switch-over) is no bug: marked here, answered 503 below (databaseOutOfReach).
  provider.on('server_error', (ctx: Context, err: unknown) => {
    if (isDatabaseUnavailable(err)) {
      ctx.state.databaseUnavailable = true;
      c.log.warn('oidc request refused: database unavailable', { request_id: ctx.state.requestId, path: ctx.path });
      return;
    }
    c.log.error('oidc server_error', { request_id: ctx.state.requestId, path: ctx.path, err });
  });
  const pages = interactionRoutes({
    provider,
    db: c.db,
    cookieKeys: c.cookieKeys,
    basePath: interactionBase,
    issuerOrigin: issuer.origin,
    limiter: new LoginLimiter(c.loginLimits, clock),
    log: c.log,
    avatars,
  });
  const signOut = signOutRoute({
    provider,
    db: c.db,
    origins: [...new Set([issuer.origin, new URL(c.publicUrl ?? c.issuerUrl).origin])],
    publicUrl: c.publicUrl ?? c.issuerUrl,
    log: c.log,
  });
  const requests = new RateLimiter({ perMinute: c.rateLimitPerMinute, burst: c.rateLimitBurst, clock });
  // The same budget per client, spent once oidc-provider has authenticated it (so a stolen secret used
  // from many addresses is still limited, and nobody can spend a client's budget with its public id
  // alone). oidc-provider announces the authenticated client on the request's own OIDC context, which
  // is created inside its router: the hook goes on that context's `entity`, and the error thrown there
  // is answered by the endpoint's own error handling like any other token-endpoint error.
  const perClient = new RateLimiter({ perMinute: c.rateLimitPerMinute, burst: c.rateLimitBurst, clock });
  const oidcContext = (provider as unknown as { OIDCContext: { prototype: { entity(key: string, value: unknown): void } } }).OIDCContext.prototype;
  const assign = oidcContext.entity;
  oidcContext.entity = function limited(this: { ctx: KoaContextWithOIDC; route: string }, key: string, value: unknown) {
    assign.call(this, key, value);
    if (key !== 'Client' || (this.route !== 'token' && this.route !== 'revocation')) return;
    // A public client (the panel, above all) authenticates with its public id alone: a budget per client
    // would be one budget for all of its users together, which anyone could spend. Its requests count
    // against their addresses' budget only.
    if ((value as { tokenEndpointAuthMethod?: string }).tokenEndpointAuthMethod === 'none') return;
    const wait = perClient.take(`client:${(value as { clientId: string }).clientId}`);
    if (wait > 0) {
      this.ctx.set('Retry-After', String(wait));
      const e = new errors.CustomOIDCProviderError('rate_limited', `Too many requests for this client; retry in ${wait} s.`);
      Object.assign(e, { status: 429, statusCode: 429 });
      throw e;
    }
  };
  // Failed client authentications per address: once an address has spent its budget of failures it is
  // refused before any secret is checked, until the bucket refills, so guessing secrets stays slow;
  // clients at other addresses are unaffected.
  const clientFailures = new RateLimiter({ perMinute: Math.max(20, c.rateLimitPerMinute / 10), burst: Math.max(20, c.rateLimitBurst / 5), clock });
  const blockedUntil = new Map<string, number>();
  const providerStack = provider.middleware as Middleware[];

  /** oidc-provider as a mounted Koa app: it sees the path below the issuer's path. */
  async function runProvider(ctx: Context, rest: string, next: Next): Promise<void> {
    const original = ctx.path;
    if (prefix) {
      ctx.mountPath = prefix;
      ctx.path = rest;
    }
    const dispatch = async (i: number): Promise<void> => {
      const mw = providerStack[i];
      if (!mw) {
        ctx.path = original;
        await next();
        ctx.path = rest;
        return;
      }
      await mw(ctx, () => dispatch(i + 1));
    };
    const scope: RequestScope = {};
    try {
      await requestScope.run(scope, () => dispatch(0));
    } finally {
      ctx.path = original;
    }
    // A redemption whose consume was deferred but that stored no refresh token: consume it now, before
    // the response leaves; if another request won the race, the tokens in this response are withdrawn.
    const lost = await consumePending(c.db, scope);
    if (lost) {
      ctx.status = 400;
      ctx.body = { error: 'invalid_grant', error_description: lost.error_detail ?? 'grant request is invalid' };
    }
  }

  const middleware: Middleware = async (ctx, next) => {
    if (await serveAvatar(ctx)) {
      ctx._matchedRoute = '/avatars/:key';
      return;
    }
    if (prefix && ctx.path !== prefix && !ctx.path.startsWith(`${prefix}/`)) return next();
    const rest = ctx.path.slice(prefix.length) || '/';
    // The route label of the request metrics (server/http/app.ts), with uids folded.
    const label = (route: string) => {
      ctx._matchedRoute = route;
    };
    if (rest.startsWith('/interaction/')) {
      // Labelled only once handled: the pages accept `<uid>` and `<uid>/(login|consent)`, so the label set stays small.
      if (await pages(ctx, rest.slice('/interaction/'.length))) return label(rest.replace(/^\/interaction\/[^/]+/, '/interaction/:uid'));
      return next();
    }
    if (rest === '/oauth/userinfo') {
      label(rest);
      return userinfo(ctx, accessTokens, c.db, avatars);
    }
    if (rest === '/oauth/logout') {
      label(rest);
      return signOut(ctx);
    }
    if (!PROVIDER_PATHS.test(rest)) return next();
    label(rest.replace(/^\/oauth\/authorize\/.+$/, '/oauth/authorize/:uid'));
    const clientCall = rest === '/oauth/token' || rest === '/oauth/revoke';
    const address = addressKey(ctx.ip);
    if (clientCall && ctx.method === 'POST') {
      const until = blockedUntil.get(address);
      if (until !== undefined) {
        const left = Math.ceil((until - clock()) / 1000);
        if (left > 0) throw new ApiError('rate_limited', `Too many failed client authentications from this address; retry in ${left} s.`, { 'Retry-After': String(left) });
        blockedUntil.delete(address);
      }
      const wait = requests.take(`oauth:${address}`);
      if (wait > 0) throw new ApiError('rate_limited', `Too many requests from this address; retry in ${wait} s.`, { 'Retry-After': String(wait) });
    }
    await runProvider(ctx, rest, next);
    databaseOutOfReach(ctx);
    if (clientCall) missingCredentialsAreInvalidClient(ctx);
    if (clientCall && ctx.status === 401) {
      const wait = clientFailures.take(`oauth-fail:${address}`);
      if (wait > 0) {
        if (blockedUntil.size >= 100_000) blockedUntil.clear();
        blockedUntil.set(address, clock() + wait * 1000);
      }
    }
    if (rest === '/oauth/revoke') await revokeJwtAfterProvider(ctx as KoaContextWithOIDC, accessTokens, c.db);
  };

  const purge = () =>
    purgeExpired(c.db)
      .then((n) => {
        if (n > 0) c.log.info('oidc purge', { deleted: n });
      })
      .catch((e: unknown) => c.log.warn('oidc purge failed', { err: e }));
  void purge();
  const timer = setInterval(purge, PURGE_INTERVAL_MS);
  timer.unref();

  return {
    middleware,
    accessTokens,
    stop: () => clearInterval(timer),
  };
}

export { looksLikeJwt };
