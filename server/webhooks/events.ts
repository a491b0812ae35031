// The events webhooks carry (docs/CONTRACTS.md "Webhooks") and how one is written: into
// the outbox (webhook_delivery), one row per subscribed webhook of the tunnel's account, IN THE
// TRANSACTION of the change that causes it. So an event is never lost (it commits with the change) and
// never sent for a change that rolled back (it rolls back with it). The delivery worker (delivery.ts)
// sends it later, as often as it takes.
//
// A disabled webhook (disabled_at set: revocation.ts, disable.ts) gets no row. The tunnel's origin_ip goes only to
// webhooks registered with include_origin: the body is signed and stored per delivery, so each row is
// written with the body its webhook may see (docs/CONTRACTS.md "Webhooks").
import { randomBytes } from 'node:crypto';
import type { Sql } from '../db/database.ts';
import { readTunnelOfAnyAccount, tunnelView } from '../domain/tunnels/rows.ts';
import type { AttackRecord } from '../../common/attacks.ts';
import { DISABLED_CREDENTIAL_REVOKED } from './disabled-reason.ts';

/**
 * What happens to tunnels: `data: {"tunnel": ...}`, and for the attack events also `"attack"` (docs/CONTRACTS.md
 * "Attacks").
 */
export const TUNNEL_EVENTS = ['tunnel.status_changed', 'tunnel.health_changed', 'tunnel.attack_started', 'tunnel.attack_ended'] as const;
export type TunnelEventType = (typeof TUNNEL_EVENTS)[number];
/**
 * One of the account's webhooks was disabled (disable.ts): `data: {"webhook": <it as REST shows it>}`, sent
 * to the account's other enabled webhooks that take it.
 */
export const WEBHOOK_DISABLED_EVENT = 'webhook.disabled';
/** Every event a webhook may subscribe to; a webhook registered without `events` takes them all. */
export const WEBHOOK_EVENTS = [...TUNNEL_EVENTS, WEBHOOK_DISABLED_EVENT] as const;
export type WebhookEvent = (typeof WEBHOOK_EVENTS)[number];
/**
 * At most this many deliveries wait per webhook (neither delivered nor given up, not in flight): writing
 * one more gives up the oldest (docs/CONTRACTS.md "Webhooks"). Events are snapshots of the tunnel after
 * the change, so the newest carry what an endpoint needs and the oldest are the stalest; and an endpoint
 * that never answers cannot grow the outbox without end.
 */
