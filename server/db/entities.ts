// The tables, as MikroORM entities. Checks and partial indexes that guard invariants live here too,
// so the generated migration and the schema-drift test see them: the database refuses an overdrawn
// balance or a doubly-sold IP even if a code path forgets to.
import { defineEntity, p, type InferEntity } from '@mikro-orm/core';

export const TUNNEL_STATUSES = ['pending', 'provisioning', 'provisioned', 'active', 'failed', 'deleting', 'deleted'] as const;
export type TunnelStatus = (typeof TUNNEL_STATUSES)[number];
export const ROLES = ['owner', 'viewer'] as const;
export type Role = (typeof ROLES)[number];
export const PERMISSIONS = ['read', 'write'] as const;
export type Permission = (typeof PERMISSIONS)[number];
/** What an OAuth client's access tokens may do on the tunnel API and GraphQL (docs/CONTRACTS.md "Admin CLI"). */
export const API_ACCESS = ['none', 'read', 'write'] as const;
export type ApiAccess = (typeof API_ACCESS)[number];
/**
 * Who registered a webhook (docs/CONTRACTS.md "Webhooks"): the owner signed in to the panel (`session`),
 * an API key, a third-party OAuth application (`oauth_client`), or the operator with the admin CLI.
 */
export const WEBHOOK_CREATOR_KINDS = ['session', 'api_key', 'oauth_client', 'operator'] as const;
export type WebhookCreatorKind = (typeof WEBHOOK_CREATOR_KINDS)[number];
/** A tunnel's `protocol` setting (common/tunnel-policy.ts PROTOCOLS; docs/CONTRACTS.md "Tunnel settings"). */
const TUNNEL_PROTOCOLS = ['both', 'tcp', 'udp'] as const;
/** A tunnel's health (common/tunnel-status.ts HEALTHS; docs/CONTRACTS.md "Health and traffic"). */
export const TUNNEL_HEALTHS = ['up', 'down', 'unknown'] as const;

const createdAt = () => p.datetime().defaultRaw('now()').onCreate(() => new Date());

const AccountSchema = defineEntity({
  name: 'Account',
  tableName: 'account',
  properties: {
    id: p.uuid().primary(),
    // USD, exact: numeric(14,2) read as a string and turned into bigint cents in code.
    balanceUsd: p.decimal('string').precision(14).scale(2).default('0').check('balance_usd >= 0'),
    createdAt: createdAt(),
  },
});
export type Account = InferEntity<typeof AccountSchema>;

const UserSchema = defineEntity({
  name: 'User',
  tableName: 'app_user',
  properties: {
    id: p.uuid().primary(),
    account: () => p.manyToOne(AccountSchema).index(),
    // Stored lower-cased; the unique index makes the email the login name.
    email: p.string().length(320).unique(),
    name: p.string().length(200),
    picture: p.string().length(2048).nullable(),
    // The generated avatar's public URL is keyed by this random value, not by the user id or email
    // (docs/CONTRACTS.md "REST shapes"): the URL tells nothing about its owner and cannot be derived from `sub`.
    avatarKey: p.string().length(32).unique().defaultRaw(`replace((gen_random_uuid())::text, '-'::text, ''::text)`),
    passwordHash: p.string().length(255),
    role: p.enum(ROLES),
    createdAt: createdAt(),
  },
});
export type User = InferEntity<typeof UserSchema>;

const ApiKeySchema = defineEntity({
  name: 'ApiKey',
  tableName: 'api_key',
  properties: {
    // The key is `svc_<id hex>_<secret>`: the id finds the row, only SHA-256(secret) is stored.
    id: p.uuid().primary(),
    account: () => p.manyToOne(AccountSchema).index(),
    user: () => p.manyToOne(UserSchema).nullable(),
    secretHash: p.string().length(64),
    permission: p.enum(PERMISSIONS),
    createdAt: createdAt(),
    revokedAt: p.datetime().nullable(),
    lastUsedAt: p.datetime().nullable(),
  },
});
export type ApiKey = InferEntity<typeof ApiKeySchema>;

