// Money and amounts as the user reads them. The API's amounts are exact decimals; the panel only shows them.
import { formatNumber, t } from '../i18n/index.ts';

export const usd = (amount: number) => t('money.usd', { amount: formatNumber(amount, 2) });
export const rub = (amount: number) => t('money.rub', { amount: formatNumber(amount, 2) });
