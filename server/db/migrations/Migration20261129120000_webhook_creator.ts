// Webhooks record the credential that registered them, carry the origin only when asked, and can be
// disabled (docs/CONTRACTS.md "Webhooks"): a webhook registered by an API key or a third-party OAuth
// application is disabled when that credential is revoked (server/webhooks/revocation.ts), and its
// deliveries leave the tunnel's origin_ip out unless it was registered with include_origin. Webhooks
// from before have no recorded creator and do not include the origin. disabled_at and disabled_reason
// are also added by the migration that disables failing endpoints, hence `if not exists` on both.
// Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261129120000_webhook_creator extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `alter table "webhook" add column "created_by_kind" text null, add column "created_by_id" text null, add column "created_by_grant" varchar(255) null, add column "include_origin" boolean not null default false;`,
    );
    this.addSql(`alter table "webhook" add column if not exists "disabled_at" timestamptz null, add column if not exists "disabled_reason" text null;`);
    this.addSql(`alter table "webhook" add constraint "webhook_created_by_kind_check" check ("created_by_kind" in ('session', 'api_key', 'oauth_client', 'operator'));`);
    this.addSql(`create index "webhook_created_by_idx" on "webhook" ("created_by_kind", "created_by_id") where "created_by_kind" is not null;`);
    this.addSql(`create index "webhook_created_by_grant_idx" on "webhook" ("created_by_grant") where "created_by_grant" is not null;`);
  }
}
