// OAuth clients of the identity provider: registered with the admin CLI (the operator's), in the
// developer portal (an account's own, server/domain/applications.ts), and the gateway's first-party
// public client `panel`, which the gateway registers itself at start (docs/CONTRACTS.md "Identity provider").
//
// A confidential client's secret is 32 random bytes (base64url) and is stored encrypted (AES-256-GCM
// under the server's secret-encryption key, bound to the client id): ID tokens are HS256-signed with the
// client secret (OIDC Core 10.1), so the issuer needs the plaintext back; a hash would not do. A public
// client (token_endpoint_auth_method none, PKCE only) has no secret at all, so no ID token either: it may
// not ask for `openid` (server/oidc/adapter.ts).
import { randomBytes } from 'node:crypto';
import type { Database, Sql } from '../db/database.ts';
import { API_ACCESS, type ApiAccess } from '../db/entities.ts';
import { decryptSecret, encryptSecret } from '../secrets/at-rest.ts';
import { disableWebhooksOf } from '../webhooks/revocation.ts';
import { ApiError } from './errors.ts';

export interface OAuthClientRecord {
  client_id: string;
  name: string;
  redirect_uris: string[];
  /** The plaintext secret, decrypted; null for a public client. */
  client_secret: string | null;
  is_public: boolean;
  /** The account that registered it in the developer portal; null for the operator's and the panel. */
  owner_account_id: string | null;
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
  /** A public client: no secret, token_endpoint_auth_method none, PKCE only. */
  public?: boolean;
}

/** The gateway's own panel (docs/CONTRACTS.md "Identity provider"): registered at start, never by hand. */
export const PANEL_CLIENT_ID = 'panel';

