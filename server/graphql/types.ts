// GraphQL object types. The domain returns the REST wire shapes (snake_case, docs/CONTRACTS.md "REST
// shapes"); the `to*` functions below map them to these camelCase types, field for field, so the two
// APIs show the same values. Money is Float here: the domain already rounded it exactly (cents for
// USD, kopecks for RUB) and hands over the JSON number REST sends.
import 'reflect-metadata';
import { Field, Float, ID, InputType, Int, ObjectType, registerEnumType, GraphQLISODateTime } from 'type-graphql';
import type { Pricing as PricingView } from '../domain/pricing.ts';
import { SETTINGS_APPLIED, type Purchase as PurchaseView, type SetupView, type TunnelPage as TunnelPageView, type TunnelView } from '../domain/tunnels/index.ts';
import { nextStepsOf } from '../http/rest/paths.ts';
import { ALERT_PPS_MAX, ALERT_PPS_MIN, DEFAULT_MAX_FLOWS, MAX_FLOWS_MAX, MAX_FLOWS_MIN, PPS_MAX, PPS_MIN } from '../../common/tunnel-policy.ts';
import type { AccountView } from '../domain/accounts.ts';
import type { Health } from '../../common/tunnel-status.ts';
import type { Permission as PermissionValue, Role as RoleValue, TunnelStatus as TunnelStatusValue } from '../db/entities.ts';

const PORTS_INPUT = '* (all ports) or up to 32 comma-separated ports and ranges, 1-65535, e.g. "22,80,443,25565-25575"; answered normalised.';
const PROTOCOL_INPUT = 'both, tcp or udp.';

// GraphQL enum names are upper case; their internal values are the REST literals.
export enum TunnelStatus {
  PENDING = 'pending',
  PROVISIONING = 'provisioning',
  PROVISIONED = 'provisioned',
  ACTIVE = 'active',
  FAILED = 'failed',
  DELETING = 'deleting',
  DELETED = 'deleted',
}
registerEnumType(TunnelStatus, {
  name: 'TunnelStatus',
  description: 'Lifecycle of a tunnel: PENDING after purchase, then PROVISIONING, PROVISIONED, ACTIVE; FAILED when the edge gave up; DELETING, DELETED.',
});

export enum TunnelHealth {
  UP = 'up',
  DOWN = 'down',
  UNKNOWN = 'unknown',
}
registerEnumType(TunnelHealth, {
  name: 'TunnelHealth',
  description: "From the edge's checks through the tunnel: UP, DOWN, or UNKNOWN (before the first check, while its edge does not answer, and whenever the tunnel is not on an edge).",
});

export enum Role {
  OWNER = 'owner',
  VIEWER = 'viewer',
}
registerEnumType(Role, { name: 'Role', description: "A panel user's role in the account." });

export enum Permission {
  READ = 'read',
  WRITE = 'write',
}
registerEnumType(Permission, { name: 'Permission', description: 'What the credential of this request may do: READ, or WRITE (purchase, provision, activate, delete).' });

// Compile-time checks that the enums cover the domain's literals exactly.
/** True only when A and B are the same union: a compile-time check that a GraphQL enum covers a domain literal type. */
export type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : never) : never;
const _statusCovered: Same<`${TunnelStatus}`, TunnelStatusValue> = true;
const _roleCovered: Same<`${Role}`, RoleValue> = true;
const _permissionCovered: Same<`${Permission}`, PermissionValue> = true;
const _healthCovered: Same<`${TunnelHealth}`, Health> = true;
void _healthCovered;
void _statusCovered;
void _roleCovered;
void _permissionCovered;

@ObjectType({ description: 'Protected IPs in stock, counted live from the edge pools.' })
export class Availability {
  @Field(() => Int, { description: 'Protected IPs in all pools.' })
  total!: number;

  @Field(() => Int, { description: 'Protected IPs not given to a tunnel.' })
  available!: number;

  @Field({ description: 'Whether a purchase can get a protected IP right now.' })
  inStock!: boolean;
}

@ObjectType({ description: 'The price list (GET /api/dedicated/pricing).' })
export class Pricing {
  @Field(() => Float, { description: 'One-time price in `currency` (RUB).' })
  price!: number;

  @Field({ description: 'Always RUB.' })
  currency!: string;

  @Field(() => Float, { description: 'The price in USD at the current rate, rounded to the cent; this is what a purchase debits.' })
  priceUsd!: number;

