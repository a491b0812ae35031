// A webhook ends with the credential that registered it (docs/CONTRACTS.md "Webhooks"): revoking an API
// key, withdrawing a third-party application's grant, or rotating or deleting its client disables every
// webhook that credential registered, in the transaction of the revocation itself. Otherwise a leaked key
// or a dropped application would go on receiving every tunnel event after losing all access to the API.
// Webhooks the owner registered in the panel (`session`) or the operator with the CLI end with nothing
// but their deletion: signing out of the panel is not a revocation.
//
// Disabled means `disabled_at` and `disabled_reason` set: the event fan-out (events.ts) writes nothing for
// it, the delivery worker (delivery.ts) sends nothing of it, and what it still had pending is given up
// here, so nothing written before the revocation goes out later either.
import type { Sql } from '../db/database.ts';
import { DISABLED_CREDENTIAL_REVOKED as CREDENTIAL_REVOKED } from './disabled-reason.ts';

/** What was revoked: one API key, one grant of a third-party application, or every grant of one client. */
export type RevokedCredential = { apiKey: string } | { grant: string } | { client: string };

function matching(revoked: RevokedCredential): { where: string; param: string } {
  if ('apiKey' in revoked) return { where: `created_by_kind = 'api_key' and created_by_id = ?`, param: revoked.apiKey };
  if ('grant' in revoked) return { where: `created_by_kind = 'oauth_client' and created_by_grant = ?`, param: revoked.grant };
  return { where: `created_by_kind = 'oauth_client' and created_by_id = ?`, param: revoked.client };
}

/**
 * Disables the webhooks `revoked` registered and gives up their pending deliveries; returns their ids.
 * Call it on the revocation's own transaction (one statement here, so a lone call is atomic too). A
 * webhook already disabled for another reason (a failing endpoint) takes this reason instead: enabling it
 * again must not bring back what a revoked credential registered.
 */
export async function disableWebhooksOf(sql: Pick<Sql, 'query'>, revoked: RevokedCredential): Promise<string[]> {
  const { where, param } = matching(revoked);
  const rows = await sql.query<{ id: string }>(
    `with disabled as (
       update webhook set disabled_at = now(), disabled_reason = '${CREDENTIAL_REVOKED}'
        where ${where} and disabled_reason is distinct from '${CREDENTIAL_REVOKED}'
        returning id),
     dropped as (
       update webhook_delivery set given_up_at = now(), lease_until = null, last_outcome = 'not sent: webhook disabled (${CREDENTIAL_REVOKED})'
        where webhook_id in (select id from disabled) and delivered_at is null and given_up_at is null)
     select id from disabled`,
    [param],
  );
  return rows.map((r) => r.id);
}
