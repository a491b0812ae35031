// What a buyer may send, checked before anything is locked: the purchase fields and the Idempotency-Key
// (REST and GraphQL call the same functions), the refusal of an origin that is one of our own addresses,
// and the digest that tells a retried key from a reused one.
import { createHash } from 'node:crypto';
import type { Sql } from '../../db/database.ts';
import { ApiError } from '../errors.ts';
import { isPublicUnicast, isUnicast, parseIPv4 } from '../ip.ts';
import { normalizeCode } from '../promocodes.ts';

export interface PurchaseInput {
  name: string | null;
  originIp: string;
  promocode: string | null;
}

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

export function validatePurchase(
  input: { name?: unknown; origin_ip?: unknown; promocode?: unknown },
  allowPrivateOrigins: boolean,
): PurchaseInput {
  const { name, origin_ip: originIp, promocode } = input;
  if (name !== undefined && name !== null) {
    if (typeof name !== 'string') throw new ApiError('invalid_request', 'name must be a string.');
    if (name.length > NAME_MAX) throw new ApiError('invalid_request', `name must be at most ${NAME_MAX} characters.`);
    if (/[\u0000-\u001f\u007f]/.test(name)) throw new ApiError('invalid_request', 'name must not contain control characters.');
  }
  if (originIp === undefined || originIp === null) throw new ApiError('invalid_request', 'origin_ip is required.');
  if (typeof originIp !== 'string') throw new ApiError('invalid_request', 'origin_ip must be a string.');
  const ip = parseIPv4(originIp);
  if (ip === null) throw new ApiError('invalid_origin_ip', `origin_ip must be a dotted-quad IPv4 address, got ${JSON.stringify(originIp.slice(0, 64))}.`);
  if (allowPrivateOrigins ? !isUnicast(ip) : !isPublicUnicast(ip)) {
    throw new ApiError('invalid_origin_ip', `origin_ip ${originIp} is not a public unicast address.`);
  }
  if (promocode !== undefined && promocode !== null) {
    if (typeof promocode !== 'string') throw new ApiError('invalid_request', 'promocode must be a string.');
    // Codes are [A-Z0-9_-] once normalized (createPromocode); anything else cannot exist, and a NUL
    // byte would reach PostgreSQL's text parameter as a 500 (found by test/fuzz/rest.test.ts).
    if (promocode.length === 0 || promocode.length > PROMO_MAX || !/^[A-Z0-9_-]+$/.test(normalizeCode(promocode))) {
      throw new ApiError('invalid_promocode', 'Unknown promocode.');
    }
  }
  const trimmed = typeof name === 'string' ? name.trim() : '';
  return {
    name: trimmed === '' ? null : trimmed,
    originIp,
    promocode: typeof promocode === 'string' ? promocode : null,
  };
}

/**
 * What `ip` is among our own addresses, or null: a protected IP of any pool (sold or not) or an edge's
 * public or SSH address. A tunnel to one of them loops GRE between the edge and its upstream (issue 8
 * item 7; docs/CONTRACTS.md "REST errors" `invalid_origin_ip`). Edge SSH hosts given as names are not resolved.
 */
export async function ourAddress(sql: Pick<Sql, 'query'>, ip: string): Promise<string | null> {
  const [row] = await sql.query<{ what: string }>(
    `select 'a protected IP of ours' as what from protected_ip where ip = ?
     union all select 'an edge router''s address' from edge_node where public_ip = ? or ssh_host = ?
     limit 1`,
    [ip, ip, ip],
  );
  return row ? row.what : null;
}

export async function refuseOurAddress(sql: Pick<Sql, 'query'>, ip: string): Promise<void> {
  const ours = await ourAddress(sql, ip);
  if (ours) throw new ApiError('invalid_origin_ip', `origin_ip ${ip} is ${ours}, not an origin server; give your origin server's own public address.`);
}

/** Stable digest of what was asked for, so a retried key can be told apart from a reused one. */
export function requestHash(input: PurchaseInput): string {
  const canonical = JSON.stringify([input.name, input.originIp, input.promocode === null ? null : normalizeCode(input.promocode)]);
  return createHash('sha256').update(canonical).digest('hex');
}
