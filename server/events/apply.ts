// An event pushed by a node's agent (common/edge-events.ts) into the same ingestion the `status` pull uses
// (docs/CONTRACTS.md "Events stream"): an attack start or end through server/attacks/ingest.ts (stored by its id,
// its webhook event in the same transaction, then the tunnelStatus bus and /metrics), a health change through
// server/health/ingest.ts pushHealth (row, history, webhook event, bus). Both are idempotent against the pull and
// against another replica's stream, so the same event seen twice is one record and one webhook.
import type { Database } from '../db/database.ts';
import type { EdgeEvent } from '../../common/edge-events.ts';
import type { AttackIngest } from '../attacks/ingest.ts';
import type { StatusIngest } from '../health/ingest.ts';

export interface EventApplyDeps {
  db: Database;
  attacks: Pick<AttackIngest, 'recordEvent' | 'published'>;
  health: Pick<StatusIngest, 'pushHealth'>;
}

/** Applies one event of node `nodeId`; keep-alives do nothing. */
export async function applyEdgeEvent(d: EventApplyDeps, nodeId: string, e: EdgeEvent, at = new Date()): Promise<void> {
  switch (e.type) {
    case 'attack_started':
    case 'attack_ended': {
      const round = await d.db.transaction((sql) => d.attacks.recordEvent(sql, nodeId, e.attack, at));
      await d.attacks.published(round.changes);
      return;
    }
    case 'health_changed':
      // Called before any await: the change joins its node's batch in the stream's order (EventStreamsOptions.apply).
      await d.health.pushHealth(nodeId, e.tunnel_id, e.health, new Date(e.checked_at));
      return;
    case 'keepalive':
      return;
  }
}
