// The per-request GraphQL context. Authentication is lazy: `pricing` needs none, so a request that
// only asks for pricing never touches the credential; every other field awaits `principal()`, which
// authenticates at most once per request however many fields ask.
import type { Principal } from '../auth/principal.ts';
import { ApiError } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import type { Services } from '../services.ts';

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
}

export function createContext(services: Services, log: Logger, authorization: string | undefined, requestId: string | null = null): GraphqlContext {
  let pending: Promise<Principal> | null = null;
  const ctx: GraphqlContext = {
    services,
    log,
    requestId,
    auth: { error: null },
    principal() {
      pending ??= services.auth.authenticate(authorization).catch((e: unknown) => {
        if (e instanceof ApiError) ctx.auth.error = e;
        throw e;
      });
      return pending;
    },
  };
  return ctx;
}
