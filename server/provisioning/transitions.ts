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

  /**
   * The edge applied the tunnel's spec of `revision` (server/db/entities.ts, spec_revision): recorded,
   * so a PATCH waiting for it answers. When that spec carried a new origin_ip the edge did not have
   * yet, an active tunnel moves back to provisioned (through moveIn, so with its webhook event): the
   * buyer runs the new setup script on the new origin and activates again (docs/CONTRACTS.md "Tunnel
   * lifecycle"). True when the stored spec is newer still (changed while this one was applied).
   */
  async applied(id: string, revision: number): Promise<boolean> {
    const r = await this.db.transaction(async (sql) => {
      const [row] = await sql.query<{ status: TunnelStatus; spec_revision: number; applied_revision: number; origin_revision: number }>(
        'select status, spec_revision, applied_revision, origin_revision from tunnel where id = ? for update',
        [id],
      );
      if (!row) return null;
      const raised = revision > row.applied_revision;
      const repoint = raised && row.status === 'active' && row.origin_revision > row.applied_revision && row.origin_revision <= revision;
      if (raised) await sql.query('update tunnel set applied_revision = ? where id = ?', [revision, id]);
      if (repoint) await this.moveIn(sql, id, ['active'], 'provisioned');
      return { raised, status: repoint ? ('provisioned' as const) : row.status, newer: row.spec_revision > Math.max(revision, row.applied_revision) };
    });
    if (!r) return false;
    // Also a hint for whoever waits for this revision (a status notice is only a hint: waiters re-read).
    if (r.raised) await this.bus.publish(id, r.status);
    return r.newer;
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
