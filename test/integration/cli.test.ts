// The admin CLI as operators run it: the real `server/cli/admin.ts` in a child process against a real
// PostgreSQL database, checked by its stdout JSON, its exit status and, through a plain pg pool, what
// it wrote. Plus loadSecrets against the database (race-safety, never regenerating, env override) and
// the exhaustive usage-error matrix run in-process through main() (no database needed for those).
import { readFileSync } from 'node:fs';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticateApiKey } from '../../server/auth/api-keys.ts';
import { main } from '../../server/cli/admin.ts';
import { getClient } from '../../server/domain/clients.ts';
import { verifyPassword } from '../../server/auth/passwords.ts';
import { ApiError } from '../../server/domain/errors.ts';
import { ENV_MARK, loadSecrets, SECRET_ENV, SECRET_NAMES, SecretsError } from '../../server/secrets.ts';
import { adminCli, cliFailed, cliOk, expectCliRefusals, spawnAdminCli, type CliRefusal } from '../helpers/admin-cli.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

const sha256hex = (s: string) => createHash('sha256').update(s).digest('hex');
const PASSWORD_WARNING = 'warning: --password on the command line is visible in ps and shell history; use --password - and pipe it';

/** Row counts (and the rate) of every table the CLI writes, to show that a refusal wrote nothing. */
async function snapshot(t: TestDatabase) {
  const tables = ['account', 'app_user', 'api_key', 'ledger_entry', 'edge_node', 'protected_ip', 'promocode', 'oauth_client', 'server_secret'];
  const out: Record<string, unknown> = {};
  for (const table of tables) out[table] = (await t.raw.query(`select count(*)::int as n from ${table}`)).rows[0].n;
  out.rate = (await t.raw.query(`select value from setting where key = 'usd_rub_rate'`)).rows[0]?.value;
  out.balances = (await t.raw.query(`select balance_usd from account order by id`)).rows.map((r) => r.balance_usd);
  out.revoked = (await t.raw.query(`select count(*)::int as n from api_key where revoked_at is not null`)).rows[0].n;
  out.clients = (await t.raw.query(`select client_id, secret_ciphertext from oauth_client order by client_id`)).rows;
  return out;
}

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