export function validateApiAccess(value: string): ApiAccess {
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

/** An id the issuer may know: a registered client's `cl_` id or the panel's. */
export const isClientId = (id: string) => CLIENT_ID_RE.test(id) || id === PANEL_CLIENT_ID;
/** An id of a client the operator or the portal manages (never the panel, which the gateway keeps as it is). */
export const isManagedClientId = (id: string) => CLIENT_ID_RE.test(id);
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

/**
 * Developer-portal redirect URIs: the checks above, and https only, except the loopback addresses
 * (http://127.0.0.1, http://[::1], http://localhost, any port) where a developer's own machine
 * receives the code (RFC 8252 7.3). Compared by exact string at authorize, like every client's.
 */
export function validatePortalRedirectUris(uris: readonly string[]): string[] {
  const out = validateRedirectUris(uris);
  for (const uri of out) {
    const u = new URL(uri);
    const loopback = u.hostname === '127.0.0.1' || u.hostname === '[::1]' || u.hostname === 'localhost';
    if (u.protocol !== 'https:' && !loopback) {
      throw new ApiError('invalid_request', `redirect URI ${JSON.stringify(uri)} must use https (http only for http://127.0.0.1, http://[::1] or http://localhost).`);
    }
  }
  return out;
}

export type CreatedClient = {
  client_id: string;
  /** Shown this once; null for a public client. */
  client_secret: string | null;
  api_access: ApiAccess;
  public: boolean;
};

/**
 * Inserts a client whose name and redirect URIs are already validated, on `sql` (a transaction of the
 * caller's, such as the portal's per-account cap, or the database).
 */
export async function insertClient(
  sql: Pick<Sql, 'query'>,
  encryptionKey: Buffer,
  c: { name: string; redirectUris: readonly string[]; apiAccess: ApiAccess; public: boolean; ownerAccountId?: string | null },
): Promise<CreatedClient> {
  const clientSecret = c.public ? null : newClientSecret();
  // 80 random bits make a collision practically impossible; the primary key would refuse one anyway.
  const clientId = newClientId();
  await sql.query(
    'insert into oauth_client (client_id, name, redirect_uris, secret_ciphertext, api_access, is_public, owner_account_id) values (?, ?, ?::jsonb, ?, ?, ?, ?)',
    [clientId, c.name, JSON.stringify(c.redirectUris), clientSecret === null ? null : encryptSecret(encryptionKey, clientSecret, clientId), c.apiAccess, c.public, c.ownerAccountId ?? null],
  );
  return { client_id: clientId, client_secret: clientSecret, api_access: c.apiAccess, public: c.public };
}

/** The admin CLI's `client create`: an operator's client, with no owner account. */
export async function createClient(db: Database, encryptionKey: Buffer, c: CreateClient & { public?: false }): Promise<CreatedClient & { client_secret: string }>;
export async function createClient(db: Database, encryptionKey: Buffer, c: CreateClient): Promise<CreatedClient>;
export async function createClient(db: Database, encryptionKey: Buffer, c: CreateClient): Promise<CreatedClient> {
  const name = validateClientName(c.name);
  const redirectUris = validateRedirectUris(c.redirectUris);
  const apiAccess = validateApiAccess(c.apiAccess ?? 'none');
  return insertClient(db, encryptionKey, { name, redirectUris, apiAccess, public: c.public === true });
}

/**
 * Registers (or brings up to date) the first-party public client `panel`: redirect URI
 * `$PUBLIC_URL/callback`, API access write (still capped by each user's role), no consent screen
 * (server/oidc/provider.ts). Every gateway does this at start; concurrent starts meet in the upsert.
 */
export async function ensurePanelClient(db: Pick<Database, 'query'>, publicUrl: string): Promise<void> {
  const [callback] = validateRedirectUris([`${publicUrl.replace(/\/+$/, '')}/callback`]);
  await db.query(
    `insert into oauth_client (client_id, name, redirect_uris, secret_ciphertext, api_access, is_public, owner_account_id)
     values (?, 'Tunnelgate panel', ?::jsonb, null, 'write', true, null)
     on conflict (client_id) do update
       set name = excluded.name, redirect_uris = excluded.redirect_uris, secret_ciphertext = null,
           api_access = 'write', is_public = true, owner_account_id = null
     where (oauth_client.name, oauth_client.redirect_uris, oauth_client.api_access, oauth_client.is_public, oauth_client.owner_account_id, oauth_client.secret_ciphertext)
       is distinct from (excluded.name, excluded.redirect_uris, 'write', true, null::uuid, null::text)`,
    [PANEL_CLIENT_ID, JSON.stringify([callback])],
  );
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

/**
 * What the consent page says of a client: its API access, and whether a customer registered it in the
 * developer portal (so its name is anyone's choice); null for an unknown client.
 */
export async function clientConsentFacts(db: Pick<Database, 'query'>, clientId: string): Promise<{ api_access: ApiAccess; portal: boolean } | null> {
  if (!isClientId(clientId)) return null;
  const [row] = await db.query<{ api_access: ApiAccess; portal: boolean }>('select api_access, owner_account_id is not null as portal from oauth_client where client_id = ?', [clientId]);
  return row ?? null;
}

export interface ClientListItem {
  client_id: string;
  name: string;
  redirect_uris: string[];
  api_access: ApiAccess;
  public: boolean;
  /** The developer-portal account that registered it; null for the operator's clients and the panel. */
  owner_account_id: string | null;
  created_at: string;
  secret_rotated_at: string;
}

/** Clients in client_id order, without secrets; `cursor` is the last client_id of the previous page. */
export async function listClients(db: Pick<Database, 'query'>, o: { limit: number; cursor?: string | null }): Promise<{ items: ClientListItem[]; next_cursor: string | null }> {
  if (o.cursor != null && !isClientId(o.cursor)) throw new ApiError('invalid_request', 'cursor is not one this command printed.');
  const rows = await db.query<{
    client_id: string;
    name: string;
    redirect_uris: string[] | string;
    api_access: ApiAccess;
    is_public: boolean;
    owner_account_id: string | null;
    created_at: Date | string;
    secret_rotated_at: Date | string;
  }>(
    `select client_id, name, redirect_uris, api_access, is_public, owner_account_id, created_at, secret_rotated_at from oauth_client
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
      public: r.is_public,
      owner_account_id: r.owner_account_id,
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
 *  - the webhooks the client's tokens registered are disabled (docs/CONTRACTS.md "Webhooks").
 * Access tokens are JWTs that are not stored, but each names its grant (`gid`) and the API, userinfo
 * and revocation check that the grant still exists: deleting the grants ends them at once. Neither
 * grants nor clients are cached: every client authentication reads the client's row (readClients), so
 * the commit is the moment the new secret works and the old one stops, on every gateway.
 */
export async function invalidateClientArtifacts(sql: Pick<Sql, 'query'>, clientId: string): Promise<void> {
  await sql.query('delete from oidc_payload where client_id = ?', [clientId]);
  // Every grant of the client just ended: so do the webhooks its tokens registered (server/webhooks/revocation.ts).
  await disableWebhooksOf(sql, { client: clientId });
  await sql.query(
    `update oidc_payload set payload = payload #- array['authorizations', ?]::text[]
      where kind = 'Session' and jsonb_exists(payload->'authorizations', ?)`,
    [clientId, clientId],
  );
}

/**
 * A new secret for the client; everything issued under the old one is invalidated in the same
 * transaction. `owner` limits it to a developer-portal account's own clients (another's is not_found).
 * A public client has no secret to replace (invalid_request).
 */
export async function rotateClientSecret(
  db: Database,
  encryptionKey: Buffer,
  clientId: string,
  o: { owner?: string; notFound?: () => ApiError } = {},
): Promise<{ client_id: string; client_secret: string }> {
  const notFound = o.notFound ?? (() => new ApiError('not_found', `no OAuth client ${JSON.stringify(clientId)}.`));
  if (!isManagedClientId(clientId)) throw notFound();
  const clientSecret = newClientSecret();
  const rotated = await db.transaction(async (sql) => {
    const [row] = await sql.query<{ is_public: boolean }>(
      'select is_public from oauth_client where client_id = ? and (?::uuid is null or owner_account_id = ?::uuid) for update',
      [clientId, o.owner ?? null, o.owner ?? null],
    );
    if (!row) throw notFound();
    if (row.is_public) throw new ApiError('invalid_request', 'a public client has no secret to rotate.');
    await sql.query('update oauth_client set secret_ciphertext = ?, secret_rotated_at = clock_timestamp() where client_id = ?', [
      encryptSecret(encryptionKey, clientSecret, clientId),
      clientId,
    ]);
    await invalidateClientArtifacts(sql, clientId);
    return { client_id: clientId, client_secret: clientSecret };
  });
  return rotated;
}

/** Deletes a client and, in the same transaction, every code, token, grant and session entry it had. */
export async function deleteClient(db: Database, clientId: string, o: { owner?: string; notFound?: () => ApiError } = {}): Promise<{ client_id: string }> {
  const notFound = o.notFound ?? (() => new ApiError('not_found', `no OAuth client ${JSON.stringify(clientId)}.`));
  if (!isManagedClientId(clientId)) throw notFound();
  return db.transaction(async (sql) => {
    const rows = await sql.query('delete from oauth_client where client_id = ? and (?::uuid is null or owner_account_id = ?::uuid) returning client_id', [
      clientId,
      o.owner ?? null,
      o.owner ?? null,
    ]);
    if (rows.length === 0) throw notFound();
    await invalidateClientArtifacts(sql, clientId);
    return { client_id: clientId };
  });
}

export async function clientExists(db: Pick<Database, 'query'>, clientId: string): Promise<boolean> {
  if (!isManagedClientId(clientId)) return false;
  return (await db.query('select 1 from oauth_client where client_id = ?', [clientId])).length > 0;
}

interface ClientRow {
  client_id: string;
  name: string;
  api_access: ApiAccess;
  redirect_uris: string[] | string;
  secret_ciphertext: string | null;
  is_public: boolean;
  owner_account_id: string | null;
  secret_rotated_at: Date | string;
  created_at: Date | string;
}

const asDate = (v: Date | string) => (v instanceof Date ? v : new Date(v));

const toRecord = (encryptionKey: Buffer, row: ClientRow): OAuthClientRecord => ({
  client_id: row.client_id,
  name: row.name,
  redirect_uris: typeof row.redirect_uris === 'string' ? (JSON.parse(row.redirect_uris) as string[]) : row.redirect_uris,
  client_secret: row.secret_ciphertext === null ? null : decryptSecret(encryptionKey, row.secret_ciphertext, row.client_id),
  is_public: row.is_public,
  owner_account_id: row.owner_account_id,
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
  const wanted = clientIds.map((id) => (isClientId(id) ? id : ''));
  const rows = await db.hot<ClientRow & { n: string }>(
    'oauth_client_by_ids_public_owner',
    `select i.n, c.client_id, c.name, c.redirect_uris, c.api_access, c.secret_ciphertext, c.is_public, c.owner_account_id, c.secret_rotated_at, c.created_at
       from unnest(?::text[]) with ordinality as i(id, n) join oauth_client c on c.client_id = i.id`,
    [wanted],
  );
  const out = new Array<OAuthClientRecord | null>(clientIds.length).fill(null);
  for (const r of rows) out[Number(r.n) - 1] = toRecord(encryptionKey, r);
  return out;
}

/** The client with its decrypted secret, or null when there is none with this id. */
export async function getClient(db: Pick<Database, 'query'> | Sql, encryptionKey: Buffer, clientId: string): Promise<OAuthClientRecord | null> {
  if (!isClientId(clientId)) return null;
  const [row] = await db.query<ClientRow>(
    'select client_id, name, redirect_uris, api_access, secret_ciphertext, is_public, owner_account_id, secret_rotated_at, created_at from oauth_client where client_id = ?',
    [clientId],
  );
  return row ? toRecord(encryptionKey, row) : null;
}
