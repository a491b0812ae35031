// The generated avatar behind userinfo's `picture` when the user set none (docs/CONTRACTS.md "REST shapes": always an
// absolute URL). `GET <PUBLIC_URL>/avatars/<avatar_key>.svg`: an SVG with the user's initials on a
// colour derived from the key. No authentication (clients embed it in <img>), cacheable, and keyed by
// app_user.avatar_key, a random value that is neither the user id nor the email, so the URL reveals
// nothing about its owner and cannot be built from a `sub`; the image shows only the initials the
// user's name already gives to every client that receives the URL.
import { createHash } from 'node:crypto';
import type { Context } from 'koa';
import type { Database } from '../db/database.ts';
import { ApiError } from '../domain/errors.ts';

const KEY_RE = /^[0-9a-f]{32}$/;

/** `<PUBLIC_URL>/avatars`, without a trailing slash. */
export const avatarBase = (publicUrl: string) => `${publicUrl.replace(/\/+$/, '')}/avatars`;

export const avatarUrl = (base: string, key: string) => `${base}/${key}.svg`;

/** Up to two initials, one per word, from letters and digits in any script. */
function initials(name: string): string {
  const words = name.normalize('NFC').split(/\s+/).map((w) => /[\p{L}\p{N}]/u.exec(w)?.[0]).filter((c): c is string => !!c);
  const picked = words.length > 1 ? [words[0]!, words[words.length - 1]!] : words.slice(0, 1);
  return picked.join('').toLocaleUpperCase() || '?';
}

const xml = (s: string) => s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c]!);

function renderAvatar(name: string, key: string): string {
  // A hue from the key: stable per user, unrelated to the name; dark enough for white text.
  const hue = createHash('sha256').update(key).digest().readUInt16BE(0) % 360;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="128" height="128" viewBox="0 0 128 128" role="img" aria-label="${xml(initials(name))}">
<rect width="128" height="128" fill="hsl(${hue},45%,38%)"/>
<text x="64" y="64" dy=".35em" text-anchor="middle" font-family="system-ui,-apple-system,'Segoe UI',Roboto,sans-serif" font-size="52" fill="#fff">${xml(initials(name))}</text>
</svg>
`;
}

/**
 * Serves `<base path>/<key>.svg`; returns false for any other path. `basePath` is the path of
 * avatarBase(PUBLIC_URL).
 */
export function avatarRoute(db: Database, basePath: string) {
  const prefix = `${basePath}/`;
  return async function handle(ctx: Context): Promise<boolean> {
    if (!ctx.path.startsWith(prefix)) return false;
    const m = /^([0-9a-f]{32})\.svg$/.exec(ctx.path.slice(prefix.length));
    if (ctx.method !== 'GET' && ctx.method !== 'HEAD') {
      throw new ApiError('method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}; allowed: GET, HEAD.`, { Allow: 'GET, HEAD' });
    }
    if (!m || !KEY_RE.test(m[1]!)) throw new ApiError('not_found', 'No such avatar.');
    const [row] = await db.hot<{ name: string }>('avatar_by_key', 'select name from app_user where avatar_key = ?', [m[1]!]);
    if (!row) throw new ApiError('not_found', 'No such avatar.');
    ctx.status = 200;
    ctx.type = 'image/svg+xml';
    ctx.set({
      // An hour, then revalidated: a renamed user's initials follow within the hour.
      'Cache-Control': 'public, max-age=3600',
      // Opened on its own, an SVG is a document: no scripts, nothing loaded, not framed elsewhere.
      'Content-Security-Policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
      'X-Content-Type-Options': 'nosniff',
      'Cross-Origin-Resource-Policy': 'cross-origin',
    });
    ctx.body = renderAvatar(row.name, m[1]!);
    return true;
  };
}
