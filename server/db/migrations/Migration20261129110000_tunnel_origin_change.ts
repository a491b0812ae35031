// Origin changes are limited (docs/CONTRACTS.md "Tunnel settings"): each change of a tunnel's origin_ip is a
// row, counted per tunnel over the last hour under the tunnel's row lock. Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261129110000_tunnel_origin_change extends Migration {
  override async up(): Promise<void> {
    this.addSql(`create table "tunnel_origin_change" ("id" bigserial primary key, "tunnel_id" uuid not null, "changed_at" timestamptz not null);`);
    this.addSql(`create index "tunnel_origin_change_tunnel_id_changed_at_index" on "tunnel_origin_change" ("tunnel_id", "changed_at");`);
    this.addSql(`alter table "tunnel_origin_change" add constraint "tunnel_origin_change_tunnel_id_foreign" foreign key ("tunnel_id") references "tunnel" ("id") on delete cascade;`);
  }
}
