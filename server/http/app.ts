// The gateway's one Koa app: health and metrics, the REST routes under /api, GraphQL at /graphql, the
// customer panel's files at `/`.
// Middleware order matters: request context (id, logs, metrics) wraps the error mapper, which wraps
// everything that can throw an ApiError.
import { randomUUID, timingSafeEqual, createHash } from 'node:crypto';
import fs from 'node:fs';
import type http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import Koa, { type Context, type Next } from 'koa';
import YAML from 'yaml';
import type { Services } from '../services.ts';
import type { Logger } from '../../common/log.ts';
import { ApiError } from '../domain/errors.ts';
import { databaseUnavailable, isDatabaseUnavailable } from '../db/unavailable.ts';
import { migrationsPending } from '../db/orm.ts';
import { createMetrics, type Metrics } from './metrics.ts';
import { RequestGate, type Admission } from './middleware/request-gate.ts';
import { clientAddress } from './client-address.ts';
import { readJsonBody } from './middleware/body.ts';
import { prefetchList, restRouter, servePricing } from './rest/routes.ts';
import { createGraphql } from '../graphql/index.ts';
import { graphqlRefusalBody } from '../graphql/errors.ts';
import { createIssuer, looksLikeJwt } from '../oidc/index.ts';
import { avatarBase } from '../oidc/avatars.ts';
import { createPanel, wantsHtml } from './panel.ts';
import { loadSecrets } from '../secrets.ts';
import { purgeExpiredIdempotency } from '../domain/tunnels/index.ts';
import { VERSION } from '../version.ts';

const IDEMPOTENCY_PURGE_MS = 60 * 60_000;
/** The panel's GraphQL explorer page, where a browser opening /graphql is sent. */
const GRAPHQL_EXPLORER = '/developers/graphql';

