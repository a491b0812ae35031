// Builders for the state most tests need: an edge node with a pool, a user with a balance, keys.
import { randomBytes } from 'node:crypto';
import type { Database } from '../../server/db/database.ts';
import type { Permission } from '../../server/db/entities.ts';
import { createApiKey } from '../../server/auth/api-keys.ts';
import { createUser } from '../../server/domain/accounts.ts';
import { addNode } from '../../server/domain/nodes.ts';

let nodeCounter = 0;

/** A made-up agent host-key fingerprint (SHA256:<43 base64 characters>), as `node add --host-key` takes. */
export function fakeHostKey(): string {
  return `SHA256:${randomBytes(32).toString('base64').slice(0, 43)}`;
}

/**
 * A node whose pool is `pool` (e.g. 203.0.113.0/28 gives 14 usable IPs). It sells: a host key is pinned
 * (purchases skip nodes without one) unless `opts.hostKey` is null.
 */
export async function seedNode(db: Database, pool = '198.18.0.0/28', name = `edge-${++nodeCounter}-${randomBytes(2).toString('hex')}`, opts: { hostKey?: string | null } = {}) {
  return addNode(db, { name, publicIp: '192.0.2.1', sshHost: '127.0.0.1', pool, hostKey: opts.hostKey === undefined ? fakeHostKey() : opts.hostKey });
}

export interface SeededUser {
  userId: string;
  accountId: string;
  email: string;
  password: string;
  writeKey: string;
  readKey: string;
}

export async function seedUser(db: Database, opts: { balanceUsd?: string; role?: 'owner' | 'viewer' } = {}): Promise<SeededUser> {
  const email = `user-${randomBytes(4).toString('hex')}@example.test`;
  const password = 'correct horse battery staple';
  const { user_id, account_id } = await createUser(db, { email, name: 'Test User', password, balanceUsd: opts.balanceUsd ?? '100.00', role: opts.role ?? 'owner' });
  const key = (p: Permission) => createApiKey(db, account_id, user_id, p).then((k) => k.key);
  return { userId: user_id, accountId: account_id, email, password, writeKey: await key('write'), readKey: await key('read') };
}
