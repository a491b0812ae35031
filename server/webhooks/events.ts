// The events webhooks carry (docs/CONTRACTS.md "Webhooks") and how one is written: into
// the outbox (webhook_delivery), one row per subscribed webhook of the tunnel's account, IN THE
// TRANSACTION of the change that causes it. So an event is never lost (it commits with the change) and
// never sent for a change that rolled back (it rolls back with it). The delivery worker (delivery.ts)
// sends it later, as often as it takes.
import { randomBytes } from 'node:crypto';
import type { Sql } from '../db/database.ts';
import { readTunnelOfAnyAccount, tunnelView } from '../domain/tunnels/rows.ts';
import type { AttackRecord } from '../../common/attacks.ts';

export const WEBHOOK_EVENTS = ['tunnel.status_changed', 'tunnel.health_changed', 'tunnel.attack_started', 'tunnel.attack_ended'] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];
/**
 * The event a buyer asks for to try an endpoint: sent to that one webhook whatever events it takes, signed
 * and retried like the others. Not in WEBHOOK_EVENTS: nobody subscribes to it.
 */
export const WEBHOOK_TEST_EVENT = 'webhook.test';

/** A Standard Webhooks message id: `msg_` and 128 random bits; the `webhook-id` of every attempt. */
function newMessageId(): string {
  return `msg_${randomBytes(16).toString('hex')}`;
}

/** What a tunnel's status or health change reports; passed to whoever writes the change. */
export interface TunnelEventSink {
  /** Call in the transaction that changed the tunnel's status, after the change. */
  statusChanged(sql: Pick<Sql, 'query'>, tunnelId: string): Promise<void>;
  /** Call in the transaction that changed the tunnel's health, after the change. */
  healthChanged(sql: Pick<Sql, 'query'>, tunnelId: string): Promise<void>;
  /** Call in the transaction that stored an attack's start or end (server/attacks/ingest.ts), with the record as stored. */
  attackStarted(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void>;
  attackEnded(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void>;
}

/**
 * The events of tunnels, with `data: {"tunnel": <the tunnel as REST shows it>}` as it is after the change
 * (read in the same transaction). `adminSshPort` is part of that view.
 */
export class TunnelEvents implements TunnelEventSink {
  constructor(private readonly adminSshPort: number) {}

  statusChanged(sql: Pick<Sql, 'query'>, tunnelId: string): Promise<void> {
    return this.emit(sql, 'tunnel.status_changed', tunnelId);
  }

  healthChanged(sql: Pick<Sql, 'query'>, tunnelId: string): Promise<void> {
    return this.emit(sql, 'tunnel.health_changed', tunnelId);
  }

  /** `data: {"tunnel", "attack"}` (docs/CONTRACTS.md "Attacks"). */
  attackStarted(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void> {
    return this.emit(sql, 'tunnel.attack_started', tunnelId, { attack });
  }

  attackEnded(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void> {
    return this.emit(sql, 'tunnel.attack_ended', tunnelId, { attack });
  }

  private async emit(sql: Pick<Sql, 'query'>, type: WebhookEvent, tunnelId: string, more: Record<string, unknown> = {}): Promise<void> {
    const t = await readTunnelOfAnyAccount(sql, tunnelId);
    if (!t) return;
    await enqueue(sql, t.accountId, type, { tunnel: tunnelView(t.row, this.adminSshPort), ...more });
  }
}

/**
 * One outbox row for webhook `webhookId` of `accountId` carrying a `webhook.test` event (`data: {"webhook":
 * {id, url}}`); returns its message id, or null when the account has no such webhook.
 */
export async function enqueueTest(sql: Pick<Sql, 'query'>, accountId: string, webhookId: string): Promise<string | null> {
  const [hook] = await sql.query<{ id: string; url: string }>('select id, url from webhook where id = ? and account_id = ?', [webhookId, accountId]);
  if (!hook) return null;
  const id = newMessageId();
  const body = JSON.stringify({ type: WEBHOOK_TEST_EVENT, timestamp: new Date().toISOString(), data: { webhook: { id: hook.id, url: hook.url } } });
  await sql.query('insert into webhook_delivery (id, webhook_id, event_type, body, next_attempt_at) values (?, ?, ?, ?, now())', [id, hook.id, WEBHOOK_TEST_EVENT, body]);
  return id;
}

/**
 * One outbox row per webhook of `accountId` that takes `type`, each with its own message id and the
 * body it will be sent with on every attempt (due at once). Returns how many were written.
 */
async function enqueue(sql: Pick<Sql, 'query'>, accountId: string, type: WebhookEvent, data: Record<string, unknown>): Promise<number> {
  const hooks = await sql.query<{ id: string }>(`select id from webhook where account_id = ? and events @> jsonb_build_array(?::text)`, [accountId, type]);
  if (hooks.length === 0) return 0;
  const body = JSON.stringify({ type, timestamp: new Date().toISOString(), data });
  const values = hooks.map(() => '(?, ?, ?, ?, now())').join(', ');
  await sql.query(
    `insert into webhook_delivery (id, webhook_id, event_type, body, next_attempt_at) values ${values}`,
    hooks.flatMap((h) => [newMessageId(), h.id, type, body]),
  );
  return hooks.length;
}
