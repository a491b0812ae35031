// Caps on live subscriptions (docs/CONTRACTS.md "Storefront"): at most SUBSCRIPTIONS_PER_SOCKET on one
// WebSocket and SUBSCRIPTIONS_PER_CREDENTIAL for one credential across this replica's sockets. Each
// running subscription holds a bus listener, a generator and a database read per change; without a cap
// one credential could open them by the thousand. A subscription over a cap is refused when it starts,
// as a GraphQL error with code rate_limited; completing one frees its slot at once.
import type { Principal } from '../auth/principal.ts';
import { ApiError } from '../domain/errors.ts';

export const SUBSCRIPTIONS_PER_SOCKET = 10;
export const SUBSCRIPTIONS_PER_CREDENTIAL = 50;

/** One socket's way to take a slot: throws rate_limited over a cap; the function returned gives it back (idempotent). */
export interface SubscriptionSlots {
  acquire(principal: Principal): () => void;
}

export class SubscriptionCaps {
  private readonly byCredential = new Map<string, number>();

  constructor(
    private readonly perSocket = SUBSCRIPTIONS_PER_SOCKET,
    private readonly perCredential = SUBSCRIPTIONS_PER_CREDENTIAL,
  ) {}

  /** Slots of one new socket. */
  socket(): SubscriptionSlots {
    let open = 0;
    return {
      acquire: (principal) => {
        const key = `${principal.credential.kind}:${principal.credential.id}`;
        const held = this.byCredential.get(key) ?? 0;
        if (open >= this.perSocket) {
          throw new ApiError('rate_limited', `At most ${this.perSocket} subscriptions may run on one WebSocket connection; complete one first.`);
        }
        if (held >= this.perCredential) {
          throw new ApiError('rate_limited', `At most ${this.perCredential} subscriptions may run for one credential; complete one first.`);
        }
        open++;
        this.byCredential.set(key, held + 1);
        let released = false;
        return () => {
          if (released) return;
          released = true;
          open--;
          const n = (this.byCredential.get(key) ?? 1) - 1;
          if (n <= 0) this.byCredential.delete(key);
          else this.byCredential.set(key, n);
        };
      },
    };
  }

  /** Subscriptions running for one credential in this replica (tests). */
  heldBy(credential: Principal['credential']): number {
    return this.byCredential.get(`${credential.kind}:${credential.id}`) ?? 0;
  }
}

/** `source`, calling `release` once it ends: finished, returned or thrown into. */
export function releasing<T>(source: AsyncIterator<T, undefined> & { return(): Promise<IteratorResult<T, undefined>> }, release: () => void): AsyncIterableIterator<T, undefined> {
  const it: AsyncIterableIterator<T, undefined> = {
    next: async () => {
      try {
        const r = await source.next();
        if (r.done) release();
        return r;
      } catch (e) {
        release();
        throw e;
      }
    },
    return: async () => {
      try {
        return await source.return();
      } finally {
        release();
      }
    },
    throw: async (e?: unknown) => {
      try {
        return source.throw ? await source.throw(e) : await source.return();
      } finally {
        release();
      }
    },
    [Symbol.asyncIterator]: () => it,
  };
  return it;
}
