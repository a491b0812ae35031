// OAuth clients of the identity provider, registered with the admin CLI.
//
// A client secret is 32 random bytes (base64url) and is stored encrypted (AES-256-GCM under the
// server's secret-encryption key, bound to the client id): ID tokens are HS256-signed with the client
// secret (OIDC Core 10.1), so the issuer needs the plaintext back; a hash would not do.
import { randomBytes } from 'node:crypto';
import type { Database, Sql } from '../db/database.ts';
import { API_ACCESS, type ApiAccess } from '../db/entities.ts';
import { decryptSecret, encryptSecret } from '../secrets/at-rest.ts';
import { ApiError } from './errors.ts';

export interface OAuthClientRecord {
  client_id: string;
  name: string;
  redirect_uris: string[];
  /** The plaintext secret, decrypted. */
  client_secret: string;
  /** What the client's access tokens may do on the tunnel API and GraphQL (docs/CONTRACTS.md "Admin CLI"). */
  api_access: ApiAccess;
  secret_rotated_at: Date;
  created_at: Date;
}

export interface CreateClient {
  name: string;
  redirectUris: readonly string[];
  /** docs/CONTRACTS.md "Admin CLI": `none` unless the operator says otherwise. */
  apiAccess?: ApiAccess;
}

function validateApiAccess(value: string): ApiAccess {
  if (!(API_ACCESS as readonly string[]).includes(value)) throw new ApiError('invalid_request', `api-access must be one of ${API_ACCESS.join(', ')}.`);
  return value as ApiAccess;
}

export const MAX_REDIRECT_URIS = 20;
const MAX_URI_LENGTH = 2048;
const CLIENT_ID_RE = /^cl_[a-z2-7]{16}$/;

/** RFC 4648 base32, lower case, no padding: 10 random bytes give exactly 16 characters (80 bits). */
function base32(bytes: Buffer): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz234567';
  let bits = 0;
  let value = 0;
  let out = '';
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
  return out;
}

const newClientId = () => `cl_${base32(randomBytes(10))}`;
const newClientSecret = () => randomBytes(32).toString('base64url');

/**
 * Redirect URIs are compared by exact string match at the authorize endpoint, so they are stored as
 * given, after these checks: absolute http(s) URLs (http is allowed for lab setups), no fragment
 * (RFC 6749 3.1.2), no user name or password, no whitespace, at most 2048 characters each.
 */
export function validateRedirectUris(uris: readonly string[]): string[] {
  if (uris.length === 0) throw new ApiError('invalid_request', 'at least one redirect URI is required.');
  if (uris.length > MAX_REDIRECT_URIS) throw new ApiError('invalid_request', `at most ${MAX_REDIRECT_URIS} redirect URIs.`);
  const out: string[] = [];
  for (const uri of uris) {
    const bad = (why: string) => new ApiError('invalid_request', `redirect URI ${JSON.stringify(uri)} ${why}.`);
    if (uri.length > MAX_URI_LENGTH) throw bad(`is longer than ${MAX_URI_LENGTH} characters`);
    if (/[\s\u0000-\u001f\u007f]/.test(uri)) throw bad('contains whitespace or control characters');
    let u: URL;
    try {
      u = new URL(uri);
    } catch {
      throw bad('is not an absolute URL');
    }
    if (u.protocol !== 'https:' && u.protocol !== 'http:') throw bad('must use https (or http for lab setups)');
    if (uri.includes('#')) throw bad('must not contain a fragment');
    if (u.username || u.password) throw bad('must not contain a user name or password');
    if (!u.hostname) throw bad('has no host');
    if (out.includes(uri)) throw bad('is given twice');
    out.push(uri);
  }
  return out;
}

export function validateClientName(name: string): string {
  const n = name.trim();
  if (!n || n.length > 200) throw new ApiError('invalid_request', 'name must be 1-200 characters.');
  if (/[\u0000-\u001f\u007f]/.test(n)) throw new ApiError('invalid_request', 'name must not contain control characters.');
  return n;
}

