// A small application/x-www-form-urlencoded body, read by our own routes beside oidc-provider (the login,
// consent and sign-out pages), never in front of oidc-provider's own endpoints.
import type { Context } from 'koa';

/** The form, or null when the body is not a form, is longer than `limit` bytes, or broke off mid-way. */
export async function readForm(ctx: Context, limit: number): Promise<URLSearchParams | null> {
  if (!ctx.is('application/x-www-form-urlencoded')) return null;
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of ctx.req) {
      size += (chunk as Buffer).length;
      if (size > limit) return null;
      chunks.push(chunk as Buffer);
    }
  } catch {
    // The browser went away mid-body ('aborted'): no form, rather than a logged 500 (found by test/fuzz).
    return null;
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}