const EdgeNodeSchema = defineEntity({
  name: 'EdgeNode',
  tableName: 'edge_node',
  properties: {
    id: p.uuid().primary(),
    name: p.string().length(100).unique(),
    publicIp: p.string().length(15),
    sshHost: p.string().length(255),
    sshPort: p.integer().default(52222),
    hostKey: p.string().length(255).nullable(),
    // The inner pool the tunnels' /30s are numbered in. One pool for every node (INNER_POOL in
    // domain/ip.ts): the /30 numbers are allocated across nodes, so an origin with tunnels on two
    // nodes never gets the same inner address twice (docs/NODES.md).
    innerPool: p.string().length(18).default('100.64.0.0/10'),
    // The protected pool as given at `node add` (null for nodes added before it was recorded): new
    // pools may not overlap it, network and broadcast addresses included.
    pool: p.string().length(18).nullable(),
    // Purchases take IPs only from sellable nodes that have a pinned host key (`node update`).
    sellable: p.boolean().default(true),
    // What its agent last said of its tunnel links (hello or status; docs/CONTRACTS.md "Tunnel links"):
    // usable false (a kernel without GRE) keeps purchases off the node. Null: not reported (yet).
    tunnelLinksKind: p.string().length(32).nullable(),
    tunnelLinksUsable: p.boolean().nullable(),
    tunnelLinksReason: p.string().length(500).nullable(),
    // When the report last changed.
    tunnelLinksSince: p.datetime().nullable(),
    createdAt: createdAt(),
  },
});
export type EdgeNode = InferEntity<typeof EdgeNodeSchema>;

const ProtectedIpSchema = defineEntity({
  name: 'ProtectedIp',
  tableName: 'protected_ip',
  properties: {
    ip: p.string().length(15).primary(),
    node: () => p.manyToOne(EdgeNodeSchema).index(),
    // Index of this IP in its node's pool. Purchases take the lowest free position first, so sales
    // spread over the nodes rather than filling one node after another.
    position: p.integer(),
    // The inner /30 number (in the one inner pool) a tunnel on this IP uses. Unique across ALL nodes,
    // assigned when the node is added: two tunnels never share an inner subnet, whatever their nodes
    // and origins, and a purchase needs no allocation of its own (the IP's row lock covers it).
    innerIndex: p.integer().unique(),
    // Null while the IP is free; the purchase sets it under FOR UPDATE SKIP LOCKED.
    tunnelId: p.uuid().nullable().unique(),
  },
  uniques: [{ properties: ['node', 'position'] }],
  // Only free IPs, in the order the purchase takes them: finding one stays O(1) however full the pool.
  indexes: [{ name: 'protected_ip_free_idx', properties: ['position', 'ip'], expression: 'create index "protected_ip_free_idx" on "protected_ip" ("position", "ip") where "tunnel_id" is null' }],
});
export type ProtectedIp = InferEntity<typeof ProtectedIpSchema>;