export const MAX_PENDING_PER_WEBHOOK = 1000;
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
  /**
   * The same for each of `tunnelIds` changed in one transaction, the outbox capped once for them all rather than
   * once per event (docs/SCALE.md "What breaks first": a start changes every tunnel's health at once).
   */
  healthChangedAll(sql: Pick<Sql, 'query'>, tunnelIds: readonly string[]): Promise<void>;
  /** Call in the transaction that stored an attack's start or end (server/attacks/ingest.ts), with the record as stored. */
  attackStarted(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void>;
  attackEnded(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void>;
}

/**
 * The events of tunnels, with `data: {"tunnel": <the tunnel as REST shows it>}` as it is after the change
 * (read in the same transaction), less `origin_ip` for a webhook without include_origin. `adminSshPort`
 * is part of that view.
 */
export class TunnelEvents implements TunnelEventSink {
  constructor(private readonly adminSshPort: number) {}

  statusChanged(sql: Pick<Sql, 'query'>, tunnelId: string): Promise<void> {
    return this.emit(sql, 'tunnel.status_changed', tunnelId);
  }

  healthChanged(sql: Pick<Sql, 'query'>, tunnelId: string): Promise<void> {
    return this.emit(sql, 'tunnel.health_changed', tunnelId);
  }

  async healthChangedAll(sql: Pick<Sql, 'query'>, tunnelIds: readonly string[]): Promise<void> {
    const hooks = new Set<string>();
    for (const id of tunnelIds) for (const h of await this.write(sql, 'tunnel.health_changed', id)) hooks.add(h);
    if (hooks.size > 0) await capPending(sql, [...hooks]);
  }

  /** `data: {"tunnel", "attack"}` (docs/CONTRACTS.md "Attacks"). */
  attackStarted(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void> {
    return this.emit(sql, 'tunnel.attack_started', tunnelId, { attack });
  }

  attackEnded(sql: Pick<Sql, 'query'>, tunnelId: string, attack: AttackRecord): Promise<void> {
    return this.emit(sql, 'tunnel.attack_ended', tunnelId, { attack });
  }

  private async emit(sql: Pick<Sql, 'query'>, type: TunnelEventType, tunnelId: string, more: Record<string, unknown> = {}): Promise<void> {
    const hooks = await this.write(sql, type, tunnelId, more);
    if (hooks.length > 0) await capPending(sql, hooks);
  }

  /** The event's outbox rows, uncapped; returns the webhooks written to. */
  private async write(sql: Pick<Sql, 'query'>, type: TunnelEventType, tunnelId: string, more: Record<string, unknown> = {}): Promise<string[]> {
    const t = await readTunnelOfAnyAccount(sql, tunnelId);
    if (!t) return [];
    const tunnel = tunnelView(t.row, this.adminSshPort);
    const { origin_ip: _hidden, ...withoutOrigin } = tunnel;
    return enqueueUncapped(sql, t.accountId, type, (includeOrigin) => ({ tunnel: includeOrigin ? tunnel : withoutOrigin, ...more }));
  }
}

/**
 * One outbox row for webhook `webhookId` of `accountId` carrying a `webhook.test` event (`data: {"webhook":
 * {id, url}}`); returns its message id, `not_found` when the account has no such webhook, or `disabled`
 * when it is disabled (a disabled webhook gets no deliveries: nothing is written).
 */
export async function enqueueTest(sql: Pick<Sql, 'query'>, accountId: string, webhookId: string): Promise<string | 'not_found' | 'disabled' | 'credential_revoked'> {
  const [hook] = await sql.query<{ id: string; url: string; disabled: boolean; reason: string | null }>('select id, url, disabled_at is not null as disabled, disabled_reason as reason from webhook where id = ? and account_id = ?', [
    webhookId,
    accountId,
  ]);
  if (!hook) return 'not_found';
  if (hook.disabled) return hook.reason === DISABLED_CREDENTIAL_REVOKED ? 'credential_revoked' : 'disabled';
  const id = newMessageId();
  const body = JSON.stringify({ type: WEBHOOK_TEST_EVENT, timestamp: new Date().toISOString(), data: { webhook: { id: hook.id, url: hook.url } } });
  await sql.query('insert into webhook_delivery (id, webhook_id, event_type, body, next_attempt_at) values (?, ?, ?, ?, now())', [id, hook.id, WEBHOOK_TEST_EVENT, body]);
  await capPending(sql, [hook.id]);
  return id;
}

/**
 * One outbox row per enabled webhook of `accountId` that takes `type` (but `exceptWebhookId`), each with
 * its own message id and the body it will be sent with on every attempt (due at once): `data(include_origin)`
 * of that webhook. Returns how many were written.
 */
export async function enqueue(
  sql: Pick<Sql, 'query'>,
  accountId: string,
  type: WebhookEvent,
  data: (includeOrigin: boolean) => Record<string, unknown>,
  exceptWebhookId?: string,
): Promise<number> {
  const hooks = await enqueueUncapped(sql, accountId, type, data, exceptWebhookId);
  if (hooks.length > 0) await capPending(sql, hooks);
  return hooks.length;
}

/** enqueue without the cap: the caller caps the webhooks it returns before its transaction ends. */
async function enqueueUncapped(
  sql: Pick<Sql, 'query'>,
  accountId: string,
  type: WebhookEvent,
  data: (includeOrigin: boolean) => Record<string, unknown>,
  exceptWebhookId?: string,
): Promise<string[]> {
  const hooks = await sql.query<{ id: string; include_origin: boolean }>(
    `select id, include_origin from webhook where account_id = ? and disabled_at is null and events @> jsonb_build_array(?::text) and id <> ?::uuid`,
    // The nil UUID is no webhook's id: "except none".
    [accountId, type, exceptWebhookId ?? '00000000-0000-0000-0000-000000000000'],
  );
  if (hooks.length === 0) return [];
  const timestamp = new Date().toISOString();
  const bodies = new Map<boolean, string>();
  const bodyOf = (includeOrigin: boolean) => {
    let body = bodies.get(includeOrigin);
    if (body === undefined) bodies.set(includeOrigin, (body = JSON.stringify({ type, timestamp, data: data(includeOrigin) })));
    return body;
  };
  const values = hooks.map(() => '(?, ?, ?, ?, now())').join(', ');
  await sql.query(
    `insert into webhook_delivery (id, webhook_id, event_type, body, next_attempt_at) values ${values}`,
    hooks.flatMap((h) => [newMessageId(), h.id, type, bodyOf(h.include_origin)]),
  );
  return hooks.map((h) => h.id);
}

/**
 * The cap's statement (capPending). The rows to give up are gathered into an array first (`= any(array(...))`) so
 * the update finds them by primary key: written as `in (select ...)` the planner, expecting thousands, joined them
 * against a scan of the whole outbox (delivered and given-up rows included) on every write, which the fleet
 * simulator showed as most of PostgreSQL's CPU at 100 nodes (docs/SCALE.md "What breaks first"). The inner select
 * reads only the webhook's pending deliveries (webhook_delivery_pending_idx), at most the cap plus what the write
 * added; and at most MAX_PENDING_PER_WEBHOOK are given up per write (`limit`): a write adds far fewer, so the rule
 * holds after each one (an outbox over the cap by more, as after an upgrade, is trimmed over a few writes). Health
 * changes written together cap once for all of them (TunnelEvents.healthChangedAll), not once per event.
 * Parameters: the give-up reason, the webhook ids as a JSON array, the cap, the cap again (the most given up per
 * webhook per write). Exported for the test that reads its plan.
 */
export const CAP_PENDING_SQL = `update webhook_delivery d set given_up_at = now(), last_outcome = coalesce(d.last_outcome, ?)
      where d.id = any(array(
        select x.id from jsonb_array_elements_text(?::jsonb) as h(webhook_id)
        cross join lateral (
          select id from webhook_delivery
           where webhook_id = h.webhook_id::uuid and delivered_at is null and given_up_at is null and (lease_until is null or lease_until <= now())
           order by created_at desc, id desc
          offset ? limit ? for update skip locked
        ) x
      ))`;

/**
 * Gives up the oldest waiting deliveries of each of `webhookIds` beyond MAX_PENDING_PER_WEBHOOK, in the
 * transaction that just wrote more. Attempts in flight (a lease not yet over) are neither counted nor
 * touched: their outcome is on its way. Rows another transaction holds are skipped, so two writers at once
 * may leave a few more than the cap for a moment; the next write trims them.
 */
async function capPending(sql: Pick<Sql, 'query'>, webhookIds: string[]): Promise<void> {
  await sql.query(CAP_PENDING_SQL, [`not sent: more than ${MAX_PENDING_PER_WEBHOOK} deliveries pending for this webhook`, JSON.stringify(webhookIds), MAX_PENDING_PER_WEBHOOK, MAX_PENDING_PER_WEBHOOK]);
}
