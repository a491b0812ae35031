// Promocodes: a percentage or a fixed RUB amount off the price, optionally limited in uses and time.
import type { Database } from '../db/database.ts';
import { ApiError } from './errors.ts';
import { centsToString, parseDecimal } from './money.ts';

export interface PromocodeRow {
  code: string;
  percent: number | null;
  amount_rub: string | null;
  max_uses: number | null;
  uses: number;
  expired: boolean | null;
}

export const normalizeCode = (code: string) => code.trim().toUpperCase();

/** The RUB price after the discount, in kopecks, never below zero. */
export function discountedKopecks(price: bigint, promo: Pick<PromocodeRow, 'percent' | 'amount_rub'>): bigint {
  if (promo.percent !== null) return (price * BigInt(100 - promo.percent)) / 100n;
  const off = parseDecimal(promo.amount_rub!, 2, 'amount_rub');
  return off >= price ? 0n : price - off;
}

export interface CreatePromocode {
  code: string;
  percent?: number | null;
  amountRub?: string | null;
  maxUses?: number | null;
  expiresAt?: Date | null;
}

export async function createPromocode(db: Database, p: CreatePromocode): Promise<{ code: string }> {
  const code = normalizeCode(p.code);
  if (!/^[A-Z0-9_-]{1,64}$/.test(code)) {
    throw new ApiError('invalid_request', 'code must be 1-64 letters, digits, "_" or "-".');
  }
  const hasPercent = p.percent !== undefined && p.percent !== null;
  const hasAmount = p.amountRub !== undefined && p.amountRub !== null;
  if (hasPercent === hasAmount) throw new ApiError('invalid_request', 'Give exactly one of percent or amount_rub.');
  if (hasPercent && !(Number.isInteger(p.percent) && p.percent! >= 1 && p.percent! <= 100)) {
    throw new ApiError('invalid_request', 'percent must be an integer from 1 to 100.');
  }
  let amount: string | null = null;
  if (hasAmount) {
    let kopecks: bigint;
    try {
      kopecks = parseDecimal(p.amountRub!, 2, 'amount_rub');
    } catch (e) {
      throw new ApiError('invalid_request', (e as Error).message);
    }
    if (kopecks <= 0n) throw new ApiError('invalid_request', 'amount_rub must be positive.');
    amount = centsToString(kopecks);
  }
  if (p.maxUses !== undefined && p.maxUses !== null && !(Number.isInteger(p.maxUses) && p.maxUses >= 1)) {
    throw new ApiError('invalid_request', 'max_uses must be a positive integer.');
  }
  if (p.expiresAt && Number.isNaN(p.expiresAt.getTime())) throw new ApiError('invalid_request', 'expires must be an ISO 8601 time.');
  const rows = await db.query(
    `insert into promocode (code, percent, amount_rub, max_uses, expires_at) values (?, ?, ?, ?, ?)
     on conflict (code) do nothing returning code`,
    [code, hasPercent ? p.percent : null, amount, p.maxUses ?? null, p.expiresAt ?? null],
  );
  if (rows.length === 0) throw new ApiError('invalid_request', `Promocode ${code} already exists.`);
  return { code };
}