const TunnelSchema = defineEntity({
  name: 'Tunnel',
  tableName: 'tunnel',
  properties: {
    id: p.uuid().primary(),
    account: () => p.manyToOne(AccountSchema),
    node: () => p.manyToOne(EdgeNodeSchema).index(),
    name: p.string().length(100).nullable(),
    protectedIp: p.string().length(15),
    originIp: p.string().length(15),
    tunnelName: p.string().length(15).unique(),
    innerIndex: p.integer(),
    // The GRE key, 1 to 2^32-1 (server/domain/gre-keys.ts): set on every tunnel bought since GRE keys came (two unkeyed links to one origin clash);
    // null only on tunnels from before, where it could be (migration Migration20261125160000_gre_keys).
    greKey: p.bigint('number').nullable(),
    status: p.enum(TUNNEL_STATUSES).default('pending'),
    // Tunnel settings (docs/CONTRACTS.md "Tunnel settings"); the defaults are DEFAULT_POLICY
    // (common/tunnel-policy.ts). `ports` is the buyer's text form, normalised by parsePorts/formatPorts
    // before it is written: "*" or at most 32 comma-separated ports and ranges. The checks are the
    // database's guard rail for the same rules (the exact ones, from <= to and merging, are the code's).
    ports: p.text().default('*').check(`ports = '*' or ports ~ '^[0-9]{1,5}(-[0-9]{1,5})?(,[0-9]{1,5}(-[0-9]{1,5})?){0,31}$'`),
    protocol: p.enum(TUNNEL_PROTOCOLS).default('both'),
    synProxy: p.boolean().default(false),
    sourcePpsLimit: p.integer().nullable().check('source_pps_limit is null or (source_pps_limit >= 10 and source_pps_limit <= 1000000)'),
    dropFragments: p.boolean().default(false),
    // Attack settings (docs/CONTRACTS.md "Attacks"; common/tunnel-policy.ts): max_flows, the connections the
    // tunnel may hold at the edge (stored and sent to the agent; the dataplane does not enforce it yet), and
    // alert_pps, the attack alert threshold (null: automatic).
    maxFlows: p.integer().default(65536).check('max_flows >= 1000 and max_flows <= 1000000'),
    alertPps: p.integer().nullable().check('alert_pps is null or (alert_pps >= 100 and alert_pps <= 100000000)'),
    // Which version of the tunnel's spec the edge holds (server/provisioning/worker.ts): a settings
    // change that reaches the spec bumps spec_revision; the worker records the revision it applied in
    // applied_revision, so a PATCH knows when the agent has its change, and a job that read an older
    // spec applies again. origin_revision is the revision that last changed origin_ip: applying it
    // moves an active tunnel back to provisioned (docs/CONTRACTS.md "Tunnel lifecycle").
    specRevision: p.integer().default(0),
    appliedRevision: p.integer().default(0),
    originRevision: p.integer().default(0),
    // Health from the edge's checks (docs/CONTRACTS.md "Health and traffic"; server/health/):
    // 'unknown' before the first check and while its node does not answer. Traffic is in schema `traffic`.
    health: p.enum(TUNNEL_HEALTHS).default('unknown'),
    // Not the live check time: a collection round keeps that in traffic.seen.checked_at so unchanged
    // health writes no tunnel row; this holds the value from before migration 20261128100000 and a
    // deleted tunnel's last one. Read both through server/domain/tunnels/rows.ts HEALTH_CHECKED_AT_SQL.
    healthCheckedAt: p.datetime().nullable(),
    chargedUsd: p.decimal('string').precision(14).scale(2),
    chargedRub: p.decimal('string').precision(14).scale(2),
    createdAt: createdAt(),
    updatedAt: p.datetime().defaultRaw('now()').onCreate(() => new Date()).onUpdate(() => new Date()),
  },
  indexes: [
    // The list is "newest first" per account with a (created_at, id) cursor.
    { name: 'tunnel_account_created_idx', expression: 'create index "tunnel_account_created_idx" on "tunnel" ("account_id", "created_at" desc, "id" desc)' },
    // At most one live tunnel per protected IP, whatever the code does.
    { name: 'tunnel_live_ip_uniq', expression: `create unique index "tunnel_live_ip_uniq" on "tunnel" ("protected_ip") where "status" <> 'deleted'` },
    // The kernel's rule, kept by the database: GRE links on one edge are unique by (local, remote, key),
    // so no two live tunnels of one node and origin may share a key, and at most one of them may have none
    // (NULLS NOT DISTINCT). A purchase that loses a race for a key retries once (server/domain/gre-keys.ts).
    {
      name: 'tunnel_live_gre_key_uniq',
      expression: `create unique index "tunnel_live_gre_key_uniq" on "tunnel" ("node_id", "origin_ip", "gre_key") nulls not distinct where "status" <> 'deleted'`,
    },
  ],
  checks: [{ name: 'tunnel_gre_key_range', expression: 'gre_key is null or (gre_key >= 1 and gre_key <= 4294967295)' }],
});
export type Tunnel = InferEntity<typeof TunnelSchema>;

// Each change of a tunnel's origin_ip after its purchase (docs/CONTRACTS.md "Tunnel settings"): at most 10 per
// tunnel in any hour, counted here under the tunnel's row lock (server/domain/tunnels/origin-changes.ts), so
// a tenant cannot re-aim its protected IP at address after address. Rows older than the hour are deleted by
// the next change of that tunnel.
const TunnelOriginChangeSchema = defineEntity({
  name: 'TunnelOriginChange',
  tableName: 'tunnel_origin_change',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    tunnel: () => p.manyToOne(TunnelSchema).deleteRule('cascade'),
    changedAt: p.datetime(),
  },
  indexes: [{ properties: ['tunnel', 'changedAt'] }],
});
export type TunnelOriginChange = InferEntity<typeof TunnelOriginChangeSchema>;

