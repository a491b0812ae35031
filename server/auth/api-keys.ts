// svc_ API keys: `svc_<32 hex id>_<43 base64url secret>`. The id finds the row; only SHA-256 of the
// 256-bit secret is stored (a slow KDF adds nothing to a random 256-bit secret and would cost every
// request), and the comparison is constant-time.
import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { isUuid } from '../../common/names.ts';
import type { Database } from '../db/database.ts';
import type { Permission } from '../db/entities.ts';
import { Coalescer } from '../db/coalesce.ts';
import { ApiError } from '../domain/errors.ts';
import { disableWebhooksOf } from '../webhooks/revocation.ts';
import type { Principal } from './principal.ts';

const KEY_RE = /^svc_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$/;
/** last_used_at is written at most this often per key, so reads stay reads. */
const LAST_USED_GRANULARITY_MS = 60_000;

const sha256 = (s: string) => createHash('sha256').update(s).digest();

export async function createApiKey(db: Database, accountId: string, userId: string | null, permission: Permission): Promise<{ id: string; key: string }> {
  const id = randomUUID();
  const secret = randomBytes(32).toString('base64url');
  await db.query('insert into api_key (id, account_id, user_id, secret_hash, permission) values (?, ?, ?, ?, ?)', [
    id,
    accountId,
    userId,
    sha256(secret).toString('hex'),
    permission,
  ]);
  return { id, key: `svc_${id.replace(/-/g, '')}_${secret}` };
}

export async function revokeApiKey(db: Database, id: string): Promise<boolean> {
  if (!isUuid(id)) return false;
  // Every authentication reads the key's row (ApiKeyVerifier), so once this commits the key is refused
  // by every gateway: nothing to tell them. The webhooks the key registered are disabled in the same
  // transaction (server/webhooks/revocation.ts): none outlives the key.
  return db.transaction(async (sql) => {
    const rows = await sql.query('update api_key set revoked_at = coalesce(revoked_at, now()) where id = ? returning id', [id.toLowerCase()]);
    if (rows.length === 0) return false;
    await disableWebhooksOf(sql, { apiKey: id.toLowerCase() });
    return true;
  });
}

const invalid = () => new ApiError('invalid_token', 'The API key is malformed, unknown or revoked.', { 'WWW-Authenticate': 'Bearer error="invalid_token"' });

interface KeyRow {
  account_id: string;
  user_id: string | null;
  secret_hash: string;
  permission: Permission;
  revoked: boolean;
  stale: boolean;
}

/**
 * Verifies keys against their rows, read afresh for every request: a key revoked on any replica (or by
 * the admin CLI) is refused by every gateway from the moment the revocation commits, whatever the state
 * of NOTIFY delivery (a revoked key must stop working at once; a cache of verified keys used to keep a revoked key working for up to
 * 5 s, longer on a replica that missed the notice). The read is a prepared statement by primary key, and
 * concurrent requests share it: lookups made while one is in flight leave together as the next batch,
 * one round trip for all of them (server/db/coalesce.ts). Each lookup is still answered by a statement
 * sent after it was made, so it sees every revocation committed before the request arrived.
 */
export class ApiKeyVerifier {
  private readonly rows: Coalescer<string, KeyRow | undefined>;

  constructor(private readonly db: Database) {
    this.rows = new Coalescer((ids) => readKeyRows(db, ids), 2);
  }

  verify(token: string): Promise<Principal> {
    return authenticateApiKey(this.db, token, (id) => this.rows.call(id));
  }
}

const KEY_COLUMNS = `select k.account_id, k.user_id, k.secret_hash, k.permission, k.revoked_at is not null as revoked,
       (k.last_used_at is null or k.last_used_at < now() - ? * interval '1 millisecond') as stale`;

/** The rows of these key ids, one result per id in order (undefined when there is none); one statement. */
async function readKeyRows(db: Database, ids: string[]): Promise<Array<KeyRow | undefined>> {
  // The embedded database has one session and no round trips to save (and its driver would spread an
  // array parameter into a list): one plain statement per key.
  if (!db.url) return Promise.all(ids.map(async (id) => (await db.query<KeyRow>(`${KEY_COLUMNS} from api_key k where k.id = ?`, [LAST_USED_GRANULARITY_MS, id]))[0]));
  const rows = await db.hot<KeyRow & { n: string }>(
    'api_key_auth_batch',
    `${KEY_COLUMNS.replace('select ', 'select i.n, ')} from unnest(?::uuid[]) with ordinality as i(id, n) join api_key k on k.id = i.id`,
    [LAST_USED_GRANULARITY_MS, ids],
  );
  const out = new Array<KeyRow | undefined>(ids.length).fill(undefined);
  for (const r of rows) out[Number(r.n) - 1] = r;
  return out;
}

/** The id of a well-formed `svc_` key (a UUID as its row stores it), or null; nothing is verified. */
export function keyIdOf(token: string): string | null {
  const m = KEY_RE.exec(token);
  if (!m) return null;
  const hex = m[1]!;
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** Checks a `svc_` key against its row (read by `read`, one statement per key by default). */
export async function authenticateApiKey(db: Database, token: string, read: (id: string) => Promise<KeyRow | undefined> = async (id) => (await readKeyRows(db, [id]))[0]): Promise<Principal> {
  const m = KEY_RE.exec(token);
  const id = keyIdOf(token);
  if (!m || id === null) throw invalid();
  const row = await read(id);
  // Hash even when the row is missing so timing does not tell unknown ids from wrong secrets.
  const given = sha256(m[2]!);
  const stored = row ? Buffer.from(row.secret_hash, 'hex') : Buffer.alloc(32);
  const ok = timingSafeEqual(given, stored) && !!row && !row.revoked;
  if (!ok || !row) throw invalid();
  if (row.stale) {
    // Bookkeeping only: a failure here must not fail the caller's request.
    db.query('update api_key set last_used_at = now() where id = ?', [id]).catch(() => {});
  }
  return { accountId: row.account_id, userId: row.user_id, permission: row.permission, credential: { kind: 'api_key', id } };
}
