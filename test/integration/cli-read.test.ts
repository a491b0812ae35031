// The admin CLI's read and queue commands of docs/CONTRACTS.md "Admin CLI", run as operators run them: the real
// `server/cli/admin.ts` in a child process, against a real PostgreSQL database (and, at the end, against
// a running gateway on the embedded database through its admin socket). Checked by stdout JSON, exit
// status and, through a plain pg pool, what is in the database (pg-boss's job table for the queue
// commands). With a real agent (root): `tunnel repair` re-applies a provisioned tunnel the edge lost and
// `node reconcile` sends the node its desired set, each through the queue.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey, revokeApiKey } from '../../server/auth/api-keys.ts';
import { main } from '../../server/cli/admin.ts';
import { COMMANDS } from '../../server/cli/commands.ts';
import { loadConfig } from '../../server/config.ts';
import { addBalance, createUser } from '../../server/domain/accounts.ts';
import { addNode } from '../../server/domain/nodes.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { openDatabase } from '../../server/services.ts';
import { cliFailed, cliOk, runAdminCli, type CliRun } from '../helpers/admin-cli.ts';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { seedUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { provisionTunnel } from '../helpers/queue.ts';

/** The same CLI in this process (main() with its own database connection): for the long bad-input matrix. */
async function inProcess(env: Record<string, string>, args: string[]): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, env, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), progress: false });
  const text = code === 0 ? stdout : stderr;
  return { code, stdout, stderr, json: JSON.parse(text) as Record<string, unknown> };
}

/** The success contract (test/helpers/admin-cli.ts), and no secret anywhere in the output. */
function ok(r: CliRun): Record<string, unknown> {
  const json = cliOk(r);
  noSecrets(r.stdout);
  return json;
}

/** Secret values and secret column names collected while seeding; none may ever be printed. */
const secrets: string[] = [];
function noSecrets(stdout: string): void {
  for (const name of ['password_hash', 'secret_hash', 'secret_ciphertext', 'avatar_key', 'client_secret', '$argon2', 'svc_']) expect(stdout).not.toContain(name);
  for (const s of secrets) expect(stdout).not.toContain(s);
}

type Item = Record<string, unknown>;
const items = (j: Record<string, unknown>) => j.items as Item[];

/** Walks every page of a list with `--limit n`, checking each page's size; returns all items in order (in this process, as inProcess). */
async function allPages(env: Record<string, string>, args: string[], n: number): Promise<{ items: Item[]; pages: number }> {
  const out: Item[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const page = ok(await inProcess(env, [...args, '--limit', String(n), ...(cursor ? ['--cursor', cursor] : [])]));
    expect(Object.keys(page).sort()).toEqual(['items', 'next_cursor']);
    pages++;
    out.push(...items(page));
    cursor = page.next_cursor as string | null;
    if (cursor !== null) expect(items(page)).toHaveLength(n);
    expect(pages).toBeLessThan(50);
  } while (cursor !== null);
  return { items: out, pages };
}

