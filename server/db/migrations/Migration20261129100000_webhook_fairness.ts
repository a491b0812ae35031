// Webhooks that cannot stall one another (docs/CONTRACTS.md "Webhooks", "Fairness and limits"):
// - webhook.disabled_at / disabled_reason: a webhook that stopped receiving deliveries, and why ('failing':
//   nothing delivered for 24 hours while attempts kept failing). Written with `if not exists` because
//   another change adds the same two columns for another reason; whichever runs first creates them.
// - webhook.failing_since: the first failed attempt since the last delivered one (null while healthy).
// - webhook_delivery.lease_until: set while an attempt is in flight (the claim's lease), cleared with its
//   outcome; what the claim counts to keep at most 2 attempts in flight per webhook across replicas.
// - The due index becomes per webhook: the claim walks webhooks and takes each one's oldest due rows.
// Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261129100000_webhook_fairness extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table "webhook" add column if not exists "disabled_at" timestamptz null, add column if not exists "disabled_reason" text null;`);
    this.addSql(`alter table "webhook" add column "failing_since" timestamptz null;`);
    this.addSql(`alter table "webhook_delivery" add column "lease_until" timestamptz null;`);
    this.addSql(`drop index "webhook_delivery_due_idx";`);
    this.addSql(
      `create index "webhook_delivery_pending_idx" on "webhook_delivery" ("webhook_id", "next_attempt_at") where "delivered_at" is null and "given_up_at" is null;`,
    );
    this.addSql(`create index "webhook_delivery_lease_idx" on "webhook_delivery" ("lease_until") where "lease_until" is not null;`);
  }
}
