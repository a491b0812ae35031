// Sign-out of the panel (docs/CONTRACTS.md "Identity provider"): `POST <issuer path>/oauth/logout` ends the
// issuer's browser session and revokes the panel's grant in it (every refresh and access token the panel
// holds in any tab of this browser), then sends the browser to a path of PUBLIC_URL. oidc-provider's
// RP-initiated logout stays off: it wants an id_token_hint (the panel, a public client, has no ID token),
// shows a confirmation page of its own, and ends every client's grant in the session, while third-party
// applications keep theirs (they hold their own refresh tokens, which outlive the browser session).
//
// CSRF: a state-changing POST with no token of its own, so the Origin header must be the issuer's or
// PUBLIC_URL's origin (browsers send Origin on every cross-origin and same-origin POST, forms and fetch
// alike; a request without one is refused), and Sec-Fetch-Site, when sent, must not be cross-site. The
// redirect goes to PUBLIC_URL plus a path only, never to an address the request names.
import type { Context } from 'koa';
import type Provider from 'oidc-provider';
import type { Database } from '../db/database.ts';
import { PANEL_CLIENT_ID } from '../domain/clients.ts';
import { ApiError } from '../domain/errors.ts';
import type { Logger } from '../../common/log.ts';
import { readForm } from './form.ts';

const FORM_LIMIT = 4 * 1024;
/** An absolute path: one leading slash (not `//host`), no backslash, whitespace or control characters. */
const PATH_RE = /^\/(?![/\\])[^\s\\\u0000-\u001f\u007f]{0,2047}$/;

export interface SignOutOptions {
  provider: Provider;
  db: Database;
  /** Origins a sign-out may come from: the issuer's and PUBLIC_URL's. */
  origins: readonly string[];
  /** PUBLIC_URL: where the browser is sent afterwards (plus `return_to`). */
  publicUrl: string;
  log?: Logger;
}

/** The sign-out form; an empty body is an empty form (every field is optional). */
async function signOutForm(ctx: Context): Promise<URLSearchParams | null> {
  if (!ctx.request.length && !ctx.is('application/x-www-form-urlencoded')) return new URLSearchParams();
  return readForm(ctx, FORM_LIMIT);
}

export function signOutRoute(o: SignOutOptions) {
  const origins = new Set(o.origins);
  const base = o.publicUrl.replace(/\/+$/, '');
  const publicOrigin = new URL(base).origin;

  return async function signOut(ctx: Context): Promise<void> {
    if (ctx.method !== 'POST') throw new ApiError('method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}; allowed: POST.`, { Allow: 'POST' });
    ctx.set('Cache-Control', 'no-store');
    const origin = ctx.get('origin');
    const site = ctx.get('sec-fetch-site');
    if (!origin || !origins.has(origin) || (site !== '' && site !== 'same-origin' && site !== 'same-site')) {
      ctx.status = 403;
      ctx.body = { error: 'invalid_request', error_description: 'Sign-out must be sent from a page of this site (the Origin header did not match).' };
      return;
    }
    const form = await signOutForm(ctx);
    if (!form) throw new ApiError('invalid_request', 'Send the sign-out as application/x-www-form-urlencoded (at most 4 KiB).');
    const returnTo = form.get('return_to') ?? '/';
    if (!PATH_RE.test(returnTo)) throw new ApiError('invalid_request', 'return_to must be a path of this site, such as /signed-out.');
    const target = new URL(`${base}${returnTo}`);
    if (target.origin !== publicOrigin) throw new ApiError('invalid_request', 'return_to must be a path of this site, such as /signed-out.');

    const session = await o.provider.Session.get(ctx);
    const accountId = session.accountId;
    const grantId = session.grantIdFor(PANEL_CLIENT_ID);
    // The panel's grant with every token of it (a Grant row carries its own id as grant id, adapter.ts).
    if (grantId) await o.db.query('delete from oidc_payload where grant_id = ?', [grantId]);
    await session.destroy();
    ctx.cookies.set(o.provider.cookieName('session'), null, { httpOnly: true, sameSite: 'lax', signed: true });
    o.log?.info('sign-out', { request_id: ctx.state.requestId, user_id: accountId ?? null, panel_grant_revoked: Boolean(grantId) });
    ctx.status = 303;
    ctx.redirect(target.href);
  };
}
