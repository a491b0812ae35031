// The tunnel API under /api: thin adapters from HTTP to the domain services. Paths and field names
// are the tunnel API document's; shapes and errors are docs/CONTRACTS.md's ("REST shapes", "REST errors").
import Router from '@koa/router';
import type { Context } from 'koa';
import type { Services } from '../../services.ts';
import type { Principal } from '../../auth/principal.ts';
import { ApiError } from '../../domain/errors.ts';
import { PURCHASE_FIELDS, UPDATE_FIELDS, validateIdempotencyKey, validatePurchase, validateUpdate, type LifecycleResult, type ListOptions, type TunnelPage } from '../../domain/tunnels/index.ts';
import { apiKeyIdOf } from '../../auth/authenticate.ts';
import { purchaseBody } from './paths.ts';
import { expectObject, readJsonBody } from '../middleware/body.ts';
import type { Metrics } from '../metrics.ts';
import type { Admission } from '../middleware/request-gate.ts';
import { webhookRoutes } from './webhooks.ts';
import { ledgerRoutes } from './ledger.ts';

const pageJson = new WeakMap<object, string>();

/**
 * provision, activate, delete and PATCH: 200 once the move (or the change) is settled, 202 while the agent
 * still has it (docs/CONTRACTS.md "Tunnel lifecycle", "Tunnel settings").
 */
function answer(ctx: Context, res: LifecycleResult): void {
  ctx.status = res.settled ? 200 : 202;
  ctx.body = { tunnel: res.tunnel };
}

/**
 * GET /api/dedicated/pricing: the bytes PricingService made once for this rate and stock (the route must stay cheap under load): no
 * query, no JSON per request.
 */
export async function servePricing(ctx: Context, pricing: Services['pricing']): Promise<void> {
  ctx.type = 'application/json';
  ctx.body = await pricing.json();
}

/** GET /api/dedicated's query: limit and cursor, each at most once; anything else is invalid_request. */
function listOptions(ctx: Context): ListOptions {
  const allowed = ['limit', 'cursor'];
  const extra = Object.keys(ctx.query).filter((k) => !allowed.includes(k));
  if (extra.length) throw new ApiError('invalid_request', `Unknown query parameter: ${extra.join(', ')}.`);
  const { limit, cursor } = ctx.query;
  if (Array.isArray(limit) || Array.isArray(cursor)) throw new ApiError('invalid_request', 'limit and cursor may be given once.');
  if (limit !== undefined && !/^\d{1,3}$/.test(limit)) throw new ApiError('invalid_request', 'limit must be an integer from 1 to 100.');
  return { limit: limit === undefined ? undefined : Number(limit), cursor: cursor ?? null };
}

interface EarlyList {
  keyId: string;
  page: Promise<TunnelPage>;
}

/**
 * GET /api/dedicated with an svc_ key that authenticated here recently: starts reading the page of the
 * key's account, by the key's id, before the gate checks the key, so the two round trips overlap and
 * the caller waits for one (measured: the list was bound by waiting on the database, not by work). The
 * gate still reads the key afresh and decides (a key revoked a moment ago is refused on this very
 * request, docs/CONTRACTS.md "REST errors"); the route uses the page only for the key it verified.
 * Credentials not recently valid here, or out of budget, get nothing started: guesses and throttled
 * callers cost no page reads.
 */
export function prefetchList(ctx: Context, tunnels: Services['tunnels'], trusts: (authorization: string, keyId: string) => boolean): void {
  if (ctx.method !== 'GET' || ctx.path !== '/api/dedicated') return;
  const authorization = ctx.get('authorization');
  const keyId = apiKeyIdOf(authorization);
  if (keyId === null || !trusts(authorization, keyId)) return;
  let opts: ListOptions;
  try {
    opts = listOptions(ctx);
  } catch {
    return; // the route answers it, after the gate
  }
  const page = tunnels.listByKey(keyId, opts);
  // Awaited by the route only once the key is verified; a refused request leaves it unread.
  page.catch(() => {});
  ctx.state.earlyList = { keyId, page } satisfies EarlyList;
}

