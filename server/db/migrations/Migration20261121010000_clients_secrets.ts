// Server secrets generated once and shared by every replica and the admin CLI (server/secrets.ts),
// and the OAuth clients of the identity provider with their encrypted secrets (server/domain/clients.ts).
// Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261121010000_clients_secrets extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table "oauth_client" ("client_id" text not null, "name" varchar(200) not null, "redirect_uris" jsonb not null, "secret_ciphertext" text not null, "secret_rotated_at" timestamptz not null default now(), "created_at" timestamptz not null default now(), primary key ("client_id"));`);
    this.addSql(`alter table "oauth_client" add constraint "oauth_client_redirect_uris_check" check (case when jsonb_typeof(redirect_uris) = 'array' then jsonb_array_length(redirect_uris) > 0 else false end);`);
    this.addSql(`create table "server_secret" ("name" varchar(100) not null, "value" text not null, "created_at" timestamptz not null default now(), primary key ("name"));`);
  }
}
