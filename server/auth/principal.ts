// Who is calling. Every credential kind (svc_ API keys, the issuer's access tokens) resolves to
// one Principal, so services never care how the caller authenticated.
import type { Permission } from '../db/entities.ts';
import { ApiError } from '../domain/errors.ts';

/**
 * The credential a request came with: an API key (`id` its key id); or an access token of the issuer,
 * `id` its grant and `clientId` the client it was issued to: the first-party panel's (`session`, the
 * user's own sign-in), or any other application's (`oauth_client`, a third party the user allowed).
 * What a webhook records of its creator (server/webhooks/service.ts) is read from here.
 */
export type Credential = { kind: 'api_key'; id: string } | { kind: 'session' | 'oauth_client'; id: string; clientId: string };

export interface Principal {
  accountId: string;
  userId: string | null;
  permission: Permission;
  credential: Credential;
}

export function requireWrite(p: Principal): void {
  if (p.permission !== 'write') {
    throw new ApiError('insufficient_scope', 'This credential has read permission only; this operation needs write permission.');
  }
}
