// The lifecycle moves (docs/CONTRACTS.md "Tunnel lifecycle"). Each is one conditional UPDATE: it happens only
// from the status it expects, so a duplicate delivery, a stale job or a race with the buyer's delete is
// a no-op rather than a wrong state. Every move that happens is published on the status bus, and its
// `tunnel.status_changed` webhook event is written in the same transaction (moveIn: the one place a
// tunnel's status changes after its purchase; server/webhooks/events.ts).
import type { Database, Sql } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import type { TunnelEventSink } from '../webhooks/events.ts';
import type { TunnelStatusBus } from './status-bus.ts';

export class Transitions {
  constructor(
    private readonly db: Database,
    private readonly bus: TunnelStatusBus,
    private readonly events: Pick<TunnelEventSink, 'statusChanged'>,
    private readonly onStockChange: () => void = () => {},
  ) {}

  /**
   * from -> to inside the caller's transaction `sql`, with its webhook event; true when it moved. The
   * caller publishes on the bus once it committed (move() and finishDelete() do).
   */
  async moveIn(sql: Pick<Sql, 'query'>, id: string, from: readonly TunnelStatus[], to: TunnelStatus): Promise<boolean> {
    const rows = await sql.query(
      `update tunnel set status = ?, updated_at = now() where id = ? and status in (${from.map(() => '?').join(', ')}) returning id`,
      [to, id, ...from],
    );
    if (rows.length === 0) return false;
    await this.events.statusChanged(sql, id);
    return true;
  }

  /** from -> to if the tunnel is still `from`; true when it moved. */
  async move(id: string, from: readonly TunnelStatus[], to: TunnelStatus): Promise<boolean> {
    const moved = await this.db.transaction((sql) => this.moveIn(sql, id, from, to));
    if (moved) await this.bus.publish(id, to);
    return moved;
  }

  /** deleting -> deleted and the protected IP back to the pool, in one transaction. */
  async finishDelete(id: string): Promise<boolean> {
    const moved = await this.db.transaction(async (sql) => {
      if (!(await this.moveIn(sql, id, ['deleting'], 'deleted'))) return false;
      await sql.query('update protected_ip set tunnel_id = null where tunnel_id = ?', [id]);
      return true;
    });
    if (moved) {
      this.onStockChange();
      await this.bus.publish(id, 'deleted');
    }
    return moved;
  }
}
