// Cheap health writes: a collection round no longer rewrites every reported tunnel's
// row. `health_checked_at` is, per docs/CONTRACTS.md "Health and traffic", the time of the agent's own
// last check of that tunnel (each tunnel is checked at its own offset, so it is per tunnel, not the
// node's collection time). Its live value moves to traffic.seen.checked_at: that row is rewritten for
// every reported tunnel every round anyway (the counters baseline; fillfactor 50, HOT), so carrying one
// more timestamp costs no extra row version. The tunnel row is written only when `health` changes.
//
// tunnel.health_checked_at stays: it holds the value from before this migration until the tunnel's
// next report, and the last value of a deleted tunnel once its traffic.seen row is cleaned up
// (server/health/storage.ts). The API reads coalesce(seen.checked_at, tunnel.health_checked_at)
// (server/domain/tunnels/rows.ts HEALTH_CHECKED_AT_SQL).
import { Migration } from '@mikro-orm/migrations';

export class Migration20261128100000_health_checked_seen extends Migration {
  override async up(): Promise<void> {
    this.addSql(`alter table traffic.seen add column checked_at timestamptz null;`);
  }
}
