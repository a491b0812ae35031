// The delivery worker (docs/CONTRACTS.md "Webhooks"): sends what the outbox
// (webhook_delivery) holds, at least once, with the Standard Webhooks headers.
//
// - Taking work fairly: one tenant's dead endpoints must not stall everyone's deliveries. The claim is one
//   statement under a transaction-scoped advisory lock (claims of all replicas run one at a time, each
//   seeing every attempt the others started; they take milliseconds), which
//   - counts the attempts in flight (rows whose lease has not ended) per webhook and per account;
//   - takes from each enabled webhook at most `maxInFlightPerWebhook` (2) minus its attempts in flight,
//     its oldest due rows first, FOR UPDATE SKIP LOCKED;
//   - puts each account's candidates in a queue position after the attempts it already has in flight
//     (1, 2, ... interleaving its webhooks), drops positions past `maxInFlightPerAccount` (8), and takes
//     the lowest positions first, the oldest due first among equals: round-robin over accounts, so an
//     account with 10,000 due rows waits behind every other account's first row and can never hold all
//     of a process's `concurrency` (16) slots;
//   - counts the attempt and sets its lease (next_attempt_at and lease_until: the request's timeout plus a
//     margin). A worker that dies mid-request leaves the row to come due again when its lease ends, and
//     another (or the restarted one) sends it then, with the same message id and body. A finished attempt
//     clears the lease and writes its outcome only if the row still has its attempt number and was not
//     given up meanwhile (a stale worker's answer cannot overwrite a newer one).
// - One attempt: the SSRF guard resolves the URL's name now (ssrf.ts) and the request connects to the
//   checked address (no second lookup), with the URL's host for Host and TLS SNI; no redirects. The name
//   resolved and the TCP connection up within `connectTimeoutMs` (3 s: an address that drops packets, or
//   a name whose DNS never answers, frees its slot early) and a 2xx answer complete within `timeoutMs`
//   (10 s) of the start to be delivered; anything
//   else (another status, a refusal by the guard, a network error, either timeout) is retried with
//   exponential backoff, `backoffBaseMs` (5 s) doubled per attempt up to `backoffMaxMs` (1 h), until 24
//   hours after the event; then it is given up (given_up_at), the last outcome kept.
// - A webhook whose attempts have failed for `disableAfterMs` (24 h) with nothing delivered in between is
//   disabled (disable.ts).
// - Clocks: `now` (and the backoff) are injectable so tests move time instead of waiting for it.
// - A disabled webhook's deliveries are not taken, whether it was disabled for failing (disable.ts) or
//   because its credential was revoked (revocation.ts): the claim's `hooks` step leaves it out before any
//   limit, so a backlog of them cannot fill every claim and starve the others.
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import type { Database } from '../db/database.ts';
import type { Logger } from '../../common/log.ts';
import { decryptSecret } from '../secrets/at-rest.ts';
import { disableIfFailing, type Disabled } from './disable.ts';
import { signatureHeader } from './signing.ts';
import { checkTarget, systemResolver, type Resolver } from './ssrf.ts';

/** Per attempt: delivered, failed (non-2xx, network error, timeout) or refused by the SSRF guard; given_up once per delivery. */
export type DeliveryOutcome = 'delivered' | 'failed' | 'refused' | 'given_up';

export interface DeliveryOptions {
  /** ALLOW_PRIVATE_WEBHOOKS: skip the public-address rule (labs and tests). */
  allowPrivate: boolean;
  /** ADMIN_SSH_PORT: never a webhook's port (ssrf.ts portRefusal). */
  adminSshPort: number;
  encryptionKey: () => Promise<Buffer>;
  log: Logger;
  /** IPv4 addresses of a host name (default: the system resolver, IPv4 only). */
  resolve?: Resolver;
  /** Milliseconds now (default Date.now). */
  now?: () => number;
  /** First retry after this (doubled per attempt); default 5 s, so the first retry comes within 30 s. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
  /** Given up when an attempt fails this long after the event; default 24 h. */
  giveUpAfterMs?: number;
  /** One request, connect to last byte; default 10 s. */
  timeoutMs?: number;
  /** The TCP connection must be up within this (part of `timeoutMs`); default 3 s. */
  connectTimeoutMs?: number;
  /** Attempts in flight at once per webhook, across replicas (enforced by the claim); default 2. */
  maxInFlightPerWebhook?: number;
  /** Attempts in flight at once per account, across replicas (enforced by the claim); default 8, half of the default `concurrency`. */
  maxInFlightPerAccount?: number;
  /** A webhook failing this long with nothing delivered is disabled; default 24 h. */
  disableAfterMs?: number;
  /** How often due deliveries are looked for; default 1 s. */
  pollMs?: number;
  /** Attempts in flight at once in this process; default 16. */
  concurrency?: number;
  /** Each attempt's outcome (the /metrics counter). */
  onOutcome?: (outcome: DeliveryOutcome) => void;
  /** A webhook this worker disabled for failing. */
  onDisabled?: (d: Disabled) => void;
}

