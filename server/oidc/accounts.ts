// The issuer's view of app_user: password sign-in for the login page and the profile claims for
// ID tokens and userinfo. `sub` is the user's id.
import { isUuid } from '../../common/names.ts';
import type { Database } from '../db/database.ts';
import type { Role } from '../db/entities.ts';
import { hashPassword, needsRehash, verifyPassword } from '../auth/passwords.ts';
import { Prefetched } from './prefetch.ts';
import { avatarUrl } from './avatars.ts';

export interface UserClaims {
  sub: string;
  name: string;
  /** The user's own picture, else the generated avatar (docs/CONTRACTS.md "REST shapes": always an absolute URL). */
  picture: string;
  email: string;
  /** Accounts are created by the operator with the admin CLI, who vouches for the address. */
  email_verified: boolean;
  [claim: string]: unknown;
}

/** `avatars` is avatarBase(PUBLIC_URL): where the generated avatars are served (server/oidc/avatars.ts). */
export async function findUserClaims(db: Database, sub: string, avatars: string): Promise<UserClaims | null> {
  if (!isUuid(sub)) return null;
  const [row] = await db.hot<UserRow>('oidc_user_claims_avatar', 'select id, name, picture, email, avatar_key from app_user where id = ?', [sub]);
  return row ? toClaims(row, avatars) : null;
}

export interface UserRow {
  id: string;
  name: string;
  picture: string | null;
  email: string;
  avatar_key: string;
}

const toClaims = (row: UserRow, avatars: string): UserClaims => ({
  sub: row.id,
  name: row.name,
  picture: row.picture || avatarUrl(avatars, row.avatar_key),
  email: row.email,
  email_verified: true,
});

/**
 * Users for oidc-provider's findAccount. A token lookup in the adapter reads the token's user in the
 * same query and hands it over here; the findAccount that follows in the same request takes it
 * instead of querying again (see prefetch.ts).
 */
export class UserClaimsSource {
  private readonly prefetched = new Prefetched<UserClaims>();

  constructor(
    private readonly db: Database,
    private readonly avatars: string,
  ) {}

  prefetch(row: UserRow): void {
    this.prefetched.put(row.id, toClaims(row, this.avatars));
  }

  async find(sub: string): Promise<UserClaims | null> {
    return this.prefetched.take(sub) ?? findUserClaims(this.db, sub, this.avatars);
  }
}

/** The claims a set of granted scopes releases (OIDC Core 5.4). */
export function claimsForScopes(user: UserClaims, scopes: ReadonlySet<string>): Record<string, unknown> {
  const out: Record<string, unknown> = { sub: user.sub };
  if (scopes.has('profile')) {
    out.name = user.name;
    out.picture = user.picture;
  }
  if (scopes.has('email')) {
    out.email = user.email;
    out.email_verified = user.email_verified;
  }
  return out;
}

// A hash of a random password: checking against it when the email is unknown costs the same scrypt
// time as a real check, so response timing does not reveal which emails have accounts.
let decoy: Promise<string> | null = null;

/** The user id when the email and password match, else null. */
export async function checkPassword(db: Database, email: string, password: string): Promise<{ userId: string; role: Role } | null> {
  // No stored email holds a NUL, which PostgreSQL refuses in a text parameter (the login form answered
  // 500; found by test/fuzz/oidc.test.ts): no such user, and the decoy hash still runs below.
  const [row] = email.includes('\u0000')
    ? []
    : await db.query<{ id: string; password_hash: string; role: Role }>('select id, password_hash, role from app_user where email = ?', [email.trim().toLowerCase()]);
  decoy ??= hashPassword(`decoy-${Math.random()}`);
  const ok = await verifyPassword(password, row?.password_hash ?? (await decoy));
  if (!ok || !row) return null;
  if (needsRehash(row.password_hash)) await upgradeHash(db, row.id, row.password_hash, password);
  return { userId: row.id, role: row.role };
}

/**
 * Stores a hash with today's parameters (server/auth/passwords.ts) the first time an older one is
 * used successfully: the only moment the password is known. Conditional on the old hash, so a password
 * changed meanwhile is not overwritten. A failure here does not fail the sign-in: the old hash still
 * works and the upgrade is tried again at the next one.
 */
async function upgradeHash(db: Database, userId: string, old: string, password: string): Promise<void> {
  try {
    const fresh = await hashPassword(password);
    await db.query('update app_user set password_hash = ? where id = ? and password_hash = ?', [fresh, userId, old]);
  } catch {
    // See above: best effort, retried at the next sign-in.
  }
}