  @Field(() => Float, { description: 'RUB per USD used for the conversion.' })
  usdRubRate!: number;

  @Field({ description: 'Always one_time.' })
  billing!: string;

  @Field(() => [String], { description: 'dedicated_public_ip, full_tcp_udp_nat, gre_tunnel.' })
  includes!: string[];

  @Field(() => Int, { description: 'Administrative SSH port of the edge.' })
  adminSshPort!: number;

  @Field(() => Availability)
  availability!: Availability;
}

@ObjectType({ description: 'What the edge does to traffic for the protected IP before it reaches the origin (docs/CONTRACTS.md "Tunnel settings").' })
export class TunnelProtection {
  @Field({ description: 'TCP SYN proxy: the edge completes the handshake with the client before the origin sees a SYN (the origin still sees the client address).' })
  synProxy!: boolean;

  @Field(() => Int, { nullable: true, description: `Packets per second one client address may send to the protected IP (${PPS_MIN} to ${PPS_MAX}); null: no limit.` })
  sourcePpsLimit!: number | null;

  @Field({ description: 'Drop IP fragments before they reach the origin.' })
  dropFragments!: boolean;

  @Field(() => Int, { description: `Connections the tunnel may hold in the edge's connection table (${MAX_FLOWS_MIN} to ${MAX_FLOWS_MAX}, default ${DEFAULT_MAX_FLOWS}). It also caps its new connections a second at a sixteenth of it (at least 1,000): past either, new connections are dropped at the edge, counted as rate_limited.` })
  maxFlows!: number;

  @Field(() => Int, { nullable: true, description: `The attack alert threshold in inbound packets (or drops) per second (${ALERT_PPS_MIN} to ${ALERT_PPS_MAX}); null: automatic, 10 x the tunnel's 10-minute p95 and at least 5,000 (docs/CONTRACTS.md "Attacks").` })
  alertPps!: number | null;
}

@ObjectType({ description: 'A dedicated tunnel: a protected IPv4 on an edge router, carried over GRE to the origin.' })
export class Tunnel {
  @Field(() => ID)
  id!: string;

  @Field(() => String, { nullable: true, description: 'The label given at purchase.' })
  name!: string | null;

  @Field({ description: 'The public protected IPv4 address.' })
  protectedIp!: string;

  @Field({ description: 'The hidden origin server given at purchase (or since changed with updateTunnel).' })
  originIp!: string;

  @Field({ description: 'Ports forwarded to the origin: * (all), or the normalised allowlist such as "22,80-81,443" (sorted, merged). Set at purchase or with updateTunnel.' })
  ports!: string;

  @Field({ description: 'Protocols forwarded: both (TCP and UDP), tcp or udp.' })
  protocol!: string;

  @Field(() => TunnelProtection)
  protection!: TunnelProtection;

  @Field({ description: 'Name of the GRE interface on both ends (a valid Linux interface name).' })
  tunnelName!: string;

  @Field(() => TunnelStatus)
  status!: TunnelStatus;

  @Field(() => TunnelHealth, { description: 'Whether the tunnel carries traffic, from the edge\'s checks (tunnelStatus also fires when it changes).' })
  health!: TunnelHealth;

  @Field(() => GraphQLISODateTime, { nullable: true, description: 'When the edge last checked the tunnel; null before the first check.' })
  healthCheckedAt!: Date | null;

  @Field({
    description:
      'Whether the edge has the current settings (origin, ports, protocol, protection): what REST says with 200 rather than 202 after a PATCH. PROVISIONED or ACTIVE: true once the edge applied the latest change, false while its job retries (tunnelStatus fires when it turns true). PROVISIONING: false (the edge does not have the tunnel yet; the provision carries the current settings). PENDING, FAILED, DELETING, DELETED: true, nothing on an edge to apply them to (the next provision carries them).',
  })
  settingsApplied!: boolean;

  @Field(() => Int)
  adminSshPort!: number;

  @Field({ description: "The edge router's public address: the GRE peer of the origin." })
  edgeIp!: string;

  @Field(() => GraphQLISODateTime)
  createdAt!: Date;

  @Field(() => GraphQLISODateTime)
  updatedAt!: Date;
}

@ObjectType({ description: 'One page of tunnels, newest first; deleted tunnels are left out.' })
export class TunnelPage {
  @Field(() => [Tunnel])
  tunnels!: Tunnel[];

