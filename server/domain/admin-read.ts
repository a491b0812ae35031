// The operator's read views (docs/CONTRACTS.md "Admin CLI", read commands): users, tunnels, ledger, promocodes and API
// keys across every account, as the admin CLI prints them. No HTTP here; the CLI adapters are in
// server/cli/read-commands.ts.
//
// Every list is `{items, next_cursor}`, newest first, paged by keyset (a page never skips or repeats a
// row when others are added meanwhile). Cursors are opaque: base64url of the command's tag and the last
// row's key, refused (`invalid_request`) when they were not printed by the same list. Money is a JSON
// number like the REST API (money.ts, docs/CONTRACTS.md "REST shapes"). Secrets never appear: no password hash, no key hash,
// no avatar key; only the columns named below are ever selected.
import { isUuid } from '../../common/names.ts';
import type { Database } from '../db/database.ts';
import type { Permission, Role, TunnelStatus } from '../db/entities.ts';
import { ApiError } from './errors.ts';
import { centsToNumber, dbToCents } from './money.ts';
import type { Health } from '../../common/tunnel-status.ts';
import { HEALTH_CHECKED_AT_SQL, shownHealth } from './tunnels/rows.ts';
import { settingsOf, type SettingsColumns, type TunnelSettings } from './tunnels/settings.ts';
import { SETTINGS_COLUMNS } from './tunnels/spec.ts';

// Type aliases, not interfaces: the CLI prints them as plain JSON objects (Record<string, unknown>).
export type Page<T> = {
  items: T[];
  next_cursor: string | null;
};

export interface PageRequest {
  /** 1-1000 (checked by the caller's option parsing). */
  limit: number;
  cursor: string | null;
}

/** Microsecond UTC times as the queries below print them (`to_char(... 'US')`): exact keyset positions. */
const KEY_TIME_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
const KEY_TIME_SQL = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
const ISO_SQL = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;


function encodeCursor(tag: string, key: readonly string[]): string {
  return Buffer.from(JSON.stringify([tag, ...key]), 'utf8').toString('base64url');
}

/** The key parts of a cursor this list printed; anything else is `invalid_request`. */
function decodeCursor(tag: string, text: string, checks: readonly ((s: string) => boolean)[]): string[] {
  const bad = () => new ApiError('invalid_request', 'cursor is not one this command printed (use next_cursor of the previous page).');
  if (text.length > 512 || !/^[A-Za-z0-9_-]+$/.test(text)) throw bad();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(text, 'base64url').toString('utf8'));
  } catch {
    throw bad();
  }
  if (!Array.isArray(parsed) || parsed.length !== checks.length + 1 || parsed[0] !== tag) throw bad();
  const key = parsed.slice(1);
  if (!key.every((v, i) => typeof v === 'string' && checks[i]!(v))) throw bad();
  return key as string[];
}

/** Splits `limit + 1` rows into a page and the cursor after its last row. */
function page<R, T>(rows: R[], limit: number, view: (r: R) => T, key: (r: R) => string[], tag: string): Page<T> {
  const items = rows.slice(0, limit);
  const last = rows.length > limit ? items[items.length - 1] : undefined;
  return { items: items.map(view), next_cursor: last === undefined ? null : encodeCursor(tag, key(last)) };
}

const money = (numeric: string): number => centsToNumber(dbToCents(numeric));
const moneyOrNull = (numeric: string | null): number | null => (numeric === null ? null : money(numeric));

// ---- users ----

export type UserView = {
  id: string;
  account_id: string;
  email: string;
  name: string;
  role: Role;
  picture: string | null;
  balance_usd: number;
  created_at: string;
};

export type UserDetail = UserView & {
  /** Tunnels of the account by status (deleted ones included), e.g. `{"active": 2}`. */
  tunnels: Partial<Record<TunnelStatus, number>>;
  /** API keys of the account that are not revoked. */
  active_api_keys: number;
};

/** A user as the query reads it: the view's fields, the balance as PostgreSQL's numeric text, the page key. */
type UserRow = Omit<UserView, 'balance_usd'> & { balance_usd: string; k: string };

const USER_SELECT = `select u.id, u.account_id, u.email, u.name, u.role, u.picture, a.balance_usd,
    ${ISO_SQL('u.created_at')} as created_at, ${KEY_TIME_SQL('u.created_at')} as k
  from app_user u join account a on a.id = u.account_id`;

const userView = (r: UserRow): UserView => ({
  id: r.id,
  account_id: r.account_id,
  email: r.email,
  name: r.name,
  role: r.role,
  picture: r.picture,
  balance_usd: money(r.balance_usd),
  created_at: r.created_at,
});

