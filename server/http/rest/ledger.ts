// GET /api/ledger: the account's top-ups and purchases, newest first (server/domain/ledger.ts), paged
// like GET /api/dedicated. A thin adapter; GraphQL's `ledger` calls the same function.
import type Router from '@koa/router';
import type { Context } from 'koa';
import type { Principal } from '../../auth/principal.ts';
import { ApiError } from '../../domain/errors.ts';
import { LEDGER_MAX_LIMIT, listLedger } from '../../domain/ledger.ts';
import type { Services } from '../../services.ts';

export function ledgerRoutes(router: Router, services: Services, principal: (ctx: Context) => Promise<Principal>): void {
  router.get('/ledger', async (ctx) => {
    const who = await principal(ctx);
    const extra = Object.keys(ctx.query).filter((k) => k !== 'limit' && k !== 'cursor');
    if (extra.length) throw new ApiError('invalid_request', `Unknown query parameter: ${extra.join(', ')}.`);
    const { limit, cursor } = ctx.query;
    if (Array.isArray(limit) || Array.isArray(cursor)) throw new ApiError('invalid_request', 'limit and cursor may be given once.');
    if (limit !== undefined && !/^\d{1,3}$/.test(limit)) throw new ApiError('invalid_request', `limit must be an integer from 1 to ${LEDGER_MAX_LIMIT}.`);
    ctx.body = await listLedger(services.db, who, { limit: limit === undefined ? null : Number(limit), cursor: cursor ?? null });
  });
}
