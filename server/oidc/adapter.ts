// oidc-provider's storage on PostgreSQL: one `oidc_payload` row per artifact (authorization code,
// refresh token, grant, session, interaction), keyed by (model name, id), through the project's
// Database helper, which runs every statement on a freshly forked MikroORM EntityManager (adapter
// calls happen outside any request context). Clients are not stored here: they are the
// `oauth_client` rows the admin CLI writes, read (and their secret decrypted) on demand.
import { errors, type Adapter, type AdapterPayload } from 'oidc-provider';
import type { Database } from '../db/database.ts';
import { getClient } from '../domain/clients.ts';

/** The models whose rows carry a grant id; revoking a grant deletes them. */
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

/** Client metadata as oidc-provider wants it, from an `oauth_client` row. */
export interface ClientSource {
  find(clientId: string): Promise<AdapterPayload | undefined>;
}

/** Reads clients from `oauth_client` with the plaintext secret (the ID-token HMAC key). */
export function clientSource(db: Database, encryptionKey: Buffer): ClientSource {
  return {
    async find(clientId) {
      const c = await getClient(db, encryptionKey, clientId);
      if (!c) return undefined;
      return {
        client_id: c.client_id,
        client_secret: c.client_secret,
        client_name: c.name,
        redirect_uris: c.redirect_uris,
        grant_types: ['authorization_code', 'refresh_token'],
        response_types: ['code'],
        // Basic and body credentials are interchangeable in oidc-provider for these two methods.
        token_endpoint_auth_method: 'client_secret_basic',
        id_token_signed_response_alg: 'HS256',
      };
    },
  };
}

export interface AdapterOptions {
  db: Database;
  clients: ClientSource;
  /** Called after a grant's rows are deleted, so caches keyed by grant can drop it. */
  onGrantRevoked?: (grantId: string) => void;
}

/** The adapter class oidc-provider instantiates once per model name. */
export function postgresAdapter(opts: AdapterOptions): new (name: string) => Adapter {
  const { db, clients, onGrantRevoked } = opts;

  return class PostgresAdapter implements Adapter {
    constructor(private readonly kind: Kind) {}

    async upsert(id: string, payload: AdapterPayload, expiresIn?: number): Promise<void> {
      if (this.kind === 'Client') throw new Error('clients are registered with the admin CLI');
      const params = payload.params as { client_id?: unknown } | undefined;
      const clientId = payload.clientId ?? (typeof params?.client_id === 'string' ? params.client_id : null);
      // A Grant row carries its own id as grant id, so revoking a grant removes it with its tokens.
      const grantId = this.kind === 'Grant' ? id : (payload.grantId ?? null);
      await db.query(
        `insert into oidc_payload (kind, id, payload, grant_id, client_id, uid, expires_at)
         values (?, ?, ?::jsonb, ?, ?, ?, case when ?::int is null then null else now() + ?::int * interval '1 second' end)
         on conflict (kind, id) do update
           set payload = excluded.payload, grant_id = excluded.grant_id, client_id = excluded.client_id,
               uid = excluded.uid, expires_at = excluded.expires_at`,
        [this.kind, id, JSON.stringify(payload), grantId, clientId, payload.uid ?? null, expiresIn ?? null, expiresIn ?? null],
      );
    }

    async find(id: string): Promise<AdapterPayload | undefined> {
      if (this.kind === 'Client') return clients.find(id);
      const [row] = await db.query<Row>('select payload, consumed_at from oidc_payload where kind = ? and id = ?', [this.kind, id]);
      return toPayload(row);
    }

    async findByUid(uid: string): Promise<AdapterPayload | undefined> {
      const [row] = await db.query<Row>('select payload, consumed_at from oidc_payload where kind = ? and uid = ? limit 1', [this.kind, uid]);
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
      const rows = await db.query('update oidc_payload set consumed_at = now() where kind = ? and id = ? and consumed_at is null returning id', [this.kind, id]);
      if (rows.length === 0) throw new errors.InvalidGrant(`${this.kind === 'RefreshToken' ? 'refresh token' : 'authorization code'} already consumed`);
    }

    async destroy(id: string): Promise<void> {
      await db.query('delete from oidc_payload where kind = ? and id = ?', [this.kind, id]);
      if (this.kind === 'Grant') onGrantRevoked?.(id);
    }

    async revokeByGrantId(grantId: string): Promise<void> {
      await db.query('delete from oidc_payload where kind = ? and grant_id = ?', [this.kind, grantId]);
    }
  };
}

/** Deletes expired artifacts. Consumed refresh tokens stay until they expire, so a reuse is still recognised. */
export async function purgeExpired(db: Database): Promise<number> {
  const rows = await db.query('delete from oidc_payload where expires_at < now() returning 1');
  return rows.length;
}
