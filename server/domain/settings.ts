// Operator settings kept in the database so every replica and the CLI agree.
import type { Database, Sql } from '../db/database.ts';
import { parseRate } from './money.ts';

export const USD_RUB_RATE = 'usd_rub_rate';

export async function getRate(sql: Pick<Sql, 'query'> | Database): Promise<bigint> {
  const rows = await sql.query<{ value: string }>('select value from setting where key = ?', [USD_RUB_RATE]);
  if (!rows[0]) throw new Error('usd_rub_rate is not set (the first migration seeds it)');
  return parseRate(rows[0].value);
}

export async function setRate(db: Database, rateText: string): Promise<void> {
  parseRate(rateText);
  await db.query(
    `insert into setting (key, value, updated_at) values (?, ?, now())
     on conflict (key) do update set value = excluded.value, updated_at = now()`,
    [USD_RUB_RATE, rateText],
  );
}
