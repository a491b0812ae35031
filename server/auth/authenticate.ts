// The one authentication interface: an Authorization header in, a Principal out. The issuer's access
// tokens (server/oidc/access-tokens.ts) plug in through use() in server/http/app.ts.
import type { Database } from '../db/database.ts';
import { ApiError } from '../domain/errors.ts';
import { ApiKeyVerifier, keyIdOf } from './api-keys.ts';
import type { Principal } from './principal.ts';

export type BearerVerifier = (token: string) => Promise<Principal>;

const challenge = { 'WWW-Authenticate': 'Bearer' };

/** The token of `Authorization: Bearer <token>`, or null when the header is not of that form. */
function bearerToken(authorization: string): string | null {
  const m = /^Bearer +([\x21-\x7e]{1,4096})$/i.exec(authorization.trim());
  return m ? m[1]! : null;
}

/** The id of the svc_ API key this header carries, read from its form alone (nothing is verified). */
export function apiKeyIdOf(authorization: string): string | null {
  const token = bearerToken(authorization);
  return token === null ? null : keyIdOf(token);
}

export class Authenticator {
  private readonly verifiers: Array<{ accepts: (token: string) => boolean; verify: BearerVerifier }> = [];

  readonly apiKeys: ApiKeyVerifier;

  constructor(db: Database) {
    this.apiKeys = new ApiKeyVerifier(db);
    this.verifiers.push({ accepts: (t) => t.startsWith('svc_'), verify: (t) => this.apiKeys.verify(t) });
  }

  /** Registers another credential kind (e.g. JWT access tokens), tried when no earlier one accepts the token. */
  use(accepts: (token: string) => boolean, verify: BearerVerifier): void {
    this.verifiers.push({ accepts, verify });
  }

  async authenticate(authorization: string | undefined): Promise<Principal> {
    if (!authorization) throw new ApiError('invalid_token', 'Send Authorization: Bearer <svc_ API key or panel access token>.', challenge);
    const token = bearerToken(authorization);
    if (token === null) throw new ApiError('invalid_token', 'The Authorization header must be "Bearer <token>".', { 'WWW-Authenticate': 'Bearer error="invalid_token"' });
    const v = this.verifiers.find((x) => x.accepts(token));
    if (!v) throw new ApiError('invalid_token', 'The bearer token is not a credential this API accepts.', { 'WWW-Authenticate': 'Bearer error="invalid_token"' });
    return v.verify(token);
  }
}
