// The lifecycle moves the worker makes (docs/CONTRACTS.md "Tunnel lifecycle"). Each is one conditional UPDATE: it happens only
// from the status it expects, so a duplicate delivery, a stale job or a race with the buyer's delete is
// a no-op rather than a wrong state. Every move that happens is published on the status bus.
import type { Database } from '../db/database.ts';
import type { TunnelStatus } from '../db/entities.ts';
import type { TunnelStatusBus } from './status-bus.ts';

export class Transitions {
  constructor(
    private readonly db: Database,
    private readonly bus: TunnelStatusBus,
    private readonly onStockChange: () => void = () => {},
  ) {}

  /** from -> to if the tunnel is still `from`; true when it moved. */
  async move(id: string, from: readonly TunnelStatus[], to: TunnelStatus): Promise<boolean> {
    const rows = await this.db.query(
      `update tunnel set status = ?, updated_at = now() where id = ? and status in (${from.map(() => '?').join(', ')}) returning id`,
      [to, id, ...from],
    );
    if (rows.length === 0) return false;
    await this.bus.publish(id, to);
    return true;
  }

  /** deleting -> deleted and the protected IP back to the pool, in one transaction. */
  async finishDelete(id: string): Promise<boolean> {
    const moved = await this.db.transaction(async (sql) => {
      const rows = await sql.query(`update tunnel set status = 'deleted', updated_at = now() where id = ? and status = 'deleting' returning id`, [id]);
      if (rows.length === 0) return false;
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
