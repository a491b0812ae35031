// The buy page's pure parts (panel/src/pages/buy/purchase.ts): money in integer cents, the API's refusals
// mapped to the field they concern, and one idempotency key per purchase attempt. Refusal messages come
// from the gateway's own validation where it can run without a database, so a reworded server message
// that the panel would no longer place at its field fails here.
import { describe, expect, it } from 'vitest';
import { PurchaseAttempt, balanceAfterCents, missingCents, purchaseRefusal, refusedAmounts, toCents } from '../../panel/src/pages/buy/purchase.ts';
import { ApiError } from '../../server/domain/errors.ts';
import { centsToString } from '../../server/domain/money.ts';
import { refuseIfOurs, validatePurchase } from '../../server/domain/tunnels/input.ts';

/** The ApiError the gateway throws for `fn`, as the panel receives it (code and message). */
function refusalOf(fn: () => unknown): { code: string; message: string } {
  try {
    fn();
  } catch (e) {
    if (e instanceof ApiError) return { code: e.code, message: e.message };
    throw e;
  }
  throw new Error('expected the gateway to refuse');
}

const shown = { priceUsd: 1.11, balanceUsd: 0.2 };
const ORIGIN = '93.184.216.34'; // public unicast (the documentation ranges are refused as reserved)

describe('money in cents', () => {
  it('reads API amounts as whole cents, floats that miss by an ulp included', () => {
    expect(toCents(1.11)).toBe(111);
    expect(toCents(0.07)).toBe(7);
    expect(toCents(0.1 + 0.2)).toBe(30);
    expect(toCents(12345678.91)).toBe(1234567891);
  });

  it('computes the missing amount exactly where float subtraction does not', () => {
    // 1.15 - 0.05 is 1.0999999999999999 in floating point: cut to the cent, that would say 1.09.
    expect(1.15 - 0.05).not.toBe(1.1);
    expect(Math.floor((1.15 - 0.05) * 100)).toBe(109);
    expect(missingCents(1.15, 0.05)).toBe(110);
    expect(missingCents(0.3, 0.1)).toBe(20);
    expect(missingCents(1.11, 0.1)).toBe(101);
    expect(missingCents(1.11, 0.2)).toBe(91);
    expect(missingCents(1.11, 1.11)).toBe(0);
    expect(missingCents(1.11, 10)).toBe(0);
  });

  it('computes the balance after the purchase, negative when it does not suffice', () => {
    expect(balanceAfterCents(10, 1.11)).toBe(889);
    expect(balanceAfterCents(0.3, 0.1)).toBe(20);
    expect(balanceAfterCents(0.2, 1.11)).toBe(-91);
  });

  it('reads the amounts of an insufficient_balance message without floats', () => {
    // server/domain/tunnels/purchase.ts phrases the refusal with centsToString.
    const message = `The price is ${centsToString(56n)} USD and the balance is ${centsToString(7n)} USD; nothing was charged.`;
    expect(refusedAmounts(message)).toEqual({ priceCents: 56, balanceCents: 7 });
    expect(refusedAmounts(`The price is ${centsToString(123456n)} USD and the balance is ${centsToString(0n)} USD; nothing was charged.`)).toEqual({ priceCents: 123456, balanceCents: 0 });
    expect(refusedAmounts('Something else.')).toBeNull();
  });
});

