// The REST paths a purchase answer points to (`next_steps`). GraphQL shows the same paths as
// `nextSteps`, so it builds them here too: they name REST routes, which only this folder knows.
import type { Purchase } from '../../domain/tunnels/index.ts';

export interface NextSteps {
  setup: string;
  provision: string;
}

export function nextStepsOf(tunnelId: string): NextSteps {
  return { setup: `/api/dedicated/${tunnelId}/setup`, provision: `/api/dedicated/${tunnelId}/provision` };
}

/**
 * The purchase answer of docs/CONTRACTS.md "REST shapes", fields in this order. Built field by field:
 * a replayed purchase comes back from the idempotency record, which may hold other fields (older records
 * kept next_steps themselves; the value rebuilt here is the same).
 */
export function purchaseBody(p: Purchase): Purchase & { next_steps: NextSteps } {
  return {
    tunnel: p.tunnel,
    charged: p.charged,
    charged_usd: p.charged_usd,
    currency: p.currency,
    balance_after: p.balance_after,
    next_steps: nextStepsOf(p.tunnel.id),
  };
}
