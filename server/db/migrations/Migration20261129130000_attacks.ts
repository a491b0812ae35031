// Attacks (docs/CONTRACTS.md "Attacks"; DESIGN 3.11): the tunnel's attack settings, and the attacks its edge
// agent reported (server/attacks/). Every existing tunnel gets max_flows 65,536 and an automatic alert_pps (null),
// which is what a policy without them means, so no tunnel's spec changes. Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261129130000_attacks extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table "attack" ("id" uuid not null, "tunnel_id" uuid not null, "started_at" timestamptz not null, "ended_at" timestamptz null, "peak_pps" bigint not null, "peak_bps" bigint not null, "vector" jsonb not null, "packets_dropped" bigint not null, "packets_passed" bigint not null, "reported_at" timestamptz not null, "created_at" timestamptz not null default now(), primary key ("id"));`,
    );
    this.addSql(`create index "attack_tunnel_started_idx" on "attack" ("tunnel_id", "started_at");`);
    this.addSql(`create index "attack_ended_idx" on "attack" ("ended_at");`);
    this.addSql(`alter table "tunnel" add "max_flows" int not null default 65536, add "alert_pps" int null;`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_max_flows_check" check (max_flows >= 1000 and max_flows <= 1000000);`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_alert_pps_check" check (alert_pps is null or (alert_pps >= 100 and alert_pps <= 100000000));`);
    this.addSql(`alter table "attack" add constraint "attack_tunnel_id_foreign" foreign key ("tunnel_id") references "tunnel" ("id") on delete cascade;`);
    this.addSql(`alter table "attack" add constraint "attack_ended_after_start" check (ended_at is null or ended_at >= started_at);`);
  }
}
