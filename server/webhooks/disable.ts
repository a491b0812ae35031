// Disabling a webhook that keeps failing, and enabling it again (docs/CONTRACTS.md "Webhooks"). An
// endpoint that has delivered nothing for 24 hours while attempts kept failing is disabled: it gets no
// deliveries and no new events are written for it, its pending deliveries are given up (at most a day of
// stale snapshots: GET /api/dedicated says how things are now), and the account hears of it through a
// `webhook.disabled` event to its other enabled webhooks that take it, and through `disabled_at` /
// `disabled_reason` in the webhook's listing. Enabling clears all three and starts the 24 hours afresh.
import type { Database, Sql } from '../db/database.ts';
import { enqueue, WEBHOOK_DISABLED_EVENT } from './events.ts';
import { DISABLED_CREDENTIAL_REVOKED, DISABLED_FAILING } from './disabled-reason.ts';
import { WEBHOOK_COLUMNS, webhookView, type WebhookRow, type WebhookView } from './view.ts';

export interface Disabled {
  webhook: WebhookView;
  accountId: string;
  /** Pending deliveries given up with it. */
  givenUp: number;
}

/**
 * Disables webhook `webhookId` for failing if it is still enabled and has been failing since `cutoff` or
 * earlier, in one transaction with its consequences (see above). Null when it was not (another worker
 * got there first, a delivery succeeded meanwhile, someone enabled it): the conditional update makes
 * the notice go out once.
 */
export async function disableIfFailing(db: Database, webhookId: string, now: Date, cutoff: Date): Promise<Disabled | null> {
  return db.transaction(async (sql) => {
    const [row] = await sql.query<WebhookRow & { account_id: string }>(
      `update webhook set disabled_at = ?::timestamptz, disabled_reason = ?
        where id = ? and disabled_at is null and failing_since <= ?::timestamptz
        returning ${WEBHOOK_COLUMNS}, account_id`,
      [now.toISOString(), DISABLED_FAILING, webhookId, cutoff.toISOString()],
    );
    if (!row) return null;
    const givenUp = await giveUpPending(sql, webhookId, now);
    const webhook = webhookView(row);
    // The webhook's own listing holds no origin: the same body whatever the receiver's include_origin.
    await enqueue(sql, row.account_id, WEBHOOK_DISABLED_EVENT, () => ({ webhook }), webhookId);
    return { webhook, accountId: row.account_id, givenUp };
  });
}

/**
 * Gives up what a disabled webhook still had to send, attempts in flight included (their outcome, when it
 * comes, changes nothing: outcomes are written only to rows not given up).
 */
async function giveUpPending(sql: Pick<Sql, 'query'>, webhookId: string, now: Date): Promise<number> {
  const rows = await sql.query(
    `update webhook_delivery set given_up_at = ?::timestamptz, lease_until = null, last_outcome = coalesce(last_outcome, 'not sent: webhook disabled')
      where webhook_id = ? and delivered_at is null and given_up_at is null returning id`,
    [now.toISOString(), webhookId],
  );
  return rows.length;
}

/**
 * Enables webhook `id` (of `accountId`, or of any account when null): deliveries resume with the next
 * event and the failure clock starts afresh. The webhook as it is now, or null when there is no such
 * webhook. Enabling an enabled webhook changes nothing (its failure clock included: calling this over
 * and over cannot keep a failing endpoint from being disabled). A webhook disabled because its credential
 * was revoked (revocation.ts) is left as it is, and returned still disabled: the caller refuses it.
 */
export async function enableWebhook(db: Pick<Sql, 'query'>, id: string, accountId: string | null): Promise<WebhookView | null> {
  const owner = accountId === null ? '' : ' and account_id = ?';
  const params = accountId === null ? [id] : [id, accountId];
  const [enabled] = await db.query<WebhookRow>(
    `update webhook set disabled_at = null, disabled_reason = null, failing_since = null
      where id = ?${owner} and disabled_at is not null and disabled_reason is distinct from ? returning ${WEBHOOK_COLUMNS}`,
    [...params, DISABLED_CREDENTIAL_REVOKED],
  );
  if (enabled) return webhookView(enabled);
  const [row] = await db.query<WebhookRow>(`select ${WEBHOOK_COLUMNS} from webhook where id = ?${owner}`, params);
  return row ? webhookView(row) : null;
}
