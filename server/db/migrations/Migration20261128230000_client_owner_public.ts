// Public clients and the developer portal (docs/CONTRACTS.md "Identity provider"): a client may be public
// (token_endpoint_auth_method none, PKCE only, no secret: the secret column is null exactly then), and a
// client registered in the developer portal belongs to the account that registered it. Clients of the
// operator (admin CLI) keep no owner. Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261128230000_client_owner_public extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table "oauth_client" alter column "secret_ciphertext" drop not null;`);
    this.addSql(`alter table "oauth_client" add column "is_public" boolean not null default false, add column "owner_account_id" uuid null;`);
    this.addSql(`alter table "oauth_client" add constraint "oauth_client_secret_check" check (is_public = (secret_ciphertext is null));`);
    this.addSql(`create index "oauth_client_owner_account_id_index" on "oauth_client" ("owner_account_id");`);
    this.addSql(`alter table "oauth_client" add constraint "oauth_client_owner_account_id_foreign" foreign key ("owner_account_id") references "account" ("id") on delete cascade;`);
  }
}
