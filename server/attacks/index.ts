// Attacks as the rest of the gateway sees them (docs/CONTRACTS.md "Attacks"; DESIGN 3.11): the query REST
// (`GET /api/dedicated/{id}/attacks`) and GraphQL (`Tunnel.attacks`) share, with its rules written once, and the
// ingest the status rounds call (ingest.ts). The records themselves come from the edge agents (common/attacks.ts).
import type { Database } from '../db/database.ts';
import type { Principal } from '../auth/principal.ts';
import type { AttackRecord } from '../../common/attacks.ts';
import { ApiError } from '../domain/errors.ts';
import { readTunnel } from '../domain/tunnels/rows.ts';
import { parseQueryTime } from '../health/index.ts';
import type { TunnelEventSink } from '../webhooks/events.ts';
import type { TunnelStatusBus } from '../provisioning/status-bus.ts';
import { AttackIngest } from './ingest.ts';
import { ATTACK_RETENTION_MS, readAttacks } from './store.ts';

export type { AttackChange, AttackChangeKind } from './ingest.ts';
export { AttackIngest } from './ingest.ts';

/**
 * At most this many attacks in one answer, the oldest of the range: a tunnel sees a few a day at most; whoever
 * gets this many asks again from the last one's `started_at`.
 */
export const MAX_ATTACKS = 1000;
/** Without `from`: the last 7 days. */
const DEFAULT_SPAN_MS = 7 * 24 * 3_600_000;

export interface AttacksView {
  tunnel_id: string;
  attacks: AttackRecord[];
}

/** The query as a client sends it (strings or absent), from REST's query string or GraphQL's arguments. */
export interface AttacksQueryInput {
  from?: string | null;
  to?: string | null;
}

/**
 * The range of an attacks query, checked: `to` defaults to now, `from` to 7 days before `to`; from < to; `from`
 * within retention (90 days). Anything else is invalid_request.
 */
export function attacksRange(q: AttacksQueryInput, now: Date): { from: Date; to: Date } {
  const to = q.to ? parseQueryTime(q.to, 'to') : now;
  const from = q.from ? parseQueryTime(q.from, 'from') : new Date(to.getTime() - DEFAULT_SPAN_MS);
  if (from >= to) throw new ApiError('invalid_request', 'from must be before to.');
  const oldest = now.getTime() - ATTACK_RETENTION_MS;
  if (from.getTime() < oldest) throw new ApiError('invalid_request', `from is outside retention: attacks are kept 90 days (from ${new Date(oldest).toISOString()}).`);
  return { from, to };
}

export class AttackService {
  readonly ingest: AttackIngest;

  constructor(
    private readonly db: Database,
    deps: { events: Pick<TunnelEventSink, 'attackStarted' | 'attackEnded'>; bus: Pick<TunnelStatusBus, 'publish'> },
  ) {
    this.ingest = new AttackIngest(deps.events, deps.bus);
  }

  /**
   * GET /api/dedicated/{id}/attacks and Tunnel.attacks: the tunnel's attacks going on at some time in the range,
   * oldest start first, at most MAX_ATTACKS; another account's tunnel is not_found.
   */
  async list(principal: Principal, id: string, q: AttacksQueryInput, now = new Date()): Promise<AttacksView> {
    const range = attacksRange(q, now);
    const t = await readTunnel(this.db, principal, id);
    return { tunnel_id: t.id, attacks: await readAttacks(this.db, t.id, range.from, range.to, MAX_ATTACKS) };
  }
}