const PromocodeSchema = defineEntity({
  name: 'Promocode',
  tableName: 'promocode',
  properties: {
    // Codes are stored upper-case and matched case-insensitively.
    code: p.string().length(64).primary(),
    percent: p.integer().nullable().check('percent is null or (percent >= 1 and percent <= 100)'),
    amountRub: p.decimal('string').precision(14).scale(2).nullable().check('amount_rub is null or amount_rub > 0'),
    maxUses: p.integer().nullable(),
    uses: p.integer().default(0),
    expiresAt: p.datetime().nullable(),
    createdAt: createdAt(),
  },
  checks: [{ name: 'promocode_one_discount', expression: '(percent is null) <> (amount_rub is null)' }],
});
export type Promocode = InferEntity<typeof PromocodeSchema>;

const LEDGER_KINDS = ['topup', 'purchase'] as const;

const LedgerEntrySchema = defineEntity({
  name: 'LedgerEntry',
  tableName: 'ledger_entry',
  properties: {
    id: p.bigint('string').primary().autoincrement(),
    account: () => p.manyToOne(AccountSchema).index(),
    // Signed: credits positive, debits negative; balance_after is the account balance right after.
    amountUsd: p.decimal('string').precision(14).scale(2),
    balanceAfter: p.decimal('string').precision(14).scale(2),
    kind: p.enum(LEDGER_KINDS),
    tunnelId: p.uuid().nullable(),
    promocode: p.string().length(64).nullable(),
    createdAt: createdAt(),
  },
});
export type LedgerEntry = InferEntity<typeof LedgerEntrySchema>;

const IdempotencyRecordSchema = defineEntity({
  name: 'IdempotencyRecord',
  tableName: 'idempotency_record',
  properties: {
    account: () => p.manyToOne(AccountSchema).primary(),
    key: p.string().length(255).primary(),
    requestHash: p.string().length(64),
    statusCode: p.integer(),
    body: p.json<Record<string, unknown>>(),
    createdAt: createdAt(),
  },
  primaryKeys: ['account', 'key'],
  // Records expire after 7 days (server/domain/tunnels/purchase.ts, IDEMPOTENCY_TTL_DAYS): the purge finds them by age.
  indexes: [{ name: 'idempotency_record_created_idx', properties: ['createdAt'] }],
});
export type IdempotencyRecord = InferEntity<typeof IdempotencyRecordSchema>;

const SettingSchema = defineEntity({
  name: 'Setting',
  tableName: 'setting',
  properties: {
    key: p.string().length(100).primary(),
    value: p.text(),
    updatedAt: p.datetime().defaultRaw('now()').onCreate(() => new Date()).onUpdate(() => new Date()),
  },
});
export type Setting = InferEntity<typeof SettingSchema>;

// --- Server secrets and OAuth clients (server/secrets.ts, server/domain/clients.ts) ---

const ServerSecretSchema = defineEntity({
  name: 'ServerSecret',
  tableName: 'server_secret',
  properties: {
    // A secret generated once and shared by every replica and the admin CLI (or, for rows named
    // `env_fingerprint.<name>`, the fingerprint of a secret some process takes from its environment).
    name: p.string().length(100).primary(),
    value: p.text(),
    createdAt: createdAt(),
  },
});
export type ServerSecret = InferEntity<typeof ServerSecretSchema>;

const OAuthClientSchema = defineEntity({
  name: 'OAuthClient',
  tableName: 'oauth_client',
  properties: {
    clientId: p.text().primary(),
    name: p.string().length(200),
    redirectUris: p.json<string[]>(),
    // AES-256-GCM under the secret-encryption key (v1.<nonce>.<ct>.<tag>); ID tokens need the plaintext.
    // Null exactly for a public client (token_endpoint_auth_method none), which has no secret.
    secretCiphertext: p.text().nullable(),
    isPublic: p.boolean().default(false),
    // The account that registered it in the developer portal; null for clients of the operator (admin CLI)
    // and for the gateway's own first-party panel client.
    ownerAccount: () => p.manyToOne(AccountSchema).nullable().index().deleteRule('cascade'),
    // docs/CONTRACTS.md "Admin CLI": none (default) | read | write; tokens of a `none` client are refused by the API.
    apiAccess: p.enum(API_ACCESS).default('none'),
    secretRotatedAt: p.datetime().defaultRaw('now()').onCreate(() => new Date()),
    createdAt: createdAt(),
  },
  checks: [
    {
      name: 'oauth_client_redirect_uris_check',
      expression: `case when jsonb_typeof(redirect_uris) = 'array' then jsonb_array_length(redirect_uris) > 0 else false end`,
    },
    { name: 'oauth_client_secret_check', expression: `is_public = (secret_ciphertext is null)` },
  ],
});
export type OAuthClient = InferEntity<typeof OAuthClientSchema>;

