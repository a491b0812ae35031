// Operator settings kept in the database so every replica and the CLI agree.
import type { Database } from '../db/database.ts';
import { parseRate } from './money.ts';

const USD_RUB_RATE = 'usd_rub_rate';

export async function setRate(db: Database, rateText: string): Promise<void> {
  parseRate(rateText);
  await db.query(
    `insert into setting (key, value, updated_at) values (?, ?, now())
     on conflict (key) do update set value = excluded.value, updated_at = now()`,
    [USD_RUB_RATE, rateText],
  );
}
