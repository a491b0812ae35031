// The identity provider's artifacts (codes, refresh tokens, grants, sessions, interactions): one
// table keyed by (oidc-provider model, id), see server/oidc/adapter.ts. Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261121020000_oidc_payload extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table "oidc_payload" ("kind" varchar(40) not null, "id" varchar(255) not null, "payload" jsonb not null, "grant_id" varchar(255) null, "client_id" text null, "uid" varchar(255) null, "expires_at" timestamptz null, "consumed_at" timestamptz null, primary key ("kind", "id"));`);
    this.addSql(`create index "oidc_payload_grant_idx" on "oidc_payload" ("grant_id") where "grant_id" is not null;`);
    this.addSql(`create index "oidc_payload_client_idx" on "oidc_payload" ("client_id") where "client_id" is not null;`);
    this.addSql(`create index "oidc_payload_uid_idx" on "oidc_payload" ("uid") where "uid" is not null;`);
    this.addSql(`create index "oidc_payload_expires_idx" on "oidc_payload" ("expires_at") where "expires_at" is not null;`);
  }
}
