// svc_ API keys: `svc_<32 hex id>_<43 base64url secret>`. The id finds the row; only SHA-256 of the
// 256-bit secret is stored (a slow KDF adds nothing to a random 256-bit secret and would cost every
// request), and the comparison is constant-time.
import { createHash, randomBytes, randomUUID, timingSafeEqual } from 'node:crypto';
import { isUuid } from '../../common/names.ts';
import type { Database } from '../db/database.ts';
import type { Permission } from '../db/entities.ts';
import { ApiError } from '../domain/errors.ts';
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

/** Gateways drop a revoked key from their verification caches when told on this channel. */
export const REVOKED_CHANNEL = 'tunnelgate_api_key_revoked';

export async function revokeApiKey(db: Database, id: string): Promise<boolean> {
  if (!isUuid(id)) return false;
  const rows = await db.query('update api_key set revoked_at = coalesce(revoked_at, now()) where id = ? returning id', [id.toLowerCase()]);
  if (rows.length > 0) await db.notify(REVOKED_CHANNEL, id.toLowerCase());
  return rows.length > 0;
}

const invalid = () => new ApiError('invalid_token', 'The API key is malformed, unknown or revoked.', { 'WWW-Authenticate': 'Bearer error="invalid_token"' });

/**
 * Verifies keys and remembers a verified key for a few seconds, so an authenticated read costs one
 * query rather than two. A revocation reaches every gateway at once through NOTIFY (see
 * revokeApiKey); the age limit bounds staleness should that notice ever be lost.
 */
export class ApiKeyVerifier {
  private readonly cache = new Map<string, { principal: Principal; until: number; id: string }>();
  private listening: Promise<void> | null = null;

  constructor(
    private readonly db: Database,
    private readonly ttlMs = 5_000,
    private readonly maxEntries = 10_000,
  ) {}

  /** Subscribes to revocations; call once before serving. */
  start(): Promise<void> {
    this.listening ??= this.db.listen(REVOKED_CHANNEL, (id) => this.forget(id));
    return this.listening;
  }

  forget(id: string): void {
    for (const [k, v] of this.cache) if (v.id === id) this.cache.delete(k);
  }

  async verify(token: string): Promise<Principal> {
    // Keyed by a hash of the whole token: a cache hit proves the caller holds the same secret.
    const key = sha256(token).toString('base64url');
    const hit = this.cache.get(key);
    const now = Date.now();
    if (hit && hit.until > now) return hit.principal;
    const principal = await authenticateApiKey(this.db, token);
    if (this.ttlMs > 0) {
      if (this.cache.size >= this.maxEntries) this.cache.clear();
      this.cache.set(key, { principal, until: now + this.ttlMs, id: principal.credential.id });
    }
    return principal;
  }
}

export async function authenticateApiKey(db: Database, token: string): Promise<Principal> {
  const m = KEY_RE.exec(token);
  if (!m) throw invalid();
  const hex = m[1]!;
  const id = `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  const [row] = await db.hot<{ account_id: string; user_id: string | null; secret_hash: string; permission: Permission; revoked: boolean; stale: boolean }>(
    'api_key_auth',
    `select account_id, user_id, secret_hash, permission, revoked_at is not null as revoked,
            (last_used_at is null or last_used_at < now() - ? * interval '1 millisecond') as stale
       from api_key where id = ?`,
    [LAST_USED_GRANULARITY_MS, id],
  );
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
