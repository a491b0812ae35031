// A token bucket per credential (or per client address for anonymous calls). In memory, so each
// replica limits on its own: the budget is per replica, which is generous rather than wrong.
import { createHash } from 'node:crypto';
import type { Context, Next } from 'koa';
import { ApiError } from '../../domain/errors.ts';

interface Bucket {
  tokens: number;
  at: number;
}

export interface RateLimitOptions {
  perMinute: number;
  burst: number;
  /** Buckets kept at most; the fullest (least recently used) are dropped first. */
  maxBuckets?: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly ratePerMs: number;

  constructor(private readonly opts: RateLimitOptions) {
    this.ratePerMs = opts.perMinute / 60_000;
  }

  /** Takes one token; returns 0 when allowed, else the seconds until one is available. */
  take(key: string, now = Date.now()): number {
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= (this.opts.maxBuckets ?? 100_000)) this.evict();
      b = { tokens: this.opts.burst, at: now };
    } else {
      this.buckets.delete(key); // re-insert below keeps Map order = recency
      b.tokens = Math.min(this.opts.burst, b.tokens + (now - b.at) * this.ratePerMs);
      b.at = now;
    }
    this.buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / this.ratePerMs / 1000));
  }

  private evict(): void {
    let n = Math.ceil(this.buckets.size / 10);
    for (const k of this.buckets.keys()) {
      this.buckets.delete(k);
      if (--n <= 0) break;
    }
  }
}

export function rateLimit(limiter: RateLimiter) {
  return async (ctx: Context, next: Next) => {
    const auth = ctx.get('authorization');
    // Hash the credential so the map never holds a usable secret.
    const key = auth ? `c:${createHash('sha256').update(auth).digest('base64url')}` : `ip:${ctx.ip}`;
    const wait = limiter.take(key);
    if (wait > 0) {
      throw new ApiError('rate_limited', `Too many requests; retry in ${wait} s.`, { 'Retry-After': String(wait) });
    }
    await next();
  };
}