/** Delivered and given-up rows are kept this long for support, then purged. */
const RETENTION_DAYS = 7;
const PURGE_EVERY_MS = 3600_000;
/** A claimed attempt's lease: the request's timeout plus this; after it, another worker may take the row. */
const LEASE_MARGIN_MS = 5_000;
/** How much of an answer's body is read (and discarded) before the connection is closed. */
const MAX_ANSWER_BYTES = 64 * 1024;
/**
 * The claim's advisory lock (pg_advisory_xact_lock(int, int)): a class of its own ("whk" in ASCII) and
 * object 1. The two-key form never meets the one-key (bigint) locks of migrations and provisioning.
 */
const CLAIM_LOCK = [0x77686b, 1] as const;

/**
 * The fair claim (see the top of this file), with named parameters (`{now}`, ...: claimQuery() numbers
 * them). Every value is a parameter, never a subquery or a CTE column, so the planner knows them: a
 * webhook with nothing due costs one index probe, a webhook with 1,000 due rows an index scan that stops
 * after 2, and the final update looks up its 16 rows instead of scanning the outbox.
 */
const CLAIM_SQL = `
with busy as (
  select d.webhook_id, count(*)::int as n from webhook_delivery d where d.lease_until > {now} group by d.webhook_id
), account_busy as (
  select w.account_id, sum(b.n)::int as n from busy b join webhook w on w.id = b.webhook_id group by w.account_id
), hooks as (
  select w.id, w.account_id, coalesce(b.n, 0) as busy
    from webhook w left join busy b on b.webhook_id = w.id
   where w.disabled_at is null and coalesce(b.n, 0) < {per_webhook}
), candidates as (
  select c.id, c.next_attempt_at, h.account_id,
         row_number() over (partition by h.id order by c.next_attempt_at, c.id) as nth_of_webhook
    from hooks h
    cross join lateral (
      select d.id, d.next_attempt_at from webhook_delivery d
       where d.webhook_id = h.id and d.delivered_at is null and d.given_up_at is null and d.next_attempt_at <= {now}
       order by d.next_attempt_at
       limit {per_webhook} - h.busy
       for update of d skip locked
    ) c
), placed as (
  select c.id, c.next_attempt_at,
         coalesce(a.n, 0) + row_number() over (partition by c.account_id order by c.nth_of_webhook, c.next_attempt_at, c.id) as place
    from candidates c left join account_busy a on a.account_id = c.account_id
), chosen as (
  select pl.id from placed pl where pl.place <= {per_account} order by pl.place, pl.next_attempt_at, pl.id limit {room}
)
update webhook_delivery d
   set attempts = d.attempts + 1, last_attempt_at = {now}, next_attempt_at = {lease_end}, lease_until = {lease_end}
  from chosen, webhook w
 where d.id = chosen.id and w.id = d.webhook_id
returning d.id, d.webhook_id, w.url, w.secret_ciphertext, d.body, d.attempts, (extract(epoch from d.created_at) * 1000)::float8 as created_ms`;

interface ClaimParams {
  now: string;
  lease_end: string;
  per_webhook: number;
  per_account: number;
  room: number;
}

const CLAIM_TYPES: Record<keyof ClaimParams, string> = { now: 'timestamptz', lease_end: 'timestamptz', per_webhook: 'int', per_account: 'int', room: 'int' };

