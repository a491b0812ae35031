// One webhook as REST, GraphQL, the admin CLI and the `webhook.disabled` event show it (docs/CONTRACTS.md
// "Webhooks"): never its secret, nor the grant of the application that registered it. Shared by
// service.ts and disable.ts, which both read webhook rows.
import type { WebhookCreatorKind } from '../db/entities.ts';
import type { WebhookEvent } from './events.ts';

/**
 * Who registered a webhook, as the list shows it: the user (`session`: the owner signed in to the panel),
 * the API key, the third-party application (`oauth_client`: its client id; the grant is recorded, not
 * shown), or the operator's admin CLI (no id).
 */
export type WebhookCreator = { kind: Exclude<WebhookCreatorKind, 'operator'>; id: string } | { kind: 'operator'; id: null };

/** The REST wire shape of one webhook (never its secret). */
export interface WebhookView {
  id: string;
  url: string;
  events: WebhookEvent[];
  /** Whether deliveries carry the tunnel's origin_ip. */
  include_origin: boolean;
  /** Null for a webhook registered before creators were recorded. */
  created_by: WebhookCreator | null;
  created_at: string;
  /** When it stopped receiving deliveries (ISO), or null while enabled. */
  disabled_at: string | null;
  /** Why (`failing` or `credential_revoked`), or null while enabled. */
  disabled_reason: string | null;
}

/** The columns view() reads, for `select` and `returning`. */
export const WEBHOOK_COLUMNS = 'id, url, events, include_origin, created_by_kind, created_by_id, created_at, disabled_at, disabled_reason';

export interface WebhookRow {
  id: string;
  url: string;
  events: WebhookEvent[];
  include_origin: boolean;
  created_by_kind: WebhookCreatorKind | null;
  created_by_id: string | null;
  created_at: Date | string;
  disabled_at: Date | string | null;
  disabled_reason: string | null;
}

function creatorView(r: WebhookRow): WebhookCreator | null {
  if (r.created_by_kind === null) return null;
  if (r.created_by_kind === 'operator') return { kind: 'operator', id: null };
  return { kind: r.created_by_kind, id: r.created_by_id ?? '' };
}

// ISO 8601 in UTC with milliseconds, as every time the API shows.
const isoOf = (t: Date | string) => new Date(t).toISOString();

export const webhookView = (r: WebhookRow): WebhookView => ({
  id: r.id,
  url: r.url,
  events: r.events,
  include_origin: r.include_origin,
  created_by: creatorView(r),
  created_at: isoOf(r.created_at),
  disabled_at: r.disabled_at === null ? null : isoOf(r.disabled_at),
  disabled_reason: r.disabled_at === null ? null : r.disabled_reason,
});
