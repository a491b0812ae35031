// One webhook as REST, GraphQL, the admin CLI and the `webhook.disabled` event show it (docs/CONTRACTS.md
// "Webhooks"): never its secret. Shared by service.ts and disable.ts, which both read webhook rows.
import type { WebhookEvent } from './events.ts';

/** Why a webhook stopped receiving deliveries; 'failing': nothing delivered for 24 hours while attempts kept failing (delivery.ts). */
export const DISABLED_FAILING = 'failing';

/** The REST wire shape of one webhook (never its secret). */
export interface WebhookView {
  id: string;
  url: string;
  events: WebhookEvent[];
  created_at: string;
  /** When it stopped receiving deliveries (ISO), or null while enabled. */
  disabled_at: string | null;
  /** Why (`failing`, or another reason another part of the gateway records), or null while enabled. */
  disabled_reason: string | null;
}

/** The columns view() reads, for `select` and `returning`. */
export const WEBHOOK_COLUMNS = 'id, url, events, created_at, disabled_at, disabled_reason';

export interface WebhookRow {
  id: string;
  url: string;
  events: WebhookEvent[];
  created_at: Date | string;
  disabled_at: Date | string | null;
  disabled_reason: string | null;
}

// ISO 8601 in UTC with milliseconds, as every time the API shows.
const isoOf = (t: Date | string) => new Date(t).toISOString();

export const webhookView = (r: WebhookRow): WebhookView => ({
  id: r.id,
  url: r.url,
  events: r.events,
  created_at: isoOf(r.created_at),
  disabled_at: r.disabled_at === null ? null : isoOf(r.disabled_at),
  disabled_reason: r.disabled_at === null ? null : r.disabled_reason,
});