/** CLAIM_SQL with `?` placeholders (Database.query's) in place of its names, and the values in their order. */
function claimQuery(v: ClaimParams): { text: string; params: unknown[] } {
  const params: unknown[] = [];
  const text = CLAIM_SQL.replace(/\{(\w+)\}/g, (_m, name: keyof ClaimParams) => {
    params.push(v[name]);
    return `?::${CLAIM_TYPES[name]}`;
  });
  return { text, params };
}

interface Claimed {
  id: string;
  webhook_id: string;
  url: string;
  secret_ciphertext: string;
  body: string;
  attempts: number;
  created_ms: number;
}

type Attempt = { outcome: 'delivered' | 'failed' | 'refused'; detail: string };

const iso = (ms: number) => new Date(ms).toISOString();

export class DeliveryWorker {
  private readonly now: () => number;
  private readonly resolve: Resolver;
  private readonly timeoutMs: number;
  private readonly backoffBaseMs: number;
  private readonly backoffMaxMs: number;
  private readonly giveUpAfterMs: number;
  private readonly connectTimeoutMs: number;
  private readonly disableAfterMs: number;
  private timer: NodeJS.Timeout | null = null;
  private claiming: Promise<Promise<void>[]> | null = null;
  private readonly inFlight = new Set<Promise<void>>();
  private stopped = false;
  private lastPurge = 0;

  constructor(
    private readonly db: Database,
    private readonly o: DeliveryOptions,
  ) {
    this.now = o.now ?? Date.now;
    this.resolve = o.resolve ?? systemResolver;
    this.timeoutMs = o.timeoutMs ?? 10_000;
    this.backoffBaseMs = o.backoffBaseMs ?? 5_000;
    this.backoffMaxMs = o.backoffMaxMs ?? 3600_000;
    this.giveUpAfterMs = o.giveUpAfterMs ?? 24 * 3600_000;
    this.connectTimeoutMs = Math.min(o.connectTimeoutMs ?? 3_000, this.timeoutMs);
    this.disableAfterMs = o.disableAfterMs ?? 24 * 3600_000;
  }

