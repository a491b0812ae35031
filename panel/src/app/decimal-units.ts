// One rule for every scaled figure the panel shows (bytes, packets and bits a second): decimal steps of 1000,
// because traffic and link speeds are counted in decimal units. Pure: the caller brings the number format
// and the unit names in the reader's language.

/**
 * `n` in the largest unit (steps of 1000) that keeps it at 1 or more, with one decimal under 10 and none above;
 * `units` are the unit names, smallest first.
 */
export function inDecimalUnits(n: number, format: (n: number, digits?: number) => string, units: readonly string[]): string {
  let value = Math.abs(n);
  let unit = 0;
  while (value >= 999.5 && unit < units.length - 1) {
    value /= 1000;
    unit++;
  }
  // Under 999.5 the value never rounds up to "1000" of a unit; under 9.95 never to "10.0".
  const digits = unit === 0 || value >= 9.95 ? 0 : 1;
  return `${n < 0 ? '-' : ''}${format(value, digits)}\u00a0${units[unit]}`;
}
