// Who may spend the gateway's work, and how much: one gate for REST, GraphQL over HTTP and GraphQL
// over WebSocket (connection_init and every operation), so no transport has looser limits.
//
//   no credential        -> the anonymous budget of the client's address (docs/CONTRACTS.md "REST shapes" rate limits)
//   a credential         -> refused with 429 before any lookup while the address has spent its budget
//                           of failed authentications, unless this exact credential was valid here
//                           recently (a real integration is not a guess); otherwise authenticated
//   failed authentication-> charged to the address's failure budget (checked before any lookup, so a flood of bad credentials costs no database), before the
//                           lookup and refunded when the credential is valid: made-up svc_ keys stop
//                           reaching the database once it is spent, however many arrive at once
//   valid credential     -> the budget of that credential: per API key id, per token subject; never per
//                           header string, so spelling a key differently buys no fresh bucket
//   refused as a whole   -> (a valid token of a client without API access) the anonymous budget of the
//                           address, as if no credential had been sent
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
  /** Milliseconds now, for the budgets' refills and recent validity; Date.now unless a test drives the time. */
  clock?: () => number;
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
  private readonly clock: () => number;
  private readonly inflight = new Map<string, Promise<Principal>>();

  constructor(
    private readonly auth: Authenticator,
    opts: GateOptions,
  ) {
    this.clock = opts.clock ?? Date.now;
    this.requests = new RateLimiter({ perMinute: opts.perMinute, burst: opts.burst, clock: this.clock });
    // Guessing stays slow (a tenth of the request rate, at least 20 a minute) while a client that
    // mistypes a key now and then is never noticed.
    this.failures = new RateLimiter({ perMinute: Math.max(20, opts.perMinute / 10), burst: Math.max(20, opts.burst / 5), clock: this.clock });
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
    const fail = `fail:${where}`;
    const trusted = this.wasValid(digest, this.clock());
    // Identical credentials arriving together share one lookup (a new integration's first burst is one
    // query, and one made-up key sent a thousand times at once is one query too).
    let lookup = this.inflight.get(digest);
    let prepaid = false;
    if (!lookup) {
      if (!trusted) {
        // Paid before the lookup, refunded if the credential turns out valid: concurrent guesses cannot
        // all slip past a budget that is only checked (limited BEFORE any database lookup).
        const wait = this.failures.take(fail);
        if (wait > 0) throw limited(wait, 'failed authentications from this address');
        prepaid = true;
      }
      lookup = this.auth.authenticate(authorization).finally(() => this.inflight.delete(digest));
      this.inflight.set(digest, lookup);
    }
    let principal: Principal;
    try {
      principal = await lookup;
    } catch (e) {
      if (!(e instanceof ApiError)) throw e;
      if (e.code !== 'invalid_token') {
        // A genuine credential refused as a whole (a token of a client without API access, docs/CONTRACTS.md "Admin CLI"):
        // not a guess, so the failure budget is refunded; but GraphQL still runs what needs no principal for
        // it, so it spends the address's anonymous budget exactly as a request without a credential does
        // (docs/SECURITY.md): holding such a token buys no unlimited requests. The adapters answer 403 in their own shape.
        if (prepaid) this.failures.refund(fail);
        this.chargeAnonymous(address);
        return { principal: null, error: e };
      }
      this.recentlyValid.delete(digest);
      if (trusted) {
        // A credential valid here before (now revoked or expired) had nothing prepaid: charge it now.
        const wait = this.failures.take(fail);
        if (wait > 0) throw limited(wait, 'failed authentications from this address');
      }
      return { principal: null, error: e };
    }
    if (prepaid) this.failures.refund(fail);
    this.remember(digest, this.clock());
    this.charge(principal);
    return { principal, error: null };
  }

  /**
   * Whether `authorization`, which carries API key `keyId`, authenticated here recently (and has not
   * failed since) and the key's budget has a request left: such a caller is neither guessing nor
   * throttled, so work may start for it while admit() checks it again (routes.ts prefetchList).
   */
  trustsApiKey(authorization: string, keyId: string): boolean {
    const now = this.clock();
    return this.wasValid(createHash('sha256').update(authorization).digest('base64url'), now) && this.requests.has(apiKeyBucket(keyId), now);
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

const apiKeyBucket = (keyId: string) => `key:${keyId}`;

/** The bucket of a credential: its API key id, or the subject of an access token. */
function bucketOf(p: Principal): string {
  if (p.credential.kind === 'api_key') return apiKeyBucket(p.credential.id);
  return `sub:${p.userId ?? p.credential.id}`;
}
