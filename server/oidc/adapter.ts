// oidc-provider's storage on PostgreSQL: one `oidc_payload` row per artifact (authorization code,
// refresh token, grant, session, interaction), keyed by (model name, id), through the project's
// Database helper: every write (upsert, the conditional consume, destroy, revoke) runs on a freshly
// forked MikroORM EntityManager (adapter calls happen outside any request context); the two lookups
// by key are `db.hot` prepared statements, the project's pattern for hot reads (as API-key checks
// do), which the token-endpoint benchmark needs. Clients are not stored here: they are the
// `oauth_client` rows the admin CLI writes, read (and their secret decrypted) for every lookup, never
// kept, so a rotated secret takes effect on every gateway the moment it commits. Public clients (no
// secret, token_endpoint_auth_method none) come from the same table.
import { randomBytes } from 'node:crypto';
import { errors, type Adapter, type AdapterPayload } from 'oidc-provider';
import type { Database } from '../db/database.ts';
import { readClients, type OAuthClientRecord } from '../domain/clients.ts';
import { disableWebhooksOf } from '../webhooks/revocation.ts';
import type { UserClaimsSource } from './accounts.ts';
import { Coalescer } from '../db/coalesce.ts';
import { Prefetched } from './prefetch.ts';
import { requestScope } from './request-scope.ts';

/** oidc-provider's model name (AuthorizationCode, RefreshToken, Grant, Session, Interaction, Client, ...). */
type Kind = string;

interface Row {
  payload: AdapterPayload | string;
  consumed_at: Date | string | null;
}

const toPayload = (row: Row | undefined): AdapterPayload | undefined => {
  if (!row) return undefined;
  const payload = (typeof row.payload === 'string' ? JSON.parse(row.payload) : row.payload) as AdapterPayload;
  // oidc-provider reads `consumed` to detect a reused code or refresh token.
  if (row.consumed_at) payload.consumed = Math.floor(new Date(row.consumed_at).getTime() / 1000);
  return payload;
};

/**
 * The row's expiry in epoch seconds: the payload's own `exp` when it has one (the instant oidc-provider
 * itself checks), else now + expiresIn; null for rows without a lifetime.
 */
function expiresAt(payload: AdapterPayload, expiresIn: number | undefined): number | null {
  if (typeof payload.exp === 'number') return payload.exp;
  return expiresIn === undefined ? null : Math.floor(Date.now() / 1000) + expiresIn;
}

/** Client metadata as oidc-provider wants it, from an `oauth_client` row. */
export interface ClientSource {
  find(clientId: string): Promise<AdapterPayload | undefined>;
}

/**
 * Reads clients from `oauth_client` with the plaintext secret (the ID-token HMAC key), afresh for every
 * lookup: each client authentication is decided against the row as committed when the request came, so
 * right after `client rotate-secret` returns the new secret works and the old one is invalid_client on
 * every gateway, with no notice to wait for (a revocation must take effect at once: a 5-second cache, dropped by NOTIFY, refused the
 * new secret and accepted the old one until the notice arrived, or for 5 s on a replica that missed it).
 * The read is one prepared statement by primary key, and lookups made while one is in flight leave
 * together as the next batch (server/db/coalesce.ts): under load one round trip serves the client
 * authentications of many token requests, each still answered by a statement sent after it asked.
 */
export class DatabaseClientSource implements ClientSource {
  private readonly reads: Coalescer<string, OAuthClientRecord | null>;

  constructor(db: Database, encryptionKey: Buffer) {
    this.reads = new Coalescer((ids) => readClients(db, encryptionKey, ids), 2);
  }

  async find(clientId: string): Promise<AdapterPayload | undefined> {
    const c = await this.reads.call(clientId);
    if (!c) return undefined;
    // A new object per call: oidc-provider may alter what it is given.
    const common: AdapterPayload = {
      client_id: c.client_id,
      client_name: c.name,
      redirect_uris: [...c.redirect_uris],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      id_token_signed_response_alg: 'HS256',
    };
    if (c.is_public || c.client_secret === null) {
      return {
        ...common,
        // PKCE is required of every client (provider.ts); a public client authenticates with nothing else.
        token_endpoint_auth_method: 'none',
        // No secret, so no HS256 ID token: `openid` is refused (invalid_scope) and the client signs the
        // user in with its access token and userinfo (docs/CONTRACTS.md "Identity provider").
        scope: PUBLIC_CLIENT_SCOPES.join(' '),
        // oidc-provider's client schema wants a secret whenever the ID-token algorithm is HS256, even
        // for a client that can never receive an ID token. This per-process random value satisfies it;
        // it is never stored, never shown, never used to sign or to authenticate (method none).
        client_secret: UNUSABLE_SECRET,
      };
    }
    return {
      ...common,
      client_secret: c.client_secret,
      // Basic and body credentials are interchangeable in oidc-provider for these two methods.
      token_endpoint_auth_method: 'client_secret_basic',
    };
  }
}

