// The per-request GraphQL context. Authentication is lazy: `pricing` needs none, so a request that
// only asks for pricing never touches the credential; every other field awaits `principal()`, which
// authenticates at most once per request however many fields ask.
import type { Principal } from '../auth/principal.ts';
import { ApiError } from '../domain/errors.ts';
import type { Logger } from '../../common/log.ts';
import type { Services } from '../services.ts';
import type { Admission } from '../http/middleware/request-gate.ts';
import type { SubscriptionSlots } from './subscriptions.ts';

export interface GraphqlContext {
  services: Services;
  log: Logger;
  requestId: string | null;
  principal(): Promise<Principal>;
  /**
   * The authentication failure of this request, if `principal()` failed (its WWW-Authenticate header
   * goes with a 401). A holder object, because Apollo shallow-copies the context value.
   */
  auth: { error: ApiError | null };
  /** The caps of the WebSocket this operation came on (subscriptions.ts); absent over HTTP, which runs no subscription. */
  subscriptions?: SubscriptionSlots;
}

/**
 * `admission` is the request gate's answer (server/http/middleware/request-gate.ts), which already
 * authenticated the caller; without one the context authenticates on first use.
 */
export function createContext(
  services: Services,
  log: Logger,
  authorization: string | undefined,
  requestId: string | null = null,
  admission?: Admission,
): GraphqlContext {
  let pending: Promise<Principal> | null = null;
  const ctx: GraphqlContext = {
    services,
    log,
    requestId,
    auth: { error: null },
    principal() {
      pending ??= fromAdmission(admission, () => services.auth.authenticate(authorization)).catch((e: unknown) => {
        if (e instanceof ApiError) ctx.auth.error = e;
        throw e;
      });
      return pending;
    },
  };
  return ctx;
}

function fromAdmission(admission: Admission | undefined, authenticate: () => Promise<Principal>): Promise<Principal> {
  if (!admission) return authenticate();
  if (admission.principal) return Promise.resolve(admission.principal);
  if (admission.error) return Promise.reject(admission.error);
  // No credential was sent: the Authenticator's own "send a credential" answer, with no lookup.
  return authenticate();
}
