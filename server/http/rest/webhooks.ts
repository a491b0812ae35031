// The webhook routes under /api (docs/CONTRACTS.md "Webhooks"): thin adapters over
// server/webhooks/service.ts, the same functions GraphQL and the admin CLI call.
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { Principal } from '../../auth/principal.ts';
import type { Services } from '../../services.ts';
import { validateWebhookInput } from '../../webhooks/service.ts';
import { expectObject, readJsonBody } from '../middleware/body.ts';

export function webhookRoutes(
  router: Router,
  services: Services,
  principal: (ctx: Context) => Promise<Principal>,
  noBody: (ctx: Context) => Promise<void>,
): void {
  router.post('/webhooks', async (ctx) => {
    const who = await principal(ctx);
    const { webhooks, config } = services;
    const body = expectObject(await readJsonBody(ctx, config.bodyLimitBytes, { required: true }), ['url', 'events', 'include_origin']);
    const input = validateWebhookInput(body, webhooks.allowPrivate);
    ctx.status = 201;
    ctx.body = await webhooks.create(who, input);
  });

  router.get('/webhooks', async (ctx) => {
    ctx.body = { webhooks: await services.webhooks.list(await principal(ctx)) };
  });

  // A webhook.test event for this one webhook: 202, delivered by the worker like any event.
  router.post('/webhooks/:id/test', async (ctx) => {
    const who = await principal(ctx);
    await noBody(ctx);
    ctx.status = 202;
    ctx.body = await services.webhooks.test(who, ctx.params.id!);
  });

  // Enables a disabled webhook again: 200 with the webhook as the list shows it.
  router.post('/webhooks/:id/enable', async (ctx) => {
    const who = await principal(ctx);
    await noBody(ctx);
    ctx.body = { webhook: await services.webhooks.enable(who, ctx.params.id!) };
  });

  router.delete('/webhooks/:id', async (ctx) => {
    const who = await principal(ctx);
    await noBody(ctx);
    await services.webhooks.delete(who, ctx.params.id!);
    ctx.status = 204;
  });
}