export async function listUsers(db: Database, p: PageRequest): Promise<Page<UserView>> {
  const params: unknown[] = [];
  let where = '';
  if (p.cursor !== null) {
    const [k, id] = decodeCursor('user', p.cursor, [(s) => KEY_TIME_RE.test(s), isUuid]);
    where = ' where (u.created_at, u.id) < (?::timestamptz, ?::uuid)';
    params.push(k, id);
  }
  const rows = await db.query<UserRow>(`${USER_SELECT}${where} order by u.created_at desc, u.id desc limit ?`, [...params, p.limit + 1]);
  return page(rows, p.limit, userView, (r) => [r.k, r.id], 'user');
}

/** The user with this email (case-insensitive), with their account's tunnel counts and live key count. */
export async function showUser(db: Database, email: string): Promise<UserDetail> {
  const [row] = await db.query<UserRow>(`${USER_SELECT} where u.email = ?`, [email.trim().toLowerCase()]);
  if (!row) throw new ApiError('not_found', `no user with email ${email}.`);
  const counts = await db.query<{ status: TunnelStatus; n: number }>('select status, count(*)::int as n from tunnel where account_id = ? group by status order by status', [row.account_id]);
  const [keys] = await db.query<{ n: number }>('select count(*)::int as n from api_key where account_id = ? and revoked_at is null', [row.account_id]);
  const tunnels: Partial<Record<TunnelStatus, number>> = {};
  for (const c of counts) tunnels[c.status] = c.n;
  return { ...userView(row), tunnels, active_api_keys: keys?.n ?? 0 };
}

/** The account of the user with this email; `not_found` otherwise (filters name a user that must exist). */
async function accountOf(db: Database, email: string): Promise<string> {
  const [row] = await db.query<{ account_id: string }>('select account_id from app_user where email = ?', [email.trim().toLowerCase()]);
  if (!row) throw new ApiError('not_found', `no user with email ${email}.`);
  return row.account_id;
}

// ---- tunnels ----

export interface AdminTunnelView {
  id: string;
  account_id: string;
  node_id: string;
  node_name: string;
  name: string | null;
  protected_ip: string;
  origin_ip: string;
  tunnel_name: string;
  status: TunnelStatus;
  /** As the API shows them (server/domain/tunnels/rows.ts, docs/CONTRACTS.md "Health and traffic"). */
  health: Health;
  health_checked_at: string | null;
  /** ports, protocol, protection: as the API shows them (docs/CONTRACTS.md "Tunnel settings"). */
  ports: TunnelSettings['ports'];
  protocol: TunnelSettings['protocol'];
  protection: TunnelSettings['protection'];
  charged_usd: number;
  charged_rub: number;
  created_at: string;
  updated_at: string;
}

interface TunnelRow
  extends Omit<AdminTunnelView, 'charged_usd' | 'charged_rub' | keyof TunnelSettings>,
    SettingsColumns {
  charged_usd: string;
  charged_rub: string;
  k: string;
}

export interface TunnelFilter {
  email: string | null;
  status: TunnelStatus | null;
  /** A node id or name. */
  node: string | null;
}

export async function listTunnels(db: Database, f: TunnelFilter, p: PageRequest): Promise<Page<AdminTunnelView>> {
  const where: string[] = [];
  const params: unknown[] = [];
  if (f.email !== null) {
    where.push('t.account_id = ?');
    params.push(await accountOf(db, f.email));
  }
  if (f.status !== null) {
    where.push('t.status = ?');
    params.push(f.status);
  }
  if (f.node !== null) {
    const byId = isUuid(f.node);
    const [node] = await db.query<{ id: string }>(`select id from edge_node where ${byId ? 'id = ?' : 'name = ?'}`, [byId ? f.node.toLowerCase() : f.node]);
    if (!node) throw new ApiError('not_found', `no edge node ${JSON.stringify(f.node)} (give its id or name).`);
    where.push('t.node_id = ?');
    params.push(node.id);
  }
  if (p.cursor !== null) {
    const [k, id] = decodeCursor('tunnel', p.cursor, [(s) => KEY_TIME_RE.test(s), isUuid]);
    where.push('(t.created_at, t.id) < (?::timestamptz, ?::uuid)');
    params.push(k, id);
  }
  const rows = await db.query<TunnelRow>(
    `select t.id, t.account_id, t.node_id, n.name as node_name, t.name, t.protected_ip, t.origin_ip, t.tunnel_name, t.status,
            t.health, ${ISO_SQL(HEALTH_CHECKED_AT_SQL)} as health_checked_at, ${SETTINGS_COLUMNS},
            t.charged_usd, t.charged_rub, ${ISO_SQL('t.created_at')} as created_at, ${ISO_SQL('t.updated_at')} as updated_at,
            ${KEY_TIME_SQL('t.created_at')} as k
       from tunnel t join edge_node n on n.id = t.node_id
      ${where.length ? `where ${where.join(' and ')}` : ''}
      order by t.created_at desc, t.id desc limit ?`,
    [...params, p.limit + 1],
  );
  return page(
    rows,
    p.limit,
    // Keys in the order of AdminTunnelView (the order `--format table` shows its columns in).
    (r) => ({
      id: r.id,
      account_id: r.account_id,
      node_id: r.node_id,
      node_name: r.node_name,
      name: r.name,
      protected_ip: r.protected_ip,
      origin_ip: r.origin_ip,
      tunnel_name: r.tunnel_name,
      status: r.status,
      health: shownHealth(r.status, r.health),
      health_checked_at: r.health_checked_at,
      ...settingsOf(r),
      charged_usd: money(r.charged_usd),
      charged_rub: money(r.charged_rub),
      created_at: r.created_at,
      updated_at: r.updated_at,
    }),
    (r) => [r.k, r.id],
    'tunnel',
  );
}

