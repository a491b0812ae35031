// A small scripted browser for the issuer's focused tests (server/oidc): follows authorize redirects
// with a cookie jar, fills the login form (email, password, csrf), approves consent, and returns
// the code from the redirect to the client. The form fields are read from the rendered HTML.
import { createHash, randomBytes } from 'node:crypto';
import { createUser } from '../../server/domain/accounts.ts';
import { createClient } from '../../server/domain/clients.ts';
import { loadSecrets } from '../../server/secrets.ts';
import type { Database } from '../../server/db/database.ts';
import type { ApiAccess } from '../../server/db/entities.ts';

export class Jar {
  private readonly cookies = new Map<string, string>();
  store(res: Response): void {
    for (const line of res.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const eq = pair!.indexOf('=');
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      if (/expires=Thu, 01 Jan 1970/i.test(line) || value === '') this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }
  /** Path scoping is ignored: every cookie goes everywhere (the issuer checks the bound uid itself). */
  header(): string {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }
}

export interface Page {
  status: number;
  url: string;
  html: string;
  headers: Headers;
}

export async function get(url: string, jar: Jar): Promise<Response> {
  const res = await fetch(url, { redirect: 'manual', headers: { cookie: jar.header(), accept: 'text/html' } });
  jar.store(res);
  return res;
}

export async function post(url: string, jar: Jar, form: Record<string, string>, headers: Record<string, string> = {}): Promise<Response> {
  const res = await fetch(url, {
    method: 'POST',
    redirect: 'manual',
    headers: { cookie: jar.header(), 'content-type': 'application/x-www-form-urlencoded', accept: 'text/html', ...headers },
    body: new URLSearchParams(form).toString(),
  });
  jar.store(res);
  return res;
}

/** Follows redirects inside `origin`; stops at a page (returned) or at a redirect elsewhere (location returned). */
export async function follow(res: Response, base: string, jar: Jar): Promise<{ page?: Page; location?: URL }> {
  let current = res;
  let url = base;
  for (let i = 0; i < 10; i++) {
    const loc = current.headers.get('location');
    if (current.status >= 300 && current.status < 400 && loc) {
      const next = new URL(loc, url);
      if (next.origin !== new URL(base).origin) {
        await current.arrayBuffer();
        return { location: next };
      }
      await current.arrayBuffer();
      url = next.href;
      current = await get(url, jar);
      continue;
    }
    return { page: { status: current.status, url, html: await current.text(), headers: current.headers } };
  }
  throw new Error('too many redirects');
}

export const hidden = (html: string, name: string) => new RegExp(`name="${name}" value="([^"]*)"`).exec(html)?.[1] ?? '';
export const formAction = (html: string) => /<form method="post" action="([^"]+)"/.exec(html)?.[1] ?? '';

export function pkcePair() {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

export interface Client {
  id: string;
  secret: string;
  redirectUri: string;
}

/** apiAccess defaults to write here (the API tests need it); the product's default is none (docs/CONTRACTS.md "Admin CLI"). */
export async function newClient(db: Database, apiAccess: ApiAccess = 'write'): Promise<Client> {
  const { secretEncryptionKey } = (await loadSecrets(db, {})).secrets;
  const redirectUri = `http://127.0.0.1:9/cb/${randomBytes(3).toString('hex')}`;
  const c = await createClient(db, secretEncryptionKey, { name: 'Focused test app', redirectUris: [redirectUri], apiAccess });
  return { id: c.client_id, secret: c.client_secret, redirectUri };
}

export async function newUser(db: Database, role: 'owner' | 'viewer' = 'owner') {
  const email = `oidc-${randomBytes(4).toString('hex')}@example.test`;
  const password = `pw ${randomBytes(6).toString('hex')}`;
  const u = await createUser(db, { email, name: 'Focused User', password, role, picture: 'https://pictures.example.test/a.png', balanceUsd: '10.00' });
  return { id: u.user_id, accountId: u.account_id, email, password };
}

export function authorizeUrl(issuer: string, c: Client, challenge: string, extra: Record<string, string> = {}): string {
  const u = new URL(`${issuer}/oauth/authorize`);
  u.search = new URLSearchParams({
    client_id: c.id,
    redirect_uri: c.redirectUri,
    response_type: 'code',
    scope: 'openid profile email',
    state: randomBytes(8).toString('hex'),
    code_challenge: challenge,
    code_challenge_method: 'S256',
    ...extra,
  }).toString();
  return u.href;
}

/** authorize → login → consent → the callback URL (with code and state). */
export async function signIn(issuer: string, c: Client, user: { email: string; password: string }, jar = new Jar(), extra: Record<string, string> = {}) {
  const pkce = pkcePair();
  let step = await follow(await get(authorizeUrl(issuer, c, pkce.challenge, extra), jar), issuer, jar);
  for (let i = 0; i < 4 && step.page; i++) {
    const html = step.page.html;
    if (!formAction(html)) throw new Error(`sign-in stopped at a page without a form: ${step.page.status} ${html.slice(0, 2000)}`);
    const action = new URL(formAction(html), issuer).href;
    const csrf = hidden(html, 'csrf');
    const form: Record<string, string> = html.includes('name="password"') ? { csrf, email: user.email, password: user.password } : { csrf, decision: 'allow' };
    step = await follow(await post(action, jar, form, { origin: new URL(issuer).origin }), issuer, jar);
  }
  if (!step.location) throw new Error(`sign-in did not reach the client: ${step.page?.status} ${step.page?.html.slice(0, 500)}`);
  return { callback: step.location, code: step.location.searchParams.get('code')!, verifier: pkce.verifier, jar };
}

export async function token(issuer: string, c: Client, form: Record<string, string>, secret = c.secret) {
  const res = await fetch(`${issuer}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
    body: new URLSearchParams({ client_id: c.id, client_secret: secret, ...form }).toString(),
  });
  return { status: res.status, body: (await res.json()) as Record<string, string>, headers: res.headers };
}

export async function exchange(issuer: string, c: Client, code: string, verifier: string) {
  return token(issuer, c, { grant_type: 'authorization_code', code, redirect_uri: c.redirectUri, code_verifier: verifier });
}