describe('refusals of a purchase, at their field', () => {
  it('insufficient_balance: at the price, with the amount missing from the message (a promocode lowers the price)', () => {
    const message = `The price is ${centsToString(56n)} USD and the balance is ${centsToString(20n)} USD; nothing was charged.`;
    expect(purchaseRefusal('insufficient_balance', message, shown)).toEqual({ field: 'price', key: 'buy.error.insufficientBalance', missingCents: 36 });
  });

  it('insufficient_balance without amounts in its message: the shown price minus the shown balance', () => {
    expect(purchaseRefusal('insufficient_balance', 'Not enough.', { priceUsd: 1.15, balanceUsd: 0.05 })).toMatchObject({ field: 'price', missingCents: 110 });
  });

  it('out_of_stock: for the whole form', () => {
    expect(purchaseRefusal('out_of_stock', 'No protected IP is free right now; nothing was charged.', shown)).toEqual({ field: 'form', key: 'buy.error.outOfStock' });
  });

  it('an origin that is one of our own addresses: at the origin, saying so', () => {
    const r = refusalOf(() => refuseIfOurs('203.0.113.9', 'a protected IP of ours'));
    expect(r.code).toBe('invalid_origin_ip');
    expect(purchaseRefusal(r.code, r.message, shown)).toEqual({ field: 'originIp', key: 'tunnel.origin.error.ours' });
    const edge = refusalOf(() => refuseIfOurs('192.0.2.1', "an edge router's address"));
    expect(purchaseRefusal(edge.code, edge.message, shown)).toEqual({ field: 'originIp', key: 'tunnel.origin.error.ours' });
  });

  it.each([['10.0.0.1'], ['192.168.1.1'], ['127.0.0.1'], ['224.0.0.1']])('a private or reserved origin (%s): at the origin', (ip) => {
    const r = refusalOf(() => validatePurchase({ origin_ip: ip }, false));
    expect(purchaseRefusal(r.code, r.message, shown)).toEqual({ field: 'originIp', key: 'tunnel.origin.error.private' });
  });

  it.each([['abc'], ['1.2.3'], ['300.1.1.1']])('an origin that is no IPv4 address (%s): at the origin', (ip) => {
    const r = refusalOf(() => validatePurchase({ origin_ip: ip }, false));
    expect(purchaseRefusal(r.code, r.message, shown)).toEqual({ field: 'originIp', key: 'tunnel.origin.error.invalid' });
  });

  it('a missing origin: at the origin', () => {
    const r = refusalOf(() => validatePurchase({}, false));
    expect(r.code).toBe('invalid_request');
    expect(purchaseRefusal(r.code, r.message, shown)).toEqual({ field: 'originIp', key: 'tunnel.origin.error.missing' });
  });

  it('invalid_promocode: at the promocode, telling unknown, expired and used up apart', () => {
    const malformed = refusalOf(() => validatePurchase({ origin_ip: ORIGIN, promocode: 'no such code!' }, false));
    expect(purchaseRefusal(malformed.code, malformed.message, shown)).toEqual({ field: 'promocode', key: 'buy.error.promocodeUnknown' });
    // server/domain/tunnels/purchase.ts's messages for a code looked up in the database.
    expect(purchaseRefusal('invalid_promocode', 'Unknown promocode "SPRING".', shown)).toEqual({ field: 'promocode', key: 'buy.error.promocodeUnknown' });
    expect(purchaseRefusal('invalid_promocode', 'Promocode SPRING has expired.', shown)).toEqual({ field: 'promocode', key: 'buy.error.promocodeExpired' });
    expect(purchaseRefusal('invalid_promocode', 'Promocode SPRING has been used up.', shown)).toEqual({ field: 'promocode', key: 'buy.error.promocodeUsedUp' });
  });

  it('bad ports: at the ports, naming the item refused, or saying there are too many', () => {
    const item = refusalOf(() => validatePurchase({ origin_ip: ORIGIN, ports: '80,70000' }, false));
    expect(purchaseRefusal(item.code, item.message, shown)).toEqual({ field: 'ports', key: 'tunnel.settings.error.portsItem', params: { item: '70000' } });
    const many = refusalOf(() => validatePurchase({ origin_ip: ORIGIN, ports: Array.from({ length: 33 }, (_, i) => 1000 + i).join(',') }, false));
    expect(purchaseRefusal(many.code, many.message, shown)).toEqual({ field: 'ports', key: 'tunnel.settings.error.portsTooMany' });
    const notText = refusalOf(() => validatePurchase({ origin_ip: ORIGIN, ports: 80 }, false));
    expect(purchaseRefusal(notText.code, notText.message, shown)).toEqual({ field: 'ports', key: 'tunnel.settings.error.ports' });
  });

  it('a bad protocol or packet limit: at its field', () => {
    const protocol = refusalOf(() => validatePurchase({ origin_ip: ORIGIN, protocol: 'icmp' }, false));
    expect(purchaseRefusal(protocol.code, protocol.message, shown)).toEqual({ field: 'protocol', key: 'tunnel.settings.error.protocol' });
    const pps = refusalOf(() => validatePurchase({ origin_ip: ORIGIN, protection: { source_pps_limit: 5 } }, false));
    expect(purchaseRefusal(pps.code, pps.message, shown)).toEqual({ field: 'sourcePpsLimit', key: 'tunnel.settings.error.pps' });
    // GraphQL's own coercion error names the input path.
    const coerced = 'Variable "$input" got invalid value 1e+21 at "input.protection.sourcePpsLimit"; Int cannot represent non 32-bit signed integer value: 1e+21';
    expect(purchaseRefusal('invalid_request', coerced, shown)).toMatchObject({ field: 'sourcePpsLimit' });
  });

  it('a bad name: at the name', () => {
    const r = refusalOf(() => validatePurchase({ origin_ip: ORIGIN, name: 'x'.repeat(101) }, false));
    expect(purchaseRefusal(r.code, r.message, shown)).toEqual({ field: 'name', key: 'tunnel.name.error' });
  });

  it('anything else: for the whole form, with the API message', () => {
    expect(purchaseRefusal('server_error', 'boom', shown)).toEqual({ field: 'form', key: 'buy.error.other', params: { message: 'boom' } });
    expect(purchaseRefusal('network_error', 'Failed to fetch', shown)).toEqual({ field: 'form', key: 'buy.error.network' });
    expect(purchaseRefusal('rate_limited', 'slow down', shown)).toEqual({ field: 'form', key: 'buy.error.rateLimited' });
  });
});

describe('the idempotency key of a purchase attempt', () => {
  const counter = () => {
    let n = 0;
    return () => `key-${++n}`;
  };
  const input = { originIp: ORIGIN, ports: '*', protocol: 'both' };

  it('is the same for every send of the same input (a double click, a retry after a refusal or a lost answer)', () => {
    const attempt = new PurchaseAttempt(counter());
    expect(attempt.keyFor(input)).toBe('key-1');
    expect(attempt.keyFor({ ...input })).toBe('key-1');
    expect(attempt.keyFor(input)).toBe('key-1');
  });

  it('is new once the input changed, and stays for that input', () => {
    const attempt = new PurchaseAttempt(counter());
    expect(attempt.keyFor(input)).toBe('key-1');
    expect(attempt.keyFor({ ...input, promocode: 'SPRING' })).toBe('key-2');
    expect(attempt.keyFor({ ...input, promocode: 'SPRING' })).toBe('key-2');
    // Back to the first input: another attempt (the first one's key asked for other input since).
    expect(attempt.keyFor(input)).toBe('key-3');
  });

  it('is accepted by the gateway as an Idempotency-Key when it is a UUID', async () => {
    const { validateIdempotencyKey } = await import('../../server/domain/tunnels/input.ts');
    const key = new PurchaseAttempt(() => crypto.randomUUID()).keyFor(input);
    expect(validateIdempotencyKey(key)).toBe(key);
  });
});