  /** Polls every `pollMs` until stop(); each poll starts what is due, up to `concurrency` in flight. */
  start(): void {
    const tick = () => {
      if (this.stopped) return;
      void this.claimAndStart()
        .catch((e: unknown) => this.o.log.warn('webhook delivery round failed', { err: (e as Error).message }))
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(tick, this.o.pollMs ?? 1000);
        });
    };
    tick();
  }

  /** Stops polling and waits for the attempts in flight (each bounded by the timeout). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.claiming?.catch(() => {});
    await Promise.allSettled([...this.inFlight]);
  }

  /** Claims what is due, sends it and waits for the outcomes (tests drive rounds with it). Resolves with how many were attempted. */
  async runOnce(): Promise<number> {
    const started = await this.claimAndStart();
    await Promise.allSettled(started);
    return started.length;
  }

  /**
   * One poll without the timer: claims what is due and there is room for, starts it and resolves with how
   * many were claimed, without waiting for their outcomes (tests drive rounds with it while endpoints hold
   * attempts open).
   */
  async startDue(): Promise<number> {
    return (await this.claimAndStart()).length;
  }

  /** Attempts of this process in flight now. */
  get inFlightCount(): number {
    return this.inFlight.size;
  }

  /**
   * Claims due deliveries, as many as there is room for, and starts them without waiting: a slow or dead
   * endpoint holds one slot for at most the timeout, never the next poll. Claims never overlap in one
   * process.
   */
  private claimAndStart(): Promise<Promise<void>[]> {
    const run = (this.claiming ?? Promise.resolve([])).catch(() => []).then(() => this.claim());
    this.claiming = run;
    return run;
  }

  private async claim(): Promise<Promise<void>[]> {
    await this.purge();
    const room = (this.o.concurrency ?? 16) - this.inFlight.size;
    if (room <= 0) return [];
    const now = this.now();
    const concurrency = this.o.concurrency ?? 16;
    const claimed = await this.db.transaction(async (sql) => {
      await sql.query('select pg_advisory_xact_lock(?::int, ?::int)', [...CLAIM_LOCK]);
      const { text, params } = claimQuery({
        now: iso(now),
        lease_end: iso(now + this.timeoutMs + LEASE_MARGIN_MS),
        per_webhook: this.o.maxInFlightPerWebhook ?? 2,
        per_account: this.o.maxInFlightPerAccount ?? Math.max(1, Math.floor(concurrency / 2)),
        room,
      });
      return sql.query<Claimed>(text, params);
    });
    if (claimed.length === 0) return [];
    const key = await this.o.encryptionKey();
    return claimed.map((c) => {
      const p = this.deliver(c, key).catch((e: unknown) => this.o.log.warn('webhook delivery failed to record', { delivery: c.id, err: (e as Error).message }));
      this.inFlight.add(p);
      void p.finally(() => this.inFlight.delete(p));
      return p;
    });
  }

  private async deliver(c: Claimed, key: Buffer): Promise<void> {
    let attempt: Attempt;
    try {
      attempt = await this.attempt(c, key);
    } catch (e) {
      attempt = { outcome: 'failed', detail: `error: ${(e as Error).message}` };
    }
    this.o.onOutcome?.(attempt.outcome);
    const now = this.now();
    // Each write ends the lease (the attempt is no longer in flight) and touches only the row as this
    // attempt claimed it, not given up since (a cap or a disabled webhook).
    const mine = 'where id = ? and attempts = ? and given_up_at is null';
    if (attempt.outcome === 'delivered') {
      await this.db.query(`update webhook_delivery set delivered_at = ?::timestamptz, last_outcome = ?, lease_until = null ${mine}`, [iso(now), attempt.detail, c.id, c.attempts]);
      await this.db.query('update webhook set failing_since = null where id = ? and failing_since is not null', [c.webhook_id]);
      return;
    }
    const deadline = c.created_ms + this.giveUpAfterMs;
    if (now >= deadline) {
      const [given] = await this.db.query(`update webhook_delivery set given_up_at = ?::timestamptz, last_outcome = ?, lease_until = null ${mine} returning id`, [
        iso(now),
        attempt.detail,
        c.id,
        c.attempts,
      ]);
      if (given) {
        this.o.onOutcome?.('given_up');
        this.o.log.warn('webhook delivery given up', { delivery: c.id, webhook_id: c.webhook_id, attempts: c.attempts, last_outcome: attempt.detail });
      }
    } else {
      // The last try lands on the deadline itself rather than past it.
      const next = Math.min(now + this.backoff(c.attempts), deadline);
      await this.db.query(`update webhook_delivery set next_attempt_at = ?::timestamptz, last_outcome = ?, lease_until = null ${mine}`, [iso(next), attempt.detail, c.id, c.attempts]);
    }
    await this.failed(c.webhook_id, now);
  }

  /** Keeps the webhook's failure clock (failing_since) and disables it once it has run `disableAfterMs` (disable.ts). */
  private async failed(webhookId: string, now: number): Promise<void> {
    const [w] = await this.db.query<{ since_ms: number }>(
      `update webhook set failing_since = coalesce(failing_since, ?::timestamptz) where id = ? and disabled_at is null
       returning (extract(epoch from failing_since) * 1000)::float8 as since_ms`,
      [iso(now), webhookId],
    );
    if (!w || now - w.since_ms < this.disableAfterMs) return;
    const disabled = await disableIfFailing(this.db, webhookId, new Date(now), new Date(now - this.disableAfterMs));
    if (!disabled) return;
    for (let i = 0; i < disabled.givenUp; i++) this.o.onOutcome?.('given_up');
    this.o.log.warn('webhook disabled: nothing delivered while attempts kept failing', {
      webhook_id: webhookId,
      account_id: disabled.accountId,
      failing_since: iso(w.since_ms),
      given_up: disabled.givenUp,
    });
    this.o.onDisabled?.(disabled);
  }

  /** The wait after failed attempt number `n` (1-based). */
  backoff(n: number): number {
    return Math.min(this.backoffBaseMs * 2 ** Math.min(n - 1, 30), this.backoffMaxMs);
  }

  private async attempt(c: Claimed, key: Buffer): Promise<Attempt> {
    const url = new URL(c.url);
    // Both bounds count from here, the name's resolution included: a name whose DNS never answers holds
    // the slot no longer than an address that drops packets, and the attempt ends within its lease.
    // Durations on the monotonic clock (the injectable `now` is the calendar's).
    const started = performance.now();
    const check = checkTarget(this.db, url, { allowPrivate: this.o.allowPrivate, resolve: this.resolve, adminSshPort: this.o.adminSshPort });
    const target = await within(check, this.connectTimeoutMs);
    if (target === null) return { outcome: 'failed', detail: `error: no connection within ${this.connectTimeoutMs} ms` };
    if (!target.ok) return { outcome: 'refused', detail: `refused: ${target.reason}` };
    const secret = decryptSecret(key, c.secret_ciphertext, c.webhook_id);
    const timestamp = Math.floor(this.now() / 1000);
    const spent = performance.now() - started;
    const limits = { timeoutMs: this.timeoutMs, connectTimeoutMs: this.connectTimeoutMs, spentMs: spent };
    const status = await post(url, target.address, limits, c.body, {
      'content-type': 'application/json',
      'user-agent': 'Tunnelgate-Webhooks/1',
      'webhook-id': c.id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signatureHeader(secret, c.id, timestamp, c.body),
    });
    if (typeof status === 'string') return { outcome: 'failed', detail: `error: ${status}` };
    return { outcome: status >= 200 && status < 300 ? 'delivered' : 'failed', detail: `status ${status}` };
  }

  private async purge(): Promise<void> {
    const now = this.now();
    if (now - this.lastPurge < PURGE_EVERY_MS) return;
    this.lastPurge = now;
    await this.db.query(
      `delete from webhook_delivery where created_at < ?::timestamptz and (delivered_at is not null or given_up_at is not null)`,
      [iso(now - RETENTION_DAYS * 86_400_000)],
    );
  }
}

