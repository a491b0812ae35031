// A user agent for the issuer's login and consent pages over plain HTTP: a cookie jar, a tiny HTML
// form reader and a loop that follows redirects and submits forms until the issuer redirects to the
// client's redirect_uri. Independent of server/oidc on purpose: it only knows what a browser knows
// (the pages, their forms and hidden fields), so tests that use it check the issuer from outside.
import { createHash, randomBytes } from 'node:crypto';

export interface Pkce {
  verifier: string;
  challenge: string;
}

/** A fresh RFC 7636 verifier and its S256 challenge, computed here rather than by a client library. */
export function pkce(): Pkce {
  const verifier = randomBytes(32).toString('base64url');
  return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

interface StoredCookie {
  name: string;
  value: string;
  path: string;
  expires: number | null;
}

/** Cookies of one origin, with path matching and expiry (enough for one issuer on 127.0.0.1). */
export class CookieJar {
  private cookies: StoredCookie[] = [];

  store(res: Response, requestUrl: URL): void {
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(';');
      const eq = pair!.indexOf('=');
      if (eq < 1) continue;
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      let path = requestUrl.pathname.replace(/\/[^/]*$/, '') || '/';
      let expires: number | null = null;
      for (const a of attrs) {
        const [k, v = ''] = a.split('=').map((s) => s.trim());
        const key = k!.toLowerCase();
        if (key === 'path' && v.startsWith('/')) path = v;
        else if (key === 'max-age') expires = Date.now() + Number(v) * 1000;
        else if (key === 'expires' && expires === null) expires = Date.parse(v);
      }
      this.cookies = this.cookies.filter((c) => !(c.name === name && c.path === path));
      if (expires === null || expires > Date.now()) this.cookies.push({ name, value, path, expires });
    }
  }

  header(url: URL): string | undefined {
    const now = Date.now();
    const pathMatches = (p: string) => url.pathname === p || url.pathname.startsWith(p.endsWith('/') ? p : `${p}/`);
    const list = this.cookies.filter((c) => (c.expires === null || c.expires > now) && pathMatches(c.path));
    return list.length ? list.map((c) => `${c.name}=${c.value}`).join('; ') : undefined;
  }

  names(): string[] {
    return this.cookies.map((c) => c.name);
  }

  clear(): void {
    this.cookies = [];
  }
}

export interface FormField {
  name: string;
  value: string;
  type: string;
}

export interface HtmlForm {
  action: string;
  method: string;
  fields: FormField[];
  /** Submit buttons (button or input type=submit) with their name, value and visible text. */
  buttons: Array<{ name: string | null; value: string; text: string }>;
  html: string;
}

const ENTITIES: Record<string, string> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0' };

export function decodeEntities(s: string): string {
  return s.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (m, e: string) => {
    if (e[0] === '#') return String.fromCodePoint(e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10));
    return ENTITIES[e.toLowerCase()] ?? m;
  });
}