  @Field(() => String, { nullable: true, description: 'Pass as `cursor` for the next page; null on the last page.' })
  nextCursor!: string | null;
}

@ObjectType({ description: "Scripts to run on the origin server, filled with this tunnel's values." })
export class OriginScripts {
  @Field({ description: 'Idempotent bash script: GRE link, inner address, policy route, MSS clamp.' })
  origin!: string;

  @Field({ description: 'A systemd unit that re-applies the origin script at boot.' })
  systemdOrigin!: string;
}

@ObjectType()
export class TunnelSetup {
  @Field(() => ID)
  tunnelId!: string;

  @Field(() => OriginScripts)
  scripts!: OriginScripts;
}

@ObjectType({ description: 'REST paths of the next steps for a new tunnel.' })
export class NextSteps {
  @Field({ description: '/api/dedicated/{id}/setup' })
  setup!: string;

  @Field({ description: '/api/dedicated/{id}/provision' })
  provision!: string;
}

@ObjectType()
export class PurchaseResult {
  @Field(() => Tunnel)
  tunnel!: Tunnel;

  @Field(() => Float, { description: 'Amount debited in `currency` (RUB), after any promocode.' })
  charged!: number;

  @Field(() => Float, { description: 'Amount debited in USD.' })
  chargedUsd!: number;

  @Field({ description: 'Always RUB.' })
  currency!: string;

  @Field(() => Float, { description: 'Account balance in USD after the debit: the previous balance minus chargedUsd, exactly.' })
  balanceAfter!: number;

  @Field(() => NextSteps)
  nextSteps!: NextSteps;
}

@ObjectType({ description: 'The account of the credential that made this request.' })
export class Account {
  @Field(() => ID)
  accountId!: string;

  @Field(() => ID, { nullable: true, description: 'The user the credential belongs to, if any.' })
  userId!: string | null;

  @Field(() => String, { nullable: true })
  email!: string | null;

  @Field(() => String, { nullable: true })
  name!: string | null;

  @Field(() => Role, { nullable: true })
  role!: Role | null;

  @Field(() => Permission)
  permission!: Permission;

  @Field(() => Float, { description: 'Balance in USD.' })
  balanceUsd!: number;
}

@InputType()
export class PurchaseTunnelInput {
  @Field(() => String, { nullable: true, description: 'A label, at most 100 characters.' })
  name?: string | null;

  @Field({ description: 'Public unicast IPv4 of the origin server, dotted quad; never one of our own addresses (a protected IP, an edge address).' })
  originIp!: string;

  @Field(() => String, { nullable: true })
  promocode?: string | null;

  @Field(() => String, { nullable: true, description: PORTS_INPUT })
  ports?: string | null;

  @Field(() => String, { nullable: true, description: PROTOCOL_INPUT })
  protocol?: string | null;

  @Field(() => TunnelProtectionInput, { nullable: true, description: 'Left out: no SYN proxy, no rate limit, fragments forwarded.' })
  protection?: TunnelProtectionInput | null;
}

@InputType({ description: 'The fields given change; the others keep their value (updateTunnel and purchaseTunnel).' })
export class TunnelProtectionInput {
  @Field(() => Boolean, { nullable: true })
  synProxy?: boolean | null;

  @Field(() => Int, { nullable: true, description: `${PPS_MIN} to ${PPS_MAX} packets per second per client address, or null for no limit.` })
  sourcePpsLimit?: number | null;

  @Field(() => Boolean, { nullable: true })
  dropFragments?: boolean | null;

  @Field(() => Int, { nullable: true, description: `${MAX_FLOWS_MIN} to ${MAX_FLOWS_MAX} connections (default ${DEFAULT_MAX_FLOWS}).` })
  maxFlows?: number | null;

  @Field(() => Int, { nullable: true, description: `${ALERT_PPS_MIN} to ${ALERT_PPS_MAX} packets per second, or null for the automatic threshold.` })
  alertPps?: number | null;
}

@InputType({ description: 'The fields to change (PATCH /api/dedicated/{id}); a field left out keeps its value.' })
export class UpdateTunnelInput {
  @Field(() => String, { nullable: true, description: 'A label, at most 100 characters; null clears it.' })
  name?: string | null;

  @Field(() => String, { nullable: true, description: 'A new origin, checked as at purchase. On an active tunnel: PROVISIONED once the edge applied it; run the new setup script, then activate again.' })
  originIp?: string | null;

