// The two endpoints the gateway serves itself because oidc-provider cannot for JWT access tokens,
// which it does not store: userinfo, and revocation of an access token (by revoking its grant).
import type { Context } from 'koa';
import type { KoaContextWithOIDC } from 'oidc-provider';
import type { Database } from '../db/database.ts';
import { ApiError } from '../domain/errors.ts';
import { disableWebhooksOf } from '../webhooks/revocation.ts';
import { claimsForScopes, findUserClaims } from './accounts.ts';
import { invalidToken, looksLikeJwt, type AccessTokenVerifier } from './access-tokens.ts';
import { NOT_YOURS } from './provider.ts';

/** GET or POST /oauth/userinfo with `Authorization: Bearer <access token>`. */
export async function userinfo(ctx: Context, verifier: AccessTokenVerifier, db: Database, avatars: string): Promise<void> {
  if (ctx.method !== 'GET' && ctx.method !== 'POST') {
    throw new ApiError('method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}; allowed: GET, POST.`, { Allow: 'GET, POST' });
  }
  ctx.set('Cache-Control', 'no-store');
  const m = /^Bearer +([\x21-\x7e]{1,4096})$/i.exec(ctx.get('authorization').trim());
  if (!m) throw invalidToken('Send Authorization: Bearer <access token>.');
  const live = await verifier.verify(m[1]!);
  const user = await findUserClaims(db, live.claims.sub, avatars);
  if (!user) throw invalidToken('The access token belongs to a user that no longer exists.');
  ctx.status = 200;
  ctx.body = claimsForScopes(user, new Set(live.claims.scope.split(' ')));
}

/**
 * Runs after oidc-provider's revocation endpoint. oidc-provider has already authenticated the client
 * and answered a JWT with `unsupported_token_type`; for our own access tokens we revoke the grant
 * (every token of it) and answer 200 like RFC 7009 does. A JWT that is not ours (bad signature,
 * issuer or audience) is unknown: 200 and nothing happens. A token of another client is refused
 * with 400 invalid_request, as oidc-provider refuses another client's refresh token.
 */
export async function revokeJwtAfterProvider(ctx: KoaContextWithOIDC, verifier: AccessTokenVerifier, db: Database): Promise<void> {
  const body = ctx.body as { error?: string } | undefined;
  if (ctx.status !== 400 || body?.error !== 'unsupported_token_type') return;
  const token = ctx.oidc?.params?.token;
  const client = ctx.oidc?.client;
  if (typeof token !== 'string' || !client || !looksLikeJwt(token)) return;
  const claims = await verifier.decode(token, { ignoreExpiration: true });
  if (claims && claims.client_id !== client.clientId) {
    // Left as oidc-provider answers a refresh token of another client (RFC 7009 2.1).
    ctx.body = { error: 'invalid_request', error_description: NOT_YOURS };
    return;
  }
  if (claims) {
    // The grant with every token of it, and the webhooks an application registered with it, together
    // (server/webhooks/revocation.ts).
    await db.transaction(async (sql) => {
      await sql.query('delete from oidc_payload where grant_id = ?', [claims.gid]);
      await disableWebhooksOf(sql, { grant: claims.gid });
    });
  }
  ctx.status = 200;
  ctx.body = '';
}
