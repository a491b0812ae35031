// Tunnel settings (docs/CONTRACTS.md "Tunnel settings"): the protection policy a buyer sets at
// purchase or with PATCH, and the revisions that tell a PATCH when the edge holds its change. Every
// existing tunnel gets the defaults (DEFAULT_POLICY of common/tunnel-policy.ts: all ports, both
// protocols, no SYN proxy, no rate limit, fragments forwarded), which is what its edge does today, and
// revision 0 applied (the spec it was provisioned with is the one it has).
// Generated from server/db/entities.ts.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261125170000_tunnel_settings extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `alter table "tunnel" add "ports" text not null default '*', add "protocol" text not null default 'both', add "syn_proxy" boolean not null default false, add "source_pps_limit" int null, add "drop_fragments" boolean not null default false, add "spec_revision" int not null default 0, add "applied_revision" int not null default 0, add "origin_revision" int not null default 0;`,
    );
    this.addSql(`alter table "tunnel" add constraint "tunnel_ports_check" check (ports = '*' or ports ~ '^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?){0,31}$');`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_source_pps_limit_check" check (source_pps_limit is null or (source_pps_limit >= 10 and source_pps_limit <= 1000000));`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_protocol_check" check ("protocol" in ('both', 'tcp', 'udp'));`);
  }
}