export async function createClient(db: Database, encryptionKey: Buffer, c: CreateClient): Promise<{ client_id: string; client_secret: string; api_access: ApiAccess }> {
  const name = validateClientName(c.name);
  const redirectUris = validateRedirectUris(c.redirectUris);
  const apiAccess = validateApiAccess(c.apiAccess ?? 'none');
  const clientSecret = newClientSecret();
  // 80 random bits make a collision practically impossible; the primary key would refuse one anyway.
  const clientId = newClientId();
  await db.query('insert into oauth_client (client_id, name, redirect_uris, secret_ciphertext, api_access) values (?, ?, ?::jsonb, ?, ?)', [
    clientId,
    name,
    JSON.stringify(redirectUris),
    encryptSecret(encryptionKey, clientSecret, clientId),
    apiAccess,
  ]);
  return { client_id: clientId, client_secret: clientSecret, api_access: apiAccess };
}

/**
 * Changes what a client's tokens may do. Takes effect on the next API call of every token already
 * issued (the access-token check reads it with the grant, server/oidc/access-tokens.ts); the consent
 * given under the old value is not asked again.
 */
export async function setClientApiAccess(db: Database, clientId: string, access: string): Promise<{ client_id: string; api_access: ApiAccess }> {
  const apiAccess = validateApiAccess(access);
  if (!CLIENT_ID_RE.test(clientId)) throw new ApiError('not_found', `no OAuth client ${JSON.stringify(clientId)}.`);
  const rows = await db.query('update oauth_client set api_access = ? where client_id = ? returning client_id', [apiAccess, clientId]);
  if (rows.length === 0) throw new ApiError('not_found', `no OAuth client ${JSON.stringify(clientId)}.`);
  return { client_id: clientId, api_access: apiAccess };
}

/** The client's API access for the consent page; null for an unknown client. */
export async function clientApiAccess(db: Pick<Database, 'query'>, clientId: string): Promise<ApiAccess | null> {
  if (!CLIENT_ID_RE.test(clientId)) return null;
  const [row] = await db.query<{ api_access: ApiAccess }>('select api_access from oauth_client where client_id = ?', [clientId]);
  return row?.api_access ?? null;
}

export interface ClientListItem {
  client_id: string;
  name: string;
  redirect_uris: string[];
  api_access: ApiAccess;
  created_at: string;
  secret_rotated_at: string;
}

/** Clients in client_id order, without secrets; `cursor` is the last client_id of the previous page. */
export async function listClients(db: Pick<Database, 'query'>, o: { limit: number; cursor?: string | null }): Promise<{ items: ClientListItem[]; next_cursor: string | null }> {
  if (o.cursor != null && !CLIENT_ID_RE.test(o.cursor)) throw new ApiError('invalid_request', 'cursor is not one this command printed.');
  const rows = await db.query<{ client_id: string; name: string; redirect_uris: string[] | string; api_access: ApiAccess; created_at: Date | string; secret_rotated_at: Date | string }>(
    `select client_id, name, redirect_uris, api_access, created_at, secret_rotated_at from oauth_client
      where (?::text is null or client_id > ?) order by client_id limit ?`,
    [o.cursor ?? null, o.cursor ?? null, o.limit + 1],
  );
  const page = rows.slice(0, o.limit);
  return {
    items: page.map((r) => ({
      client_id: r.client_id,
      name: r.name,
      redirect_uris: typeof r.redirect_uris === 'string' ? (JSON.parse(r.redirect_uris) as string[]) : r.redirect_uris,
      api_access: r.api_access,
      created_at: asDate(r.created_at).toISOString(),
      secret_rotated_at: asDate(r.secret_rotated_at).toISOString(),
    })),
    next_cursor: rows.length > o.limit ? page[page.length - 1]!.client_id : null,
  };
}

/**
 * Invalidates everything issued to a client under its previous secret, inside the rotation
 * transaction, in whichever process rotates (the admin CLI is a separate process from the gateway, so
 * this is database work, not an in-memory callback):
 *  - every oidc_payload row of the client: authorization codes, refresh tokens, grants, interactions;
 *  - the client's entry in every browser session, so the next authorize asks for consent again.
 * Access tokens are JWTs that are not stored, but each names its grant (`gid`) and the API, userinfo
 * and revocation check that the grant still exists: deleting the grants ends them at once. Neither
 * grants nor clients are cached: every client authentication reads the client's row (readClients), so
 * the commit is the moment the new secret works and the old one stops, on every gateway.
 */
