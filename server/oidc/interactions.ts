// The login and consent pages oidc-provider sends the browser to (`interactions.url`):
//   GET  <issuer path>/interaction/:uid          the login form, or the consent form once signed in
//   POST <issuer path>/interaction/:uid/login    email + password + csrf
//   POST <issuer path>/interaction/:uid/consent  csrf + decision=allow|deny
// CSRF: the interaction cookie oidc-provider sets is signed, SameSite=Lax and bound to the uid in the
// path, and every form also carries an HMAC of the uid under the cookie key (checked in constant
// time), plus the Origin header when the browser sends one.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Context } from 'koa';
import type Provider from 'oidc-provider';
import type { Database } from '../db/database.ts';
import { clientConsentFacts } from '../domain/clients.ts';
import type { ApiAccess, Role } from '../db/entities.ts';
import { checkPassword, findUserClaims } from './accounts.ts';
import { LoginLimiter } from './login-limits.ts';
import { renderConsent, renderLogin, renderMessage } from './pages.ts';
import type { Logger } from '../../common/log.ts';
import { readForm } from './form.ts';

const FORM_LIMIT = 8 * 1024;

export interface InteractionOptions {
  provider: Provider;
  db: Database;
  cookieKeys: string[];
  /** `<issuer path>/interaction` */
  basePath: string;
  issuerOrigin: string;
  limiter?: LoginLimiter;
  /** avatarBase(PUBLIC_URL) (server/oidc/avatars.ts). */
  avatars: string;
  /** Sign-in outcomes for the security record: ids and addresses, never an email or a password. */
  log?: Logger;
}

