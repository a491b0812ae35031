// The issuer's access tokens are HS256 JWTs that oidc-provider does not store. This module verifies
// them for the API (through the Authenticator), for userinfo and for revocation: the signature, iss,
// aud and exp, and then that the token's grant (the `gid` claim) still exists, so revoking a grant,
// rotating a client secret or reusing a refresh token ends every access token of that grant at once.
import { errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { isCanonicalUuid } from '../../common/names.ts';
import type { Database } from '../db/database.ts';
import type { ApiAccess, Permission, Role } from '../db/entities.ts';
import { PANEL_CLIENT_ID } from '../domain/clients.ts';
import { ApiError } from '../domain/errors.ts';
import type { Principal } from '../auth/principal.ts';

export interface AccessTokenClaims extends JWTPayload {
  sub: string;
  client_id: string;
  scope: string;
  gid: string;
}

export interface LiveAccessToken {
  claims: AccessTokenClaims;
  accountId: string;
  role: Role;
  /** The client's API access (docs/CONTRACTS.md "Admin CLI"), read with the grant so a change applies to live tokens at once. */
  apiAccess: ApiAccess;
}

const JWT_RE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

/** True for anything shaped like a compact JWS: the Authenticator routes those here. */
export const looksLikeJwt = (token: string) => token.startsWith('eyJ') && JWT_RE.test(token);

export const invalidToken = (why: string) => new ApiError('invalid_token', why, { 'WWW-Authenticate': `Bearer error="invalid_token", error_description="${why.replace(/["\\]/g, '')}"` });

export class AccessTokenVerifier {
  constructor(
    private readonly db: Database,
    /** `clock`: milliseconds now, against which `exp` is checked; Date.now unless a test drives the time. */
    private readonly opts: { key: Buffer; issuer: string; audience: string; clock?: () => number },
  ) {}

  /** Signature and claims only (no database): what revocation needs, where an expired token is still recognised. */
  async decode(token: string, { ignoreExpiration = false } = {}): Promise<AccessTokenClaims | null> {
    if (!looksLikeJwt(token)) return null;
    try {
      const { payload } = await jwtVerify(token, this.opts.key, {
        algorithms: ['HS256'],
        issuer: this.opts.issuer,
        audience: this.opts.audience,
        // A revoked-then-expired token is still recognised for revocation; everywhere else exp counts.
        currentDate: ignoreExpiration ? new Date(0) : new Date((this.opts.clock ?? Date.now)()),
        typ: 'at+jwt',
      });
      const p = payload as Partial<AccessTokenClaims>;
      if (typeof p.sub !== 'string' || typeof p.gid !== 'string' || typeof p.client_id !== 'string' || typeof p.scope !== 'string') return null;
      return p as AccessTokenClaims;
    } catch (e) {
      if (e instanceof joseErrors.JOSEError) return null;
      throw e;
    }
  }

  /** A current token whose grant still exists, with the user's account and role; else invalid_token (401). */
  async verify(token: string): Promise<LiveAccessToken> {
    const claims = await this.decode(token);
    if (!claims || !isCanonicalUuid(claims.sub)) throw invalidToken('The access token is malformed, expired or not issued here.');
    // Both lookups by primary key: the grant by (kind, id), the user by id.
    const [row] = await this.db.hot<{ account_id: string; role: Role; api_access: ApiAccess }>(
      'oidc_access_grant_client',
      `select u.account_id, u.role, c.api_access
         from oidc_payload g join app_user u on u.id = ?::uuid join oauth_client c on c.client_id = g.client_id
        where g.kind = 'Grant' and g.id = ? and g.client_id = ? and g.payload->>'accountId' = ?
          and (g.expires_at is null or g.expires_at > now())`,
      [claims.sub, claims.gid, claims.client_id, claims.sub],
    );
    if (!row) throw invalidToken('The access token was revoked.');
    return { claims, accountId: row.account_id, role: row.role, apiAccess: row.api_access };
  }

  /**
   * The Authenticator's view (the tunnel API and GraphQL, not userinfo): the client's API access caps
   * the user's role (docs/CONTRACTS.md "Admin CLI"). A `none` client's token is valid but may not use the API at all
   * (403 insufficient_scope); `read` never writes; `write` writes only for an owner.
   */
  async principal(token: string): Promise<Principal> {
    const t = await this.verify(token);
    if (t.apiAccess === 'none') {
      throw new ApiError(
        'insufficient_scope',
        'This application was registered without access to the tunnel API; its tokens only identify the user (ask the operator for read or write access).',
        { 'WWW-Authenticate': 'Bearer error="insufficient_scope"' },
      );
    }
    const permission: Permission = t.role === 'owner' && t.apiAccess === 'write' ? 'write' : 'read';
    // The panel's token is the user's own session; any other client's is a third-party application's.
    const kind = t.claims.client_id === PANEL_CLIENT_ID ? 'session' : 'oauth_client';
    return { accountId: t.accountId, userId: t.claims.sub, permission, credential: { kind, id: t.claims.gid, clientId: t.claims.client_id } };
  }
}
