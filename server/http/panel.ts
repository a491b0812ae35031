// The customer panel's static files (docs/CONTRACTS.md "Starting it", docs/ARCHITECTURE.md server/http/panel.ts):
// the panel's build output served at `/`, behind every API route. The build output is a directory with
// `index.html` (the app) and `assets/<name>-<hash>.<ext>` (content-hashed, so cached for good), and
// possibly more HTML entry points. Unknown GET/HEAD paths that a browser navigates to (Accept names
// text/html) get index.html, whose router handles them; nothing under /assets ever falls back, so a
// missing script is a 404 and not an HTML page the browser would refuse as a script.
//
// Files are looked up per request (a rebuild or a first build while the gateway runs is picked up at the
// next request) and their contents kept in memory by inode, size and mtime, so a steady state reads no content.
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import { existsSync, type Stats } from 'node:fs';
import path from 'node:path';
import type { Context, Middleware, Next } from 'koa';
import type { Logger } from '../../common/log.ts';
import { PANEL_CLIENT_ID } from '../domain/clients.ts';

/** Hashed assets: the name changes with the content, so a browser and every cache may keep them a year. */
const IMMUTABLE = 'public, max-age=31536000, immutable';
/** Entry points keep their name across builds: caches keep them but ask first (the ETag makes that a 304). */
const REVALIDATE = 'no-cache';
/** The precompressed siblings a build may write next to a file, best first. */
const ENCODINGS = [
  { name: 'br', suffix: '.br' },
  { name: 'gzip', suffix: '.gz' },
] as const;
/** Files kept in memory at most, in bytes, all together; a file beyond the budget is read at each request. */
const CACHE_BUDGET = 64 * 1024 * 1024;

export interface PanelOptions {
  /** The build output directory (PANEL_DIR; default panel/dist of the repository). */
  dir: string;
  /** PUBLIC_URL: the panel's own origin, whose WebSocket twin carries GraphQL subscriptions. */
  publicUrl: string;
  /** ISSUER_URL: the panel signs in there (token and revocation calls, the sign-out form). */
  issuerUrl: string;
  /**
   * Paths owned by other parts of the gateway: the panel answers neither them nor anything below them,
   * so they keep their own answers (and their own 404s) however a browser asks.
   */
  reserved: readonly string[];
  log: Logger;
}

export interface Panel {
  middleware: Middleware;
}

/** Whether the request names text/html among what it accepts: a browser navigating, not `*\/*` from a script or curl. */
export function wantsHtml(ctx: Context): boolean {
  return (ctx.accepts() as string[]).includes('text/html');
}

/**
 * The Content-Security-Policy of the panel's responses: its own scripts, styles, fonts and images only
 * (no inline script or style, no eval); `data:` images for small icons the CSS may inline; API calls to
 * its own origin and its WebSocket twin (named, as browsers before CSP 3 do not count ws: as 'self'), and
 * to the issuer when ISSUER_URL is another origin (the token and revocation endpoints). Forms may post
 * only to itself and the issuer (sign-out ends the issuer session). No framing at all, no <base>, no plugins.
 */
export function panelCsp(publicUrl: string, issuerUrl: string): string {
  const pub = new URL(publicUrl);
  const issuer = new URL(issuerUrl).origin;
  const ws = `${pub.protocol === 'https:' ? 'wss:' : 'ws:'}//${pub.host}`;
  const other = issuer !== pub.origin ? ` ${issuer}` : '';
  return [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "font-src 'self'",
    `connect-src 'self' ${ws}${other}`,
    `form-action 'self'${other}`,
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "object-src 'none'",
  ].join('; ');
}

/**
 * Headers of every panel response, as the issuer's own pages (server/oidc/pages.ts) set them, but for
 * Referrer-Policy: strict-origin. A Referer never carries a path or query (tunnel ids, the authorization
 * code on /callback), not even to the gateway; and unlike no-referrer or same-origin, a form the panel
 * posts to an issuer on another origin (sign-out) still carries the real `Origin`, which the issuer checks
 * (with those two a browser sends `Origin: null`).
 */
function securityHeaders(csp: string): Record<string, string> {
  return {
    'Content-Security-Policy': csp,
    'X-Content-Type-Options': 'nosniff',
    'X-Frame-Options': 'DENY',
    'Referrer-Policy': 'strict-origin',
  };
}

