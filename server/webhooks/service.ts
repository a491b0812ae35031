// Webhooks as the account sees them (docs/CONTRACTS.md "Webhooks"): register an https
// URL for some events and get its whsec_ signing secret once; list; delete. REST, GraphQL and the admin
// CLI call these same functions. The secret is kept encrypted at rest (secrets/at-rest.ts, bound to the
// webhook's id) because the delivery worker needs it in the clear to sign.
//
// Each webhook records the credential that registered it (`created_by`), so revoking that credential
// disables it (revocation.ts), and deliveries carry the tunnel's origin_ip only when it was registered
// with `include_origin`, which a third-party application's token may not ask for: the origin is the
// address the product hides, and an application the user allowed must not be able to keep receiving it
// somewhere of its choosing.
import { randomUUID } from 'node:crypto';
import { isUuid } from '../../common/names.ts';
import type { Database } from '../db/database.ts';
import type { WebhookCreatorKind } from '../db/entities.ts';
import { requireWrite, type Principal } from '../auth/principal.ts';
import { ApiError, notFound } from '../domain/errors.ts';
import { encryptSecret } from '../secrets/at-rest.ts';
import type { Logger } from '../../common/log.ts';
import { DeliveryWorker, type DeliveryOptions, type DeliveryOutcome } from './delivery.ts';
import { enableWebhook } from './disable.ts';
import { enqueueTest, WEBHOOK_EVENTS, type WebhookEvent } from './events.ts';
import { newWebhookSecret } from './signing.ts';
import { literalRefusal, portRefusal } from './ssrf.ts';
import { DISABLED_CREDENTIAL_REVOKED } from './disabled-reason.ts';
import { WEBHOOK_COLUMNS, webhookView, type WebhookRow, type WebhookView } from './view.ts';

/** A sane bound per account: each webhook multiplies every event into one delivery. */
const MAX_WEBHOOKS_PER_ACCOUNT = 10;
/** The webhook.url column's width (varchar(2048)): the bound is on the URL as stored, its normalised href. */
const MAX_URL_LENGTH = 2048;

export type { WebhookCreator, WebhookView } from './view.ts';

export interface CreatedWebhook {
  webhook: WebhookView;
  /** The whsec_ secret, shown this once. */
  secret: string;
}

export interface WebhookInput {
  url: string;
  events: WebhookEvent[];
  /** Deliveries carry the tunnel's origin_ip (default false). */
  includeOrigin: boolean;
}

/** What is stored of the creator: WebhookCreator, and a third-party application's grant. */
type CreatorRecord = { kind: WebhookCreatorKind; id: string | null; grant: string | null };

/** The credential of a request as a webhook records it (server/auth/principal.ts). */
function creatorOf(p: Principal): CreatorRecord {
  const c = p.credential;
  if (c.kind === 'api_key') return { kind: 'api_key', id: c.id, grant: null };
  // The panel's token is the user's own session: the user is what it stands for (a new sign-in is a new
  // grant, and signing out revokes nothing the user registered).
  if (c.kind === 'session') return { kind: 'session', id: p.userId, grant: null };
  return { kind: 'oauth_client', id: c.clientId, grant: c.id };
}

const OPERATOR: CreatorRecord = { kind: 'operator', id: null, grant: null };

const bad = (text: string) => new ApiError('invalid_request', text);

/**
 * A webhook still disabled after enabling because its credential was revoked (enableWebhook leaves those
 * alone): refused, since its creator may no longer register or receive anything (revocation.ts).
 */
function refuseRevoked(view: WebhookView): WebhookView {
  if (view.disabled_reason === DISABLED_CREDENTIAL_REVOKED) {
    throw new ApiError(
      'invalid_state',
      'The webhook was disabled because the credential that registered it was revoked, and cannot be enabled again; create a new webhook (POST /api/webhooks).',
    );
  }
  return view;
}

/**
 * `{url, events?, include_origin?}` as REST, GraphQL and the CLI receive it, checked the same way for all
 * three: an absolute https URL (http too when ALLOW_PRIVATE_WEBHOOKS=true) without credentials or
 * fragment, whose host, if an IP literal, is public; events a non-empty list of known names (default:
 * all of them); include_origin true or false (default false; null is the default).
 */
