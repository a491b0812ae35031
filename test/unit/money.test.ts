import { describe, expect, it } from 'vitest';
import { centsToNumber, centsToString, MoneyError, parseRate, parseUsd, rateToNumber, rubToUsdCents } from '../../server/domain/money.ts';
import { discountedKopecks } from '../../server/domain/promocodes.ts';

describe('money', () => {
  it('parses USD exactly, refusing more than two decimals and junk', () => {
    expect(parseUsd('12.34')).toBe(1234n);
    expect(parseUsd('12.3')).toBe(1230n);
    expect(parseUsd('0.07')).toBe(7n);
    expect(parseUsd('-5')).toBe(-500n);
    expect(parseUsd(0.1 + 0.2 === 0.3 ? '0.3' : '0.30')).toBe(30n);
    for (const bad of ['1.234', 'abc', '', '1e3', '1,5', ' 1 2', 'NaN', '1000000000000000']) {
      expect(() => parseUsd(bad), bad).toThrow(MoneyError);
    }
  });

  it('formats cents without floating point drift', () => {
    expect(centsToString(1n)).toBe('0.01');
    expect(centsToString(-1234n)).toBe('-12.34');
    expect(centsToNumber(110n)).toBe(1.1);
    // 0.1 + 0.2 in floats is 0.30000000000000004; in cents it is 30.
    expect(centsToNumber(10n + 20n)).toBe(0.3);
  });

  it('converts RUB to USD rounding half up to the cent', () => {
    const r = (x: string) => parseRate(x);
    expect(rubToUsdCents(10_000n, r('90'))).toBe(111n); // 1.1111
    expect(rubToUsdCents(10_000n, r('92.5'))).toBe(108n); // 1.0810
    expect(rubToUsdCents(10_000n, r('160'))).toBe(63n); // 0.625 exactly -> up
    expect(rubToUsdCents(10_000n, r('32'))).toBe(313n); // 3.125 exactly -> up
    expect(rubToUsdCents(10_000n, r('80'))).toBe(125n);
    expect(rubToUsdCents(0n, r('80'))).toBe(0n);
    expect(rubToUsdCents(10_000n, r('0.0001'))).toBe(100_000_000n); // 1,000,000 USD
  });

  it('parses and prints rates with up to four decimals', () => {
    expect(parseRate('92.5')).toBe(925_000n);
    expect(rateToNumber(parseRate('92.5'))).toBe(92.5);
    expect(rateToNumber(parseRate('91.1234'))).toBe(91.1234);
    for (const bad of ['0', '-1', '1.23456', 'x']) expect(() => parseRate(bad), bad).toThrow(MoneyError);
  });

  it('applies promocodes in kopecks', () => {
    expect(discountedKopecks(10_000n, { percent: 15, amount_rub: null })).toBe(8_500n);
    expect(discountedKopecks(10_000n, { percent: 100, amount_rub: null })).toBe(0n);
    expect(discountedKopecks(10_000n, { percent: null, amount_rub: '30.50' })).toBe(6_950n);
    expect(discountedKopecks(10_000n, { percent: null, amount_rub: '150' })).toBe(0n);
  });
});
