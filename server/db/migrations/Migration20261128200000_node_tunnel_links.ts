// Whether each node's agent can make its tunnels' links (docs/CONTRACTS.md "Tunnel links"), as it last
// said in `hello` or `status`: an agent on a kernel without GRE fails every tunnel job, so purchases and
// pricing's stock leave such a node out, and `node list`/`node show` say why. All null until the agent
// reports (and for agents from before the report): not known, treated as before, able to sell.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261128200000_node_tunnel_links extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `alter table "edge_node" add column "tunnel_links_kind" varchar(32) null, add column "tunnel_links_usable" boolean null, ` +
        `add column "tunnel_links_reason" varchar(500) null, add column "tunnel_links_since" timestamptz null;`,
    );
  }
}