/** The scopes a public client may ask for: the document's, less `openid` (no secret to sign an ID token with). */
export const PUBLIC_CLIENT_SCOPES = ['profile', 'email'] as const;
const UNUSABLE_SECRET = randomBytes(32).toString('base64url');

export interface AdapterOptions {
  db: Database;
  clients: ClientSource;
  /** Receives the token's user, read in the same query as the token (see UserClaimsSource). */
  users?: Pick<UserClaimsSource, 'prefetch'>;
}

/** The adapter class oidc-provider instantiates once per model name. */
export function postgresAdapter(opts: AdapterOptions): new (name: string) => Adapter {
  const { db, clients, users } = opts;
  // Every redemption of a code or refresh token looks up its grant right after the token itself:
  // token lookups read the grant (and the user, for findAccount) in the same query and hand them over.
  const grants = new Prefetched<AdapterPayload>();
  // The token endpoint's two statements, coalesced across concurrent requests (server/db/coalesce.ts):
  // under load one round trip and one commit serve a batch of token requests. One batch in flight per
  // statement measured best (larger batches; batches of writes never wait on each other's row locks).
  const findTokens = new Coalescer<{ kind: string; id: string }, TokenRow | undefined>((items) => findTokenRows(db, items), 1);
  const consumeAndStore = new Coalescer<Redemption, boolean>((items) => consumeAndStoreRows(db, items), 1);

  return class PostgresAdapter implements Adapter {
    constructor(private readonly kind: Kind) {}

    async upsert(id: string, payload: AdapterPayload, expiresIn?: number): Promise<void> {
      if (this.kind === 'Client') throw new Error('clients are registered with the admin CLI');
      const params = payload.params as { client_id?: unknown } | undefined;
      const clientId = payload.clientId ?? (typeof params?.client_id === 'string' ? params.client_id : null);
      // A Grant row carries its own id as grant id, so revoking a grant removes it with its tokens.
      const grantId = this.kind === 'Grant' ? id : (payload.grantId ?? null);
      const row = [this.kind, id, JSON.stringify(payload), grantId, clientId, payload.uid ?? null, expiresAt(payload, expiresIn)];
      const scope = requestScope.getStore();
      const pending = this.kind === 'RefreshToken' ? scope?.pendingConsume : undefined;
      if (scope && pending) {
        // The refresh token issued for a redeemed code or refresh token: mark that one used and store
        // this one in one statement. The same conditional update as consume(): when another request
        // consumed it first, nothing is stored and this request fails with invalid_grant.
        scope.pendingConsume = undefined;
        const stored = await consumeAndStore.call({ usedKind: pending.kind, usedId: pending.id, row });
        if (!stored) throw alreadyConsumed(pending.kind);
        return;
      }
      await db.query(
        `insert into oidc_payload (kind, id, payload, grant_id, client_id, uid, expires_at)
         values (?, ?, ?::jsonb, ?, ?, ?, to_timestamp(?::bigint))
         on conflict (kind, id) do update
           set payload = excluded.payload, grant_id = excluded.grant_id, client_id = excluded.client_id,
               uid = excluded.uid, expires_at = excluded.expires_at`,
        row,
      );
    }

    async find(id: string): Promise<AdapterPayload | undefined> {
      // No stored id holds a NUL, and PostgreSQL refuses one in a text parameter (a 500 from the token
      // and revocation endpoints; found by test/fuzz/oidc.test.ts).
      if (id.includes('\u0000')) return undefined;
      if (this.kind === 'Client') return clients.find(id);
      if (this.kind === 'Grant') {
        const hit = grants.take(id);
        if (hit) return hit;
      }
      if (this.kind === 'AuthorizationCode' || this.kind === 'RefreshToken') {
        const row = await findTokens.call({ kind: this.kind, id });
        const grant = row?.grant_payload ? toPayload({ payload: row.grant_payload, consumed_at: null }) : undefined;
        if (grant?.jti) grants.put(grant.jti, grant);
        if (row?.user_id) users?.prefetch({ id: row.user_id, name: row.name, picture: row.picture, email: row.email, avatar_key: row.avatar_key });
        return toPayload(row);
      }
      const [row] = await db.hot<Row>('oidc_find', 'select payload, consumed_at from oidc_payload where kind = ? and id = ?', [this.kind, id]);
      return toPayload(row);
    }

    async findByUid(uid: string): Promise<AdapterPayload | undefined> {
      if (uid.includes('\u0000')) return undefined;
      const [row] = await db.hot<Row>('oidc_find_uid', 'select payload, consumed_at from oidc_payload where kind = ? and uid = ? limit 1', [this.kind, uid]);
      return toPayload(row);
    }

    async findByUserCode(): Promise<undefined> {
      // The device flow is off; nothing has a user code.
      return undefined;
    }

    /**
     * Marks the artifact used. A conditional update: of several concurrent redemptions of one code or
     * refresh token exactly one changes the row; the others fail with invalid_grant.
     */
    async consume(id: string): Promise<void> {
      const scope = requestScope.getStore();
      if (scope && !scope.pendingConsume && (this.kind === 'AuthorizationCode' || this.kind === 'RefreshToken')) {
        // Done together with storing the refresh token this request issues (see upsert), or when the
        // request ends (consumePending), whichever comes first; never after the response is sent.
        scope.pendingConsume = { kind: this.kind, id };
        return;
      }
      await consumeNow(db, this.kind, id);
    }

    async destroy(id: string): Promise<void> {
      // Any revocation ends the grant everywhere: a refresh token looked up at /oauth/revoke reads its grant ahead, and revocation
      // never takes it; left there, the next sign-in's Grant.find got the deleted grant back, skipped
      // consent and issued a code for it ("grant not found" at the exchange).
      if (this.kind === 'Grant') return destroyGrant(db, grants, id);
      await db.query('delete from oidc_payload where kind = ? and id = ?', [this.kind, id]);
    }

    async revokeByGrantId(grantId: string): Promise<void> {
      // A Grant row's grant id is its own id: the same as destroying it.
      if (this.kind === 'Grant') return destroyGrant(db, grants, grantId);
      grants.drop(grantId);
      await db.query('delete from oidc_payload where kind = ? and grant_id = ?', [this.kind, grantId]);
    }
  };
}

