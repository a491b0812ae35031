// Which nodes sell, inner subnets unique across nodes, our own addresses never an origin (docs/NODES.md).
// - edge_node.pool: the protected pool's CIDR, so a new pool can be checked for overlap as a range.
// - edge_node.sellable: `node update --sellable false` stops sales on a node (default: it sells).
// - protected_ip.position: the old per-node inner_index, renamed: it is now only the IP's place in its
//   node's pool (the order purchases take free IPs in).
// - protected_ip.inner_index: the inner /30 number, now unique across every node (it restarted at 0 on
//   each node, so one origin with tunnels on two nodes got the same inner address twice).
// Existing IPs are renumbered; existing tunnels keep the inner subnet they have (tunnel.inner_index is
// left alone: their origins run scripts with it). The new numbers start above every live tunnel's, so no
// tunnel bought from now on can share an inner subnet with one bought before.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261125010000_nodes extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table "edge_node" add column "pool" varchar(18) null, add column "sellable" boolean not null default true;`);

    this.addSql(`alter table "protected_ip" drop constraint "protected_ip_node_id_inner_index_unique";`);
    this.addSql(`drop index "protected_ip_free_idx";`);
    this.addSql(`alter table "protected_ip" rename column "inner_index" to "position";`);
    this.addSql(`alter table "protected_ip" add constraint "protected_ip_node_id_position_unique" unique ("node_id", "position");`);
    this.addSql(`create index "protected_ip_free_idx" on "protected_ip" ("position", "ip") where "tunnel_id" is null;`);

    this.addSql(`alter table "protected_ip" add column "inner_index" int null;`);
    // Nodes in the order they were added, each a contiguous run of /30 numbers.
    this.addSql(`
      with base as (select coalesce(max(inner_index) + 1, 0) as first from tunnel where status <> 'deleted'),
      numbered as (
        select p.ip, (row_number() over (order by n.created_at, n.id, p.position) - 1)::int as k
          from protected_ip p join edge_node n on n.id = p.node_id
      )
      update protected_ip p set inner_index = base.first + numbered.k from numbered, base where numbered.ip = p.ip;`);
    this.addSql(`alter table "protected_ip" alter column "inner_index" set not null;`);
    this.addSql(`alter table "protected_ip" add constraint "protected_ip_inner_index_unique" unique ("inner_index");`);
  }
}
