// An account's own ledger, as the buyer sees it (GET /api/ledger, GraphQL `ledger`): every balance
// change, newest first, a top-up or a purchase with the tunnel it bought (id and name, also once
// deleted) and the promocode it used. Keyset pages with opaque cursors, like the tunnel list: a page never
// skips or repeats an entry when others are written meanwhile. Amounts are computed in cents (money.ts)
// and leave as the REST money numbers (docs/CONTRACTS.md "REST shapes"): signed, credits positive.
import type { Database } from '../db/database.ts';
import type { Principal } from '../auth/principal.ts';
import { ApiError } from './errors.ts';
import { centsToNumber, dbToCents } from './money.ts';

export const LEDGER_DEFAULT_LIMIT = 20;
export const LEDGER_MAX_LIMIT = 100;

export interface LedgerEntryView {
  /** The entry's sequence number (a bigint, so a string). */
  id: string;
  kind: 'topup' | 'purchase';
  /** Signed USD: a top-up is positive, a purchase negative. */
  amount_usd: number;
  /** The balance right after this entry. */
  balance_after: number;
  /** The tunnel a purchase bought (null for a top-up). */
  tunnel: { id: string; name: string | null } | null;
  promocode: string | null;
  created_at: string;
}

export interface LedgerPage {
  entries: LedgerEntryView[];
  next_cursor: string | null;
}

const CURSOR_TAG = 'ledger';
const MAX_INT8 = 2n ** 63n - 1n;

function encodeCursor(id: string): string {
  return Buffer.from(JSON.stringify([CURSOR_TAG, id])).toString('base64url');
}

/** The entry id a cursor names; anything encodeCursor did not write is invalid_request. */
function decodeCursor(cursor: string): string {
  if (cursor.length <= 128 && /^[A-Za-z0-9_-]+$/.test(cursor)) {
    try {
      const v = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown;
      // Within bigint (int8), or the cast in the query would fail as a server error.
      if (Array.isArray(v) && v.length === 2 && v[0] === CURSOR_TAG && typeof v[1] === 'string' && /^[1-9]\d{0,18}$/.test(v[1]) && BigInt(v[1]) <= MAX_INT8) return v[1];
    } catch {
      // fall through
    }
  }
  throw new ApiError('invalid_request', 'cursor is not one this API issued (use next_cursor of the previous page).');
}

interface Row {
  id: string;
  kind: 'topup' | 'purchase';
  amount_usd: string;
  balance_after: string;
  tunnel_id: string | null;
  tunnel_name: string | null;
  promocode: string | null;
  created_at: string;
}

/** Read access is enough: a viewer sees the account's ledger. */
export async function listLedger(db: Database, principal: Principal, opts: { limit?: number | null; cursor?: string | null } = {}): Promise<LedgerPage> {
  const limit = opts.limit ?? LEDGER_DEFAULT_LIMIT;
  if (!Number.isInteger(limit) || limit < 1 || limit > LEDGER_MAX_LIMIT) throw new ApiError('invalid_request', `limit must be an integer from 1 to ${LEDGER_MAX_LIMIT}.`);
  const after = opts.cursor ? decodeCursor(opts.cursor) : null;
  const rows = await db.query<Row>(
    `select l.id::text as id, l.kind, l.amount_usd::text as amount_usd, l.balance_after::text as balance_after, l.tunnel_id::text as tunnel_id,
            t.name as tunnel_name, l.promocode,
            to_char(l.created_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') as created_at
       from ledger_entry l left join tunnel t on t.id = l.tunnel_id and t.account_id = l.account_id
      where l.account_id = ?${after === null ? '' : ' and l.id < ?::bigint'}
      order by l.id desc limit ?`,
    after === null ? [principal.accountId, limit + 1] : [principal.accountId, after, limit + 1],
  );
  const entries = rows.slice(0, limit).map(
    (r): LedgerEntryView => ({
      id: r.id,
      kind: r.kind,
      amount_usd: centsToNumber(dbToCents(r.amount_usd)),
      balance_after: centsToNumber(dbToCents(r.balance_after)),
      tunnel: r.tunnel_id === null ? null : { id: r.tunnel_id, name: r.tunnel_name },
      promocode: r.promocode,
      created_at: r.created_at,
    }),
  );
  return { entries, next_cursor: rows.length > limit ? encodeCursor(entries[entries.length - 1]!.id) : null };
}
