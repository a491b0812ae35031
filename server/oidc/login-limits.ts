// Brute-force limits for the login form. Every attempt is charged before its password is checked
// (attempt()), so concurrent posts cannot all pass a check that the first failures have not yet paid
// for (parallel guesses must not slip past a budget); a success gives its charge back and clears the account's failures from that
// address (succeeded()), so in effect only failures spend tokens, in two buckets:
//  - per (account, client address): a handful of guesses at one account from one place;
//  - per client address: password spraying across many accounts from one place.
// There is deliberately no bucket per account alone: an attacker elsewhere could then lock the real
// user out just by failing on purpose. The real user, from their own address, keeps their own
// (account, address) bucket. In memory, so each replica counts on its own (documented in docs/OPERATOR.md "OAuth clients and users").
export interface Limit {
  /** Failures allowed at once. */
  burst: number;
  /** One more failure allowed every this many seconds. */
  refillSeconds: number;
}

const DEFAULT_LIMITS = {
  accountAddress: { burst: 5, refillSeconds: 60 },
  address: { burst: 30, refillSeconds: 10 },
} as const satisfies Record<string, Limit>;

interface Bucket {
  tokens: number;
  at: number;
}

class Buckets {
  private readonly map = new Map<string, Bucket>();

  constructor(
    private readonly limit: Limit,
    private readonly max = 100_000,
  ) {}

  private current(key: string, now: number): Bucket {
    const b = this.map.get(key);
    if (!b) return { tokens: this.limit.burst, at: now };
    const tokens = Math.min(this.limit.burst, b.tokens + (now - b.at) / 1000 / this.limit.refillSeconds);
    return { tokens, at: now };
  }

  /** Seconds until one more failure is allowed; 0 when one is allowed now. */
  wait(key: string, now: number): number {
    const b = this.current(key, now);
    return b.tokens >= 1 ? 0 : Math.max(1, Math.ceil((1 - b.tokens) * this.limit.refillSeconds));
  }

  spend(key: string, now: number): void {
    const b = this.current(key, now);
    b.tokens = Math.max(0, b.tokens - 1);
    this.map.delete(key);
    if (this.map.size >= this.max) {
      // Drop the oldest tenth; a dropped bucket only forgets old failures.
      let n = Math.ceil(this.max / 10);
      for (const k of this.map.keys()) {
        this.map.delete(k);
        if (--n <= 0) break;
      }
    }
    this.map.set(key, b);
  }

  /** Gives one token back (an attempt charged up front that turned out not to be a failure). */
  refund(key: string, now: number): void {
    const b = this.map.get(key);
    if (!b) return;
    const c = this.current(key, now);
    if (c.tokens + 1 >= this.limit.burst) this.map.delete(key);
    else this.map.set(key, { tokens: c.tokens + 1, at: now });
  }

  reset(key: string): void {
    this.map.delete(key);
  }
}

/**
 * The address a limit counts: IPv4 as is, IPv6 by its /64 (one subscriber usually holds a whole /64,
 * so counting single IPv6 addresses would give an attacker billions of fresh buckets).
 */
export function addressKey(ip: string): string {
  const v4mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (v4mapped) return v4mapped[1]!;
  if (!ip.includes(':')) return ip;
  const [head = '', tail = ''] = ip.split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right] : left;
  return `${groups.slice(0, 4).map((g) => (parseInt(g, 16) || 0).toString(16)).join(':')}::/64`;
}

export class LoginLimiter {
  private readonly pair: Buckets;
  private readonly address: Buckets;
  private readonly clock: () => number;

  /** `clock`: milliseconds now, for refills; Date.now unless a test drives the time itself. */
  constructor(limits: { accountAddress: Limit; address: Limit } = DEFAULT_LIMITS, clock: () => number = Date.now) {
    this.pair = new Buckets(limits.accountAddress);
    this.address = new Buckets(limits.address);
    this.clock = clock;
  }

  private static pairKey(email: string, ip: string): string {
    return `${email.trim().toLowerCase()}\u0000${ip}`;
  }

  /** Seconds to wait before this address may try this account again (0: go ahead). */
  blocked(email: string, ip: string, now = this.clock()): number {
    const a = addressKey(ip);
    return Math.max(this.pair.wait(LoginLimiter.pairKey(email, a), now), this.address.wait(a, now));
  }

  failed(email: string, ip: string, now = this.clock()): void {
    const a = addressKey(ip);
    this.pair.spend(LoginLimiter.pairKey(email, a), now);
    this.address.spend(a, now);
  }

  /**
   * Checks and charges one attempt in the same synchronous step: 0 when the attempt may go on to the
   * password check (and has been charged to both buckets), else the seconds to wait (nothing charged).
   * Call before the KDF runs; call succeeded() when the password was right.
   */
  attempt(email: string, ip: string, now = this.clock()): number {
    const wait = this.blocked(email, ip, now);
    if (wait > 0) return wait;
    this.failed(email, ip, now);
    return 0;
  }

  /**
   * A successful sign-in clears that account's failures from that address, and gives back the
   * address bucket's token that attempt() charged for it.
   */
  succeeded(email: string, ip: string, now = this.clock()): void {
    const a = addressKey(ip);
    this.pair.reset(LoginLimiter.pairKey(email, a));
    this.address.refund(a, now);
  }
}