async function invalidateClientArtifacts(sql: Sql, clientId: string): Promise<void> {
  await sql.query('delete from oidc_payload where client_id = ?', [clientId]);
  await sql.query(
    `update oidc_payload set payload = payload #- array['authorizations', ?]::text[]
      where kind = 'Session' and jsonb_exists(payload->'authorizations', ?)`,
    [clientId, clientId],
  );
}

/** A new secret for the client; everything issued under the old one is invalidated in the same transaction. */
export async function rotateClientSecret(db: Database, encryptionKey: Buffer, clientId: string): Promise<{ client_id: string; client_secret: string }> {
  if (!CLIENT_ID_RE.test(clientId)) throw new ApiError('not_found', `no OAuth client ${JSON.stringify(clientId)}.`);
  const clientSecret = newClientSecret();
  const rotated = await db.transaction(async (sql) => {
    const rows = await sql.query(
      'update oauth_client set secret_ciphertext = ?, secret_rotated_at = clock_timestamp() where client_id = ? returning client_id',
      [encryptSecret(encryptionKey, clientSecret, clientId), clientId],
    );
    if (rows.length === 0) throw new ApiError('not_found', `no OAuth client ${JSON.stringify(clientId)}.`);
    await invalidateClientArtifacts(sql, clientId);
    return { client_id: clientId, client_secret: clientSecret };
  });
  return rotated;
}

export async function clientExists(db: Pick<Database, 'query'>, clientId: string): Promise<boolean> {
  if (!CLIENT_ID_RE.test(clientId)) return false;
  return (await db.query('select 1 from oauth_client where client_id = ?', [clientId])).length > 0;
}

interface ClientRow {
  client_id: string;
  name: string;
  api_access: ApiAccess;
  redirect_uris: string[] | string;
  secret_ciphertext: string;
  secret_rotated_at: Date | string;
  created_at: Date | string;
}

const asDate = (v: Date | string) => (v instanceof Date ? v : new Date(v));

const toRecord = (encryptionKey: Buffer, row: ClientRow): OAuthClientRecord => ({
  client_id: row.client_id,
  name: row.name,
  redirect_uris: typeof row.redirect_uris === 'string' ? (JSON.parse(row.redirect_uris) as string[]) : row.redirect_uris,
  client_secret: decryptSecret(encryptionKey, row.secret_ciphertext, row.client_id),
  api_access: row.api_access,
  secret_rotated_at: asDate(row.secret_rotated_at),
  created_at: asDate(row.created_at),
});

/**
 * Several clients with their decrypted secrets, one result per id in order (null when there is none),
 * in one prepared statement: the issuer's per-request read (server/oidc/adapter.ts), which batches the
 * client authentications of concurrent token requests.
 */
export async function readClients(db: Pick<Database, 'hot' | 'url' | 'query'>, encryptionKey: Buffer, clientIds: readonly string[]): Promise<Array<OAuthClientRecord | null>> {
  // The embedded database has one session and no round trips to save (and its driver would spread an
  // array parameter into a list): one plain statement per client.
  if (!db.url) return Promise.all(clientIds.map((id) => getClient(db, encryptionKey, id)));
  const wanted = clientIds.map((id) => (CLIENT_ID_RE.test(id) ? id : ''));
  const rows = await db.hot<ClientRow & { n: string }>(
    'oauth_client_by_ids',
    `select i.n, c.client_id, c.name, c.redirect_uris, c.api_access, c.secret_ciphertext, c.secret_rotated_at, c.created_at
       from unnest(?::text[]) with ordinality as i(id, n) join oauth_client c on c.client_id = i.id`,
    [wanted],
  );
  const out = new Array<OAuthClientRecord | null>(clientIds.length).fill(null);
  for (const r of rows) out[Number(r.n) - 1] = toRecord(encryptionKey, r);
  return out;
}

/** The client with its decrypted secret, or null when there is none with this id. */
export async function getClient(db: Pick<Database, 'query'> | Sql, encryptionKey: Buffer, clientId: string): Promise<OAuthClientRecord | null> {
  if (!CLIENT_ID_RE.test(clientId)) return null;
  const [row] = await db.query<ClientRow>(
    'select client_id, name, redirect_uris, api_access, secret_ciphertext, secret_rotated_at, created_at from oauth_client where client_id = ?',
    [clientId],
  );
  return row ? toRecord(encryptionKey, row) : null;
}