export function validateWebhookInput(input: { url?: unknown; events?: unknown; include_origin?: unknown }, allowPrivate: boolean): WebhookInput {
  const { url, events, include_origin } = input;
  if (typeof url !== 'string' || url === '') throw bad('url is required: a string, the https URL deliveries are POSTed to.');
  // A first bound before parsing, so a megabyte of text is not normalised for nothing.
  if (url.length > MAX_URL_LENGTH) throw bad(`url is longer than ${MAX_URL_LENGTH} characters.`);
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw bad('url is not an absolute URL.');
  }
  // What is stored is the normalised href, which can be six times the text sent (each é becomes %C3%A9,
  // an IDN host its punycode): bounded again here, or the insert overflows the column and answers 500.
  if (parsed.href.length > MAX_URL_LENGTH) throw bad(`url is longer than ${MAX_URL_LENGTH} characters once normalised (percent-encoded).`);
  const schemes = allowPrivate ? ['https:', 'http:'] : ['https:'];
  if (!schemes.includes(parsed.protocol)) throw bad(`url must be https${allowPrivate ? ' or http' : ''}.`);
  if (parsed.username || parsed.password) throw bad('url must not carry a user name or password.');
  if (parsed.hash) throw bad('url must not have a fragment.');
  if (!parsed.hostname) throw bad('url has no host.');
  const literal = literalRefusal(parsed, allowPrivate);
  if (literal) throw bad(`url: ${literal}.`);
  let chosen: WebhookEvent[] = [...WEBHOOK_EVENTS];
  if (events !== undefined && events !== null) {
    if (!Array.isArray(events) || events.length === 0 || !events.every((e) => typeof e === 'string')) {
      throw bad(`events must be a non-empty array of event names (${WEBHOOK_EVENTS.join(', ')}).`);
    }
    const unknown = events.filter((e) => !(WEBHOOK_EVENTS as readonly string[]).includes(e));
    if (unknown.length) throw bad(`events: unknown event ${unknown.map((e) => JSON.stringify(String(e).slice(0, 64))).join(', ')}; known: ${WEBHOOK_EVENTS.join(', ')}.`);
    chosen = WEBHOOK_EVENTS.filter((e) => events.includes(e));
  }
  if (include_origin !== undefined && include_origin !== null && typeof include_origin !== 'boolean') throw bad('include_origin must be true or false.');
  return { url: parsed.href, events: chosen, includeOrigin: include_origin === true };
}


export class WebhookService {
  private worker: DeliveryWorker | null = null;
  private readonly outcomeListeners = new Set<(o: DeliveryOutcome) => void>();

  constructor(
    private readonly db: Database,
    private readonly opts: {
      /** ALLOW_PRIVATE_WEBHOOKS (server/config.ts). */
      allowPrivate: boolean;
      /** ADMIN_SSH_PORT (server/config.ts): never a webhook's port. */
      adminSshPort: number;
      /** The secret-encryption key (loaded on first use: an API replica may start before its secrets). */
      encryptionKey: () => Promise<Buffer>;
    },
  ) {}

  get allowPrivate(): boolean {
    return this.opts.allowPrivate;
  }

  /**
   * Starts this process's delivery worker (delivery.ts); main.ts does when WEBHOOK_WORKER is on. Tests
   * pass their clock, resolver and backoff in `overrides`.
   */
  startDelivery(log: Logger, overrides: Partial<Omit<DeliveryOptions, 'encryptionKey' | 'onOutcome'>> = {}): DeliveryWorker {
    if (this.worker) throw new Error('the webhook delivery worker is already running');
    this.worker = new DeliveryWorker(this.db, {
      allowPrivate: this.opts.allowPrivate,
      adminSshPort: this.opts.adminSshPort,
      log,
      ...overrides,
      encryptionKey: this.opts.encryptionKey,
      onOutcome: (o) => {
        for (const fn of this.outcomeListeners) fn(o);
      },
    });
    this.worker.start();
    return this.worker;
  }

  async stopDelivery(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    await w?.stop();
  }

  /** Each delivery attempt's outcome in this process (the /metrics counter); returns the unsubscribe. */
  onOutcome(fn: (o: DeliveryOutcome) => void): () => void {
    this.outcomeListeners.add(fn);
    return () => this.outcomeListeners.delete(fn);
  }

  /** Deliveries still to be sent, across replicas (the /metrics gauge). */
  async pendingDeliveries(): Promise<number> {
    const [r] = await this.db.query<{ n: number }>(`select count(*)::int as n from webhook_delivery where delivered_at is null and given_up_at is null`);
    return r?.n ?? 0;
  }

  /**
   * Registers a webhook for the caller's account, recording the caller's credential. include_origin is
   * refused (insufficient_scope) to a third-party application's token: only the account's own session
   * (the panel) or its own API key may have the origin sent somewhere.
   */
  create(principal: Principal, input: WebhookInput): Promise<CreatedWebhook> {
    requireWrite(principal);
    if (input.includeOrigin && principal.credential.kind === 'oauth_client') {
      throw new ApiError(
        'insufficient_scope',
        'include_origin: a third-party application may not register a webhook that receives the origin address; the account owner can, in the panel or with an API key.',
      );
    }
    return this.insert(principal.accountId, input, creatorOf(principal));
  }

  list(principal: Principal): Promise<WebhookView[]> {
    return this.listFor(principal.accountId);
  }

  /** Another account's webhook is not_found, as a missing one. */
  async delete(principal: Principal, id: string): Promise<void> {
    requireWrite(principal);
    if (!(await this.deleteWhere(id, principal.accountId))) throw notFound('webhook');
  }