// --- The identity provider's artifacts (server/oidc/adapter.ts) ---

const OidcPayloadSchema = defineEntity({
  name: 'OidcPayload',
  tableName: 'oidc_payload',
  properties: {
    // oidc-provider's model name (AuthorizationCode, RefreshToken, Grant, Session, Interaction, ...) and its id.
    kind: p.string().length(40).primary(),
    id: p.string().length(255).primary(),
    payload: p.json<Record<string, unknown>>(),
    // Copied out of the payload so lookups, grant revocation and per-client invalidation use an index.
    grantId: p.string().length(255).nullable(),
    clientId: p.text().nullable(),
    uid: p.string().length(255).nullable(),
    expiresAt: p.datetime().nullable(),
    // Set once by the conditional update in consume(); a second consume changes no row.
    consumedAt: p.datetime().nullable(),
  },
  primaryKeys: ['kind', 'id'],
  indexes: [
    { name: 'oidc_payload_grant_idx', expression: 'create index "oidc_payload_grant_idx" on "oidc_payload" ("grant_id") where "grant_id" is not null' },
    { name: 'oidc_payload_client_idx', expression: 'create index "oidc_payload_client_idx" on "oidc_payload" ("client_id") where "client_id" is not null' },
    { name: 'oidc_payload_uid_idx', expression: 'create index "oidc_payload_uid_idx" on "oidc_payload" ("uid") where "uid" is not null' },
    { name: 'oidc_payload_expires_idx', expression: 'create index "oidc_payload_expires_idx" on "oidc_payload" ("expires_at") where "expires_at" is not null' },
  ],
});
export type OidcPayload = InferEntity<typeof OidcPayloadSchema>;

// --- Webhooks (server/webhooks/; docs/CONTRACTS.md "Webhooks") ---

const WebhookSchema = defineEntity({
  name: 'Webhook',
  tableName: 'webhook',
  properties: {
    id: p.uuid().primary(),
    account: () => p.manyToOne(AccountSchema).index(),
    url: p.string().length(2048),
    // The event types it receives (server/webhooks/events.ts WEBHOOK_EVENTS), a JSON array of strings.
    events: p.json<string[]>(),
    // The whsec_ signing secret under the secret-encryption key (secrets/at-rest.ts), bound to the id.
    secretCiphertext: p.text(),
    createdAt: createdAt(),
    // The credential that registered it (server/webhooks/service.ts; docs/CONTRACTS.md "Webhooks"): its
    // kind, and the API key id, the user id (the panel's session) or the OAuth client id; for a third-party
    // application also the grant. Revoking that credential disables the webhook (server/webhooks/revocation.ts).
    // Null on webhooks registered before it was recorded.
    createdByKind: p.enum(WEBHOOK_CREATOR_KINDS).nullable(),
    createdById: p.text().nullable(),
    createdByGrant: p.string().length(255).nullable(),
    // Whether deliveries carry the tunnel's origin_ip (server/webhooks/events.ts); only the account's own
    // credentials may ask for it.
    includeOrigin: p.boolean().default(false),
    // Set when the webhook stops receiving anything (no event is written for it, nothing pending is sent),
    // with why: 'credential_revoked' (its creator was revoked; server/webhooks/revocation.ts) or 'failing'
    // (nothing delivered for 24 hours while attempts kept failing; server/webhooks/disable.ts). Null while
    // enabled. Both migrations add these two columns, each with `if not exists`.
    disabledAt: p.datetime().nullable(),
    disabledReason: p.text().nullable(),
    // The first failed attempt since the last delivered one; null while the endpoint answers.
    failingSince: p.datetime().nullable(),
  },
  indexes: [
    // Revoking a key, a grant or a client finds the webhooks it registered (server/webhooks/revocation.ts).
    { name: 'webhook_created_by_idx', expression: 'create index "webhook_created_by_idx" on "webhook" ("created_by_kind", "created_by_id") where "created_by_kind" is not null' },
    { name: 'webhook_created_by_grant_idx', expression: 'create index "webhook_created_by_grant_idx" on "webhook" ("created_by_grant") where "created_by_grant" is not null' },
  ],
});
export type Webhook = InferEntity<typeof WebhookSchema>;

