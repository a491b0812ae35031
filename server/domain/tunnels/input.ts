// What a buyer may send, checked before anything is locked: the purchase fields and the Idempotency-Key
// (REST and GraphQL call the same functions), the refusal of an origin that is one of our own addresses,
// and the digest that tells a retried key from a reused one.
import { createHash } from 'node:crypto';
import type { Sql } from '../../db/database.ts';
import { ApiError } from '../errors.ts';
import { isPublicUnicast, isUnicast, parseIPv4 } from '../ip.ts';
import { normalizeCode } from '../promocodes.ts';
import { DEFAULT_SETTINGS, SETTINGS_FIELDS, applyChange, isDefaultSettings, validateSettings, type SettingsChange, type TunnelSettings } from './settings.ts';

export interface PurchaseInput {
  name: string | null;
  originIp: string;
  promocode: string | null;
  /** The tunnel settings asked for, the defaults where the buyer sent none (docs/CONTRACTS.md "Tunnel settings"). */
  settings: TunnelSettings;
}

/** What a PATCH sets (docs/CONTRACTS.md "Tunnel settings"); a key left out keeps the stored value. */
export interface TunnelUpdate extends SettingsChange {
  /** null clears the label. */
  name?: string | null;
  originIp?: string;
}

export const PURCHASE_FIELDS = ['name', 'origin_ip', 'promocode', ...SETTINGS_FIELDS] as const;
export const UPDATE_FIELDS = ['name', 'origin_ip', ...SETTINGS_FIELDS] as const;

const NAME_MAX = 100;
const PROMO_MAX = 64;
const IDEMPOTENCY_KEY_RE = /^[\x21-\x7e]{1,255}$/;

export function validateIdempotencyKey(key: string | null | undefined): string | null {
  if (key === undefined || key === null) return null;
  if (!IDEMPOTENCY_KEY_RE.test(key)) {
    throw new ApiError('invalid_request', 'Idempotency-Key must be 1 to 255 visible ASCII characters.');
  }
  return key;
}

/** A label: at most NAME_MAX characters, no control characters; blank is none (null). */
function validateName(name: unknown): string | null {
  if (name === undefined || name === null) return null;
  if (typeof name !== 'string') throw new ApiError('invalid_request', 'name must be a string.');
  if (name.length > NAME_MAX) throw new ApiError('invalid_request', `name must be at most ${NAME_MAX} characters.`);
  if (/[\u0000-\u001f\u007f]/.test(name)) throw new ApiError('invalid_request', 'name must not contain control characters.');
  const trimmed = name.trim();
  return trimmed === '' ? null : trimmed;
}

/**
 * An origin as a buyer gives it, at purchase and in a PATCH alike: a dotted quad, public unicast (any
 * unicast with ALLOW_PRIVATE_ORIGINS). Whether it is one of our own addresses needs the database
 * (refuseOurAddress, in the transaction).
 */
function validateOriginIp(originIp: unknown, allowPrivateOrigins: boolean): string {
  if (originIp === undefined || originIp === null) throw new ApiError('invalid_request', 'origin_ip is required.');
  if (typeof originIp !== 'string') throw new ApiError('invalid_request', 'origin_ip must be a string.');
  const ip = parseIPv4(originIp);
  if (ip === null) throw new ApiError('invalid_origin_ip', `origin_ip must be a dotted-quad IPv4 address, got ${JSON.stringify(originIp.slice(0, 64))}.`);
  if (allowPrivateOrigins ? !isUnicast(ip) : !isPublicUnicast(ip)) {
    throw new ApiError('invalid_origin_ip', `origin_ip ${originIp} is not a public unicast address.`);
  }
  return originIp;
}

