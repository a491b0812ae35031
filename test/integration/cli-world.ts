// The admin CLI tests' world (cli-read.test.ts: the read commands; cli-queue.test.ts: the queue commands): a real
// PostgreSQL database seeded as operators meet it (three users, keys live and revoked, two nodes, tunnels in
// every status, a ledger row, promocodes), and the success check that no secret is ever printed. A describe
// calls useCliWorld() once, at its top: the database is made before its tests and dropped after them.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect } from 'vitest';
import { createApiKey, revokeApiKey } from '../../server/auth/api-keys.ts';
import { addBalance, createUser } from '../../server/domain/accounts.ts';
import { addNode } from '../../server/domain/nodes.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { cliOk, type CliRun } from '../helpers/admin-cli.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

/** The success contract (test/helpers/admin-cli.ts), and no secret anywhere in the output. */
export function ok(r: CliRun): Record<string, unknown> {
  const json = cliOk(r);
  noSecrets(r.stdout);
  return json;
}

/** Secret values and secret column names collected while seeding; none may ever be printed. */
export const secrets: string[] = [];
export function noSecrets(stdout: string): void {
  for (const name of ['password_hash', 'secret_hash', 'secret_ciphertext', 'avatar_key', 'client_secret', '$argon2', 'svc_']) expect(stdout).not.toContain(name);
  for (const s of secrets) expect(stdout).not.toContain(s);
}

export let t: TestDatabase;
export let env: Record<string, string>;
export const emails = ['ann@example.test', 'bob@example.test', 'cid@example.test'];
export const ids: Record<string, { user_id: string; account_id: string }> = {};
export let nodeA = '';
export let nodeB = '';
export const tunnels: Record<string, string> = {};
export let liveKey = '';
export let revokedKey = '';

/** Seeds the world before the describe's tests and drops its database after them. */
export function useCliWorld(): void {
  beforeAll(async () => {
    t = await createTestDatabase();
    env = { DATABASE_URL: t.url };
    for (const [i, email] of emails.entries()) {
      ids[email] = await createUser(t.db, { email, name: `User ${i}`, password: 'correct horse battery', balanceUsd: ['25.50', '0.10', '7'][i]!, role: i === 2 ? 'viewer' : 'owner' });
    }
    const ann = ids[emails[0]!]!;
    await addBalance(t.db, emails[0]!, '4.75');
    const k1 = await createApiKey(t.db, ann.account_id, ann.user_id, 'write');
    const k2 = await createApiKey(t.db, ann.account_id, ann.user_id, 'read');
    await revokeApiKey(t.db, k2.id);
    liveKey = k1.id;
    revokedKey = k2.id;
    // The secret part of each key (it may itself contain "_", so by position, not by splitting).
    for (const k of [k1.key, k2.key]) secrets.push(k, /^svc_[0-9a-f]{32}_([A-Za-z0-9_-]{43})$/.exec(k)![1]!);
    expect(secrets.every((x) => x.length >= 43)).toBe(true);
    const hashes = await t.raw.query<{ secret_hash: string }>('select secret_hash from api_key');
    const pw = await t.raw.query<{ password_hash: string }>('select password_hash from app_user');
    secrets.push(...hashes.rows.map((r) => r.secret_hash), ...pw.rows.map((r) => r.password_hash));

    nodeA = (await addNode(t.db, { name: 'edge-a', publicIp: '192.0.2.10', sshHost: '127.0.0.1', pool: '198.18.0.0/29' })).node_id;
    nodeB = (await addNode(t.db, { name: 'edge-b', publicIp: '192.0.2.11', sshHost: '127.0.0.1', pool: '198.18.1.0/29' })).node_id;
    // Tunnels straight into their tables (the purchase path has its own tests): ann has three on edge-a
    // and one on edge-b, bob one on edge-b. Created a second apart so "newest first" is well defined.
    const specs: [string, string, string, string][] = [
      ['ann-1', emails[0]!, nodeA, 'active'],
      ['ann-2', emails[0]!, nodeA, 'pending'],
      ['ann-3', emails[0]!, nodeB, 'active'],
      ['bob-1', emails[1]!, nodeB, 'deleted'],
      ['ann-4', emails[0]!, nodeA, 'provisioned'],
    ];
    for (const [i, [name, email, node, status]] of specs.entries()) {
      const id = randomUUID();
      tunnels[name] = id;
      const { rows } = await t.raw.query<{ ip: string; inner_index: number }>(
        'update protected_ip set tunnel_id = $1 where ip = (select ip from protected_ip where node_id = $2 and tunnel_id is null order by inner_index limit 1) returning ip, inner_index',
        [id, node],
      );
      await t.raw.query(
        // Each with its own GRE key, as every tunnel bought since GRE keys came: live tunnels of one node and
        // origin may not share one (nor both have none).
        `insert into tunnel (id, account_id, node_id, name, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub, created_at, updated_at)
         values ($1, $2, $3, $4, $5, '8.8.4.4', $6, $7, $8, $9, '1.11', '100.00', now() - make_interval(secs => $10), now())`,
        [id, ids[email]!.account_id, node, name, rows[0]!.ip, `tg-${name}`, rows[0]!.inner_index, 1000 + i, status, 100 - i],
      );
    }
    // Check times and settings as the edge and a PATCH leave them: ann-4's check time in traffic.seen (where
    // a collection round keeps it), with its own settings; ann-1's from before that (the tunnel column);
    // bob-1 deleted (its last one moved back to the tunnel row). Health: in the tests that need it.
    await t.raw.query(`update tunnel set ports = '80,443,1000-1010', protocol = 'tcp', syn_proxy = true, source_pps_limit = 5000 where id = $1`, [tunnels['ann-4']]);
    await t.raw.query(
      `insert into traffic.seen (tunnel_id, packets_in, bytes_in, packets_out, bytes_out, dropped, seen_at, checked_at) values ($1, 0, 0, 0, 0, '{0,0,0,0,0}', now(), '2026-11-25T10:00:01.234Z')`,
      [tunnels['ann-4']],
    );
    await t.raw.query(`update tunnel set health_checked_at = '2026-11-24T09:00:00Z', drop_fragments = true where id = $1`, [tunnels['ann-1']]);
    await t.raw.query(`update tunnel set health_checked_at = '2026-11-20T09:00:00Z' where id = $1`, [tunnels['bob-1']]);
    await t.raw.query(
      `insert into ledger_entry (account_id, amount_usd, balance_after, kind, tunnel_id, promocode) values ($1, '-1.11', '29.14', 'purchase', $2, 'SPRING')`,
      [ann.account_id, tunnels['ann-1']],
    );
    await createPromocode(t.db, { code: 'spring', percent: 15, amountRub: null, maxUses: 10, expiresAt: new Date('2099-01-01T00:00:00Z') });
    await createPromocode(t.db, { code: 'flat', percent: null, amountRub: '49.90', maxUses: null, expiresAt: null });
    await createPromocode(t.db, { code: 'third', percent: 5, amountRub: null, maxUses: null, expiresAt: null });
  }, 60_000);

  afterAll(async () => {
    await t?.drop();
  }, 120_000);
}

export type Item = Record<string, unknown>;
export const items = (j: Record<string, unknown>) => j.items as Item[];
