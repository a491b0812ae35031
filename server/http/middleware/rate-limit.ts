// Token buckets by key (a credential id, a client address). In memory, so each replica limits on its
// own: the budget is per replica, which is generous rather than wrong. What is keyed how: request-gate.ts.

interface Bucket {
  tokens: number;
  at: number;
}

export interface RateLimitOptions {
  perMinute: number;
  burst: number;
  /** Buckets kept at most; the fullest (least recently used) are dropped first. */
  maxBuckets?: number;
  /** Milliseconds now, for refills; Date.now unless a test drives the time itself. */
  clock?: () => number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly ratePerMs: number;
  private readonly clock: () => number;

  constructor(private readonly opts: RateLimitOptions) {
    this.ratePerMs = opts.perMinute / 60_000;
    this.clock = opts.clock ?? Date.now;
  }

  /** Takes one token; returns 0 when allowed, else the seconds until one is available. */
  take(key: string, now = this.clock()): number {
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

  /** Whether take() would allow one now; takes nothing. */
  has(key: string, now = this.clock()): boolean {
    const b = this.buckets.get(key);
    return !b || Math.min(this.opts.burst, b.tokens + (now - b.at) * this.ratePerMs) >= 1;
  }

  /** Gives back one token taken by take() (never above the burst): for a charge that turned out unwarranted. */
  refund(key: string): void {
    const b = this.buckets.get(key);
    if (b) b.tokens = Math.min(this.opts.burst, b.tokens + 1);
  }

  private evict(): void {
    let n = Math.ceil(this.buckets.size / 10);
    for (const k of this.buckets.keys()) {
      this.buckets.delete(k);
      if (--n <= 0) break;
    }
  }
}