/** `p`'s value, or null when it has not settled within `ms` (it keeps running; its result is dropped). */
function within<T>(p: Promise<T>, ms: number): Promise<T | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<null>((resolve) => {
    timer = setTimeout(() => resolve(null), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

/**
 * POSTs `body` to `url`, connecting to `address` (already checked) whatever the name resolves to now;
 * Host and SNI stay the URL's. The status, or why there is none. Redirects are not followed (a 3xx is
 * just not 2xx). The TCP connection must be up within `connectTimeoutMs` and the answer complete within
 * `timeoutMs`, both counted from the attempt's start, `spentMs` ago (the resolution).
 */
function post(
  url: URL,
  address: string,
  limits: { timeoutMs: number; connectTimeoutMs: number; spentMs: number },
  body: string,
  headers: Record<string, string>,
): Promise<number | string> {
  const { timeoutMs, connectTimeoutMs, spentMs } = limits;
  const lookup: LookupFunction = (_host, opts, cb) => {
    if (opts.all) (cb as unknown as (e: null, a: { address: string; family: number }[]) => void)(null, [{ address, family: 4 }]);
    else cb(null, address, 4);
  };
  const mod = url.protocol === 'https:' ? https : http;
  // SNI carries a host name only, never an address literal.
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const servername = isIP(host) === 0 ? host : undefined;
  return new Promise((resolve) => {
    let settled = false;
    let connectTimer: NodeJS.Timeout | undefined;
    const done = (v: number | string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      clearTimeout(connectTimer);
      req.destroy();
      resolve(v);
    };
    const req = mod.request(
      url,
      { method: 'POST', headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) }, lookup, agent: false, ...(servername ? { servername } : {}) },
      (res) => {
        const status = res.statusCode ?? 0;
        let read = 0;
        res.on('data', (d: Buffer) => {
          read += d.length;
          if (read > MAX_ANSWER_BYTES) done(status);
        });
        res.on('end', () => done(status));
        res.on('error', () => done(status));
      },
    );
    const timer = setTimeout(() => done(`no answer within ${timeoutMs} ms`), Math.max(0, timeoutMs - spentMs));
    // An address that drops packets would otherwise hold the attempt (and its slot) for the whole
    // timeout: the connection gets a shorter bound of its own.
    req.on('socket', (socket) => {
      if (!socket.connecting) return;
      connectTimer = setTimeout(() => done(`no connection within ${connectTimeoutMs} ms`), Math.max(0, connectTimeoutMs - spentMs));
      socket.once('connect', () => clearTimeout(connectTimer));
    });
    req.on('error', (e) => done(e.message));
    req.end(body);
  });
}