function attrs(tag: string): Record<string, string> {
  const out: Record<string, string> = {};
  const re = /([a-zA-Z_:][-a-zA-Z0-9_:.]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?/g;
  const inner = tag.replace(/^<\s*[a-zA-Z]+/, '').replace(/\/?>$/, '');
  for (let m; (m = re.exec(inner)); ) out[m[1]!.toLowerCase()] = decodeEntities(m[2] ?? m[3] ?? m[4] ?? '');
  return out;
}

/** Every <form> of a page with its inputs and submit buttons. */
export function parseForms(html: string): HtmlForm[] {
  const forms: HtmlForm[] = [];
  for (const m of html.matchAll(/<form\b[^>]*>([\s\S]*?)<\/form>/gi)) {
    const open = /<form\b[^>]*>/i.exec(m[0])![0];
    const a = attrs(open);
    const body = m[1]!;
    const fields: FormField[] = [];
    const buttons: HtmlForm['buttons'] = [];
    for (const t of body.matchAll(/<input\b[^>]*>/gi)) {
      const ia = attrs(t[0]);
      const type = (ia.type ?? 'text').toLowerCase();
      if (type === 'submit') buttons.push({ name: ia.name ?? null, value: ia.value ?? '', text: ia.value ?? '' });
      else if (ia.name) fields.push({ name: ia.name, value: ia.value ?? '', type });
    }
    for (const b of body.matchAll(/<button\b([^>]*)>([\s\S]*?)<\/button>/gi)) {
      const ba = attrs(`<button ${b[1]}>`);
      if ((ba.type ?? 'submit').toLowerCase() !== 'submit') continue;
      buttons.push({ name: ba.name ?? null, value: ba.value ?? '', text: decodeEntities(b[2]!.replace(/<[^>]*>/g, '')).trim() });
    }
    forms.push({ action: a.action ?? '', method: (a.method ?? 'get').toLowerCase(), fields, buttons, html: m[0] });
  }
  return forms;
}

export interface Credentials {
  email: string;
  password: string;
}

export interface AuthorizeResult {
  /** The URL the issuer finally redirected to (on the client's redirect_uri), or null. */
  callback: URL | null;
  /** Every page the issuer rendered on the way, with its status. */
  pages: Array<{ url: string; status: number; html: string }>;
  /** The last response when the flow did not reach the redirect_uri. */
  last: { status: number; url: string; body: string } | null;
}

export const isConsentDecline = (b: { name: string | null; value: string; text: string }) =>
  /\b(deny|decline|cancel|reject|abort)\b/i.test(`${b.name ?? ''} ${b.value} ${b.text}`);

/**
 * Follows the authorize URL like a browser: redirects inside the issuer's origin are followed,
 * a page with a `password` field is the login form (email + password filled, every hidden field kept),
 * any other page with a form is the consent page (submitted with its approving button). Stops at the
 * first redirect leaving the issuer's origin (the client's redirect_uri), or at a page without a form.
 */
export async function driveAuthorize(
  authorizeUrl: string | URL,
  creds: Credentials | null,
  opts: {
    jar?: CookieJar;
    consent?: 'approve' | 'deny';
    maxSteps?: number;
    /** The redirect_uri when it is on the issuer's own origin (the panel's `$PUBLIC_URL/callback`): a redirect there ends the flow too. */
    callback?: string;
  } = {},
): Promise<AuthorizeResult> {
  const jar = opts.jar ?? new CookieJar();
  const start = new URL(authorizeUrl);
  const issuerOrigin = start.origin;
  const pages: AuthorizeResult['pages'] = [];
  let next: { url: URL; method: string; body?: string } = { url: start, method: 'GET' };
  let loggedIn = false;
  for (let step = 0; step < (opts.maxSteps ?? 12); step++) {
    const headers: Record<string, string> = { accept: 'text/html' };
    const cookie = jar.header(next.url);
    if (cookie) headers.cookie = cookie;
    if (next.body !== undefined) {
      headers['content-type'] = 'application/x-www-form-urlencoded';
      // A browser sends Origin on a form POST; CSRF defences may rely on it.
      headers.origin = issuerOrigin;
    }
    const res = await fetch(next.url, { method: next.method, headers, body: next.body, redirect: 'manual' });
    jar.store(res, next.url);
    if (res.status >= 300 && res.status < 400 && res.headers.get('location')) {
      await res.arrayBuffer();
      const loc = new URL(res.headers.get('location')!, next.url);
      if (loc.origin !== issuerOrigin || (opts.callback !== undefined && loc.origin + loc.pathname === opts.callback)) return { callback: loc, pages, last: null };
      next = { url: loc, method: 'GET' };
      continue;
    }
    const html = await res.text();
    pages.push({ url: next.url.href, status: res.status, html });
    const forms = parseForms(html);
    const login = forms.find((f) => f.fields.some((x) => x.name === 'password'));
    let form: HtmlForm | undefined;
    let data: URLSearchParams;
    if (login) {
      // A second login page right after submitting credentials means they were refused.
      if (loggedIn || !creds) return { callback: null, pages, last: { status: res.status, url: next.url.href, body: html } };
      loggedIn = true;
      form = login;
      data = new URLSearchParams(form.fields.map((x): [string, string] => [x.name, x.value]));
      data.set('email', creds.email);
      data.set('password', creds.password);
    } else {
      // Consent: either one form with approve/deny buttons, or one form per decision.
      const want = opts.consent ?? 'approve';
      const candidates = forms.filter((f) => f.method === 'post');
      const pick = (f: HtmlForm) => f.buttons.find((b) => (want === 'deny') === isConsentDecline(b));
      form = candidates.find((f) => pick(f) !== undefined) ?? (want === 'approve' ? candidates.find((f) => f.buttons.length === 0) : undefined);
      if (!form) return { callback: null, pages, last: { status: res.status, url: next.url.href, body: html } };
      data = new URLSearchParams(form.fields.map((x): [string, string] => [x.name, x.value]));
      const button = pick(form);
      if (button?.name) data.set(button.name, button.value);
    }
    next = { url: new URL(form.action || next.url.href, next.url), method: form.method.toUpperCase(), body: data.toString() };
    if (next.method === 'GET') {
      next.url.search = data.toString();
      delete next.body;
    }
  }
  throw new Error(`authorize did not finish within ${opts.maxSteps ?? 12} steps; pages: ${pages.map((p) => `${p.status} ${p.url}`).join(', ')}`);
}

export interface AuthorizeParams {
  clientId: string;
  redirectUri: string;
  scope?: string;
  state?: string;
  challenge?: string;
  method?: string;
  extra?: Record<string, string>;
}

export function authorizeUrl(endpoint: string, p: AuthorizeParams): URL {
  const u = new URL(endpoint);
  u.searchParams.set('client_id', p.clientId);
  u.searchParams.set('redirect_uri', p.redirectUri);
  u.searchParams.set('response_type', 'code');
  u.searchParams.set('scope', p.scope ?? 'openid profile email');
  if (p.state !== undefined) u.searchParams.set('state', p.state);
  if (p.challenge !== undefined) u.searchParams.set('code_challenge', p.challenge);
  if (p.method !== undefined) u.searchParams.set('code_challenge_method', p.method);
  for (const [k, v] of Object.entries(p.extra ?? {})) u.searchParams.set(k, v);
  return u;
}

/** POST a form to the token or revoke endpoint; returns status, headers and JSON body. */
export async function postForm(url: string, form: Record<string, string | undefined>, opts: { basic?: { id: string; secret: string } } = {}) {
  const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' };
  if (opts.basic) {
    // RFC 6749 2.3.1: form-urlencode id and secret before base64.
    const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, '+');
    headers.authorization = `Basic ${Buffer.from(`${enc(opts.basic.id)}:${enc(opts.basic.secret)}`).toString('base64')}`;
  }
  const body = new URLSearchParams(Object.entries(form).filter((e): e is [string, string] => e[1] !== undefined));
  const res = await fetch(url, { method: 'POST', headers, body: body.toString() });
  const text = await res.text();
  let json: Record<string, unknown> = {};
  try {
    json = text ? (JSON.parse(text) as Record<string, unknown>) : {};
  } catch {
    json = { unparsable: text };
  }
  return { status: res.status, headers: res.headers, body: json, text };
}

/** The payload of a JWT, unverified (tests verify signatures with jose where it matters). */
export function jwtPayload(jwt: string): Record<string, unknown> {
  const part = jwt.split('.')[1];
  if (!part) throw new Error('not a JWT');
  return JSON.parse(Buffer.from(part, 'base64url').toString('utf8')) as Record<string, unknown>;
}

export function jwtHeader(jwt: string): Record<string, unknown> {
  return JSON.parse(Buffer.from(jwt.split('.')[0]!, 'base64url').toString('utf8')) as Record<string, unknown>;
}
