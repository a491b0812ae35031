// Why a webhook stopped receiving deliveries (docs/CONTRACTS.md "Webhooks"). A module of its own so that
// events.ts (which writes nothing for a disabled webhook) and view.ts (which shows the reason, and names
// events.ts's event type) need not import each other.

/** Why a webhook stopped receiving deliveries; 'failing': nothing delivered for 24 hours while attempts kept failing (delivery.ts). */
export const DISABLED_FAILING = 'failing';
/**
 * Why a webhook stopped receiving deliveries; 'credential_revoked': the key, grant or client that registered
 * it was revoked (revocation.ts). Final: enabling refuses it (disable.ts), the owner registers a new webhook.
 */
export const DISABLED_CREDENTIAL_REVOKED = 'credential_revoked';
