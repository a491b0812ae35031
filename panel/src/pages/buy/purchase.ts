// The buy page's arithmetic and decisions, apart from its markup: money in integer cents, the API's
// refusals of a purchase mapped to the field they concern, and the idempotency key of a purchase attempt.
// Pure: no DOM, no preact, no i18n runtime (test/unit/panel-buy.test.ts imports it directly).
import { nameRefusal, originRefusal, settingsRefusal, type FieldRefusal, type SettingsField } from '../tunnel/protection.ts';

/**
 * USD cents of an amount the API answered. GraphQL carries money as Float, but every USD amount is
 * rounded to the cent by the API (docs/API.md "Money"), so the nearest whole number of cents is exact;
 * all arithmetic after this is on integers.
 */
export function toCents(usd: number): number {
  return Math.round(usd * 100);
}

/** What a purchase leaves: the balance after paying `priceUsd`, in cents (negative when it does not suffice). */
export function balanceAfterCents(balanceUsd: number, priceUsd: number): number {
  return toCents(balanceUsd) - toCents(priceUsd);
}

/** How much is missing to pay `priceUsd` from `balanceUsd`, in cents; 0 when the balance suffices. */
export function missingCents(priceUsd: number, balanceUsd: number): number {
  return Math.max(0, toCents(priceUsd) - toCents(balanceUsd));
}

/**
 * The amounts of an insufficient_balance refusal, from its message ("The price is 0.56 USD and the balance
 * is 0.20 USD; nothing was charged.", server/domain/tunnels/purchase.ts). With a promocode, the price
 * refused is the discounted one, which the pricing query cannot know; null when the message has no amounts.
 */
export function refusedAmounts(message: string): { priceCents: number; balanceCents: number } | null {
  const m = /price is (-?\d+(?:\.\d{1,2})?) USD and the balance is (-?\d+(?:\.\d{1,2})?) USD/.exec(message);
  if (!m) return null;
  return { priceCents: decimalToCents(m[1]!), balanceCents: decimalToCents(m[2]!) };
}

/** "12.3" -> 1230, without passing through a float. */
function decimalToCents(text: string): number {
  const negative = text.startsWith('-');
  const [whole, fraction = ''] = text.replace('-', '').split('.');
  const cents = Number(whole) * 100 + Number(fraction.padEnd(2, '0'));
  return negative ? -cents : cents;
}

export type BuyField = 'name' | 'originIp' | 'promocode' | 'price' | 'form' | SettingsField;

export interface BuyRefusal extends FieldRefusal<BuyField> {
  /** For insufficient_balance: what is missing, in USD cents. */
  missingCents?: number;
}

/**
 * A refusal of purchaseTunnel in plain words at the field it concerns. `code` and `message` are the
 * API's (server/domain/tunnels/input.ts and purchase.ts phrase them); `priceUsd` and `balanceUsd` are what
 * the page showed, the fallback for the missing amount when the message does not carry it.
 */
export function purchaseRefusal(code: string, message: string, shown: { priceUsd: number; balanceUsd: number }): BuyRefusal {
  switch (code) {
    case 'insufficient_balance': {
      const refused = refusedAmounts(message);
      const missing = refused ? Math.max(0, refused.priceCents - refused.balanceCents) : missingCents(shown.priceUsd, shown.balanceUsd);
      return { field: 'price', key: 'buy.error.insufficientBalance', missingCents: missing };
    }
    case 'out_of_stock':
      return { field: 'form', key: 'buy.error.outOfStock' };
    case 'invalid_promocode':
      if (/expired/.test(message)) return { field: 'promocode', key: 'buy.error.promocodeExpired' };
      if (/used up/.test(message)) return { field: 'promocode', key: 'buy.error.promocodeUsedUp' };
      return { field: 'promocode', key: 'buy.error.promocodeUnknown' };
    case 'invalid_origin_ip':
      return originRefusal(code, message)!;
    case 'invalid_request': {
      const refused = originRefusal(code, message) ?? nameRefusal(message) ?? settingsRefusal(message);
      if (refused) return refused;
      return { field: 'form', key: 'buy.error.request', params: { message } };
    }
    case 'rate_limited':
      return { field: 'form', key: 'buy.error.rateLimited' };
    case 'network_error':
      return { field: 'form', key: 'buy.error.network' };
    default:
      return { field: 'form', key: 'buy.error.other', params: { message } };
  }
}

/**
 * One idempotency key per purchase attempt: the same input sent again (a double click, a retry after a
 * lost answer or a refusal) carries the same key, so the API replays the purchase instead of charging a
 * second time (docs/API.md "Idempotency"); other input is another purchase and gets a new key.
 */
export class PurchaseAttempt {
  private fingerprint: string | undefined;
  private key: string | undefined;

  constructor(private readonly newKey: () => string) {}

  /** The key for sending `input` now. */
  keyFor(input: unknown): string {
    const fingerprint = JSON.stringify(input);
    if (this.key === undefined || fingerprint !== this.fingerprint) {
      this.fingerprint = fingerprint;
      this.key = this.newKey();
    }
    return this.key;
  }
}
