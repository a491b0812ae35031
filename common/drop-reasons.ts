// Why the edge drops a packet of a tunnel (docs/CONTRACTS.md "Dataplane"): the names a `status` answer counts
// drops under (tunnel-status.ts) and an attack's vector names its top one by (attacks.ts). A module of its
// own so both can import it without importing each other.
export const DROP_REASONS = ['not_allowed', 'rate_limited', 'spoofed', 'invalid', 'fragment'] as const;
export type DropReason = (typeof DROP_REASONS)[number];
