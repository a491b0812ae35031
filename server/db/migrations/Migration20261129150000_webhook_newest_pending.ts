// The webhook outbox's cap (docs/CONTRACTS.md "Webhooks": at most 1,000 deliveries pending per webhook, the oldest
// given up) reads a webhook's pending deliveries newest first on every write (server/webhooks/events.ts
// CAP_PENDING_SQL). Without an index in that order it sorted all of them each time, so each event cost as much as
// the backlog (docs/SCALE.md "What breaks first"); with this one it walks the newest 1,000 entries and sorts nothing.
// Partial like webhook_delivery_pending_idx: only deliveries still waiting are in it.
// Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261129150000_webhook_newest_pending extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create index "webhook_delivery_newest_pending_idx" on "webhook_delivery" ("webhook_id", "created_at" desc, "id" desc) where "delivered_at" is null and "given_up_at" is null;`,
    );
  }
}