/**
 * Withdraws a grant: oidc-provider's revocation of it (the revocation endpoint, a reused refresh token).
 * Every access token of it is refused from the commit on (server/oidc/access-tokens.ts reads the grant),
 * and the webhooks a third-party application registered with it are disabled in the same transaction
 * (server/webhooks/revocation.ts).
 */
async function destroyGrant(db: Database, grants: Prefetched<AdapterPayload>, id: string): Promise<void> {
  grants.drop(id);
  await db.transaction(async (sql) => {
    await sql.query(`delete from oidc_payload where kind = 'Grant' and id = ?`, [id]);
    await disableWebhooksOf(sql, { grant: id });
  });
}

/** A code or refresh token with its grant and user; `from oidc_payload t` is where the keys join in. */
const FIND_TOKEN = `select t.payload, t.consumed_at, g.payload as grant_payload, u.id as user_id, u.name, u.picture, u.email, u.avatar_key
  from oidc_payload t
  left join oidc_payload g on g.kind = 'Grant' and g.id = t.grant_id
  left join app_user u on u.id = case when t.payload->>'accountId' ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
                                      then (t.payload->>'accountId')::uuid end`;

type TokenRow = Row & { grant_payload: AdapterPayload | string | null; user_id: string | null; name: string; picture: string | null; email: string; avatar_key: string };

/**
 * Codes or refresh tokens by key, each with its grant and its user (for findAccount), one result per
 * key in order (undefined when not found); one statement for the whole batch.
 */
async function findTokenRows(db: Database, items: Array<{ kind: string; id: string }>): Promise<Array<TokenRow | undefined>> {
  // The embedded database has one session and no round trips to save: one plain statement per key.
  if (!db.url) return Promise.all(items.map(async (i) => (await db.query<TokenRow>(`${FIND_TOKEN} where t.kind = ? and t.id = ?`, [i.kind, i.id]))[0]));
  const rows = await db.hot<TokenRow & { n: string }>(
    'oidc_find_tokens_with_grant',
    `${FIND_TOKEN.replace('select ', 'select i.n, ').replace('from oidc_payload t', 'from unnest(?::text[], ?::text[]) with ordinality as i(kind, id, n) join oidc_payload t on t.kind = i.kind and t.id = i.id')}`,
    [items.map((i) => i.kind), items.map((i) => i.id)],
  );
  const out = new Array<TokenRow | undefined>(items.length).fill(undefined);
  for (const r of rows) out[Number(r.n) - 1] = r;
  return out;
}

