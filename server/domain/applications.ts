// The developer portal (docs/CONTRACTS.md "Developer portal"): an account owner registers OAuth
// applications of the account's own, through the same client functions the admin CLI uses
// (server/domain/clients.ts). GraphQL's resolvers (server/graphql/applications.ts) are thin adapters
// over this service.
//
// Rules: only a user of role owner manages applications (an API key has no role and is refused; a
// viewer is refused); mutations also need write permission; `apiAccess` is never above the caller's
// role; redirect URIs are exact, https except loopback; at most MAX_APPLICATIONS_PER_ACCOUNT per
// account, counted under a lock on the account row so concurrent creates cannot pass it; another
// account's application is not_found, like every other thing of another account.
import type { Principal } from '../auth/principal.ts';
import { requireWrite } from '../auth/principal.ts';
import type { Database } from '../db/database.ts';
import type { ApiAccess, Role } from '../db/entities.ts';
import { deleteClient, insertClient, isManagedClientId, rotateClientSecret, validateApiAccess, validateClientName, validatePortalRedirectUris } from './clients.ts';
import { ApiError } from './errors.ts';

export const MAX_APPLICATIONS_PER_ACCOUNT = 20;
/** The grants list is for people to read; an application with more users shows its newest. */
export const MAX_GRANTS_LISTED = 500;

const ACCESS_RANK: Record<ApiAccess, number> = { none: 0, read: 1, write: 2 };
/** The most a role's own tokens may do (server/oidc/access-tokens.ts): only an owner writes. */
const ROLE_CEILING: Record<Role, ApiAccess> = { owner: 'write', viewer: 'read' };

export interface ApplicationView {
  id: string;
  name: string;
  redirect_uris: string[];
  public: boolean;
  api_access: ApiAccess;
  created_at: string;
  /** When its secret last changed; null for a public application (it has none). */
  secret_rotated_at: string | null;
}

export interface ApplicationGrantView {
  /**
   * The user who allowed the application, with what the application itself may learn about them:
   * name only under the `profile` scope, email only under `email` (as userinfo releases them).
   */
  user: { id: string; name: string | null; email: string | null };
  /** When the user first allowed it (of the grants still live). */
  created_at: string;
  scopes: string[];
}

export interface CreateApplicationInput {
  name: string;
  redirectUris: readonly string[];
  public: boolean;
  apiAccess: string;
}

interface Row {
  client_id: string;
  name: string;
  redirect_uris: string[] | string;
  is_public: boolean;
  api_access: ApiAccess;
  created_at: Date | string;
  secret_rotated_at: Date | string;
}

const iso = (v: Date | string) => (v instanceof Date ? v : new Date(v)).toISOString();
const toView = (r: Row): ApplicationView => ({
  id: r.client_id,
  name: r.name,
  redirect_uris: typeof r.redirect_uris === 'string' ? (JSON.parse(r.redirect_uris) as string[]) : r.redirect_uris,
  public: r.is_public,
  api_access: r.api_access,
  created_at: iso(r.created_at),
  secret_rotated_at: r.is_public ? null : iso(r.secret_rotated_at),
});

const notFound = () => new ApiError('not_found', 'No such application for this account.');
const COLUMNS = 'client_id, name, redirect_uris, is_public, api_access, created_at, secret_rotated_at';

export class ApplicationService {
  constructor(
    private readonly db: Database,
    /** The secret-encryption key, loaded on first use (server/services.ts). */
    private readonly encryptionKey: () => Promise<Buffer>,
  ) {}

  /** The caller's role, when it may manage applications at all: a user of role owner of this account. */
  private async role(p: Principal): Promise<Role> {
    if (!p.userId) throw new ApiError('insufficient_scope', 'Applications are managed by an account owner signed in to the panel; an API key cannot manage them.');
    const [row] = await this.db.query<{ role: Role }>('select role from app_user where id = ? and account_id = ?', [p.userId, p.accountId]);
    if (!row) throw new ApiError('invalid_token', 'The user of this credential no longer exists.');
    return row.role;
  }

  private async requireOwner(p: Principal): Promise<void> {
    if ((await this.role(p)) !== 'owner') throw new ApiError('insufficient_scope', 'Only an account owner may manage applications.');
  }

  async list(p: Principal): Promise<ApplicationView[]> {
    await this.requireOwner(p);
    const rows = await this.db.query<Row>(`select ${COLUMNS} from oauth_client where owner_account_id = ? order by created_at, client_id`, [p.accountId]);
    return rows.map(toView);
  }

  async get(p: Principal, id: string): Promise<ApplicationView> {
    await this.requireOwner(p);
    return this.own(p.accountId, id);
  }

