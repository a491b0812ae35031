// Who may spend the gateway's work, and how much: one gate for REST, GraphQL over HTTP and GraphQL
// over WebSocket (connection_init and every operation), so no transport has looser limits.
//
//   no credential        -> the anonymous budget of the client's address (DESIGN 3.3 rate limits)
//   a credential         -> refused with 429 before any lookup while the address has spent its budget
//                           of failed authentications, unless this exact credential was valid here
//                           recently (a real integration is not a guess); otherwise authenticated
//   failed authentication-> charged to the address's failure budget (issue 8, item 14): made-up svc_
//                           keys stop reaching the database once it is spent
//   valid credential     -> the budget of that credential: per API key id, per token subject; never per
//                           header string, so spelling a key differently buys no fresh bucket
import { createHash } from 'node:crypto';
import type { Authenticator } from '../../auth/authenticate.ts';
import type { Principal } from '../../auth/principal.ts';
import { ApiError } from '../../domain/errors.ts';
import { addressKey } from '../../oidc/login-limits.ts';
import { RateLimiter } from './rate-limit.ts';

export interface Admission {
  /** The caller, when it sent a valid credential. */
  principal: Principal | null;
  /** Why the credential it sent is refused (invalid_token), for the adapter to answer as it answers them. */
  error: ApiError | null;
}

export interface GateOptions {
  perMinute: number;
  burst: number;
  /** How long a credential that authenticated stays exempt from its address's failure block. */
  recentlyValidMs?: number;
}

const RECENT_MAX = 100_000;

const limited = (wait: number, what: string) =>
  new ApiError('rate_limited', `Too many ${what}; retry in ${wait} s.`, { 'Retry-After': String(wait) });

export class RequestGate {
  private readonly requests: RateLimiter;
  private readonly failures: RateLimiter;
  /** sha256(Authorization) -> until when; holding the hash proves nothing without the secret itself. */
  private readonly recentlyValid = new Map<string, number>();
  private readonly recentlyValidMs: number;

  constructor(
    private readonly auth: Authenticator,
    opts: GateOptions,
  ) {
    this.requests = new RateLimiter({ perMinute: opts.perMinute, burst: opts.burst });
    // Guessing stays slow (a tenth of the request rate, at least 20 a minute) while a client that
    // mistypes a key now and then is never noticed.
    this.failures = new RateLimiter({ perMinute: Math.max(20, opts.perMinute / 10), burst: Math.max(20, opts.burst / 5) });
    this.recentlyValidMs = opts.recentlyValidMs ?? 10 * 60_000;
  }

  /**
   * Admits one request (or one WebSocket operation) from `address` carrying `authorization`.
   * Throws 429 rate_limited; an invalid credential is returned as `error`, not thrown, so GraphQL can
   * still answer fields that need none.
   */
  async admit(address: string, authorization: string | undefined): Promise<Admission> {
    const where = addressKey(address);
    if (!authorization) {
      this.chargeAnonymous(address);
      return { principal: null, error: null };
    }
    const digest = createHash('sha256').update(authorization).digest('base64url');
    const now = Date.now();
    const blocked = this.failures.wait(`fail:${where}`, now);
    if (blocked > 0 && !this.wasValid(digest, now)) throw limited(blocked, 'failed authentications from this address');
    let principal: Principal;
    try {
      principal = await this.auth.authenticate(authorization);
    } catch (e) {
      if (!(e instanceof ApiError) || e.code !== 'invalid_token') throw e;
      this.recentlyValid.delete(digest);
      const wait = this.failures.take(`fail:${where}`);
      if (wait > 0) throw limited(wait, 'failed authentications from this address');
      return { principal: null, error: e };
    }
    this.remember(digest, now);
    this.charge(principal);
    return { principal, error: null };
  }

  /** Spends one request of `principal`'s own budget; throws 429 when it is empty. */
  charge(principal: Principal): void {
    const wait = this.requests.take(bucketOf(principal));
    if (wait > 0) throw limited(wait, 'requests');
  }

  /** Spends one request of the anonymous budget of `address`; throws 429 when it is empty. */
  chargeAnonymous(address: string): void {
    const wait = this.requests.take(`addr:${addressKey(address)}`);
    if (wait > 0) throw limited(wait, 'requests from this address');
  }

  private wasValid(digest: string, now: number): boolean {
    const until = this.recentlyValid.get(digest);
    return until !== undefined && until > now;
  }

  private remember(digest: string, now: number): void {
    this.recentlyValid.delete(digest);
    if (this.recentlyValid.size >= RECENT_MAX) {
      // Oldest first (Map order is insertion order, refreshed above).
      for (const k of this.recentlyValid.keys()) {
        this.recentlyValid.delete(k);
        if (this.recentlyValid.size < RECENT_MAX * 0.9) break;
      }
    }
    this.recentlyValid.set(digest, now + this.recentlyValidMs);
  }
}

/** The bucket of a credential: its API key id, or the subject of an access token. */
export function bucketOf(p: Principal): string {
  if (p.credential.kind === 'api_key') return `key:${p.credential.id}`;
  return `sub:${p.userId ?? p.credential.id}`;
}