describe('admin CLI, every command against PostgreSQL', () => {
  const email = 'Operator.One@Example.TEST';
  let userId = '';
  let accountId = '';

  it('user create and balance add: account, user, ledger rows in exact decimals', async () => {
    const run = await adminCli(t.url, ['user', 'create', '--email', email, '--name', 'Operator One', '--password', 'correct horse battery', '--balance-usd', '25.50', '--role', 'viewer', '--picture', 'https://img.example/a.png']);
    // A password given as an argument still works (same JSON, exit 0), with a warning on stderr that
    // names the safe form and never repeats the password.
    expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: `${PASSWORD_WARNING}\n` });
    const created = cliOk({ ...run, stderr: '' });
    expect(Object.keys(created).sort()).toEqual(['account_id', 'user_id']);
    userId = created.user_id as string;
    accountId = created.account_id as string;
    const { rows: users } = await t.raw.query('select account_id, email, name, role, picture, password_hash from app_user where id = $1', [userId]);
    expect(users[0]).toMatchObject({ account_id: accountId, email: 'operator.one@example.test', name: 'Operator One', role: 'viewer', picture: 'https://img.example/a.png' });
    expect(users[0].password_hash).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$/);
    expect(users[0].password_hash).not.toContain('correct horse');

    const added = cliOk(await adminCli(t.url, ['balance', 'add', '--email', 'operator.one@example.test', '--usd', '4.75']));
    expect(added).toEqual({ balance: 30.25 });
    const { rows: acc } = await t.raw.query('select balance_usd from account where id = $1', [accountId]);
    expect(acc[0].balance_usd).toBe('30.25');
    const { rows: ledger } = await t.raw.query('select amount_usd, balance_after, kind from ledger_entry where account_id = $1 order by id', [accountId]);
    expect(ledger).toEqual([
      { amount_usd: '25.50', balance_after: '25.50', kind: 'topup' },
      { amount_usd: '4.75', balance_after: '30.25', kind: 'topup' },
    ]);
  });

  it('apikey create stores only a hash, and apikey revoke makes the key fail authentication', async () => {
    const created = cliOk(await adminCli(t.url, ['apikey', 'create', '--email', email, '--permission', 'read']));
    expect(Object.keys(created).sort()).toEqual(['id', 'key']);
    const key = created.key as string;
    const m = /^svc_([0-9a-f]{32})_([A-Za-z0-9_-]{43})$/.exec(key);
    expect(m).not.toBeNull();
    expect(m![1]).toBe((created.id as string).replace(/-/g, ''));
    const { rows } = await t.raw.query('select * from api_key where id = $1', [created.id]);
    expect(rows[0]).toMatchObject({ account_id: accountId, user_id: userId, permission: 'read', revoked_at: null, secret_hash: sha256hex(m![2]!) });
    expect(JSON.stringify(rows[0])).not.toContain(m![2]);
    await expect(authenticateApiKey(t.db, key)).resolves.toMatchObject({ accountId, permission: 'read' });

    const revoked = cliOk(await adminCli(t.url, ['apikey', 'revoke', '--id', (created.id as string).toUpperCase()]));
    expect(revoked).toEqual({ id: created.id, revoked: true });
    const { rows: after } = await t.raw.query('select revoked_at from api_key where id = $1', [created.id]);
    expect(after[0].revoked_at).toBeInstanceOf(Date);
    await expect(authenticateApiKey(t.db, key)).rejects.toBeInstanceOf(ApiError);
  });

  it('client create stores the secret encrypted; client rotate-secret replaces it', async () => {
    const uris = ['https://app.example/callback', 'http://localhost:3000/cb?x=1'];
    const created = cliOk(await adminCli(t.url, ['client', 'create', '--name', 'Panel', '--redirect-uri', uris[0]!, '--redirect-uri', uris[1]!]));
    expect(Object.keys(created).sort()).toEqual(['api_access', 'client_id', 'client_secret', 'public']);
    // docs/CONTRACTS.md "Admin CLI": without --api-access a client's tokens get no access to the tunnel API.
    expect(created.api_access).toBe('none');
    const clientId = created.client_id as string;
    const secret = created.client_secret as string;
    expect(clientId).toMatch(/^cl_[a-z2-7]{16}$/);
    expect(secret).toMatch(/^[A-Za-z0-9_-]{43,}$/);
    expect(Buffer.from(secret, 'base64url').length).toBeGreaterThanOrEqual(32);

    const { rows } = await t.raw.query('select * from oauth_client where client_id = $1', [clientId]);
    expect(rows[0]).toMatchObject({ name: 'Panel', redirect_uris: uris });
    expect(rows[0].secret_ciphertext).toMatch(/^v1\./);
    expect(JSON.stringify(rows[0])).not.toContain(secret);
    // Nor under any other encoding a lazy implementation might pick.
    expect(JSON.stringify(rows[0])).not.toContain(Buffer.from(secret, 'base64url').toString('hex'));
    // The gateway (same database, same secrets) decrypts it back.
    const { secrets } = await loadSecrets(t.db, {});
    const client = await getClient(t.db, secrets.secretEncryptionKey, clientId);
    expect(client).toMatchObject({ client_id: clientId, name: 'Panel', redirect_uris: uris, client_secret: secret });

    const rotated = cliOk(await adminCli(t.url, ['client', 'rotate-secret', '--client-id', clientId]));
    expect(rotated.client_id).toBe(clientId);
    expect(rotated.client_secret).not.toBe(secret);
    const after = await getClient(t.db, secrets.secretEncryptionKey, clientId);
    expect(after!.client_secret).toBe(rotated.client_secret);
    expect(after!.secret_rotated_at.getTime()).toBeGreaterThan(client!.secret_rotated_at.getTime());
    const { rows: raw } = await t.raw.query('select secret_ciphertext from oauth_client where client_id = $1', [clientId]);
    expect(raw[0].secret_ciphertext).not.toBe(rows[0].secret_ciphertext);
    expect(raw[0].secret_ciphertext).not.toContain(rotated.client_secret as string);
  });

  it('node add creates the pool; two processes at once generate the gateway keys once and print the same ones', async () => {
    const [a, b] = await Promise.all([
      adminCli(t.url, ['node', 'add', '--name', 'edge-a', '--public-ip', '192.0.2.10', '--ssh-host', 'edge-a.example', '--pool', '198.18.0.0/24', '--host-key', `SHA256:${'A'.repeat(43)}`]),
      adminCli(t.url, ['node', 'add', '--name', 'edge-b', '--public-ip', '192.0.2.11', '--ssh-host', '10.0.0.2', '--ssh-port', '2222', '--pool', '198.18.1.0/30']),
    ]);
    const na = cliOk(a);
    const nb = cliOk(b);
    expect(Object.keys(na).sort()).toEqual(['gateway_job_public_key', 'gateway_ssh_public_key', 'node_id', 'pool_size']);
    expect(na.pool_size).toBe(254);
    expect(nb.pool_size).toBe(2);
    expect(na.gateway_ssh_public_key).toMatch(/^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI[A-Za-z0-9+/]{43} tunnelgate-gateway$/);
    expect(nb.gateway_ssh_public_key).toBe(na.gateway_ssh_public_key);
    expect(nb.gateway_job_public_key).toEqual(na.gateway_job_public_key);
    const jwk = na.gateway_job_public_key as Record<string, string>;
    expect(jwk).toMatchObject({ kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig' });
    expect(jwk).not.toHaveProperty('d');

    const { rows: nodes } = await t.raw.query('select id, name, public_ip, ssh_host, ssh_port, host_key from edge_node order by name');
    expect(nodes).toEqual([
      { id: na.node_id, name: 'edge-a', public_ip: '192.0.2.10', ssh_host: 'edge-a.example', ssh_port: 52222, host_key: `SHA256:${'A'.repeat(43)}` },
      { id: nb.node_id, name: 'edge-b', public_ip: '192.0.2.11', ssh_host: '10.0.0.2', ssh_port: 2222, host_key: null },
    ]);
    const { rows: pool } = await t.raw.query(
      `select node_id, count(*)::int as n, min(position) as lo, max(position) as hi, min(inner_index) as inner_lo, max(inner_index) as inner_hi,
              count(tunnel_id)::int as taken from protected_ip group by node_id order by n desc`,
    );
    expect(pool).toEqual([
      { node_id: na.node_id, n: 254, lo: 0, hi: 253, inner_lo: expect.any(Number), inner_hi: expect.any(Number), taken: 0 },
      { node_id: nb.node_id, n: 2, lo: 0, hi: 1, inner_lo: expect.any(Number), inner_hi: expect.any(Number), taken: 0 },
    ]);
    // Inner /30 numbers are allocated across nodes (docs/NODES.md): the two nodes, added at the same
    // moment, got two contiguous runs that do not overlap and together are 0..255.
    const runs = pool.map((r) => [r.inner_lo, r.inner_hi] as [number, number]).sort((x, y) => x[0] - y[0]);
    expect(runs[0]![0]).toBe(0);
    expect(runs[1]![0]).toBe(runs[0]![1] + 1);
    expect(runs[1]![1]).toBe(255);
    expect(pool.map((r) => r.inner_hi - r.inner_lo + 1)).toEqual([254, 2]);
    expect((await t.raw.query(`select 1 from protected_ip where ip in ('198.18.0.0', '198.18.0.255')`)).rowCount).toBe(0);
    // Every secret stored exactly once, and the public key printed matches the stored private key.
    const { rows: stored } = await t.raw.query('select name, value from server_secret order by name');
    expect(stored.map((r) => r.name)).toEqual([...SECRET_NAMES].sort());
    const { secrets } = await loadSecrets(t.db, {});
    expect(secrets.gatewaySshKey.publicKey).toBe(na.gateway_ssh_public_key);
    expect(secrets.jobSigningKey.publicJwk).toEqual(jwk);
  });

  it('rate set and promocode create', async () => {
    const [rate, pct, amt] = await Promise.all([
      adminCli(t.url, ['rate', 'set', '--usd-rub', '092.5000']),
      adminCli(t.url, ['promocode', 'create', '--code', 'spring10', '--percent', '10', '--max-uses', '3', '--expires', '2099-06-01T12:00:00+03:00']),
      adminCli(t.url, ['promocode', 'create', '--code', 'MINUS150', '--amount-rub', '150']),
    ]);
    expect(cliOk(rate)).toEqual({ usd_rub_rate: 92.5 });
    expect(typeof rate.json.usd_rub_rate).toBe('number');
    expect((await t.raw.query(`select value from setting where key = 'usd_rub_rate'`)).rows[0].value).toBe('92.5');
    expect(cliOk(pct)).toEqual({ code: 'SPRING10' });
    expect(cliOk(amt)).toEqual({ code: 'MINUS150' });
    const { rows } = await t.raw.query('select code, percent, amount_rub, max_uses, uses, expires_at from promocode order by code');
    expect(rows).toEqual([
      { code: 'MINUS150', percent: null, amount_rub: '150.00', max_uses: null, uses: 0, expires_at: null },
      { code: 'SPRING10', percent: 10, amount_rub: null, max_uses: 3, uses: 0, expires_at: new Date('2099-06-01T09:00:00Z') },
    ]);
  });

  it('refuses bad input with exit 1 or 2, an error JSON on stderr, and writes nothing', async () => {
    const before = await snapshot(t);
    const cases: CliRefusal[] = [
      [[], 2, 'usage_error', /no command/],
      [['user', 'create', '--email', 'x@example.test', '--name', 'X', '--password', 'long enough pw', '--admin'], 2, 'usage_error', /unknown option --admin/],
      [['rate', 'set', '--usd-rub', '90', '--usd-rub', '91'], 2, 'usage_error', /--usd-rub was given 2 times/],
      [['user', 'create', '--email', email, '--name', 'Dup', '--password', 'long enough pw'], 1, 'invalid_request', /already exists/],
      [['user', 'create', '--email', 'not-an-email', '--name', 'X', '--password', 'long enough pw'], 1, 'invalid_request', /email/],
      [['balance', 'add', '--email', 'nobody@example.test', '--usd', '5'], 1, 'not_found', /nobody@example.test/],
      [['balance', 'add', '--email', email, '--usd=-1000'], 1, 'invalid_request', /negative/],
      [['apikey', 'revoke', '--id', '00000000-0000-4000-8000-000000000000'], 1, 'not_found', /no API key/],
      [['client', 'create', '--name', 'Evil', '--redirect-uri', 'https://ok.example/cb', '--redirect-uri', 'https://app.example/cb#frag'], 1, 'invalid_request', /fragment/],
      [['client', 'rotate-secret', '--client-id', 'cl_aaaaaaaaaaaaaaaa'], 1, 'not_found', /no OAuth client/],
      [['node', 'add', '--name', 'edge-c', '--public-ip', '192.0.2.12', '--ssh-host', 'h', '--pool', '198.18.0.128/25'], 1, 'invalid_request', /overlaps node edge-a's pool 198\.18\.0\.0\/24/],
      [['rate', 'set', '--usd-rub', '0'], 1, 'invalid_request', /positive/],
      [['promocode', 'create', '--code', 'spring10', '--percent', '5'], 1, 'invalid_request', /already exists/],
      [['promocode', 'create', '--code', 'OLD', '--percent', '5', '--expires', '2001-01-01'], 1, 'invalid_request', /past/],
    ];
    await expectCliRefusals(t.url, cases);
    expect(await snapshot(t)).toEqual(before);
    // A bound for a hang, not a timing assertion.
  }, 300_000);
});

describe('--password - (docs/CONTRACTS.md "Admin CLI")', () => {
  /** Starts the CLI with stdin open; `feed` is written only after the process's argv has been read from /proc. */
  function cliWithStdin(args: string[], feed: string) {
    const child = spawnAdminCli({ DATABASE_URL: t.url }, args);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
    return { child, done, feed: () => child.stdin.end(feed) };
  }

  /** The process's argv and environment as `ps` and /proc show them, once it runs the CLI. */
  async function processView(pid: number): Promise<string> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
      if (cmdline.includes('admin.ts')) return `${cmdline}\n${readFileSync(`/proc/${pid}/environ`, 'utf8')}`;
      if (Date.now() > deadline) throw new Error('the CLI process did not start');
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it('user create --password - reads the first line of stdin; the password is in neither argv nor the environment', async () => {
    const password = `stdin pw ${Date.now()} ünïcode`;
    const email = `stdin-${Date.now()}@example.test`;
    const run = cliWithStdin(['user', 'create', '--email', email, '--name', 'Stdin User', '--password', '-'], `${password}\nsecond line is ignored\n`);
    const view = await processView(run.child.pid!);
    expect(view).not.toContain(password);
    run.feed();
    const r = await run.done;
    expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
    const created = JSON.parse(r.stdout) as { user_id: string };
    const { rows } = await t.raw.query('select password_hash from app_user where id = $1', [created.user_id]);
    expect(await verifyPassword(password, rows[0].password_hash)).toBe(true);
    expect(await verifyPassword('-', rows[0].password_hash)).toBe(false);
    expect(await verifyPassword('second line is ignored', rows[0].password_hash)).toBe(false);
  }, 60_000);

  it('an empty first line is a usage error and writes nothing', async () => {
    const before = await snapshot(t);
    const run = cliWithStdin(['user', 'create', '--email', `empty-${Date.now()}@example.test`, '--name', 'E', '--password', '-'], '\n');
    run.feed();
    const r = await run.done;
    expect(r.code).toBe(2);
    expect(JSON.parse(r.stderr).error).toBe('usage_error');
    expect(r.stdout).toBe('');
    expect(await snapshot(t)).toEqual(before);
  }, 60_000);
});

describe('help and environment failures', () => {
  it('--help prints usage on stdout with exit 0; a broken environment exits 3 with configuration_error', async () => {
    const [help, cmdHelp, badEnv, noDb] = await Promise.all([
      adminCli(t.url, ['--help']),
      adminCli(t.url, ['node', 'add', '--help']),
      adminCli(t.url, ['client', 'create', '--name', 'X', '--redirect-uri', 'https://x.example/cb'], { SECRET_ENCRYPTION_KEY: 'too-short' }),
      adminCli('postgresql://nobody:nothing@127.0.0.1:1/none', ['rate', 'set', '--usd-rub', '90']),
    ]);
    expect(help.code).toBe(0);
    expect(help.stderr).toBe('');
    for (const c of ['user create', 'balance add', 'apikey create', 'apikey revoke', 'client create', 'client rotate-secret', 'node add', 'rate set', 'promocode create']) {
      expect(help.stdout).toContain(c);
    }
    expect(cmdHelp.code).toBe(0);
    for (const o of ['--name', '--public-ip', '--ssh-host', '--ssh-port', '--pool', '--host-key']) expect(cmdHelp.stdout).toContain(o);
    cliFailed(badEnv, 3, 'configuration_error', /SECRET_ENCRYPTION_KEY/);
    cliFailed(noDb, 3, 'server_error');
  });
});

describe('server secrets in the database', () => {
  let fresh: TestDatabase;
  beforeAll(async () => {
    fresh = await createTestDatabase();
  });
  afterAll(async () => {
    await fresh?.drop();
  });

  it('concurrent loads on an empty table generate each secret exactly once, and later loads reuse it', async () => {
    const loads = await Promise.all(Array.from({ length: 8 }, () => loadSecrets(fresh.db, {})));
    const first = loads[0]!.secrets;
    for (const l of loads) {
      expect(l.secrets.accessTokenKey.equals(first.accessTokenKey)).toBe(true);
      expect(l.secrets.secretEncryptionKey.equals(first.secretEncryptionKey)).toBe(true);
      expect(l.secrets.cookieKeys).toEqual(first.cookieKeys);
      expect(l.secrets.gatewaySshKey).toEqual(first.gatewaySshKey);
      expect(l.secrets.jobSigningKey.publicJwk).toEqual(first.jobSigningKey.publicJwk);
    }
    // Exactly one caller won each insert.
    const generated = loads.flatMap((l) => l.generated).sort();
    expect(generated).toEqual([...SECRET_NAMES].sort());
    const again = await loadSecrets(fresh.db, {});
    expect(again.generated).toEqual([]);
    expect(Object.values(again.sources)).toEqual(SECRET_NAMES.map(() => 'database'));
    expect(again.secrets.gatewaySshKey.publicKey).toBe(first.gatewaySshKey.publicKey);
    expect(JSON.stringify(again.secrets)).toBe('"[server secrets]"');
  });

  it('an unusable stored secret is an error, never silently regenerated', async () => {
    await fresh.raw.query(`update server_secret set value = 'tampered' where name = 'secret_encryption_key'`);
    await expect(loadSecrets(fresh.db, {})).rejects.toThrow(/stored server secret secret_encryption_key is unusable/);
    expect((await fresh.raw.query(`select value from server_secret where name = 'secret_encryption_key'`)).rows[0].value).toBe('tampered');
    // The CLI reports it as a configuration failure and writes nothing.
    const r = await adminCli(fresh.url, ['client', 'create', '--name', 'X', '--redirect-uri', 'https://x.example/cb']);
    cliFailed(r, 3, 'configuration_error', /secret_encryption_key is unusable/);
    expect((await fresh.raw.query('select count(*)::int as n from oauth_client')).rows[0].n).toBe(0);
    await fresh.raw.query(`delete from server_secret where name = 'secret_encryption_key'`);
  });

  it('environment values win, are never stored, and a process without them is refused', async () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const sshPem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString().trim().replace(/\n/g, '\\n');
    const rawPub = Buffer.from(privateKey.export({ format: 'jwk' }).x!, 'base64url');
    const str = (b: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, b.length]), b]);
    const expectedSsh = `ssh-ed25519 ${Buffer.concat([str(Buffer.from('ssh-ed25519')), str(rawPub)]).toString('base64')} tunnelgate-gateway`;
    const job = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' });
    const env = { [SECRET_ENV.gateway_ssh_key]: sshPem, [SECRET_ENV.job_signing_key]: JSON.stringify(job) };

    const added = cliOk(await adminCli(fresh.url, ['node', 'add', '--name', 'edge-env', '--public-ip', '192.0.2.20', '--ssh-host', 'h', '--pool', '198.18.2.0/30'], env));
    expect(added.gateway_ssh_public_key).toBe(expectedSsh);
    expect((added.gateway_job_public_key as Record<string, string>).x).toBe(job.x);
    // The stored (generated) keys were not used, and the environment's private keys were not stored.
    const { rows } = await fresh.raw.query('select name, value from server_secret');
    const dump = JSON.stringify(rows);
    expect(dump).not.toContain(job.d!);
    expect(dump).not.toContain(privateKey.export({ format: 'jwk' }).d!);
    expect(rows.map((r) => r.name)).toContain(`${ENV_MARK}gateway_ssh_key`);

    // Without the variables, the CLI would print the stored keys, which the gateway does not use: refused.
    const without = await adminCli(fresh.url, ['node', 'add', '--name', 'edge-env2', '--public-ip', '192.0.2.21', '--ssh-host', 'h', '--pool', '198.18.3.0/30']);
    cliFailed(without, 3, 'configuration_error', /JOB_SIGNING_KEY, GATEWAY_SSH_KEY are not set here/);
    expect((await fresh.raw.query(`select count(*)::int as n from edge_node where name = 'edge-env2'`)).rows[0].n).toBe(0);
    await expect(loadSecrets(fresh.db, {})).rejects.toBeInstanceOf(SecretsError);
    const loaded = await loadSecrets(fresh.db, env);
    expect(loaded.sources.gateway_ssh_key).toBe('env');
    expect(loaded.sources.access_token_key).toBe('database');
  });
});

