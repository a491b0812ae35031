// Money, amounts and rates as the user reads them. The API's amounts are exact decimals; the panel only shows them.
import { formatNumber, t } from '../i18n/index.ts';
import type { MessageKey } from '../i18n/en.ts';
import { inDecimalUnits } from './decimal-units.ts';

export const usd = (amount: number) => t('money.usd', { amount: formatNumber(amount, 2) });
export const rub = (amount: number) => t('money.rub', { amount: formatNumber(amount, 2) });

/**
 * `n` in the largest decimal unit (steps of 1000) that keeps it at 1 or more, with one decimal under 10 and
 * none above; `unitsKey` names the units, smallest first, comma-separated, in the reader's language.
 */
function scaled(n: number, unitsKey: MessageKey): string {
  return inDecimalUnits(n, formatNumber, t(unitsKey).split(','));
}

/** Packets per second: 950 pps, 1.2 kpps, 35 Mpps. */
export const packetRate = (pps: number) => scaled(pps, 'rate.pps.units');
/** Bits per second, decimal (link speeds are): 800 bit/s, 1.2 Mbit/s, 40 Gbit/s. */
export const bitRate = (bps: number) => scaled(bps, 'rate.bps.units');