  /**
   * Queues a `webhook.test` event for this one webhook (write permission), delivered and signed like any
   * other; returns its message id (the `webhook-id` header the endpoint will see). Another account's
   * webhook is not_found, as a missing one.
   */
  async test(principal: Principal, id: string): Promise<{ message_id: string }> {
    requireWrite(principal);
    if (!isUuid(id)) throw notFound('webhook');
    const messageId = await enqueueTest(this.db, principal.accountId, id.toLowerCase());
    if (messageId === 'not_found') throw notFound('webhook');
    if (messageId === 'disabled') throw new ApiError('invalid_state', 'The webhook is disabled and gets no deliveries, test events included; enable it first (POST /api/webhooks/{id}/enable).');
    if (messageId === 'credential_revoked') {
      throw new ApiError('invalid_state', 'The webhook is disabled because the credential that registered it was revoked, and gets no deliveries, test events included; register a new webhook.');
    }
    return { message_id: messageId };
  }

  /** The operator's create (admin CLI): a webhook of this account, recorded as the operator's. */
  createFor(accountId: string, input: WebhookInput): Promise<CreatedWebhook> {
    return this.insert(accountId, input, OPERATOR);
  }

  /**
   * Enables one of the account's webhooks again (write permission) after it was disabled for failing:
   * deliveries resume with the next event (disable.ts). Enabling an enabled webhook changes nothing.
   * A webhook disabled because its credential was revoked stays disabled (invalid_state): what that
   * credential registered must not come back; the owner registers a new webhook. Another account's
   * webhook is not_found, as a missing one.
   */
  async enable(principal: Principal, id: string): Promise<WebhookView> {
    requireWrite(principal);
    const view = isUuid(id) ? await enableWebhook(this.db, id.toLowerCase(), principal.accountId) : null;
    if (!view) throw notFound('webhook');
    return refuseRevoked(view);
  }

  /** The operator's enable (admin CLI): any account's webhook; null when there is none; as enable() otherwise. */
  async enableAny(id: string): Promise<WebhookView | null> {
    const view = isUuid(id) ? await enableWebhook(this.db, id.toLowerCase(), null) : null;
    return view && refuseRevoked(view);
  }

  /** The account's webhook with a new secret; at most MAX_WEBHOOKS_PER_ACCOUNT per account. */
  private async insert(accountId: string, input: WebhookInput, creator: CreatorRecord): Promise<CreatedWebhook> {
    // Here rather than in validateWebhookInput: the edges' ssh_ports are in the database. REST, GraphQL
    // and the CLI all come through this function.
    const port = await portRefusal(this.db, new URL(input.url), this.opts.adminSshPort);
    if (port) throw bad(`url: ${port}; webhooks may not be aimed at it.`);
    const key = await this.opts.encryptionKey();
    const id = randomUUID();
    const secret = newWebhookSecret();
    const row = await this.db.transaction(async (sql) => {
      // The account row's lock makes the count and the insert one step, whatever runs at the same time.
      await sql.query('select id from account where id = ? for update', [accountId]);
      const [{ n } = { n: 0 }] = await sql.query<{ n: number }>('select count(*)::int as n from webhook where account_id = ?', [accountId]);
      if (n >= MAX_WEBHOOKS_PER_ACCOUNT) throw bad(`An account may have at most ${MAX_WEBHOOKS_PER_ACCOUNT} webhooks; delete one first.`);
      const [r] = await sql.query<WebhookRow>(
        `insert into webhook (id, account_id, url, events, secret_ciphertext, include_origin, created_by_kind, created_by_id, created_by_grant)
         values (?, ?, ?, ?::jsonb, ?, ?, ?, ?, ?) returning ${WEBHOOK_COLUMNS}`,
        [id, accountId, input.url, JSON.stringify(input.events), encryptSecret(key, secret, id), input.includeOrigin, creator.kind, creator.id, creator.grant],
      );
      return r!;
    });
    return { webhook: webhookView(row), secret };
  }

  async listFor(accountId: string): Promise<WebhookView[]> {
    const rows = await this.db.query<WebhookRow>(`select ${WEBHOOK_COLUMNS} from webhook where account_id = ? order by created_at, id`, [accountId]);
    return rows.map(webhookView);
  }

  /** The operator's delete (admin CLI): any account's webhook. */
  async deleteAny(id: string): Promise<boolean> {
    return this.deleteWhere(id, null);
  }

  private async deleteWhere(id: string, accountId: string | null): Promise<boolean> {
    if (!isUuid(id)) return false;
    const rows = await this.db.query(`delete from webhook where id = ?${accountId === null ? '' : ' and account_id = ?'} returning id`, accountId === null ? [id.toLowerCase()] : [id.toLowerCase(), accountId]);
    return rows.length > 0;
  }
}