  @Field(() => String, { nullable: true, description: PORTS_INPUT })
  ports?: string | null;

  @Field(() => String, { nullable: true, description: PROTOCOL_INPUT })
  protocol?: string | null;

  @Field(() => TunnelProtectionInput, { nullable: true })
  protection?: TunnelProtectionInput | null;
}

// --- GraphQL input -> REST field names (validated by the same domain functions) ----------------------

/** null as "left out": these fields have no null value (name's, sourcePpsLimit's and alertPps's nulls mean something, and are kept). */
const unlessNull = <T>(v: T | null | undefined): T | undefined => (v === null ? undefined : v);

/** The settings fields of an input, under their REST names (ports, protocol, protection). */
export function settingsFields(input: { ports?: string | null; protocol?: string | null; protection?: TunnelProtectionInput | null }): {
  ports?: unknown;
  protocol?: unknown;
  protection?: unknown;
} {
  const p = input.protection;
  return {
    ports: unlessNull(input.ports),
    protocol: unlessNull(input.protocol),
    protection:
      p === undefined || p === null
        ? undefined
        : { syn_proxy: unlessNull(p.synProxy), source_pps_limit: p.sourcePpsLimit, drop_fragments: unlessNull(p.dropFragments), max_flows: unlessNull(p.maxFlows), alert_pps: p.alertPps },
  };
}

/** An updateTunnel input under the REST names of a PATCH body. */
export function updateFields(input: UpdateTunnelInput): Record<string, unknown> {
  return { name: input.name, origin_ip: unlessNull(input.originIp), ...settingsFields(input) };
}

// --- REST wire shape -> GraphQL ---------------------------------------------------------------------

export function toPricing(p: PricingView): Pricing {
  return {
    price: p.price,
    currency: p.currency,
    priceUsd: p.price_usd,
    usdRubRate: p.usd_rub_rate,
    billing: p.billing,
    includes: p.includes,
    adminSshPort: p.admin_ssh_port,
    availability: { total: p.availability.total, available: p.availability.available, inStock: p.availability.in_stock },
  };
}

export function toTunnel(t: TunnelView): Tunnel {
  return {
    id: t.id,
    name: t.name,
    protectedIp: t.protected_ip,
    originIp: t.origin_ip,
    ports: t.ports,
    protocol: t.protocol,
    protection: {
      synProxy: t.protection.syn_proxy,
      sourcePpsLimit: t.protection.source_pps_limit,
      dropFragments: t.protection.drop_fragments,
      maxFlows: t.protection.max_flows,
      alertPps: t.protection.alert_pps,
    },
    tunnelName: t.tunnel_name,
    status: t.status as TunnelStatus,
    health: t.health as TunnelHealth,
    healthCheckedAt: t.health_checked_at === null ? null : new Date(t.health_checked_at),
    // A replayed purchase's tunnel comes from its stored JSON, which has no symbol keys: a purchase is
    // pending, on no edge, so nothing is left to apply.
    settingsApplied: t[SETTINGS_APPLIED] ?? true,
    adminSshPort: t.admin_ssh_port,
    edgeIp: t.edge_ip,
    createdAt: new Date(t.created_at),
    updatedAt: new Date(t.updated_at),
  };
}

export function toTunnelPage(p: TunnelPageView): TunnelPage {
  return { tunnels: p.tunnels.map(toTunnel), nextCursor: p.next_cursor };
}

export function toSetup(s: SetupView): TunnelSetup {
  return { tunnelId: s.tunnel_id, scripts: { origin: s.scripts.origin, systemdOrigin: s.scripts.systemd_origin } };
}

export function toPurchase(p: PurchaseView): PurchaseResult {
  return {
    tunnel: toTunnel(p.tunnel),
    charged: p.charged,
    chargedUsd: p.charged_usd,
    currency: p.currency,
    balanceAfter: p.balance_after,
    // The REST paths of the next calls, as REST's next_steps shows them.
    nextSteps: nextStepsOf(p.tunnel.id),
  };
}

export function toAccount(a: AccountView, permission: PermissionValue): Account {
  return {
    accountId: a.account_id,
    userId: a.user_id,
    email: a.email,
    name: a.name,
    role: a.role as Role | null,
    permission: permission as Permission,
    balanceUsd: a.balance_usd,
  };
}