declare module 'koa' {
  interface Request {
    /** Parsed JSON body, set for /graphql before Apollo's middleware reads it. */
    body?: unknown;
  }
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const OPENAPI_PATH = path.join(ROOT, 'schema/openapi.yaml');

export interface Gateway {
  app: Koa;
  metrics: Metrics;
  /** Flips /readyz to 503 while the process drains, and ends the WebSockets (they would hold the listener's close). */
  setDraining(): void;
  stop(): Promise<void>;
}

function requestContext(log: Logger, metrics: Metrics, accessLog: boolean, trustProxy: number, publicHttps: boolean) {
  return async (ctx: Context, next: Next) => {
    const start = process.hrtime.bigint();
    // One rule for the client address everywhere ctx.ip is read (client-address.ts, docs/CONTRACTS.md "Starting it").
    ctx.request.ip = clientAddress(ctx.req, trustProxy);
    // Behind a TLS-terminating proxy the hop to us is plain HTTP, yet the browser is on https: the
    // public scheme is PUBLIC_URL's. Koa and oidc-provider decide cookies' Secure flag from
    // ctx.secure (and Koa refuses to set a Secure cookie on a request it thinks is http), so the
    // request is marked https here, whatever X-Forwarded-Proto says or omits.
    if (publicHttps) Object.defineProperty(ctx.request, 'protocol', { value: 'https', configurable: true });
    const incoming = ctx.get('x-request-id');
    const id = /^[\w.-]{1,64}$/.test(incoming) ? incoming : randomUUID();
    ctx.state.requestId = id;
    ctx.set('X-Request-Id', id);
    try {
      await next();
    } finally {
      const route = typeof ctx._matchedRoute === 'string' ? ctx._matchedRoute : ctx.path.startsWith('/graphql') ? '/graphql' : 'unmatched';
      const seconds = Number(process.hrtime.bigint() - start) / 1e9;
      metrics.requests.inc({ method: ctx.method, route, status: String(ctx.status) });
      metrics.duration.observe({ method: ctx.method, route }, seconds);
      if (accessLog || ctx.status >= 500) log.info('request', { request_id: id, method: ctx.method, route, status: ctx.status, ms: Math.round(seconds * 1e4) / 10 });
    }
  };
}

function errorMapper(log: Logger) {
  return async (ctx: Context, next: Next) => {
    try {
      await next();
    } catch (e) {
      const err = e instanceof ApiError ? e : isDatabaseUnavailable(e) ? databaseUnavailable() : fromKoaError(e);
      if (err) {
        if (err.internal !== undefined) log.warn('request refused', { request_id: ctx.state.requestId, method: ctx.method, path: ctx.path, error: err.code, detail: err.internal });
        ctx.status = err.status;
        ctx.set(err.headers);
        // RFC 6750: every 401 carries a challenge. The domain's invalid_token (an account gone since the
        // credential was checked) carries none of its own: HTTP headers are this adapter's business.
        if (err.code === 'invalid_token' && err.headers['WWW-Authenticate'] === undefined) ctx.set('WWW-Authenticate', 'Bearer error="invalid_token"');
        ctx.body = err.body;
        return;
      }
      log.error('unhandled error', { request_id: ctx.state.requestId, method: ctx.method, path: ctx.path, err: e });
      ctx.status = 500;
      ctx.body = { error: 'server_error', error_description: `Internal error; quote request id ${ctx.state.requestId} to support.` };
    }
  };
}

/** Errors thrown by Koa or the router themselves (a bad URI encoding, for example). */
function fromKoaError(e: unknown): ApiError | null {
  const status = (e as { status?: number }).status;
  if (status === 400 || status === 414 || status === 431) return new ApiError('invalid_request', (e as Error).message || 'Bad request.');
  return null;
}

export interface GatewayOptions {
  /** Milliseconds now for every rate limit (the request gate's, the issuer's); Date.now unless a test drives the time itself. */
  clock?: () => number;
  /** How often stale idempotency records are purged; hourly unless a test wants to see the timer fire. */
  idempotencyPurgeMs?: number;
}

export async function createGateway(services: Services, log: Logger, server: http.Server, opts: GatewayOptions = {}): Promise<Gateway> {
  const metrics = createMetrics(true, {
    pendingWebhooks: () => services.webhooks.pendingDeliveries(),
    queueDepth: () => services.provisioning.queueDepth(),
    nodeReachability: () => services.health.nodeReachability(),
    tunnelCounts: () => services.health.tunnelCounts(),
  });
  const stopWebhookMetrics = services.webhooks.onOutcome((outcome) => metrics.webhookDeliveries.inc({ outcome }));
  const stopJobMetrics = services.provisioning.onJob((op, outcome, seconds) => metrics.edgeJobs.observe({ op, outcome }, seconds));
  const stopAttackMetrics = services.attacks.ingest.onChange((kind) => (kind === 'started' ? metrics.attacksStarted : metrics.attacksEnded).inc());
  const { trustProxy, publicUrl, issuerUrl, metricsToken } = services.config;
  // Koa's own proxy handling only decides the protocol (X-Forwarded-Proto) and host from here on;
  // the client address is set by requestContext.
  const app = new Koa({ proxy: trustProxy > 0, maxIpsCount: trustProxy });
  const publicHttps = publicUrl.startsWith('https:') || issuerUrl.startsWith('https:');
  // Koa would print every error to stderr; ours are logged once, as JSON, by errorMapper.
  app.silent = true;
  let draining = false;

  let openapiJson: string | null = null;
  const openapi = () => (openapiJson ??= JSON.stringify(YAML.parse(fs.readFileSync(OPENAPI_PATH, 'utf8'))));

  app.use(requestContext(log, metrics, services.config.accessLog, trustProxy, publicHttps));
  app.use(errorMapper(log));

  app.use(async (ctx, next) => {
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') return next();
    switch (ctx.path) {
      case '/api/dedicated/pricing':
        // Public, cheap, and the first thing hit in an attack: answered before the issuer,
        // the request gate (it needs no credential) and the router. The metrics label is the router's.
        ctx._matchedRoute = '/api/dedicated/pricing';
        return servePricing(ctx, services.pricing);
      // Their own route labels in the access log and the request metrics (the router never sees them).
      case '/healthz':
        ctx._matchedRoute = '/healthz';
        ctx.body = { status: 'ok', version: VERSION };
        return;
      case '/readyz': {
        ctx._matchedRoute = '/readyz';
        let pending = -1;
        try {
          pending = await migrationsPending(services.db.orm);
        } catch {
          pending = -1;
        }
        const ok = pending === 0 && !draining;
        ctx.status = ok ? 200 : 503;
        ctx.body = { status: ok ? 'ready' : 'not_ready', database: pending >= 0 ? 'ok' : 'unreachable', migrations_pending: Math.max(pending, 0), draining };
        return;
      }
      case '/metrics':
        ctx._matchedRoute = '/metrics';
        if (metricsToken !== null && !bearerMatches(ctx.get('authorization'), metricsToken)) {
          throw new ApiError('invalid_token', 'GET /metrics needs Authorization: Bearer <METRICS_TOKEN>.', { 'WWW-Authenticate': 'Bearer realm="metrics"' });
        }
        ctx.type = metrics.registry.contentType;
        ctx.body = await metrics.registry.metrics();
        return;
      default:
        return next();
    }
  });

  const { rateLimitPerMinute, rateLimitBurst } = services.config;

  // The OIDC issuer (server/oidc): its endpoints, login and consent pages, and its access tokens as
  // API credentials. oidc-provider reads its own request bodies, so no body parser runs before it.
  const { secrets } = await loadSecrets(services.db, process.env);
  app.keys = secrets.cookieKeys;
  const issuer = await createIssuer({
    issuerUrl: services.config.issuerUrl,
    audience: `${services.config.publicUrl}/api`,
    db: services.db,
    log,
    accessTokenKey: secrets.accessTokenKey,
    cookieKeys: secrets.cookieKeys,
    secretEncryptionKey: secrets.secretEncryptionKey,
    rateLimitPerMinute,
    rateLimitBurst,
    publicUrl: services.config.publicUrl,
    ...(opts.clock ? { clock: opts.clock } : {}),
  });
  services.auth.use(looksLikeJwt, (token) => issuer.accessTokens.principal(token));
  app.use(issuer.middleware);
  const gate = new RequestGate(services.auth, { perMinute: rateLimitPerMinute, burst: rateLimitBurst, ...(opts.clock ? { clock: opts.clock } : {}) });
  /** Runs the gate for this request and keeps its answer where the routes look for the caller. */
  const admit = async (ctx: Context): Promise<Admission> => {
    const admission = await gate.admit(ctx.ip, ctx.get('authorization') || undefined);
    ctx.state.admission = admission;
    return admission;
  };

  const router = restRouter(services, metrics, openapi);
  // The router's context type carries route params; at this boundary a plain Koa middleware is enough.
  const routes = router.routes() as unknown as Koa.Middleware;
  const methods = router.allowedMethods({ throw: false }) as unknown as Koa.Middleware;
  app.use(async (ctx, next) => {
    if (ctx.path !== '/api' && !ctx.path.startsWith('/api/')) return next();
    // Pricing and the API description are public and cheap; everything else spends the caller's budget.
    const path = ctx.path.replace(/\/+$/, '');
    if (!((ctx.method === 'GET' || ctx.method === 'HEAD') && (path === '/api/dedicated/pricing' || path === '/api/openapi.json'))) {
      prefetchList(ctx, services.tunnels, (authorization, keyId) => gate.trustsApiKey(authorization, keyId));
      await admit(ctx);
    }
    await routes(ctx, async () => {
      await methods(ctx, async () => {});
    });
    if (ctx.status === 405) {
      throw new ApiError('method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}; allowed: ${ctx.response.get('Allow')}.`, { Allow: ctx.response.get('Allow') });
    }
    if (ctx.body === undefined && ctx.status === 404) throw new ApiError('not_found', `No route ${ctx.method} ${ctx.path}.`);
  });

  const graphql = await createGraphql(services, server, log, gate);
  app.use(async (ctx, next) => {
    if (ctx.path !== '/graphql') return next();
    // A browser opening /graphql (no query to run) is shown the panel's GraphQL explorer instead of
    // Apollo's 400; queries by GET and every POST are unchanged.
    if ((ctx.method === 'GET' || ctx.method === 'HEAD') && !ctx.URL.searchParams.has('query') && wantsHtml(ctx)) {
      ctx._matchedRoute = '/graphql';
      ctx.vary('Accept');
      ctx.redirect(GRAPHQL_EXPLORER);
      return;
    }
    // Every GraphQL request passes the gate (GET queries too); the WebSocket transport has its own
    // entrance in graphql/index.ts, through the same gate. A spent budget is answered in GraphQL's
    // error shape (extensions.code rate_limited), as every other /graphql refusal, with Retry-After.
    try {
      await admit(ctx);
    } catch (e) {
      if (!(e instanceof ApiError) || e.code !== 'rate_limited') throw e;
      ctx.status = e.status;
      ctx.set(e.headers);
      ctx.body = graphqlRefusalBody(e);
      return;
    }
    if (ctx.method === 'POST') {
      ctx.request.body = await readJsonBody(ctx, services.config.bodyLimitBytes, { required: true });
    }
    await graphql.middleware(ctx, next);
  });

  // The customer panel at `/` (server/http/panel.ts), behind everything above: the paths those answer
  // are reserved, so a browser asking for them never gets the app in place of their own answers or 404s.
  const issuerPath = new URL(issuerUrl).pathname.replace(/\/+$/, '');
  const panel = createPanel({
    dir: services.config.panelDir,
    publicUrl,
    issuerUrl,
    reserved: [
      '/api',
      '/graphql',
      '/metrics',
      '/healthz',
      '/readyz',
      new URL(avatarBase(publicUrl)).pathname,
      // The issuer mounted at its own path owns all of it; at `/` it owns these.
      ...(issuerPath ? [issuerPath] : ['/oauth', '/interaction', '/.well-known']),
    ],
    log,
  });
  app.use(panel.middleware);

  app.use((ctx) => {
    throw new ApiError('not_found', `No route ${ctx.method} ${ctx.path}.`);
  });

  // Idempotency records older than 7 days no longer count (domain/tunnels/purchase.ts); this drops them in
  // batches so the table stays bounded (docs/API.md "Idempotency"). Every replica may run it: deletes are idempotent.
  const purgeIdempotency = () =>
    purgeExpiredIdempotency(services.db)
      .then((n) => {
        if (n > 0) log.info('idempotency purge', { deleted: n });
      })
      .catch((e: unknown) => log.warn('idempotency purge failed', { err: e }));
  void purgeIdempotency();
  const idempotencyTimer = setInterval(purgeIdempotency, opts.idempotencyPurgeMs ?? IDEMPOTENCY_PURGE_MS);
  idempotencyTimer.unref();

  return {
    app,
    metrics,
    setDraining: () => {
      draining = true;
      graphql.closeSockets();
    },
    stop: () => {
      clearInterval(idempotencyTimer);
      stopWebhookMetrics();
      stopJobMetrics();
      stopAttackMetrics();
      issuer.stop();
      return graphql.stop();
    },
  };
}

/** Constant-time check of `Authorization: Bearer <expected>` (hashes first, so lengths do not leak either). */
function bearerMatches(header: string, expected: string): boolean {
  const m = /^Bearer +(\S+)$/i.exec(header.trim());
  const given = createHash('sha256').update(m ? m[1]! : '').digest();
  return timingSafeEqual(given, createHash('sha256').update(expected).digest()) && m !== null;
}
