// A client's API access, and the user's picture for userinfo.
// - oauth_client.api_access (docs/CONTRACTS.md "Admin CLI"): what a client's access tokens may do on the tunnel API and
//   GraphQL. Existing clients become `none`, like new ones: until now every client's token could spend
//   the user's balance, which is the hole being closed, and the operator is the only one who knows which
//   registered application really needs the API. `client update --client-id C --api-access read|write`
//   gives it back in one command (docs/OPERATOR.md "Upgrades").
// - app_user.avatar_key: the opaque key of the generated avatar's public URL (docs/CONTRACTS.md "REST shapes").
// Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261125020000_identity extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table "oauth_client" add column "api_access" text not null default 'none';`);
    this.addSql(`alter table "oauth_client" add constraint "oauth_client_api_access_check" check ("api_access" in ('none', 'read', 'write'));`);
    this.addSql(`alter table "app_user" add column "avatar_key" varchar(32) not null default replace((gen_random_uuid())::text, '-'::text, ''::text);`);
    this.addSql(`alter table "app_user" add constraint "app_user_avatar_key_unique" unique ("avatar_key");`);
  }
}