describe('read and queue commands against PostgreSQL', () => {
  let t: TestDatabase;
  let env: Record<string, string>;
  const emails = ['ann@example.test', 'bob@example.test', 'cid@example.test'];
  const ids: Record<string, { user_id: string; account_id: string }> = {};
  let nodeA = '';
  let nodeB = '';
  const tunnels: Record<string, string> = {};
  let liveKey = '';
  let revokedKey = '';

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

  it('user list: every user with the balance as a JSON number, newest first, paged by cursor, no secrets', async () => {
    const one = ok(await runAdminCli(env, ['user', 'list']));
    expect(one.next_cursor).toBeNull();
    expect(items(one).map((u) => u.email)).toEqual([...emails].reverse());
    const ann = items(one).find((u) => u.email === emails[0])!;
    expect(Object.keys(ann).sort()).toEqual(['account_id', 'balance_usd', 'created_at', 'email', 'id', 'name', 'picture', 'role']);
    expect(ann).toMatchObject({ id: ids[emails[0]!]!.user_id, account_id: ids[emails[0]!]!.account_id, balance_usd: 30.25, role: 'owner', picture: null });
    expect(items(one).map((u) => u.balance_usd)).toEqual([7, 0.1, 30.25]);
    expect(new Date(ann.created_at as string).toISOString()).toBe(ann.created_at);

    const paged = await allPages(env, ['user', 'list'], 2);
    expect(paged.pages).toBe(2);
    expect(paged.items).toEqual(items(one));
  }, 120_000);

  it('user show: one object with tunnel counts and live keys; unknown email is not_found', async () => {
    const shown = ok(await runAdminCli(env, ['user', 'show', '--email', 'ANN@Example.test']));
    expect(shown).toMatchObject({ id: ids[emails[0]!]!.user_id, email: emails[0], balance_usd: 30.25, tunnels: { active: 2, pending: 1, provisioned: 1 }, active_api_keys: 1 });
    expect(shown).not.toHaveProperty('items');
    cliFailed(await runAdminCli(env, ['user', 'show', '--email', 'nobody@example.test']), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['user', 'show']), 2, 'usage_error');
  }, 120_000);

  it('tunnel list: newest first, health and settings as the API shows them, filters by email, status and node (id or name), money as numbers, paged', async () => {
    // Health as the collector records it; bob-1 deleted with a stored 'up' (shown 'unknown': not on an edge).
    await t.raw.query(`update tunnel set health = 'up' where id = any($1::uuid[])`, [[tunnels['ann-4'], tunnels['bob-1']]]);
    await t.raw.query(`update tunnel set health = 'down' where id = $1`, [tunnels['ann-1']]);
    try {
      const all = ok(await runAdminCli(env, ['tunnel', 'list']));
      expect(items(all).map((x) => x.name)).toEqual(['ann-4', 'bob-1', 'ann-3', 'ann-2', 'ann-1']);
      const first = items(all)[0]!;
      expect(Object.keys(first).sort()).toEqual(
        [
          'account_id', 'charged_rub', 'charged_usd', 'created_at', 'health', 'health_checked_at', 'id', 'name', 'node_id', 'node_name', 'origin_ip', 'ports', 'protected_ip',
          'protection', 'protocol', 'status', 'tunnel_name', 'updated_at',
        ].sort(),
      );
      expect(first).toMatchObject({ id: tunnels['ann-4'], node_id: nodeA, node_name: 'edge-a', status: 'provisioned', charged_usd: 1.11, charged_rub: 100, tunnel_name: 'tg-ann-4' });
      // health_checked_at: traffic.seen's check time (what a collection round writes), else the tunnel column's.
      const byName = Object.fromEntries(items(all).map((x) => [x.name as string, x]));
      expect(byName['ann-4']).toMatchObject({
        health: 'up', health_checked_at: '2026-11-25T10:00:01.234Z', ports: '80,443,1000-1010', protocol: 'tcp', protection: { syn_proxy: true, source_pps_limit: 5000, drop_fragments: false },
      });
      expect(byName['ann-1']).toMatchObject({ health: 'down', health_checked_at: '2026-11-24T09:00:00.000Z', ports: '*', protocol: 'both', protection: { syn_proxy: false, source_pps_limit: null, drop_fragments: true } });
      expect(byName['ann-2']).toMatchObject({ health: 'unknown', health_checked_at: null });
      expect(byName['bob-1']).toMatchObject({ status: 'deleted', health: 'unknown', health_checked_at: '2026-11-20T09:00:00.000Z' });

      // Filters and pages run the same main() in this process: each spawned run is a Node start, and the
      // spawned path is covered by the runs around them.
      const names = async (...args: string[]) => items(ok(await inProcess(env, ['tunnel', 'list', ...args]))).map((x) => x.name);
      expect(await names('--email', 'bob@example.test')).toEqual(['bob-1']);
      expect(await names('--status', 'active')).toEqual(['ann-3', 'ann-1']);
      expect(await names('--node', 'edge-b')).toEqual(['bob-1', 'ann-3']);
      expect(await names('--node', nodeA.toUpperCase())).toEqual(['ann-4', 'ann-2', 'ann-1']);
      expect(await names('--email', emails[0]!, '--node', nodeB, '--status', 'active')).toEqual(['ann-3']);
      expect(await names('--email', emails[2]!)).toEqual([]);

      const paged = await allPages(env, ['tunnel', 'list'], 2);
      expect(paged.pages).toBe(3);
      expect(paged.items).toEqual(items(all));
      const filtered = await allPages(env, ['tunnel', 'list', '--email', emails[0]!], 3);
      expect(filtered.items.map((x) => x.name)).toEqual(['ann-4', 'ann-3', 'ann-2', 'ann-1']);

      cliFailed(await runAdminCli(env, ['tunnel', 'list', '--email', 'nobody@example.test']), 1, 'not_found');
      cliFailed(await runAdminCli(env, ['tunnel', 'list', '--node', 'edge-zz']), 1, 'not_found');
      cliFailed(await runAdminCli(env, ['tunnel', 'list', '--status', 'running']), 2, 'usage_error');
    } finally {
      await t.raw.query(`update tunnel set health = 'unknown'`);
    }
  }, 120_000);

  it('ledger: one account, newest first, exact amounts, --since, paged', async () => {
    const l = ok(await runAdminCli(env, ['ledger', '--email', emails[0]!]));
    expect(items(l).map(({ id: _id, created_at: _c, ...rest }) => rest)).toEqual([
      { kind: 'purchase', amount_usd: -1.11, balance_after: 29.14, tunnel_id: tunnels['ann-1'], promocode: 'SPRING' },
      { kind: 'topup', amount_usd: 4.75, balance_after: 30.25, tunnel_id: null, promocode: null },
      { kind: 'topup', amount_usd: 25.5, balance_after: 25.5, tunnel_id: null, promocode: null },
    ]);
    expect(Object.keys(items(l)[0]!).sort()).toEqual(['amount_usd', 'balance_after', 'created_at', 'id', 'kind', 'promocode', 'tunnel_id']);
    const paged = await allPages(env, ['ledger', '--email', emails[0]!], 2);
    expect(paged.items).toEqual(items(l));

    // --since keeps entries at or after the instant: the newest entry's own time keeps it (and any of the same instant).
    const since = items(l)[0]!.created_at as string;
    const recent = items(ok(await runAdminCli(env, ['ledger', '--email', emails[0]!, '--since', since])));
    expect(recent.map((x) => x.kind)).toContain('purchase');
    expect(recent.every((x) => (x.created_at as string) >= since)).toBe(true);
    expect(items(ok(await runAdminCli(env, ['ledger', '--email', emails[0]!, '--since', '2999-01-01'])))).toEqual([]);
    expect(items(ok(await runAdminCli(env, ['ledger', '--email', emails[0]!, '--since', '2000-01-01T00:00:00Z'])))).toEqual(items(l));
    cliFailed(await runAdminCli(env, ['ledger', '--email', emails[0]!, '--since', 'yesterday']), 2, 'usage_error');
    cliFailed(await runAdminCli(env, ['ledger', '--email', 'nobody@example.test']), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['ledger']), 2, 'usage_error');
  }, 120_000);

  it('promocode list: percent or RUB amount as numbers, uses, expiry; paged', async () => {
    const p = ok(await runAdminCli(env, ['promocode', 'list']));
    expect(items(p).map(({ created_at: _c, ...rest }) => rest)).toEqual([
      { code: 'THIRD', percent: 5, amount_rub: null, max_uses: null, uses: 0, expires_at: null },
      { code: 'FLAT', percent: null, amount_rub: 49.9, max_uses: null, uses: 0, expires_at: null },
      { code: 'SPRING', percent: 15, amount_rub: null, max_uses: 10, uses: 0, expires_at: '2099-01-01T00:00:00.000Z' },
    ]);
    expect((await allPages(env, ['promocode', 'list'], 1)).items).toEqual(items(p));
  }, 120_000);

  it('apikey list: the account\'s keys with permission and revocation, never a key or its hash', async () => {
    const k = ok(await runAdminCli(env, ['apikey', 'list', '--email', emails[0]!]));
    const byId = Object.fromEntries(items(k).map((x) => [x.id, x]));
    expect(Object.keys(byId).sort()).toEqual([liveKey, revokedKey].sort());
    expect(Object.keys(byId[liveKey]!).sort()).toEqual(['created_at', 'id', 'last_used_at', 'permission', 'revoked_at', 'user_id']);
    expect(byId[liveKey]).toMatchObject({ permission: 'write', revoked_at: null, user_id: ids[emails[0]!]!.user_id });
    expect(byId[revokedKey]).toMatchObject({ permission: 'read', revoked_at: expect.stringMatching(/^\d{4}-\d{2}-\d{2}T.*Z$/) });
    expect((await allPages(env, ['apikey', 'list', '--email', emails[0]!], 1)).items).toEqual(items(k));
    expect(items(ok(await runAdminCli(env, ['apikey', 'list', '--email', emails[1]!])))).toEqual([]);
    cliFailed(await runAdminCli(env, ['apikey', 'list', '--email', 'nobody@example.test']), 1, 'not_found');
  }, 120_000);

  it('node list and node show: tunnels by status, live tunnels by health, the last status round', async () => {
    // Health as the collector records it (server/health/), and one status round for edge-a only.
    await t.raw.query(`update tunnel set health = 'up' where id = $1`, [tunnels['ann-1']]);
    await t.raw.query(`update tunnel set health = 'down' where id = $1`, [tunnels['ann-4']]);
    await t.raw.query(`update tunnel set health = 'up' where id = $1`, [tunnels['bob-1']]); // deleted: not counted
    // The round found edge-a's agent with an operation its watchdog had given up (op status `agent.stuck`).
    const stuck = { op: 'reconcile', step: 'nftables commit (nftables commit (812 messages))', since: '2026-11-25T09:58:30.000Z' };
    await t.raw.query(`insert into traffic.node_poll (node_id, polled_at, reachable, tunnels, stuck) values ($1, '2026-11-25T10:00:00Z', true, 3, $2::jsonb)`, [nodeA, JSON.stringify(stuck)]);
    try {
      const list = items(ok(await runAdminCli(env, ['node', 'list'])));
      const zero = { pending: 0, provisioning: 0, provisioned: 0, active: 0, failed: 0, deleting: 0, deleted: 0 };
      const a = { tunnels: { ...zero, active: 1, pending: 1, provisioned: 1 }, health: { up: 1, down: 1, unknown: 1 }, last_poll: { at: '2026-11-25T10:00:00.000Z', reachable: true }, stuck };
      const b = { tunnels: { ...zero, active: 1, deleted: 1 }, health: { up: 0, down: 0, unknown: 1 }, last_poll: null, stuck: null };
      expect(list.map(({ name, tunnels: byStatus, health, last_poll, stuck: s }) => ({ name, tunnels: byStatus, health, last_poll, stuck: s }))).toEqual([
        { name: 'edge-a', ...a },
        { name: 'edge-b', ...b },
      ]);
      expect(list[0]).toMatchObject({ pool_size: 6, free: 3, host_key: null, sellable: true, selling: false });
      expect(ok(await runAdminCli(env, ['node', 'show', '--id', nodeB]))).toMatchObject({ node_id: nodeB, pool_size: 6, free: 4, ...b });
      expect(ok(await runAdminCli(env, ['node', 'show', '--id', nodeA]))).toMatchObject({ node_id: nodeA, ...a });
      // The table shows it in one cell.
      const table = (await runAdminCli(env, ['node', 'show', '--id', nodeA, '--format', 'table'])).stdout;
      expect(table).toMatch(/^stuck +op=reconcile step=nftables commit \(nftables commit \(812 messages\)\) since=2026-11-25T09:58:30\.000Z$/m);
    } finally {
      await t.raw.query(`update tunnel set health = 'unknown'`);
      await t.raw.query(`delete from traffic.node_poll`);
    }
  }, 120_000);

  it('--format table: every read command takes it and prints the JSON result as aligned text; bad values are usage errors', async () => {
    // Every read command, and only they (a write prints a secret once, as JSON for the script that keeps it).
    const readNames = COMMANDS.filter((c) => / (list|show)$/.test(c.name) || c.name === 'ledger').map((c) => c.name);
    expect(readNames.length).toBeGreaterThanOrEqual(10);
    for (const c of COMMANDS) expect(c.options.some((o) => o.name === 'format'), c.name).toBe(readNames.includes(c.name));

    // A list: a header of the JSON's keys, one row per item with the same values, the cursor line when paged.
    const json = items(ok(await runAdminCli(env, ['user', 'list'])));
    const table = await runAdminCli(env, ['user', 'list', '--format', 'table']);
    expect({ code: table.code, stderr: table.stderr }).toEqual({ code: 0, stderr: '' });
    noSecrets(table.stdout);
    const lines = table.stdout.trimEnd().split('\n');
    expect(lines[0]!.split(/ {2,}/)).toEqual(Object.keys(json[0]!));
    expect(lines).toHaveLength(1 + json.length);
    for (const [i, u] of json.entries()) {
      expect(lines[i + 1]!.split(/ {2,}/)).toEqual(Object.values(u).map((v) => (v === null ? '-' : String(v))));
    }
    // Columns line up: each header name starts where its column's values start.
    const starts = (line: string) => [...line.matchAll(/(?:^| {2})(\S)/g)].map((m) => m.index! + (m.index === 0 ? 0 : 2));
    for (const l of lines.slice(1)) expect(starts(l)).toEqual(starts(lines[0]!));

    const paged = await runAdminCli(env, ['ledger', '--email', emails[0]!, '--limit', '1', '--format', 'table']);
    expect(paged.code).toBe(0);
    const cursor = (ok(await runAdminCli(env, ['ledger', '--email', emails[0]!, '--limit', '1'])).next_cursor as string);
    expect(paged.stdout.trimEnd().split('\n')).toEqual([expect.stringMatching(/^id +kind +amount_usd +balance_after +tunnel_id +promocode +created_at$/), expect.stringMatching(/^\d+ +purchase +-1\.11 +29\.14 /), `next_cursor: ${cursor}`]);
    expect((await runAdminCli(env, ['tunnel', 'list', '--email', emails[2]!, '--format', 'table'])).stdout).toBe('(none)\n');
    // A tunnel's row: its health, check time and settings, protection as key=value pairs.
    const tunnelTable = (await runAdminCli(env, ['tunnel', 'list', '--status', 'provisioned', '--format', 'table'])).stdout.trimEnd().split('\n');
    expect(tunnelTable[0]).toMatch(/ status +health +health_checked_at +ports +protocol +protection +charged_usd /);
    expect(tunnelTable[1]).toMatch(/ provisioned +unknown +2026-11-25T10:00:01\.234Z +80,443,1000-1010 +tcp +syn_proxy=true source_pps_limit=5000 drop_fragments=false max_flows=65536 alert_pps=- +1\.11 /);

    // One object: a key and its value per line; nested counts show what is there.
    const shown = await runAdminCli(env, ['user', 'show', '--email', emails[0]!, '--format', 'table']);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toMatch(/^email +ann@example\.test$/m);
    expect(shown.stdout).toMatch(/^balance_usd +30\.25$/m);
    expect(shown.stdout).toMatch(/^tunnels +(?=.*active=2)(?=.*pending=1)(?=.*provisioned=1).*$/m);
    const nodes = await runAdminCli(env, ['node', 'list', '--format', 'table']);
    // tunnels (0 counts left out), health, last_poll ("-": never polled), stuck ("-": none), created_at.
    expect(nodes.stdout.split('\n')[1]).toMatch(/^[0-9a-f-]{36} +edge-a +192\.0\.2\.10 .* pending=1 provisioned=1 active=1 +unknown=3 +- +- +\d{4}-\S+$/);
    expect(nodes.stdout.split('\n')[2]).toMatch(/^[0-9a-f-]{36} +edge-b +192\.0\.2\.11 .* active=1 deleted=1 +unknown=1 +- +- +\d{4}-\S+$/);

    // JSON stays the default and --format json is the same bytes.
    expect((await runAdminCli(env, ['promocode', 'list', '--format', 'json'])).stdout).toBe((await runAdminCli(env, ['promocode', 'list'])).stdout);

    // Bad input: clear usage errors (exit 2), nothing on stdout.
    cliFailed(await inProcess(env, ['user', 'list', '--format', 'xml']), 2, 'usage_error', /--format must be one of json, table; got "xml"/);
    cliFailed(await inProcess(env, ['user', 'list', '--format']), 2, 'usage_error', /--format needs a value/);
    cliFailed(await inProcess(env, ['user', 'list', '--format', 'table', '--format', 'json']), 2, 'usage_error', /--format was given 2 times/);
    cliFailed(await inProcess(env, ['balance', 'add', '--email', emails[0]!, '--usd', '1', '--format', 'table']), 2, 'usage_error', /unknown option --format/);
    // Failures stay JSON with --format table (a script may still parse them).
    cliFailed(await runAdminCli(env, ['user', 'show', '--email', 'nobody@example.test', '--format', 'table']), 1, 'not_found');
  }, 120_000);

  it('bad --limit is a usage error; a cursor not printed by the same list is invalid_request', async () => {
    for (const limit of ['0', '1001', 'ten', '-1', '1.5']) cliFailed(await inProcess(env, ['user', 'list', `--limit=${limit}`]), 2, 'usage_error');
    cliFailed(await runAdminCli(env, ['tunnel', 'list', '--limit', '0']), 2, 'usage_error');
    expect(items(ok(await runAdminCli(env, ['user', 'list', '--limit', '1000'])))).toHaveLength(3);
    const userCursor = ok(await runAdminCli(env, ['user', 'list', '--limit', '1'])).next_cursor as string;
    expect(typeof userCursor).toBe('string');
    // The cursor is opaque: no raw id in it.
    const users = items(ok(await runAdminCli(env, ['user', 'list'])));
    for (const u of users) expect(userCursor).not.toContain(u.id as string);
    cliFailed(await runAdminCli(env, ['tunnel', 'list', '--cursor', userCursor]), 1, 'invalid_request');
    for (const other of [['promocode', 'list'], ['apikey', 'list', '--email', emails[0]!], ['ledger', '--email', emails[0]!]]) {
      cliFailed(await inProcess(env, [...other, '--cursor', userCursor]), 1, 'invalid_request');
    }
    for (const bad of ['garbage', 'e30', Buffer.from('["user","x","y"]').toString('base64url'), Buffer.from(JSON.stringify(['ledger', "1; drop table tunnel"])).toString('base64url')]) {
      cliFailed(await inProcess(env, ['user', 'list', '--cursor', bad]), 1, 'invalid_request');
      cliFailed(await inProcess(env, ['ledger', '--email', emails[0]!, '--cursor', bad]), 1, 'invalid_request');
    }
    cliFailed(await inProcess(env, ['user', 'list', '--bogus']), 2, 'usage_error');
    cliFailed(await inProcess(env, ['user', 'list', 'extra']), 2, 'usage_error');
    cliFailed(await inProcess(env, ['ledger', 'list', '--email', emails[0]!]), 2, 'usage_error');
  }, 120_000);

  it('node reconcile queues one reconcile job in pg-boss (a repeat names the same live job); unknown ids are not_found', async () => {
    const r = ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeA]));
    expect(Object.keys(r).sort()).toEqual(['job_id', 'queued']);
    expect(r.queued).toBe(true);
    const { rows } = await t.raw.query(`select name, state::text, data from pgboss.job where id = $1`, [r.job_id]);
    expect(rows).toEqual([{ name: 'edge-job', state: 'created', data: { kind: 'reconcile', nodeId: nodeA, reason: 'operator' } }]);
    // One live job per node reconcile: the repeat answers the queued one and adds nothing.
    expect(ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeA.toUpperCase()]))).toEqual(r);
    const n = await t.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data @> $1::jsonb`, [JSON.stringify({ kind: 'reconcile', nodeId: nodeA })]);
    expect(n.rows[0]!.n).toBe(1);

    cliFailed(await runAdminCli(env, ['node', 'reconcile', '--id', randomUUID()]), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['node', 'reconcile', '--id', 'edge-a']), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['node', 'reconcile']), 2, 'usage_error');
  }, 120_000);

  it('tunnel repair queues a repair job for the tunnel (one live job per tunnel); nothing to repair is invalid_state', async () => {
    const r = ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-3']!]));
    expect(Object.keys(r).sort()).toEqual(['job_id', 'queued']);
    expect(r.queued).toBe(true);
    const { rows } = await t.raw.query(`select name, state::text, data, singleton_key from pgboss.job where id = $1`, [r.job_id]);
    expect(rows).toEqual([{ name: 'edge-job', state: 'created', data: { tunnelId: tunnels['ann-3'], nodeId: nodeB, repair: true }, singleton_key: nodeB }]);
    expect(ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-3']!]))).toEqual(r);
    const n = await t.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data->>'tunnelId' = $1`, [tunnels['ann-3']]);
    expect(n.rows[0]!.n).toBe(1);
    // A provisioned tunnel too.
    const p = ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-4']!]));
    expect(p.job_id).not.toBe(r.job_id);

    const before = (await t.raw.query<{ n: number }>('select count(*)::int as n from pgboss.job')).rows[0]!.n;
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-2']!]), 1, 'invalid_state'); // pending: never on an edge
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['bob-1']!]), 1, 'invalid_state'); // deleted
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', randomUUID()]), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', 'not-a-uuid']), 1, 'not_found');
    expect((await t.raw.query<{ n: number }>('select count(*)::int as n from pgboss.job')).rows[0]!.n).toBe(before);
  }, 120_000);

  it('--help lists the new commands', async () => {
    const r = await runAdminCli(env, ['--help']);
    expect(r.code).toBe(0);
    for (const c of ['user list', 'user show', 'tunnel list', 'ledger', 'promocode list', 'apikey list', 'node reconcile', 'tunnel repair']) expect(r.stdout).toContain(`  ${c} `);
  }, 120_000);
});

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('queue commands drive a real agent through the gateway worker', () => {
  let gw: RunningGateway;
  let edge: TestEdge;

  beforeAll(async () => {
    // The periodic reconcile is an hour away and the connection stays up: only the commands repair here.
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 5000, edgeJobTimeoutMs: 5000, edgeReconcileSeconds: 3600 }, pool: '203.0.113.96/28' }));
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  it('tunnel repair re-applies a provisioned tunnel the edge lost; node reconcile restores the node', async () => {
    const user = await seedUser(gw.testDb.db);
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'repair', origin_ip: '8.8.4.4' } });
    const tun = bought.body.tunnel as { id: string; protected_ip: string; tunnel_name: string };
    // 200 or 202 (how fast the first SSH handshake is depends on the host), then provisioned.
    await provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, tun.id);
    expect(edge.count('apply', tun.id)).toBe(1);
    const env = { DATABASE_URL: gw.testDb.url };
    // Provisioned, not activated: the edge holds the link and its isolation, and no DNAT (docs/CONTRACTS.md
    // "Dataplane"); lost are the link and the tunnel's counter-map element, and a repair must bring back those
    // and no DNAT.
    const counterElements = () => edge.netns.run('nft', 'list', 'map', 'ip', 'tunnelgate', 'tunnel_counters');
    const lose = () => {
      edge.netns.run('ip', 'link', 'del', 'dev', tun.tunnel_name);
      edge.netns.run('nft', 'delete', 'element', 'ip', 'tunnelgate', 'tunnel_counters', `{ ${tun.protected_ip} }`);
      expect(edge.links()).not.toContain(tun.tunnel_name);
      expect(counterElements()).not.toContain(tun.protected_ip);
    };
    const restored = async () => {
      await until('link and element restored', async () => edge.links().includes(tun.tunnel_name) && counterElements().includes(tun.protected_ip), 30_000);
      expect(edge.mapElements()).not.toContain(tun.protected_ip);
    };
    const jobState = async (id: unknown) => (await gw.testDb.raw.query<{ state: string }>('select state::text from pgboss.job where id = $1', [id])).rows[0]?.state;

    lose();
    const r = ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tun.id]));
    await restored();
    await until('repair job completed', async () => (await jobState(r.job_id)) === 'completed');
    expect(edge.count('apply', tun.id)).toBe(2);
    // Re-applied as it stands: the status did not move.
    expect((await gw.testDb.raw.query('select status from tunnel where id = $1', [tun.id])).rows[0].status).toBe('provisioned');

    lose();
    const reconciles = edge.calls.filter((c) => c.call === 'reconcile').length;
    const n = ok(await runAdminCli(env, ['node', 'reconcile', '--id', edge.nodeId]));
    await restored();
    await until('reconcile job completed', async () => (await jobState(n.job_id)) === 'completed');
    expect(edge.calls.filter((c) => c.call === 'reconcile').length).toBe(reconciles + 1);
    expect(edge.count('apply', tun.id)).toBe(2);
  }, 120_000);
});

