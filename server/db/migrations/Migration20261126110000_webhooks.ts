// Webhooks (docs/CONTRACTS.md "Webhooks"): the account's endpoints with
// their signing secrets encrypted at rest, and the durable outbox of deliveries the events write in the
// transaction of the change that causes them (server/webhooks/). Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261126110000_webhooks extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table "webhook" ("id" uuid not null, "account_id" uuid not null, "url" varchar(2048) not null, "events" jsonb not null, "secret_ciphertext" text not null, "created_at" timestamptz not null default now(), primary key ("id"));`);
    this.addSql(`create index "webhook_account_id_index" on "webhook" ("account_id");`);
    this.addSql(`create table "webhook_delivery" ("id" varchar(64) not null, "webhook_id" uuid not null, "event_type" varchar(64) not null, "body" text not null, "attempts" int not null default 0, "next_attempt_at" timestamptz not null, "last_attempt_at" timestamptz null, "last_outcome" text null, "delivered_at" timestamptz null, "given_up_at" timestamptz null, "created_at" timestamptz not null default now(), primary key ("id"));`);
    this.addSql(`create index "webhook_delivery_webhook_id_index" on "webhook_delivery" ("webhook_id");`);
    this.addSql(`create index "webhook_delivery_created_at_index" on "webhook_delivery" ("created_at");`);
    this.addSql(`create index "webhook_delivery_due_idx" on "webhook_delivery" ("next_attempt_at") where "delivered_at" is null and "given_up_at" is null;`);
    this.addSql(`alter table "webhook" add constraint "webhook_account_id_foreign" foreign key ("account_id") references "account" ("id");`);
    this.addSql(`alter table "webhook_delivery" add constraint "webhook_delivery_webhook_id_foreign" foreign key ("webhook_id") references "webhook" ("id") on delete cascade;`);
  }
}
