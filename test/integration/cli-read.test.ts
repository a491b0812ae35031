// The admin CLI's read and queue commands of docs/CONTRACTS.md "Admin CLI", run as operators run them: the real
// `server/cli/admin.ts` in a child process, against a real PostgreSQL database (and, at the end, against
// a running gateway on the embedded database through its admin socket). Checked by stdout JSON, exit
// status and, through a plain pg pool, what is in the database (pg-boss's job table for the queue
// commands). With a real agent (root): `tunnel repair` re-applies a provisioned tunnel the edge lost and
// `node reconcile` sends the node its desired set, each through the queue.
import { describe, expect, it } from 'vitest';
import { main } from '../../server/cli/admin.ts';
import { COMMANDS } from '../../server/cli/commands.ts';
import { cliFailed, runAdminCli, type CliRun } from '../helpers/admin-cli.ts';
import { emails, env, ids, type Item, items, liveKey, nodeA, nodeB, noSecrets, ok, revokedKey, t, tunnels, useCliWorld } from './cli-world.ts';

/** The same CLI in this process (main() with its own database connection): for the long bad-input matrix. */
async function inProcess(env: Record<string, string>, args: string[]): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, env, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), progress: false });
  const text = code === 0 ? stdout : stderr;
  return { code, stdout, stderr, json: JSON.parse(text) as Record<string, unknown> };
}

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

describe('read commands against PostgreSQL', () => {
  useCliWorld();

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

  it('--help lists the new commands', async () => {
    const r = await runAdminCli(env, ['--help']);
    expect(r.code).toBe(0);
    for (const c of ['user list', 'user show', 'tunnel list', 'ledger', 'promocode list', 'apikey list', 'node reconcile', 'tunnel repair']) expect(r.stdout).toContain(`  ${c} `);
  }, 120_000);
});
