// Exact money. USD lives in code as a bigint of cents and in PostgreSQL as numeric(14,2); RUB amounts
// as bigint kopecks; the USD/RUB rate as a bigint scaled by 10^4. A JS number appears only at the
// JSON boundary (`centsToNumber`), never in arithmetic.
const RATE_SCALE = 10_000n;
const MAX_CENTS = 10n ** 14n - 1n; // numeric(14,2) holds at most 999,999,999,999.99

export class MoneyError extends Error {
  override name = 'MoneyError';
}

/** Parses a decimal string such as "12", "12.3" or "12.34" (at most `scale` decimals) into units of 10^-scale. */
export function parseDecimal(input: string | number, scale: number, what: string): bigint {
  const text = typeof input === 'number' ? numberToPlainString(input) : input.trim();
  const m = /^(-)?(\d{1,15})(?:\.(\d+))?$/.exec(text);
  if (!m) throw new MoneyError(`${what} must be a decimal number, got ${JSON.stringify(String(input))}`);
  const frac = m[3] ?? '';
  if (frac.length > scale) throw new MoneyError(`${what} has more than ${scale} decimal places: ${text}`);
  const units = BigInt(m[2]!) * 10n ** BigInt(scale) + BigInt((frac + '0'.repeat(scale)).slice(0, scale) || '0');
  return m[1] ? -units : units;
}

function numberToPlainString(n: number): string {
  if (!Number.isFinite(n)) throw new MoneyError(`not a finite number: ${n}`);
  // Numbers arriving from JSON (e.g. an admin typing 12.34) have a shortest round-trip form; use it.
  const s = String(n);
  if (/e/i.test(s)) throw new MoneyError(`number out of range: ${s}`);
  return s;
}

export function parseUsd(input: string | number, what = 'amount'): bigint {
  const cents = parseDecimal(input, 2, what);
  if (cents > MAX_CENTS || cents < -MAX_CENTS) throw new MoneyError(`${what} is too large`);
  return cents;
}

/** numeric(14,2) text from PostgreSQL ("12.30") -> cents. */
export const dbToCents = (text: string): bigint => parseDecimal(text, 2, 'stored amount');

/** cents -> "12.30", for SQL parameters and the CLI. */
export function centsToString(cents: bigint): string {
  const neg = cents < 0n;
  const abs = neg ? -cents : cents;
  const s = `${abs / 100n}.${(abs % 100n).toString().padStart(2, '0')}`;
  return neg ? `-${s}` : s;
}

/** cents -> JSON number (12.3 for 1230n). Exact: every cent value below 2^53 has a shortest decimal form. */
export const centsToNumber = (cents: bigint): number => Number(centsToString(cents));

/** The rate as text ("92.5", up to 4 decimals) -> rate * 10^4. */
export function parseRate(input: string | number): bigint {
  const r = parseDecimal(input, 4, 'usd_rub_rate');
  if (r <= 0n) throw new MoneyError('usd_rub_rate must be positive');
  if (r > 1_000_000n * RATE_SCALE) throw new MoneyError('usd_rub_rate is implausibly large');
  return r;
}

export function rateToNumber(rate: bigint): number {
  const whole = rate / RATE_SCALE;
  const frac = (rate % RATE_SCALE).toString().padStart(4, '0').replace(/0+$/, '');
  return Number(frac ? `${whole}.${frac}` : `${whole}`);
}

/**
 * RUB (kopecks) -> USD cents at `rate` (RUB per USD, scaled by 10^4), rounded half up to the cent.
 * cents = kopecks / 100 / (rate / 10^4) * 100 = kopecks * 10^4 / rate.
 */
export function rubToUsdCents(kopecks: bigint, rate: bigint): bigint {
  if (kopecks < 0n) throw new MoneyError('negative RUB amount');
  const num = kopecks * RATE_SCALE;
  return (2n * num + rate) / (2n * rate);
}

export const kopecksToNumber = centsToNumber;