const WebhookDeliverySchema = defineEntity({
  name: 'WebhookDelivery',
  tableName: 'webhook_delivery',
  properties: {
    // The Standard Webhooks message id (`webhook-id`): written with the event, the same on every attempt.
    id: p.string().length(64).primary(),
    // Deleting a webhook drops what it still had to send.
    webhook: () => p.manyToOne(WebhookSchema).deleteRule('cascade').index(),
    eventType: p.string().length(64),
    // The exact body signed and sent on every attempt (text, not jsonb: jsonb would reorder its keys).
    body: p.text(),
    attempts: p.integer().default(0),
    nextAttemptAt: p.datetime(),
    lastAttemptAt: p.datetime().nullable(),
    // What the last attempt got: `status 500`, `refused: ...`, `error: ...`; null before the first.
    lastOutcome: p.text().nullable(),
    deliveredAt: p.datetime().nullable(),
    givenUpAt: p.datetime().nullable(),
    // The claimed attempt's lease while it is in flight, cleared with its outcome: the claim counts these
    // to keep at most 2 attempts in flight per webhook across replicas (server/webhooks/delivery.ts).
    leaseUntil: p.datetime().nullable(),
    // Finished deliveries are purged by age (server/webhooks/delivery.ts, RETENTION_DAYS).
    createdAt: createdAt().index(),
  },
  indexes: [
    // What the delivery worker takes, per webhook: undelivered, not given up, oldest due first; also what
    // the per-webhook cap on pending deliveries counts (server/webhooks/delivery.ts, events.ts).
    {
      name: 'webhook_delivery_pending_idx',
      expression:
        'create index "webhook_delivery_pending_idx" on "webhook_delivery" ("webhook_id", "next_attempt_at") where "delivered_at" is null and "given_up_at" is null',
    },
    // The attempts in flight (a lease set), counted by every claim.
    {
      name: 'webhook_delivery_lease_idx',
      expression: 'create index "webhook_delivery_lease_idx" on "webhook_delivery" ("lease_until") where "lease_until" is not null',
    },
  ],
});
export type WebhookDelivery = InferEntity<typeof WebhookDeliverySchema>;

// --- Attacks (server/attacks/; docs/CONTRACTS.md "Attacks") ---

/** What an attack's packets mostly were, as its record says (common/attacks.ts AttackVector). */
export interface AttackVectorColumn {
  protocol: string | null;
  ports: number[] | null;
  top_drop_reason: string | null;
}

const AttackSchema = defineEntity({
  name: 'Attack',
  tableName: 'attack',
  properties: {
    // The id the edge agent gave it when it started: its status answers carry the record under it, and the
    // gateway upserts by it, so a record reported in many rounds is one row.
    id: p.uuid().primary(),
    // Deleting a tunnel row (nothing does today: deleted tunnels stay) takes its attacks with it.
    tunnel: () => p.manyToOne(TunnelSchema).deleteRule('cascade'),
    startedAt: p.datetime(),
    // Null while it goes on.
    endedAt: p.datetime().nullable(),
    peakPps: p.bigint('number'),
    peakBps: p.bigint('number'),
    vector: p.json<AttackVectorColumn>(),
    packetsDropped: p.bigint('number'),
    packetsPassed: p.bigint('number'),
    // The status round that last carried it: an open attack no longer listed by its agent ends here.
    reportedAt: p.datetime(),
    createdAt: createdAt(),
  },
  indexes: [
    // A tunnel's attacks by time (the API's range), and the purge after 90 days (by end).
    { name: 'attack_tunnel_started_idx', properties: ['tunnel', 'startedAt'] },
    { name: 'attack_ended_idx', properties: ['endedAt'] },
  ],
  checks: [{ name: 'attack_ended_after_start', expression: 'ended_at is null or ended_at >= started_at' }],
});
export type Attack = InferEntity<typeof AttackSchema>;

export const entities = [
  AccountSchema,
  UserSchema,
  ApiKeySchema,
  EdgeNodeSchema,
  ProtectedIpSchema,
  TunnelSchema,
  TunnelOriginChangeSchema,
  PromocodeSchema,
  LedgerEntrySchema,
  IdempotencyRecordSchema,
  SettingSchema,
  ServerSecretSchema,
  OAuthClientSchema,
  OidcPayloadSchema,
  WebhookSchema,
  WebhookDeliverySchema,
  AttackSchema,
];
