// Who is calling. Every credential kind (svc_ API keys, the issuer's access tokens) resolves to
// one Principal, so services never care how the caller authenticated.
import type { Permission } from '../db/entities.ts';
import { ApiError } from '../domain/errors.ts';

export interface Principal {
  accountId: string;
  userId: string | null;
  permission: Permission;
  credential: { kind: 'api_key' | 'session'; id: string };
}

export function requireWrite(p: Principal): void {
  if (p.permission !== 'write') {
    throw new ApiError('insufficient_scope', 'This credential has read permission only; this operation needs write permission.');
  }
}
