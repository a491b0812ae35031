// Status by change (docs/CONTRACTS.md "Status by change"): per node, the cursor of the last `status` answer the
// gateway committed (the agent's run `epoch` and answer `seq`), written in the same transaction as that answer's
// counters and health (server/health/ingest.ts), so a round lost before its commit is asked again from the cursor
// before it. `checked_floor`: the oldest last-check time of the node's tunnels in that answer, the lower bound of
// the check time of every tunnel it left out (server/domain/tunnels/rows.ts HEALTH_CHECKED_AT_SQL). `full_at`:
// when the node last answered in full; the gateway asks for the full list again after a while (ingest.ts).
// A new table, empty: a database upgraded from an older release has no cursor, so every node's first round after
// the upgrade is a full answer, as every round was before.
import { Migration } from '@mikro-orm/migrations';

export class Migration20261129140000_status_cursor extends Migration {
  override async up(): Promise<void> {
    this.addSql(
      `create table traffic.node_cursor (node_id uuid primary key, epoch text not null, seq bigint not null, checked_floor timestamptz null, full_at timestamptz not null, stored_at timestamptz not null);`,
    );
  }
}
