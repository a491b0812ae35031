// GRE keys (two unkeyed links between one edge and one origin clash). Every tunnel bought from now on gets a key (server/domain/gre-keys.ts); here the
// existing ones are brought under the same rule without disturbing any that works:
// - where a (node, origin_ip) pair has one live tunnel, it keeps no key: it is provisioned as it is;
// - where a pair repeats among live tunnels, one keeps no key: the one the kernel holds, as far as the
//   statuses tell (provisioned or active: the edge confirmed it; only one unkeyed link per pair could
//   exist), else the oldest (created_at, then id), the one that could have been provisioned. A buyer who
//   bought first but provisioned later was the one refused ("File exists"). Every other one gets a
//   distinct random key. Those could never carry traffic: their next provision or reconcile creates the
//   keyed link, and the buyer fetches the setup script again, which now sets the same key on the origin.
// Keys come from gen_random_uuid() (PostgreSQL's strong random source): its first 32 bits, mapped onto
// 1..2^32-1. A repeat within a pair (odds 2^-32) is drawn again before the unique index is built.
import { Migration } from '@mikro-orm/migrations';

const RANDOM_KEY = `(('x' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 8))::bit(32)::bigint % 4294967295) + 1`;

export class Migration20261125160000_gre_keys extends Migration {
  override async up(): Promise<void> {
    this.addSql(`
      update tunnel t set gre_key = ${RANDOM_KEY}
        from (select id, row_number() over (partition by node_id, origin_ip
                                            order by status in ('provisioned', 'active') desc, created_at, id) as n
                from tunnel where status <> 'deleted') r
       where r.id = t.id and r.n > 1 and t.gre_key is null;`);
    this.addSql(`
      do $$
      begin
        loop
          update tunnel t set gre_key = ${RANDOM_KEY}
           where t.id in (select id from (select id, row_number() over (partition by node_id, origin_ip, gre_key order by created_at, id) as n
                                            from tunnel where status <> 'deleted' and gre_key is not null) d
                           where d.n > 1);
          exit when not found;
        end loop;
      end $$;`);
    this.addSql(`alter table "tunnel" add constraint "tunnel_gre_key_range" check (gre_key is null or (gre_key >= 1 and gre_key <= 4294967295));`);
    this.addSql(`create unique index "tunnel_live_gre_key_uniq" on "tunnel" ("node_id", "origin_ip", "gre_key") nulls not distinct where "status" <> 'deleted';`);
  }
}