// ---- ledger ----

export interface LedgerView {
  /** The entry's sequence number (a bigint, so a string). */
  id: string;
  kind: 'topup' | 'purchase';
  amount_usd: number;
  balance_after: number;
  tunnel_id: string | null;
  promocode: string | null;
  created_at: string;
}

interface LedgerRow extends Omit<LedgerView, 'amount_usd' | 'balance_after'> {
  amount_usd: string;
  balance_after: string;
}

/** One account's ledger, newest first; `since` keeps entries at or after that instant. */
export async function listLedger(db: Database, email: string, since: Date | null, p: PageRequest): Promise<Page<LedgerView>> {
  const params: unknown[] = [await accountOf(db, email)];
  let where = 'account_id = ?';
  if (since !== null) {
    where += ' and created_at >= ?';
    params.push(since);
  }
  if (p.cursor !== null) {
    const [id] = decodeCursor('ledger', p.cursor, [(s) => /^\d{1,19}$/.test(s)]);
    where += ' and id < ?::bigint';
    params.push(id);
  }
  const rows = await db.query<LedgerRow>(
    `select id::text as id, kind, amount_usd, balance_after, tunnel_id, promocode, ${ISO_SQL('created_at')} as created_at
       from ledger_entry where ${where} order by id desc limit ?`,
    [...params, p.limit + 1],
  );
  return page(rows, p.limit, (r) => ({ ...r, amount_usd: money(r.amount_usd), balance_after: money(r.balance_after) }), (r) => [r.id], 'ledger');
}

// ---- promocodes ----

export interface PromocodeView {
  code: string;
  percent: number | null;
  amount_rub: number | null;
  max_uses: number | null;
  uses: number;
  expires_at: string | null;
  created_at: string;
}

interface PromocodeRow extends Omit<PromocodeView, 'amount_rub'> {
  amount_rub: string | null;
  k: string;
}

export async function listPromocodes(db: Database, p: PageRequest): Promise<Page<PromocodeView>> {
  const params: unknown[] = [];
  let where = '';
  if (p.cursor !== null) {
    const [k, code] = decodeCursor('promocode', p.cursor, [(s) => KEY_TIME_RE.test(s), (s) => /^[A-Z0-9_-]{1,64}$/.test(s)]);
    where = ' where (created_at, code) < (?::timestamptz, ?)';
    params.push(k, code);
  }
  const rows = await db.query<PromocodeRow>(
    `select code, percent, amount_rub, max_uses, uses, ${ISO_SQL('expires_at')} as expires_at, ${ISO_SQL('created_at')} as created_at,
            ${KEY_TIME_SQL('created_at')} as k
       from promocode${where} order by created_at desc, code desc limit ?`,
    [...params, p.limit + 1],
  );
  return page(rows, p.limit, ({ k: _k, amount_rub, ...r }) => ({ ...r, amount_rub: moneyOrNull(amount_rub) }), (r) => [r.k, r.code], 'promocode');
}

// ---- API keys ----

export interface ApiKeyView {
  id: string;
  user_id: string | null;
  permission: Permission;
  created_at: string;
  revoked_at: string | null;
  last_used_at: string | null;
}

interface ApiKeyRow extends ApiKeyView {
  k: string;
}

/** The API keys of the user's account (revoked ones too), newest first; never their hashes. */
export async function listApiKeys(db: Database, email: string, p: PageRequest): Promise<Page<ApiKeyView>> {
  const params: unknown[] = [await accountOf(db, email)];
  let where = 'account_id = ?';
  if (p.cursor !== null) {
    const [k, id] = decodeCursor('apikey', p.cursor, [(s) => KEY_TIME_RE.test(s), isUuid]);
    where += ' and (created_at, id) < (?::timestamptz, ?::uuid)';
    params.push(k, id);
  }
  const rows = await db.query<ApiKeyRow>(
    `select id, user_id, permission, ${ISO_SQL('created_at')} as created_at, ${ISO_SQL('revoked_at')} as revoked_at,
            ${ISO_SQL('last_used_at')} as last_used_at, ${KEY_TIME_SQL('created_at')} as k
       from api_key where ${where} order by created_at desc, id desc limit ?`,
    [...params, p.limit + 1],
  );
  return page(rows, p.limit, ({ k: _k, ...r }) => r, (r) => [r.k, r.id], 'apikey');
}