export function validatePurchase(
  input: { name?: unknown; origin_ip?: unknown; promocode?: unknown; ports?: unknown; protocol?: unknown; protection?: unknown },
  allowPrivateOrigins: boolean,
): PurchaseInput {
  const { promocode } = input;
  const name = validateName(input.name);
  const originIp = validateOriginIp(input.origin_ip, allowPrivateOrigins);
  if (promocode !== undefined && promocode !== null) {
    if (typeof promocode !== 'string') throw new ApiError('invalid_request', 'promocode must be a string.');
    // Codes are [A-Z0-9_-] once normalized (createPromocode); anything else cannot exist, and a NUL
    // byte would reach PostgreSQL's text parameter as a 500 (found by test/fuzz/rest.test.ts).
    if (promocode.length === 0 || promocode.length > PROMO_MAX || !/^[A-Z0-9_-]+$/.test(normalizeCode(promocode))) {
      throw new ApiError('invalid_promocode', 'Unknown promocode.');
    }
  }
  const settings = applyChange(DEFAULT_SETTINGS, validateSettings(input));
  return { name, originIp, promocode: typeof promocode === 'string' ? promocode : null, settings };
}

/** A PATCH body (docs/CONTRACTS.md "Tunnel settings"): only the keys given, each checked as at purchase. */
export function validateUpdate(
  input: { name?: unknown; origin_ip?: unknown; ports?: unknown; protocol?: unknown; protection?: unknown },
  allowPrivateOrigins: boolean,
): TunnelUpdate {
  const out: TunnelUpdate = validateSettings(input);
  if (input.name !== undefined) out.name = validateName(input.name);
  if (input.origin_ip !== undefined) out.originIp = validateOriginIp(input.origin_ip, allowPrivateOrigins);
  return out;
}

/**
 * What `ip` is among our own addresses, or null: a protected IP of any pool (sold or not) or an edge's
 * public or SSH address. A tunnel to one of them loops GRE between the edge and its upstream (docs/NODES.md
 * and docs/CONTRACTS.md "REST errors" `invalid_origin_ip`). Edge SSH hosts given as names are not resolved.
 */
export async function ourAddress(sql: Pick<Sql, 'query'>, ip: string): Promise<string | null> {
  const [row] = await sql.query<{ what: string }>(OUR_ADDRESS_SQL, [ip, ip, ip]);
  return row ? row.what : null;
}

/** ourAddress's query (parameters: the IP three times); the purchase runs it inside its IP pick, one round trip less. */
export const OUR_ADDRESS_SQL = `select 'a protected IP of ours' as what from protected_ip where ip = ?
     union all select 'an edge router''s address' from edge_node where public_ip = ? or ssh_host = ?
     limit 1`;

export async function refuseOurAddress(sql: Pick<Sql, 'query'>, ip: string): Promise<void> {
  refuseIfOurs(ip, await ourAddress(sql, ip));
}

/** The refusal of an origin that is `ours` (ourAddress's answer), if it is one. */
export function refuseIfOurs(ip: string, ours: string | null): void {
  if (ours) throw new ApiError('invalid_origin_ip', `origin_ip ${ip} is ${ours}, not an origin server; give your origin server's own public address.`);
}

/** Stable digest of what was asked for, so a retried key can be told apart from a reused one. */
export function requestHash(input: PurchaseInput): string {
  const fields: unknown[] = [input.name, input.originIp, input.promocode === null ? null : normalizeCode(input.promocode)];
  // Settings count as they take effect: "443,80,81" and "80-81,443" ask for the same thing, and default
  // settings, sent or not, add nothing, so a key recorded before settings existed still replays; likewise
  // max_flows and alert_pps at their defaults, for a key recorded before they existed.
  if (!isDefaultSettings(input.settings)) {
    const { max_flows, alert_pps, ...rest } = input.settings.protection;
    fields.push({ ...input.settings, protection: { ...rest, ...(max_flows !== DEFAULT_SETTINGS.protection.max_flows ? { max_flows } : {}), ...(alert_pps !== null ? { alert_pps } : {}) } });
  }
  const canonical = JSON.stringify(fields);
  return createHash('sha256').update(canonical).digest('hex');
}