describe('a password on the command line, in-process through main() on the test database', () => {
  async function run(argv: string[], opts: { stdin?: string; forwarded?: boolean } = {}) {
    let stdout = '';
    let stderr = '';
    const code = await main(
      argv,
      { DATABASE_URL: t.url },
      { stdout: (s) => void (stdout += s), stderr: (s) => void (stderr += s), progress: false, ...(opts.stdin === undefined ? {} : { readLine: async () => opts.stdin! }) },
      { db: t.db, forwarded: opts.forwarded },
    );
    return { code, stdout, stderr };
  }
  const create = (password: string, email = `pw-${Math.random().toString(36).slice(2)}@example.test`) => ['user', 'create', '--email', email, '--name', 'P', `--password=${password}`];

  it('warns for --password=P too, never for --password - nor for a line a CLI forwarded (that CLI warns), and keeps a failure to its one JSON line', async () => {
    const inline = await run(create('inline password'));
    expect([inline.code, inline.stderr]).toEqual([0, `${PASSWORD_WARNING}\n`]);
    expect(Object.keys(JSON.parse(inline.stdout)).sort()).toEqual(['account_id', 'user_id']);
    const piped = await run(['user', 'create', '--email', `pw-stdin-${Date.now()}@example.test`, '--name', 'P', '--password', '-'], { stdin: 'piped password' });
    expect([piped.code, piped.stderr]).toEqual([0, '']);
    // The gateway's side of the admin socket gets the command line with `-` already replaced.
    const forwarded = await run(create('piped then forwarded'), { forwarded: true });
    expect([forwarded.code, forwarded.stderr]).toEqual([0, '']);
    const email = `pw-dup-${Date.now()}@example.test`;
    expect((await run(create('first one', email))).code).toBe(0);
    const refused = await run(create('second one', email));
    expect(refused.code).toBe(1);
    expect(refused.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(JSON.parse(refused.stderr).error).toBe('invalid_request');
  });
});

describe('usage errors, in-process through main()', () => {
  // These never reach the database; main() is the same function the child processes run.
  async function run(argv: string[]) {
    let stdout = '';
    let stderr = '';
    const code = await main(argv, { DATABASE_URL: 'postgresql://unused:unused@127.0.0.1:1/unused' }, {
      stdout: (s) => void (stdout += s),
      stderr: (s) => void (stderr += s),
      progress: false,
    });
    return { code, stdout, stderr, json: stderr ? (JSON.parse(stderr) as Record<string, unknown>) : {} };
  }

  it.each([
    [['user'], /user takes one of: create, list, show; got nothing/],
    [['user', 'delete'], /user takes one of: create, list, show; got "delete"/],
    [['user', 'create', '--email', 'a@b.c', '--name', 'n'], /--password is required/],
    [['user', 'create', '--email', 'a@b.c', '--name', 'n', '--password', 'pppppppp', '--role', 'admin'], /--role must be one of owner, viewer/],
    [['user', 'create', '--email', 'a@b.c', '--name', 'n', '--password', 'pppppppp', 'stray'], /unexpected argument "stray"/],
    [['user', 'create', '--email', 'a@b.c', '--email', 'd@e.f', '--name', 'n', '--password', 'pppppppp'], /--email was given 2 times/],
    [['user', 'create', '--email', '', '--name', 'n', '--password', 'pppppppp'], /--email must not be empty/],
    [['balance', 'add', '--email', 'a@b.c', '--usd', '-5'], /--usd needs a value \(for a value that starts with "-", write --usd=VALUE\)/],
    [['apikey', 'create', '--email', 'a@b.c', '--permission', 'admin'], /--permission must be one of read, write/],
    [['apikey', 'revoke'], /--id is required/],
    [['client', 'create', '--name', 'n'], /--redirect-uri is required/],
    [['client', 'rotate-secret', '--client', 'x'], /unknown option --client/],
    [['node', 'add', '--name', 'n', '--public-ip', '1.2.3.4', '--ssh-host', 'h', '--pool', '1.2.3.0/30', '--ssh-port', '0'], /--ssh-port must be between 1 and 65535/],
    [['node', 'add', '--name', 'n', '--public-ip', '1.2.3.4', '--ssh-host', 'h', '--pool', '1.2.3.0/30', '--ssh-port', '22a'], /--ssh-port must be a whole number/],
    [['node', 'add', '--name', 'n', '--public-ip', '1.2.3.4', '--ssh-host', 'h'], /--pool is required/],
    [['rate', 'set', '--usd-rub'], /--usd-rub needs a value/],
    [['promocode', 'create', '--code', 'X'], /exactly one of --percent and --amount-rub/],
    [['promocode', 'create', '--code', 'X', '--percent', '5', '--amount-rub', '10'], /exactly one of --percent and --amount-rub/],
    [['promocode', 'create', '--code', 'X', '--percent', '101'], /--percent must be between 1 and 100/],
    [['promocode', 'create', '--code', 'X', '--percent', '5', '--max-uses', '0'], /--max-uses must be between 1/],
    [['promocode', 'create', '--code', 'X', '--percent', '5', '--expires', '2027-02-30'], /--expires must be an ISO 8601/],
    [['promocode', 'create', '--code', 'X', '--percent', '5', '--expires', '2027-01-31T12:00:00'], /--expires must be an ISO 8601/],
    [['promocode', 'create', '--code', 'X', '--percent', '5', '--expires', 'tomorrow'], /--expires must be an ISO 8601/],
  ])('%j is a usage error', async (argv, description) => {
    const r = await run(argv);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.json).toEqual({ error: 'usage_error', error_description: expect.stringMatching(description) });
  });

  it('help wins over other problems on the line, per command and per group', async () => {
    for (const argv of [['help'], ['-h'], ['user', 'create', '--bogus', '--help'], ['promocode', 'create', '-h'], ['client', '--help']]) {
      const r = await run(argv);
      expect({ argv, code: r.code, stderr: r.stderr }).toEqual({ argv, code: 0, stderr: '' });
      expect(r.stdout).toMatch(/Usage: npm run admin --/);
    }
    expect((await run(['client', '--help'])).stdout).toContain('client rotate-secret --client-id ID');
  });
});
