// The first schema: accounts and users, API keys, edge nodes with their protected-IP pools, tunnels,
// promocodes, the ledger, idempotency records and settings. Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261121000000_initial extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table "account" ("id" uuid not null, "balance_usd" numeric(14,2) not null default '0', "created_at" timestamptz not null default now(), primary key ("id"));`);
    this.addSql(`alter table "account" add constraint "account_balance_usd_check" check (balance_usd >= 0);`);
    this.addSql(`create table "edge_node" ("id" uuid not null, "name" varchar(100) not null, "public_ip" varchar(15) not null, "ssh_host" varchar(255) not null, "ssh_port" int not null default 52222, "host_key" varchar(255) null, "inner_pool" varchar(18) not null default '100.64.0.0/10', "created_at" timestamptz not null default now(), primary key ("id"));`);
    this.addSql(`alter table "edge_node" add constraint "edge_node_name_unique" unique ("name");`);
    this.addSql(`create table "idempotency_record" ("account_id" uuid not null, "key" varchar(255) not null, "request_hash" varchar(64) not null, "status_code" int not null, "body" jsonb not null, "created_at" timestamptz not null default now(), primary key ("account_id", "key"));`);
    this.addSql(`create table "ledger_entry" ("id" bigserial primary key, "account_id" uuid not null, "amount_usd" numeric(14,2) not null, "balance_after" numeric(14,2) not null, "kind" text not null, "tunnel_id" uuid null, "promocode" varchar(64) null, "created_at" timestamptz not null default now());`);
    this.addSql(`create index "ledger_entry_account_id_index" on "ledger_entry" ("account_id");`);
    this.addSql(`alter table "ledger_entry" add constraint "ledger_entry_kind_check" check ("kind" in ('topup', 'purchase'));`);
    this.addSql(`create table "promocode" ("code" varchar(64) not null, "percent" int null, "amount_rub" numeric(14,2) null, "max_uses" int null, "uses" int not null default 0, "expires_at" timestamptz null, "created_at" timestamptz not null default now(), primary key ("code"));`);
    this.addSql(`alter table "promocode" add constraint "promocode_one_discount" check ((percent is null) <> (amount_rub is null));`);
    this.addSql(`alter table "promocode" add constraint "promocode_percent_check" check (percent is null or (percent >= 1 and percent <= 100));`);
    this.addSql(`alter table "promocode" add constraint "promocode_amount_rub_check" check (amount_rub is null or amount_rub > 0);`);
    this.addSql(`create table "protected_ip" ("ip" varchar(15) not null, "node_id" uuid not null, "inner_index" int not null, "tunnel_id" uuid null, primary key ("ip"));`);
    this.addSql(`create index "protected_ip_node_id_index" on "protected_ip" ("node_id");`);
    this.addSql(`alter table "protected_ip" add constraint "protected_ip_tunnel_id_unique" unique ("tunnel_id");`);
    this.addSql(`create index "protected_ip_free_idx" on "protected_ip" ("inner_index", "ip") where "tunnel_id" is null;`);
    this.addSql(`alter table "protected_ip" add constraint "protected_ip_node_id_inner_index_unique" unique ("node_id", "inner_index");`);
    this.addSql(`create table "setting" ("key" varchar(100) not null, "value" text not null, "updated_at" timestamptz not null default now(), primary key ("key"));`);
    this.addSql(`create table "tunnel" ("id" uuid not null, "account_id" uuid not null, "node_id" uuid not null, "name" varchar(100) null, "protected_ip" varchar(15) not null, "origin_ip" varchar(15) not null, "tunnel_name" varchar(15) not null, "inner_index" int not null, "gre_key" bigint null, "status" text not null default 'pending', "charged_usd" numeric(14,2) not null, "charged_rub" numeric(14,2) not null, "created_at" timestamptz not null default now(), "updated_at" timestamptz not null default now(), primary key ("id"));`);
    this.addSql(`create index "tunnel_node_id_index" on "tunnel" ("node_id");`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_tunnel_name_unique" unique ("tunnel_name");`);
    this.addSql(`create index "tunnel_account_created_idx" on "tunnel" ("account_id", "created_at" desc, "id" desc);`);
    this.addSql(`create unique index "tunnel_live_ip_uniq" on "tunnel" ("protected_ip") where "status" <> 'deleted';`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_status_check" check ("status" in ('pending', 'provisioning', 'provisioned', 'active', 'failed', 'deleting', 'deleted'));`);
    this.addSql(`create table "app_user" ("id" uuid not null, "account_id" uuid not null, "email" varchar(320) not null, "name" varchar(200) not null, "picture" varchar(2048) null, "password_hash" varchar(255) not null, "role" text not null, "created_at" timestamptz not null default now(), primary key ("id"));`);
    this.addSql(`create index "app_user_account_id_index" on "app_user" ("account_id");`);
    this.addSql(`alter table "app_user" add constraint "app_user_email_unique" unique ("email");`);
    this.addSql(`alter table "app_user" add constraint "app_user_role_check" check ("role" in ('owner', 'viewer'));`);
    this.addSql(`create table "api_key" ("id" uuid not null, "account_id" uuid not null, "user_id" uuid null, "secret_hash" varchar(64) not null, "permission" text not null, "created_at" timestamptz not null default now(), "revoked_at" timestamptz null, "last_used_at" timestamptz null, primary key ("id"));`);
    this.addSql(`create index "api_key_account_id_index" on "api_key" ("account_id");`);
    this.addSql(`alter table "api_key" add constraint "api_key_permission_check" check ("permission" in ('read', 'write'));`);
    this.addSql(`alter table "idempotency_record" add constraint "idempotency_record_account_id_foreign" foreign key ("account_id") references "account" ("id");`);
    this.addSql(`alter table "ledger_entry" add constraint "ledger_entry_account_id_foreign" foreign key ("account_id") references "account" ("id");`);
    this.addSql(`alter table "protected_ip" add constraint "protected_ip_node_id_foreign" foreign key ("node_id") references "edge_node" ("id");`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_account_id_foreign" foreign key ("account_id") references "account" ("id");`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_node_id_foreign" foreign key ("node_id") references "edge_node" ("id");`);
    this.addSql(`alter table "app_user" add constraint "app_user_account_id_foreign" foreign key ("account_id") references "account" ("id");`);
    this.addSql(`alter table "api_key" add constraint "api_key_account_id_foreign" foreign key ("account_id") references "account" ("id");`);
    this.addSql(`alter table "api_key" add constraint "api_key_user_id_foreign" foreign key ("user_id") references "app_user" ("id") on delete set null;`);
    // A fresh install can sell at once; operators set the real rate with `admin rate set`.
    this.addSql(`insert into "setting" ("key", "value") values ('usd_rub_rate', '90') on conflict do nothing;`);
  }
}