export function interactionRoutes(o: InteractionOptions) {
  const limiter = o.limiter ?? new LoginLimiter();
  const csrfFor = (uid: string, key = o.cookieKeys[0]!) => createHmac('sha256', key).update(`csrf\u0000${uid}`).digest('base64url');
  const csrfOk = (uid: string, given: string | null) => {
    if (!given) return false;
    const g = Buffer.from(given);
    return o.cookieKeys.some((k) => {
      const want = Buffer.from(csrfFor(uid, k));
      return want.length === g.length && timingSafeEqual(want, g);
    });
  };
  const clientName = async (clientId: unknown) => {
    const client = typeof clientId === 'string' ? await o.provider.Client.find(clientId) : undefined;
    return client?.clientName ?? (typeof clientId === 'string' ? clientId : 'the application');
  };
  const expired = (ctx: Context) =>
    renderMessage(ctx, 400, 'Sign-in expired', 'This sign-in page has expired or was opened in another browser. Go back to the application and sign in again.');

  async function details(ctx: Context) {
    try {
      return await o.provider.interactionDetails(ctx.req, ctx.res);
    } catch {
      return null;
    }
  }

  async function show(ctx: Context, uid: string) {
    const d = await details(ctx);
    if (!d || d.uid !== uid) return expired(ctx);
    const action = `${o.basePath}/${uid}`;
    if (d.prompt.name === 'login') {
      return renderLogin(ctx, { action: `${action}/login`, csrf: csrfFor(uid), clientName: await clientName(d.params.client_id) });
    }
    if (d.prompt.name === 'consent') {
      const user = d.session?.accountId ? await findUserClaims(o.db, d.session.accountId, o.avatars) : null;
      if (!user) return expired(ctx);
      const scopes = String(d.params.scope ?? '').split(' ').filter(Boolean);
      const [facts, [row]] = await Promise.all([
        clientConsentFacts(o.db, String(d.params.client_id)),
        o.db.query<{ role: Role }>('select role from app_user where id = ?', [user.sub]),
      ]);
      // What the tokens will really be allowed (server/oidc/access-tokens.ts): the client's access, capped by the role.
      const access = facts?.api_access ?? 'none';
      const apiAccess: ApiAccess = access === 'write' && row?.role !== 'owner' ? 'read' : access;
      return renderConsent(ctx, {
        action: `${action}/consent`,
        csrf: csrfFor(uid),
        clientName: await clientName(d.params.client_id),
        userEmail: user.email,
        scopes,
        apiAccess,
        portal: facts?.portal ?? false,
      });
    }
    return renderMessage(ctx, 400, 'Sign-in not possible', `This sign-in step (${d.prompt.name}) is not supported.`);
  }

  async function login(ctx: Context, uid: string) {
    const form = await readForm(ctx, FORM_LIMIT);
    const d = await details(ctx);
    if (!d || d.uid !== uid) return expired(ctx);
    const action = `${o.basePath}/${uid}/login`;
    const name = await clientName(d.params.client_id);
    if (!form || !csrfOk(uid, form.get('csrf'))) {
      return renderLogin(ctx, { action, csrf: csrfFor(uid), clientName: name, error: 'The form could not be verified (it expired or did not come from this page). Please sign in again.' }, 403);
    }
    if (d.prompt.name !== 'login') return ctx.redirect(`${o.basePath}/${uid}`);
    const email = (form.get('email') ?? '').trim();
    const password = form.get('password') ?? '';
    if (!email || !password) {
      return renderLogin(ctx, { action, csrf: csrfFor(uid), clientName: name, email, error: 'Enter your email address and your password.' }, 400);
    }
    // Charged before the password is checked (else a burst of parallel guesses all pass a budget only checked): parallel posts each take a token
    // synchronously here, so no more of them reach the KDF than the buckets allow.
    const wait = limiter.attempt(email, ctx.ip);
    const event = { request_id: ctx.state.requestId, client_id: d.params.client_id, address: ctx.ip };
    if (wait > 0) {
      o.log?.warn('sign-in rate limited', { ...event, retry_after: wait });
      return renderLogin(
        ctx,
        { action, csrf: csrfFor(uid), clientName: name, email, error: `Too many failed sign-in attempts. Try again in ${wait} seconds.` },
        429,
        { 'Retry-After': String(wait) },
      );
    }
    const user = await checkPassword(o.db, email, password);
    if (!user) {
      // Already charged by attempt().
      o.log?.info('sign-in failed', event);
      return renderLogin(ctx, { action, csrf: csrfFor(uid), clientName: name, email, error: 'The email address or password is incorrect.' }, 401);
    }
    limiter.succeeded(email, ctx.ip);
    o.log?.info('sign-in', { ...event, user_id: user.userId });
    const returnTo = await o.provider.interactionResult(ctx.req, ctx.res, { login: { accountId: user.userId } }, { mergeWithLastSubmission: false });
    ctx.status = 303;
    ctx.redirect(returnTo);
  }

  async function consent(ctx: Context, uid: string) {
    const form = await readForm(ctx, FORM_LIMIT);
    const d = await details(ctx);
    if (!d || d.uid !== uid) return expired(ctx);
    if (!form || !csrfOk(uid, form.get('csrf'))) {
      return renderMessage(ctx, 403, 'Request not verified', 'The form could not be verified (it expired or did not come from this page). Go back to the application and sign in again.');
    }
    if (d.prompt.name !== 'consent' || !d.session?.accountId) return ctx.redirect(`${o.basePath}/${uid}`);
    const decision = form.get('decision');
    let result;
    if (decision === 'deny') {
      result = { error: 'access_denied', error_description: 'The user did not allow access.' };
    } else if (decision === 'allow') {
      const clientId = String(d.params.client_id);
      const grant = d.grantId ? await o.provider.Grant.find(d.grantId) : new o.provider.Grant({ accountId: d.session.accountId, clientId });
      if (!grant) return expired(ctx);
      const missing = d.prompt.details as { missingOIDCScope?: string[]; missingOIDCClaims?: string[]; missingResourceScopes?: Record<string, string[]> };
      if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
      if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
      for (const [resource, scopes] of Object.entries(missing.missingResourceScopes ?? {})) grant.addResourceScope(resource, scopes.join(' '));
      const grantId = await grant.save();
      result = { consent: { grantId } };
    } else {
      return renderMessage(ctx, 400, 'Choose Allow or Deny', 'The consent form was sent without a decision.');
    }
    const returnTo = await o.provider.interactionResult(ctx.req, ctx.res, result, { mergeWithLastSubmission: true });
    ctx.status = 303;
    ctx.redirect(returnTo);
  }

  const UID = '([A-Za-z0-9_-]{1,64})';
  const showRe = new RegExp(`^${UID}$`);
  const actionRe = new RegExp(`^${UID}/(login|consent)$`);

  /** Handles `rest` (the path after basePath + '/'); returns false for anything else. */
  return async function handle(ctx: Context, rest: string): Promise<boolean> {
    let m = showRe.exec(rest);
    if (m && (ctx.method === 'GET' || ctx.method === 'HEAD')) {
      await show(ctx, m[1]!);
      return true;
    }
    m = actionRe.exec(rest);
    if (m && ctx.method === 'POST') {
      const origin = ctx.get('origin');
      if (origin && origin !== o.issuerOrigin) {
        renderMessage(ctx, 403, 'Request not verified', 'This form was sent from another site.');
        return true;
      }
      if (m[2] === 'login') await login(ctx, m[1]!);
      else await consent(ctx, m[1]!);
      return true;
    }
    return false;
  };
}