  private async own(accountId: string, id: string): Promise<ApplicationView> {
    if (!isManagedClientId(id)) throw notFound();
    const [row] = await this.db.query<Row>(`select ${COLUMNS} from oauth_client where client_id = ? and owner_account_id = ?`, [id, accountId]);
    if (!row) throw notFound();
    return toView(row);
  }

  /** Users who allowed the application and still have a live grant, newest first. */
  async grants(p: Principal, id: string): Promise<ApplicationGrantView[]> {
    await this.requireOwner(p);
    await this.own(p.accountId, id);
    const rows = await this.db.query<{ user_id: string; name: string; email: string; payload: Record<string, unknown> | string }>(
      `select u.id as user_id, u.name, u.email, g.payload
         from oidc_payload g join app_user u on u.id::text = g.payload->>'accountId'
        where g.kind = 'Grant' and g.client_id = ? and (g.expires_at is null or g.expires_at > now())`,
      [id],
    );
    const byUser = new Map<string, { name: string; email: string; first: number; scopes: Set<string> }>();
    for (const r of rows) {
      const payload = (typeof r.payload === 'string' ? JSON.parse(r.payload) : r.payload) as {
        iat?: number;
        openid?: { scope?: string };
        resources?: Record<string, string>;
      };
      const scopes = [payload.openid?.scope ?? '', ...Object.values(payload.resources ?? {})].join(' ').split(' ').filter(Boolean);
      const at = typeof payload.iat === 'number' ? payload.iat : 0;
      const seen = byUser.get(r.user_id);
      if (seen) {
        seen.first = Math.min(seen.first, at);
        for (const s of scopes) seen.scopes.add(s);
      } else {
        byUser.set(r.user_id, { name: r.name, email: r.email, first: at, scopes: new Set(scopes) });
      }
    }
    return [...byUser.entries()]
      .sort((a, b) => b[1].first - a[1].first || (a[0] < b[0] ? -1 : 1))
      .slice(0, MAX_GRANTS_LISTED)
      .map(([userId, g]) => ({
        user: { id: userId, name: g.scopes.has('profile') ? g.name : null, email: g.scopes.has('email') ? g.email : null },
        created_at: new Date(g.first * 1000).toISOString(),
        scopes: [...g.scopes].sort(),
      }));
  }

  /** A new application of the caller's account; a confidential one's secret is in the answer, this once. */
  async create(p: Principal, input: CreateApplicationInput): Promise<{ application: ApplicationView; client_secret: string | null }> {
    const name = validateClientName(input.name);
    const redirectUris = validatePortalRedirectUris(input.redirectUris);
    const apiAccess = validateApiAccess(input.apiAccess);
    const role = await this.role(p);
    const ceiling = ROLE_CEILING[role];
    if (ACCESS_RANK[apiAccess] > ACCESS_RANK[ceiling]) {
      throw new ApiError('insufficient_scope', `apiAccess ${apiAccess} is above what your role (${role}) may do; at most ${ceiling}.`);
    }
    if (role !== 'owner') throw new ApiError('insufficient_scope', 'Only an account owner may manage applications.');
    requireWrite(p);
    const key = await this.encryptionKey();
    return this.db.transaction(async (sql) => {
      // The account row's lock serialises creates of one account, so the count below cannot go stale.
      await sql.query('select id from account where id = ? for update', [p.accountId]);
      const [{ n }] = (await sql.query<{ n: string }>('select count(*)::text as n from oauth_client where owner_account_id = ?', [p.accountId])) as [{ n: string }];
      if (Number(n) >= MAX_APPLICATIONS_PER_ACCOUNT) {
        throw new ApiError('invalid_request', `An account may have at most ${MAX_APPLICATIONS_PER_ACCOUNT} applications; delete one first.`);
      }
      const created = await insertClient(sql, key, { name, redirectUris, apiAccess, public: input.public, ownerAccountId: p.accountId });
      const [row] = await sql.query<Row>(`select ${COLUMNS} from oauth_client where client_id = ?`, [created.client_id]);
      return { application: toView(row!), client_secret: created.client_secret };
    });
  }

  /**
   * A new secret; every code, token, grant and session entry of the application ends in the same
   * transaction (identity-provider document, section 3), so its users sign in again.
   */
  async rotateSecret(p: Principal, id: string): Promise<{ application: ApplicationView; client_secret: string }> {
    await this.requireOwner(p);
    requireWrite(p);
    const key = await this.encryptionKey();
    const rotated = await rotateClientSecret(this.db, key, id, { owner: p.accountId, notFound });
    return { application: await this.own(p.accountId, id), client_secret: rotated.client_secret };
  }

  /** Deletes the application and everything issued to it. */
  async delete(p: Principal, id: string): Promise<void> {
    await this.requireOwner(p);
    requireWrite(p);
    await deleteClient(this.db, id, { owner: p.accountId, notFound });
  }
}