/** A redeemed code or refresh token to mark used, and the row of the refresh token issued for it. */
interface Redemption {
  usedKind: string;
  usedId: string;
  /** kind, id, payload (JSON text), grant_id, client_id, uid, expires_at (epoch seconds). */
  row: unknown[];
}

/**
 * For each redemption, the conditional update of consume() and the insert of the new refresh token,
 * which happens only when that update changed the row: true for the redemptions that won. One
 * statement (one transaction) for the batch; two redemptions of the same token in one batch update
 * the row once, so exactly one of them wins, as across batches. Items go in key order so concurrent
 * batches lock rows in the same order; a deadlock (which rolls the whole statement back) is retried.
 */
async function consumeAndStoreRows(db: Database, items: Redemption[]): Promise<boolean[]> {
  const order = items.map((_, i) => i).sort((a, b) => {
    const x = items[a]!;
    const y = items[b]!;
    return x.usedKind < y.usedKind ? -1 : x.usedKind > y.usedKind ? 1 : x.usedId < y.usedId ? -1 : x.usedId > y.usedId ? 1 : 0;
  });
  const sorted = order.map((i) => items[i]!);
  if (!db.url) {
    // The embedded database: one statement per redemption, in the same order.
    const won = new Array<boolean>(items.length).fill(false);
    for (const i of order) {
      const r = items[i]!;
      const stored = await db.query(
        `with used as (update oidc_payload set consumed_at = now() where kind = ? and id = ? and consumed_at is null returning 1)
         insert into oidc_payload (kind, id, payload, grant_id, client_id, uid, expires_at)
         select ?, ?, ?::jsonb, ?, ?, ?, to_timestamp(?::bigint) where exists (select 1 from used)
         returning 1`,
        [r.usedKind, r.usedId, ...r.row],
      );
      won[i] = stored.length > 0;
    }
    return won;
  }
  const column = (k: number) => sorted.map((r) => r.row[k] ?? null);
  for (let attempt = 0; ; attempt++) {
    try {
      const rows = await db.prepared<{ n: string }>(
        'oidc_consume_and_store_batch',
        `with i as (
           select * from unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[])
             with ordinality as i(used_kind, used_id, kind, id, payload, grant_id, client_id, uid, exp, n)
         ), used as (
           update oidc_payload p set consumed_at = now() from i
            where p.kind = i.used_kind and p.id = i.used_id and p.consumed_at is null
           returning i.n, i.kind, i.id, i.payload, i.grant_id, i.client_id, i.uid, i.exp
         ), stored as (
           insert into oidc_payload (kind, id, payload, grant_id, client_id, uid, expires_at)
           select kind, id, payload::jsonb, grant_id, client_id, uid, to_timestamp(exp) from used
         )
         select n from used`,
        [sorted.map((r) => r.usedKind), sorted.map((r) => r.usedId), column(0), column(1), column(2), column(3), column(4), column(5), column(6)],
      );
      const won = new Array<boolean>(items.length).fill(false);
      for (const r of rows) won[order[Number(r.n) - 1]!] = true;
      return won;
    } catch (e) {
      if ((e as { code?: string }).code !== '40P01' || attempt >= 3) throw e;
    }
  }
}

const alreadyConsumed = (kind: string) => new errors.InvalidGrant(`${kind === 'RefreshToken' ? 'refresh token' : 'authorization code'} already consumed`);

/** The conditional update: exactly one of several concurrent calls for one artifact succeeds. */
async function consumeNow(db: Database, kind: string, id: string): Promise<void> {
  const rows = await db.query('update oidc_payload set consumed_at = now() where kind = ? and id = ? and consumed_at is null returning id', [kind, id]);
  if (rows.length === 0) throw alreadyConsumed(kind);
}

/**
 * Consumes what the request left pending (it issued no refresh token). Returns the invalid_grant error
 * when another request consumed it first; the caller must then answer that instead of the tokens.
 */
export async function consumePending(db: Database, scope: { pendingConsume?: { kind: string; id: string } }): Promise<errors.InvalidGrant | null> {
  const pending = scope.pendingConsume;
  if (!pending) return null;
  scope.pendingConsume = undefined;
  try {
    await consumeNow(db, pending.kind, pending.id);
    return null;
  } catch (e) {
    if (e instanceof errors.InvalidGrant) return e;
    throw e;
  }
}

/** Deletes expired artifacts. Consumed refresh tokens stay until they expire, so a reuse is still recognised. */
export async function purgeExpired(db: Database): Promise<number> {
  const rows = await db.query('delete from oidc_payload where expires_at < now() returning 1');
  return rows.length;
}