describe('queue and read commands through a running gateway on the embedded database (admin socket)', () => {
  it('node reconcile queues on the gateway\'s own queue (one live job), and on the database directly once the gateway stopped', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-cli-read-'));
    const env = { DATA_DIR: dir };
    let gateway: GatewayProcess | undefined;
    try {
      // The edge worker's jobs for an unreachable node keep retrying (it stays live) while this runs.
      gateway = await startGatewayProcess({ DATABASE_URL: '', DATA_DIR: dir, LOG_LEVEL: 'info', EDGE_WORKER: 'true' });
      // A node on a closed local port: its jobs fail to connect and wait to retry, so they stay live.
      const node = ok(await runAdminCli(env, ['node', 'add', '--name', 'edge-e', '--public-ip', '192.0.2.20', '--ssh-host', '127.0.0.1', '--ssh-port', '9', '--pool', '198.18.9.0/30', '--host-key', `SHA256:${'B'.repeat(43)}`]));
      const nodeId = node.node_id as string;
      ok(await runAdminCli(env, ['user', 'create', '--email', 'e@example.test', '--name', 'E', '--password', '-', '--balance-usd', '3'], 'long enough pw\n'));
      expect(items(ok(await runAdminCli(env, ['user', 'list']))).map((u) => u.email)).toEqual(['e@example.test']);

      const r = ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeId]));
      expect(r).toMatchObject({ queued: true, job_id: expect.any(String) });
      // Its attempts fail to connect and wait to retry (EDGE_RETRY_LIMIT 10): still live, so a repeat
      // through the gateway's queue names the same job.
      expect(ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeId]))).toEqual(r);
      cliFailed(await runAdminCli(env, ['node', 'reconcile', '--id', randomUUID()]), 1, 'not_found');
      cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', randomUUID()]), 1, 'not_found');

      gateway.kill('SIGTERM');
      expect(await gateway.exited).toBe(0);
      // No gateway now: the CLI opens the embedded database and its queue itself, and finds the live job.
      expect(ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeId]))).toEqual(r);
      // Open its database and find the operator's job in its queue.
      const db = await openDatabase(loadConfig({ DATA_DIR: dir }));
      try {
        const rows = await db.query<{ data: unknown }>(`select data from pgboss.job where id = ?::uuid`, [r.job_id]);
        expect(rows).toEqual([{ data: { kind: 'reconcile', nodeId, reason: 'operator' } }]);
      } finally {
        await db.close();
      }
    } finally {
      gateway?.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