export function restRouter(services: Services, metrics: Metrics, openapiJson: () => string): Router {
  const router = new Router({ prefix: '/api' });
  const { tunnels, pricing, auth, config } = services;
  // The gate (middleware/request-gate.ts) has already authenticated the caller, once, before any
  // route ran; the routes only read its answer.
  const principal = async (ctx: Context): Promise<Principal> => {
    const admission = ctx.state.admission as Admission | undefined;
    if (!admission) return auth.authenticate(ctx.get('authorization') || undefined);
    if (admission.principal) return admission.principal;
    throw admission.error ?? new ApiError('invalid_token', 'Send Authorization: Bearer <svc_ API key or panel access token>.', { 'WWW-Authenticate': 'Bearer' });
  };

  /** For routes that take no body: a stray body is tolerated only if it is empty JSON. */
  const noBody = async (ctx: Context) => {
    const body = await readJsonBody(ctx, config.bodyLimitBytes, { required: false });
    if (body !== undefined) expectObject(body, []);
  };

  router.get('/openapi.json', (ctx) => {
    ctx.type = 'application/json';
    ctx.body = openapiJson();
  });

  // Also answered ahead of the whole middleware stack (server/http/app.ts); this route serves the
  // spellings that only the router normalises (a trailing slash).
  router.get('/dedicated/pricing', (ctx) => servePricing(ctx, pricing));

  router.post('/dedicated', async (ctx) => {
    const who = await principal(ctx);
    const key = validateIdempotencyKey(ctx.get('idempotency-key') || null);
    const body = expectObject(await readJsonBody(ctx, config.bodyLimitBytes, { required: true }), PURCHASE_FIELDS);
    const input = validatePurchase(body, tunnels.allowPrivateOrigins);
    try {
      // A replay answers as the first time did: 201 with the same purchase, marked as a replay (the first
      // answer has no such header), so a client can tell that nothing was bought this time.
      const { purchase, replayed } = await tunnels.purchase(who, input, key);
      metrics.purchases.inc({ outcome: replayed ? 'replayed' : 'created' });
      if (replayed) ctx.set('Idempotent-Replayed', 'true');
      ctx.status = 201;
      ctx.body = purchaseBody(purchase);
    } catch (e) {
      if (e instanceof ApiError) metrics.purchases.inc({ outcome: e.code });
      throw e;
    }
  });

  router.get('/dedicated', async (ctx) => {
    const who = await principal(ctx);
    const opts = listOptions(ctx);
    // The page prefetchList started is this caller's only when the key it was read by is the credential
    // the gate has just verified for this request (a key never changes account).
    const early = ctx.state.earlyList as EarlyList | undefined;
    const page = early && who.credential.kind === 'api_key' && who.credential.id === early.keyId ? await early.page : await tunnels.list(who, opts);
    // Concurrent identical lists share one page object (TunnelService.list), so its JSON is made once.
    let json = pageJson.get(page);
    if (json === undefined) pageJson.set(page, (json = JSON.stringify(page)));
    ctx.type = 'application/json';
    ctx.body = json;
  });

  router.get('/dedicated/:id', async (ctx) => {
    ctx.body = { tunnel: await tunnels.get(await principal(ctx), ctx.params.id!) };
  });

  // docs/CONTRACTS.md "Tunnel settings": any of name, origin_ip, ports, protocol, protection.
  router.patch('/dedicated/:id', async (ctx) => {
    const who = await principal(ctx);
    const body = expectObject(await readJsonBody(ctx, config.bodyLimitBytes, { required: true }), UPDATE_FIELDS);
    answer(ctx, await tunnels.update(who, ctx.params.id!, validateUpdate(body, tunnels.allowPrivateOrigins)));
  });

  // docs/CONTRACTS.md "Health and traffic": from, to (ISO 8601), step 1m|1h; server/health/index.ts trafficRange.
  router.get('/dedicated/:id/traffic', async (ctx) => {
    const who = await principal(ctx);
    const allowed = ['from', 'to', 'step'];
    const extra = Object.keys(ctx.query).filter((k) => !allowed.includes(k));
    if (extra.length) throw new ApiError('invalid_request', `Unknown query parameter: ${extra.join(', ')}.`);
    const { from, to, step } = ctx.query;
    if (Array.isArray(from) || Array.isArray(to) || Array.isArray(step)) throw new ApiError('invalid_request', 'from, to and step may be given once.');
    ctx.body = await services.health.traffic(who, ctx.params.id!, { from, to, step });
  });

  // docs/CONTRACTS.md "Health and traffic": from, to (ISO 8601); server/health/index.ts healthChangesRange.
  router.get('/dedicated/:id/health-changes', async (ctx) => {
    const who = await principal(ctx);
    const extra = Object.keys(ctx.query).filter((k) => k !== 'from' && k !== 'to');
    if (extra.length) throw new ApiError('invalid_request', `Unknown query parameter: ${extra.join(', ')}.`);
    const { from, to } = ctx.query;
    if (Array.isArray(from) || Array.isArray(to)) throw new ApiError('invalid_request', 'from and to may be given once.');
    ctx.body = await services.health.healthChanges(who, ctx.params.id!, { from, to });
  });

  // docs/CONTRACTS.md "Attacks": from, to (ISO 8601); server/attacks/index.ts attacksRange.
  router.get('/dedicated/:id/attacks', async (ctx) => {
    const who = await principal(ctx);
    const extra = Object.keys(ctx.query).filter((k) => k !== 'from' && k !== 'to');
    if (extra.length) throw new ApiError('invalid_request', `Unknown query parameter: ${extra.join(', ')}.`);
    const { from, to } = ctx.query;
    if (Array.isArray(from) || Array.isArray(to)) throw new ApiError('invalid_request', 'from and to may be given once.');
    ctx.body = await services.attacks.list(who, ctx.params.id!, { from, to });
  });

  router.get('/dedicated/:id/setup', async (ctx) => {
    ctx.body = await tunnels.setup(await principal(ctx), ctx.params.id!);
  });

  // The same two scripts as plain text, byte for byte, so `curl -H 'Authorization: Bearer svc_...'
  // .../setup/origin.sh | sudo bash` needs no JSON tool on the origin (docs/CONTRACTS.md "REST shapes").
  // Same permission and errors as /setup: refusals stay the JSON error body.
  for (const [file, field] of [['origin.sh', 'origin'], ['systemd_origin.service', 'systemd_origin']] as const) {
    router.get(`/dedicated/:id/setup/${file}`, async (ctx) => {
      const { scripts } = await tunnels.setup(await principal(ctx), ctx.params.id!);
      ctx.type = 'text/plain; charset=utf-8';
      ctx.set('Content-Disposition', `inline; filename="${file}"`);
      ctx.body = scripts[field];
    });
  }

  router.post('/dedicated/:id/provision', async (ctx) => {
    const who = await principal(ctx);
    await noBody(ctx);
    answer(ctx, await tunnels.provision(who, ctx.params.id!));
  });

  router.post('/dedicated/:id/activate', async (ctx) => {
    const who = await principal(ctx);
    await noBody(ctx);
    answer(ctx, await tunnels.activate(who, ctx.params.id!));
  });

  router.delete('/dedicated/:id', async (ctx) => {
    const who = await principal(ctx);
    await noBody(ctx);
    answer(ctx, await tunnels.delete(who, ctx.params.id!));
  });

  webhookRoutes(router, services, principal, noBody);
  ledgerRoutes(router, services, principal);

  return router;
}
