// Accounts, their users and their balance. Every balance change writes a ledger row in the same
// transaction, so the ledger always sums to the balance.
import { randomUUID } from 'node:crypto';
import type { Database } from '../db/database.ts';
import { ROLES, type Role } from '../db/entities.ts';
import { hashPassword, validatePassword } from '../auth/passwords.ts';
import { ApiError } from './errors.ts';
import { centsToNumber, centsToString, dbToCents, MoneyError, parseUsd } from './money.ts';

export interface CreateUser {
  email: string;
  name: string;
  password: string;
  balanceUsd?: string | null;
  role?: string | null;
  picture?: string | null;
}

const EMAIL_RE = /^[^\s@]{1,64}@[^\s@]{1,255}$/;

function usd(text: string, what: string): bigint {
  try {
    return parseUsd(text, what);
  } catch (e) {
    if (e instanceof MoneyError) throw new ApiError('invalid_request', e.message);
    throw e;
  }
}

export async function createUser(db: Database, u: CreateUser): Promise<{ user_id: string; account_id: string }> {
  const email = u.email.trim().toLowerCase();
  if (!EMAIL_RE.test(email)) throw new ApiError('invalid_request', `not an email address: ${JSON.stringify(u.email)}`);
  const name = u.name.trim();
  if (!name || name.length > 200) throw new ApiError('invalid_request', 'name must be 1-200 characters.');
  const pwErr = validatePassword(u.password);
  if (pwErr) throw new ApiError('invalid_request', pwErr);
  const role = (u.role ?? 'owner') as Role;
  if (!ROLES.includes(role)) throw new ApiError('invalid_request', `role must be one of ${ROLES.join(', ')}.`);
  if (u.picture) {
    let ok = false;
    try {
      ok = ['http:', 'https:'].includes(new URL(u.picture).protocol);
    } catch {
      ok = false;
    }
    if (!ok || u.picture.length > 2048) throw new ApiError('invalid_request', 'picture must be an absolute http(s) URL.');
  }
  const balance = u.balanceUsd === undefined || u.balanceUsd === null ? 0n : usd(u.balanceUsd, 'balance-usd');
  if (balance < 0n) throw new ApiError('invalid_request', 'balance-usd must not be negative.');
  const passwordHash = await hashPassword(u.password);
  const accountId = randomUUID();
  const userId = randomUUID();
  await db.transaction(async (sql) => {
    const taken = await sql.query('select 1 from app_user where email = ?', [email]);
    if (taken.length) throw new ApiError('invalid_request', `a user with email ${email} already exists.`);
    await sql.query('insert into account (id, balance_usd) values (?, ?)', [accountId, centsToString(balance)]);
    if (balance > 0n) {
      await sql.query(`insert into ledger_entry (account_id, amount_usd, balance_after, kind) values (?, ?, ?, 'topup')`, [
        accountId,
        centsToString(balance),
        centsToString(balance),
      ]);
    }
    await sql.query('insert into app_user (id, account_id, email, name, picture, password_hash, role) values (?, ?, ?, ?, ?, ?, ?)', [
      userId,
      accountId,
      email,
      name,
      u.picture ?? null,
      passwordHash,
      role,
    ]);
  });
  return { user_id: userId, account_id: accountId };
}

export async function findUserByEmail(db: Database, email: string): Promise<{ id: string; account_id: string } | null> {
  const [row] = await db.query<{ id: string; account_id: string }>('select id, account_id from app_user where email = ?', [email.trim().toLowerCase()]);
  return row ?? null;
}

/** Credits (or, with a negative amount, debits) an account; refuses to go below zero. */
export async function addBalance(db: Database, email: string, amountText: string): Promise<{ balance: number }> {
  const amount = usd(amountText, 'usd');
  if (amount === 0n) throw new ApiError('invalid_request', 'usd must not be zero.');
  const user = await findUserByEmail(db, email);
  if (!user) throw new ApiError('not_found', `no user with email ${email}`);
  return db.transaction(async (sql) => {
    const [acc] = await sql.query<{ balance_usd: string }>('select balance_usd from account where id = ? for update', [user.account_id]);
    const next = dbToCents(acc!.balance_usd) + amount;
    if (next < 0n) throw new ApiError('invalid_request', `the balance would become negative (${centsToString(next)} USD).`);
    await sql.query('update account set balance_usd = ? where id = ?', [centsToString(next), user.account_id]);
    await sql.query(`insert into ledger_entry (account_id, amount_usd, balance_after, kind) values (?, ?, ?, 'topup')`, [
      user.account_id,
      centsToString(amount),
      centsToString(next),
    ]);
    return { balance: centsToNumber(next) };
  });
}

export interface AccountView {
  account_id: string;
  user_id: string | null;
  email: string | null;
  name: string | null;
  role: Role | null;
  balance_usd: number;
}

export async function getAccount(db: Database, accountId: string, userId: string | null): Promise<AccountView> {
  const [row] = await db.query<{ balance_usd: string; email: string | null; name: string | null; role: Role | null }>(
    `select a.balance_usd, u.email, u.name, u.role from account a left join app_user u on u.id = ? and u.account_id = a.id where a.id = ?`,
    [userId, accountId],
  );
  // REST adds the WWW-Authenticate challenge to every invalid_token (server/http/app.ts).
  if (!row) throw new ApiError('invalid_token', 'The account of this credential no longer exists.');
  return { account_id: accountId, user_id: userId, email: row.email, name: row.name, role: row.role, balance_usd: centsToNumber(dbToCents(row.balance_usd)) };
}
