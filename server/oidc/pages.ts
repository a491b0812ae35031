// Server-rendered HTML for the login, consent and error pages. Self-contained: inline CSS, no
// scripts, no external assets; a Content-Security-Policy that allows nothing else.
import type { Context } from 'koa';
import type { ApiAccess } from '../db/entities.ts';

const esc = (s: string) =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

const STYLE = `
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#f4f5f7;color:#1d2330;margin:0}
main{max-width:24rem;margin:3rem auto;background:#fff;padding:2rem;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.15)}
h1{font-size:1.4rem;margin:0 0 1rem}
label{display:block;font-weight:600;margin:.75rem 0 .25rem}
input[type=email],input[type=password]{width:100%;box-sizing:border-box;padding:.6rem;font-size:1rem;border:1px solid #8a93a6;border-radius:4px}
input:focus,button:focus{outline:3px solid #2f6fde;outline-offset:1px}
button{font-size:1rem;padding:.6rem 1.2rem;border-radius:4px;border:1px solid #2f6fde;background:#2f6fde;color:#fff;cursor:pointer;margin-top:1rem}
button.secondary{background:#fff;color:#2f6fde}
.error{background:#fdecea;border:1px solid #d93025;color:#8c1d18;padding:.6rem;border-radius:4px}
ul{padding-left:1.2rem}
`;

function layout(title: string, body: string): string {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)} · Tunnelgate</title>
<style>${STYLE}</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>`;
}

/** Security headers for every page: nothing external, no framing (clickjacking), no caching, no referrer. */
function send(ctx: Context, status: number, html: string, headers: Record<string, string> = {}): void {
  ctx.status = status;
  ctx.type = 'text/html; charset=utf-8';
  ctx.set({
    'Content-Security-Policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
    'X-Frame-Options': 'DENY',
    'Cache-Control': 'no-store',
    // same-origin, not no-referrer: with no-referrer browsers send `Origin: null` on the form POST, which the Origin check refuses.
    'Referrer-Policy': 'same-origin',
    'X-Content-Type-Options': 'nosniff',
    ...headers,
  });
  ctx.body = html;
}

const errorBox = (message: string | undefined) => (message ? `<p class="error" role="alert" id="form-error">${esc(message)}</p>` : '');

export interface LoginPage {
  action: string;
  csrf: string;
  clientName: string;
  email?: string;
  error?: string;
}

export function renderLogin(ctx: Context, p: LoginPage, status = 200, headers: Record<string, string> = {}): void {
  const described = p.error ? ' aria-describedby="form-error"' : '';
  send(
    ctx,
    status,
    layout(
      'Sign in',
      `<h1>Sign in</h1>
<p>to continue to <strong>${esc(p.clientName)}</strong></p>
${errorBox(p.error)}
<form method="post" action="${esc(p.action)}" novalidate>
<input type="hidden" name="csrf" value="${esc(p.csrf)}">
<label for="email">Email</label>
<input id="email" name="email" type="email" autocomplete="username" required value="${esc(p.email ?? '')}"${described}${p.email ? '' : ' autofocus'}>
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required${described}${p.email ? ' autofocus' : ''}>
<button type="submit">Sign in</button>
</form>`,
    ),
    headers,
  );
}

export interface ConsentPage {
  action: string;
  csrf: string;
  clientName: string;
  userEmail: string;
  scopes: string[];
  /** What the application's tokens may do with the tunnel API, after the user's role caps it (docs/CONTRACTS.md "Admin CLI"). */
  apiAccess: ApiAccess;
  /** Registered by a customer in the developer portal: its name is whatever that customer chose, so the page says so. */
  portal?: boolean;
  error?: string;
}

/** The plain-words line for the application's API access: the line a user must not miss, so it says money. */
const API_ACCESS_TEXT: Record<ApiAccess, string> = {
  none: 'No access to your tunnels or your balance',
  read: 'View your tunnels and your balance (it cannot buy, change or delete anything)',
  write: 'Buy, change and delete tunnels and spend your balance',
};

const SCOPE_TEXT: Record<string, string> = {
  openid: 'Know who you are (your user id)',
  profile: 'See your name and picture',
  email: 'See your email address',
};

export function renderConsent(ctx: Context, p: ConsentPage, status = 200): void {
  const items = [...p.scopes.map((s) => esc(SCOPE_TEXT[s] ?? s)), `<strong>${esc(API_ACCESS_TEXT[p.apiAccess])}</strong>`]
    .map((line) => `<li>${line}</li>`)
    .join('\n');
  send(
    ctx,
    status,
    layout(
      'Allow access',
      `<h1>Allow access?</h1>
${errorBox(p.error)}
<p><strong>${esc(p.clientName)}</strong> asks to:</p>${p.portal ? '\n<p>This application was registered by a customer of this service, not by its operator. Allow it only if you trust whoever gave you this link.</p>' : ''}
<ul>
${items}
</ul>
<p>Signed in as ${esc(p.userEmail)}.</p>
<form method="post" action="${esc(p.action)}">
<input type="hidden" name="csrf" value="${esc(p.csrf)}">
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button>
</form>`,
    ),
  );
}

export function renderMessage(ctx: Context, status: number, title: string, message: string, headers: Record<string, string> = {}): void {
  send(ctx, status, layout(title, `<h1>${esc(title)}</h1>\n<p class="error" role="alert">${esc(message)}</p>`), headers);
}

/** oidc-provider's error page (authorize errors that cannot be redirected, e.g. an unregistered redirect_uri). */
export function renderErrorPage(ctx: Context, out: { error?: string; error_description?: string }): void {
  const status = ctx.status >= 400 ? ctx.status : 400;
  renderMessage(ctx, status, 'Sign-in request refused', `${out.error ?? 'error'}: ${out.error_description ?? 'the request is invalid.'}`);
}
