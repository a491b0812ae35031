// State that lives for one request through oidc-provider, reachable from the adapter (which is called
// with no request context of its own).
import { AsyncLocalStorage } from 'node:async_hooks';

export interface RequestScope {
  /**
   * The code or refresh token this request redeems, once oidc-provider has asked to consume it. The
   * adapter marks it used in the same statement that stores the refresh token the request issues
   * (one round trip instead of two); whatever is still pending when the request ends is consumed then.
   */
  pendingConsume?: { kind: string; id: string };
}

export const requestScope = new AsyncLocalStorage<RequestScope>();
