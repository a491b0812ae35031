// The delivery worker (docs/CONTRACTS.md "Webhooks"): sends what the outbox
// (webhook_delivery) holds, at least once, with the Standard Webhooks headers.
//
// - Taking work: one statement claims due rows (as many as `concurrency` leaves room for) with FOR UPDATE SKIP LOCKED, counts the
//   attempt and pushes next_attempt_at a lease ahead (the request's timeout plus a margin). Replicas
//   running the worker never take the same row at once; a worker that dies mid-request leaves the row to
//   come due again when its lease ends, and another (or the restarted one) sends it then, with the same
//   message id and body. A finished attempt writes its outcome only if the row still has its attempt
//   number (a stale worker's answer cannot overwrite a newer one).
// - One attempt: the SSRF guard resolves the URL's name now (ssrf.ts) and the request connects to the
//   checked address (no second lookup), with the URL's host for Host and TLS SNI; no redirects. A 2xx
//   answer within `timeoutMs` (10 s) is delivered; anything else (another status, a refusal by the guard,
//   a network error, the timeout) is retried with exponential backoff, `backoffBaseMs` (5 s) doubled
//   per attempt up to `backoffMaxMs` (1 h), until 24 hours after the event; then it is given up
//   (given_up_at), the last outcome kept.
// - Clocks: `now` (and the backoff) are injectable so tests move time instead of waiting for it.
// - A disabled webhook's deliveries are not taken (revocation.ts): the condition sits in the inner
//   select, before its limit, so a backlog of them cannot fill every claim and starve the others.
import http from 'node:http';
import https from 'node:https';
import { isIP, type LookupFunction } from 'node:net';
import type { Database } from '../db/database.ts';
import type { Logger } from '../../common/log.ts';
import { decryptSecret } from '../secrets/at-rest.ts';
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
  /** How often due deliveries are looked for; default 1 s. */
  pollMs?: number;
  /** Attempts in flight at once in this process; default 16. */
  concurrency?: number;
  /** Each attempt's outcome (the /metrics counter). */
  onOutcome?: (outcome: DeliveryOutcome) => void;
}

/** Delivered and given-up rows are kept this long for support, then purged. */
const RETENTION_DAYS = 7;
const PURGE_EVERY_MS = 3600_000;
/** A claimed attempt's lease: the request's timeout plus this; after it, another worker may take the row. */
const LEASE_MARGIN_MS = 5_000;
/** How much of an answer's body is read (and discarded) before the connection is closed. */
const MAX_ANSWER_BYTES = 64 * 1024;

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
    const claimed = await this.db.query<Claimed>(
      `update webhook_delivery d set attempts = d.attempts + 1, last_attempt_at = ?::timestamptz, next_attempt_at = ?::timestamptz
         from (select id from webhook_delivery
                where delivered_at is null and given_up_at is null and next_attempt_at <= ?::timestamptz
                  and not exists (select 1 from webhook x where x.id = webhook_delivery.webhook_id and x.disabled_at is not null)
                order by next_attempt_at limit ? for update skip locked) due, webhook w
        where d.id = due.id and w.id = d.webhook_id
        returning d.id, d.webhook_id, w.url, w.secret_ciphertext, d.body, d.attempts, (extract(epoch from d.created_at) * 1000)::float8 as created_ms`,
      [iso(now), iso(now + this.timeoutMs + LEASE_MARGIN_MS), iso(now), room],
    );
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
    if (attempt.outcome === 'delivered') {
      await this.db.query(`update webhook_delivery set delivered_at = ?::timestamptz, last_outcome = ? where id = ? and attempts = ?`, [iso(now), attempt.detail, c.id, c.attempts]);
      return;
    }
    const deadline = c.created_ms + this.giveUpAfterMs;
    if (now >= deadline) {
      await this.db.query(`update webhook_delivery set given_up_at = ?::timestamptz, last_outcome = ? where id = ? and attempts = ?`, [iso(now), attempt.detail, c.id, c.attempts]);
      this.o.onOutcome?.('given_up');
      this.o.log.warn('webhook delivery given up', { delivery: c.id, webhook_id: c.webhook_id, attempts: c.attempts, last_outcome: attempt.detail });
      return;
    }
    // The last try lands on the deadline itself rather than past it.
    const next = Math.min(now + this.backoff(c.attempts), deadline);
    await this.db.query(`update webhook_delivery set next_attempt_at = ?::timestamptz, last_outcome = ? where id = ? and attempts = ?`, [iso(next), attempt.detail, c.id, c.attempts]);
  }

  /** The wait after failed attempt number `n` (1-based). */
  backoff(n: number): number {
    return Math.min(this.backoffBaseMs * 2 ** Math.min(n - 1, 30), this.backoffMaxMs);
  }

  private async attempt(c: Claimed, key: Buffer): Promise<Attempt> {
    const url = new URL(c.url);
    const target = await checkTarget(this.db, url, { allowPrivate: this.o.allowPrivate, resolve: this.resolve, adminSshPort: this.o.adminSshPort });
    if (!target.ok) return { outcome: 'refused', detail: `refused: ${target.reason}` };
    const secret = decryptSecret(key, c.secret_ciphertext, c.webhook_id);
    const timestamp = Math.floor(this.now() / 1000);
    const status = await post(url, target.address, this.timeoutMs, c.body, {
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

/**
 * POSTs `body` to `url`, connecting to `address` (already checked) whatever the name resolves to now;
 * Host and SNI stay the URL's. The status, or why there is none. Redirects are not followed (a 3xx is
 * just not 2xx).
 */
function post(url: URL, address: string, timeoutMs: number, body: string, headers: Record<string, string>): Promise<number | string> {
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
    const done = (v: number | string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
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
    const timer = setTimeout(() => done(`no answer within ${timeoutMs} ms`), timeoutMs);
    req.on('error', (e) => done(e.message));
    req.end(body);
  });
}