/**
 * What the panel learns from its gateway at start (`GET /config.json`, never cached; docs/CONTRACTS.md "The
 * panel (`client_id` `panel`)"): the issuer (ISSUER_URL may be another origin), the first-party client the
 * gateway registers for it, the scopes it asks for (no `openid`: a public client gets no ID token), and the
 * issuer's sign-out endpoint. Built from the configuration, so it cannot drift from the issuer.
 */
export function panelConfig(issuerUrl: string): { issuer: string; clientId: string; scope: string; signOutUrl: string } {
  return { issuer: issuerUrl, clientId: PANEL_CLIENT_ID, scope: 'profile email', signOutUrl: `${issuerUrl.replace(/\/+$/, '')}/oauth/logout` };
}

/** Nothing external, no script, no style: only words. */
const NOT_BUILT_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
const NOT_BUILT_PAGE = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Panel not built · Tunnelgate</title>
</head>
<body>
<h1>The panel is not built</h1>
<p>This gateway runs, but the customer panel's files are not there. Build them from the repository with</p>
<pre>npm run build:panel</pre>
<p>(<code>npm install</code> builds them too when the panel's build tools are installed), then reload this page.
An operator can point the gateway at another build with <code>PANEL_DIR</code>.</p>
<p>The API answers meanwhile: REST at <a href="/api/openapi.json">/api</a>, GraphQL at <code>/graphql</code>.</p>
</body>
</html>
`;

/**
 * The best of `available` (in our order of preference) that Accept-Encoding allows, or null for the
 * plain file. Highest q wins, ties go to our order: browsers list `gzip, deflate, br` and mean no
 * preference among them (RFC 9110 12.5.3), so the header's own order is not a ranking (Koa's negotiation
 * would take it as one and pick gzip). `*` covers encodings not named; q=0 refuses.
 */
export function pickEncoding(header: string, available: readonly string[]): string | null {
  const q = new Map<string, number>();
  for (const part of header.split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const qParam = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const value = qParam === undefined ? 1 : Number(qParam.slice(2));
    q.set(name.trim(), Number.isFinite(value) ? value : 0);
  }
  let best: string | null = null;
  let bestQ = 0;
  for (const name of available) {
    const v = q.get(name) ?? q.get('*') ?? 0;
    if (v > bestQ) {
      best = name;
      bestQ = v;
    }
  }
  return best;
}

interface FoundFile {
  /** Its real path (symbolic links resolved), inside the directory. */
  real: string;
  stat: Stats;
}

interface CachedFile {
  /** inode, size and mtime: the same triple means the same bytes (a build writes new files, it does not edit in place within a nanosecond). */
  version: string;
  etag: string;
  body: Buffer;
}

/**
 * The path's segments, decoded, or null when it could name something outside the directory or hidden in
 * it: `..` and `.` segments (also percent-encoded: the check runs after decoding), backslashes (a
 * separator on some systems), NUL bytes, dotfiles, and encodings that do not decode.
 */
export function safeSegments(urlPath: string): string[] | null {
  let decoded: string;
  try {
    decoded = decodeURIComponent(urlPath);
  } catch {
    return null;
  }
  if (!decoded.startsWith('/') || decoded.includes('\0') || decoded.includes('\\')) return null;
  const segments = decoded.slice(1).split('/');
  // A trailing slash names the directory's index.
  if (segments.at(-1) === '') segments.pop();
  for (const s of segments) if (s === '' || s.startsWith('.')) return null;
  return segments;
}

export function createPanel(o: PanelOptions): Panel {
  const root = path.resolve(o.dir);
  const csp = panelCsp(o.publicUrl, o.issuerUrl);
  const headers = securityHeaders(csp);
  const cache = new Map<string, CachedFile>();
  let cachedBytes = 0;
  const reserved = o.reserved.map((p) => p.replace(/\/+$/, '')).filter((p) => p !== '');
  const isReserved = (p: string) => reserved.some((r) => p === r || p.startsWith(`${r}/`));
  const indexFile = path.join(root, 'index.html');
  const configJson = JSON.stringify(panelConfig(o.issuerUrl));

  if (!existsSync(indexFile)) {
    o.log.warn('panel not built: / answers a page saying so until it is', { dir: root, build: 'npm run build:panel' });
  }

  /** The real path of `file` when it is a regular file inside the directory (symbolic links followed, then checked), else null. */
  async function regularFileInside(file: string): Promise<FoundFile | null> {
    try {
      const [real, realRoot] = await Promise.all([fs.realpath(file), fs.realpath(root)]);
      if (!real.startsWith(realRoot + path.sep)) return null;
      const stat = await fs.stat(real);
      return stat.isFile() ? { real, stat } : null;
    } catch {
      return null;
    }
  }

  async function read(file: FoundFile): Promise<CachedFile> {
    const version = `${file.stat.ino}:${file.stat.size}:${file.stat.mtimeMs}`;
    const hit = cache.get(file.real);
    if (hit?.version === version) return hit;
    const body = await fs.readFile(file.real);
    // A strong validator from the bytes: every replica of one build answers the same ETag.
    const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`;
    const entry = { version, etag, body };
    if (hit) {
      cache.delete(file.real);
      cachedBytes -= hit.body.length;
    }
    if (cachedBytes + body.length <= CACHE_BUDGET) {
      cache.set(file.real, entry);
      cachedBytes += body.length;
    }
    return entry;
  }

  /** Finds the file a path names: the file itself, or a directory's index.html. */
  async function lookup(segments: string[]) {
    const file = path.join(root, ...segments);
    return (await regularFileInside(file)) ?? (await regularFileInside(path.join(file, 'index.html')));
  }

  /** Answers with the file; false when it vanished before it could be read. */
  async function send(ctx: Context, file: FoundFile, cacheControl: string): Promise<boolean> {
    // The precompressed siblings present for this file, offered to the client's Accept-Encoding.
    const variants = new Map<string, FoundFile>();
    for (const e of ENCODINGS) {
      const sibling = await regularFileInside(file.real + e.suffix);
      if (sibling) variants.set(e.name, sibling);
    }
    const encoding = variants.size > 0 ? pickEncoding(ctx.get('accept-encoding'), [...variants.keys()]) : null;
    const chosen = encoding ? variants.get(encoding) : undefined;
    let content: CachedFile;
    try {
      content = await read(chosen ?? file);
    } catch (e) {
      // Gone between the look-up and the read: a rebuild is replacing the directory. Not found, this once.
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw e;
    }
    ctx.status = 200;
    ctx.set(headers);
    // The answer depends on Accept-Encoding whenever a sibling may exist: a shared cache must not hand
    // the br bytes to a client that cannot read them. Set on every file, since a later build may add siblings.
    ctx.vary('Accept-Encoding');
    ctx.set('Cache-Control', cacheControl);
    ctx.type = path.extname(file.real);
    if (chosen && encoding) ctx.set('Content-Encoding', encoding);
    ctx.set('ETag', content.etag);
    if (ctx.fresh) ctx.status = 304;
    else ctx.body = content.body;
    return true;
  }

  function sendNotBuilt(ctx: Context): void {
    // 503: the gateway is up (health checks use /healthz), this part of it is not.
    ctx.status = 503;
    ctx.set({ ...headers, 'Content-Security-Policy': NOT_BUILT_CSP, 'Cache-Control': 'no-store' });
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = NOT_BUILT_PAGE;
  }

  const middleware: Middleware = async (ctx: Context, next: Next) => {
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') return next();
    if (isReserved(ctx.path)) return next();
    if (ctx.path === '/config.json') {
      ctx._matchedRoute = '/config.json';
      ctx.set({ ...headers, 'Cache-Control': 'no-store' });
      ctx.type = 'application/json';
      ctx.body = configJson;
      return;
    }
    const segments = safeSegments(ctx.path);
    // Anything that could leave the directory is the gateway's plain 404: never a file, never the app.
    if (segments === null) return next();
    const isAsset = segments[0] === 'assets';
    const found = await lookup(segments);
    if (found) {
      if (await send(ctx, found, isAsset ? IMMUTABLE : REVALIDATE)) {
        ctx._matchedRoute = isAsset ? '/assets/*' : '/*';
        return;
      }
    }
    // A missing asset stays missing (an old page asking for a file of a previous build must see a 404).
    if (isAsset || !(segments.length === 0 || wantsHtml(ctx))) return next();
    ctx._matchedRoute = '/*';
    // The same path answers a script the JSON 404: a shared cache must key this answer on Accept too.
    if (segments.length > 0) ctx.vary('Accept');
    const index = await regularFileInside(indexFile);
    if (!index || !(await send(ctx, index, REVALIDATE))) sendNotBuilt(ctx);
  };

  return { middleware };
}
