// Why a webhook stopped receiving deliveries (its disabled_reason, docs/CONTRACTS.md "Webhooks"). Apart from
// view.ts, which shows it, so the event module (events.ts, which tells a disabled webhook's deliveries apart by
// it) and view.ts (which needs the event types) do not import each other.
/** Why a webhook stopped receiving deliveries; 'failing': nothing delivered for 24 hours while attempts kept failing (delivery.ts). */
export const DISABLED_FAILING = 'failing';
/**
 * Why a webhook stopped receiving deliveries; 'credential_revoked': the key, grant or client that registered
 * it was revoked (revocation.ts). Final: enabling refuses it (disable.ts), the owner registers a new webhook.
 */
export const DISABLED_CREDENTIAL_REVOKED = 'credential_revoked';
