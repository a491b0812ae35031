// A secret variable whose value differs from the one the gateway recorded (a stale .env beside the
// admin CLI, a replica started with an old key) is refused, naming the variable, and changes nothing in
// the database; SECRETS_ROTATE naming the variable (the rotation step of docs/OPERATOR.md) lets it
// through. The real CLI in child processes against a real PostgreSQL database
// (docs/SECURITY.md "A mismatched secret ...").
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { generateSecret, loadSecrets, SECRET_ENV, SecretsError } from '../../server/secrets.ts';
import { adminCli, cliFailed, cliOk } from '../helpers/admin-cli.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NODE = path.join(ROOT, 'node_modules/.bin/node');

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => t?.drop());

/** Everything a refused run could have touched: every secret row and every node and client. */
async function state() {
  const secrets = (await t.raw.query('select name, value from server_secret order by name')).rows;
  const nodes = (await t.raw.query('select name from edge_node order by name')).rows;
  const clients = (await t.raw.query('select client_id, secret_ciphertext from oauth_client order by client_id')).rows;
  return { secrets, nodes, clients };
}

const nodeAdd = (name: string, octet: number) => ['node', 'add', '--name', name, '--public-ip', `192.0.2.${octet}`, '--ssh-host', 'h', '--pool', `198.18.${octet}.0/30`];

it('JOB_SIGNING_KEY B after A is refused naming the variable, writes nothing; SECRETS_ROTATE=JOB_SIGNING_KEY accepts B', async () => {
  const keyA = generateSecret('job_signing_key');
  const keyB = generateSecret('job_signing_key');
  const a = cliOk(await adminCli(t.url, nodeAdd('edge-a', 10), { JOB_SIGNING_KEY: keyA }));
  const before = await state();

  const stale = await adminCli(t.url, nodeAdd('edge-b', 11), { JOB_SIGNING_KEY: keyB });
  cliFailed(stale, 3, 'configuration_error', /^JOB_SIGNING_KEY differs from the value the gateway recorded/);
  // One line, naming the variable and never a value.
  expect(stale.stderr.trimEnd().split('\n')).toHaveLength(1);
  const body = (k: string) => k.replace(/-----[A-Z ]+-----/g, '').replace(/\\n|\s/g, '').slice(0, 24);
  expect(body(keyB).length).toBeGreaterThan(20);
  expect(stale.stderr).not.toContain(body(keyB));
  expect(await state()).toEqual(before);

  // An override naming another variable does not cover this one; a misspelt name is an error of its own.
  cliFailed(await adminCli(t.url, nodeAdd('edge-b', 11), { JOB_SIGNING_KEY: keyB, SECRETS_ROTATE: 'SECRET_ENCRYPTION_KEY' }), 3, 'configuration_error', /JOB_SIGNING_KEY differs/);
  cliFailed(await adminCli(t.url, nodeAdd('edge-b', 11), { JOB_SIGNING_KEY: keyB, SECRETS_ROTATE: 'JOB_SIGNING_KY' }), 3, 'configuration_error', /SECRETS_ROTATE names JOB_SIGNING_KY/);
  expect(await state()).toEqual(before);

  const rotated = cliOk(await adminCli(t.url, nodeAdd('edge-b', 11), { JOB_SIGNING_KEY: keyB, SECRETS_ROTATE: 'JOB_SIGNING_KEY' }));
  expect((rotated.gateway_job_public_key as { x: string }).x).not.toBe((a.gateway_job_public_key as { x: string }).x);
  // B is now the recorded key: a run with B needs no override, and the old A is the stale one.
  cliOk(await adminCli(t.url, nodeAdd('edge-c', 12), { JOB_SIGNING_KEY: keyB }));
  cliFailed(await adminCli(t.url, nodeAdd('edge-d', 13), { JOB_SIGNING_KEY: keyA }), 3, 'configuration_error', /JOB_SIGNING_KEY differs/);
}, 600_000);

it('SECRET_ENCRYPTION_KEY B after A: no client secret is encrypted under B, and the recorded fingerprint stays A', async () => {
  const keyA = generateSecret('secret_encryption_key');
  const keyB = generateSecret('secret_encryption_key');
  // The first test left a recorded JOB_SIGNING_KEY; this one starts from secrets kept in the database.
  await t.raw.query(`delete from server_secret where name like 'env_fingerprint.%'`);
  const create = ['client', 'create', '--name', 'App', '--redirect-uri', 'https://app.example/cb'];
  cliOk(await adminCli(t.url, create, { SECRET_ENCRYPTION_KEY: keyA }));
  const before = await state();
  cliFailed(await adminCli(t.url, create, { SECRET_ENCRYPTION_KEY: keyB }), 3, 'configuration_error', /^SECRET_ENCRYPTION_KEY differs/);
  expect(await state()).toEqual(before);
  // In-process too (what the gateway's start calls): refused with the same error, nothing written.
  await expect(loadSecrets(t.db, { SECRET_ENCRYPTION_KEY: keyB, JOB_SIGNING_KEY: generateSecret('job_signing_key') })).rejects.toBeInstanceOf(SecretsError);
  expect(await state()).toEqual(before);
  const loaded = await loadSecrets(t.db, { [SECRET_ENV.secret_encryption_key]: keyB, SECRETS_ROTATE: 'SECRET_ENCRYPTION_KEY, JOB_SIGNING_KEY', JOB_SIGNING_KEY: generateSecret('job_signing_key') });
  expect(loaded.sources.secret_encryption_key).toBe('env');
  expect((await state()).secrets).not.toEqual(before.secrets);
}, 600_000);

it('the gateway itself refuses to start with a stale JOB_SIGNING_KEY: one invalid_config line naming it, exit 2, nothing written', async () => {
  await t.raw.query(`delete from server_secret where name like 'env_fingerprint.%'`);
  const recorded = generateSecret('job_signing_key');
  await loadSecrets(t.db, { JOB_SIGNING_KEY: recorded, SECRETS_ROTATE: 'JOB_SIGNING_KEY' });
  const before = await state();
  const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
    const p = spawn(NODE, ['--import', './loader/register.mjs', 'server/main.ts'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', HOST: '127.0.0.1', PORT: '0', EDGE_WORKER: 'false', DATABASE_URL: t.url, JOB_SIGNING_KEY: generateSecret('job_signing_key') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => {
      stdout += String(d);
      // A gateway that got as far as listening has accepted the stale key: stop it, the assertions fail.
      if (/"msg":"listening"/.test(stdout)) p.kill('SIGTERM');
    });
    p.stderr.on('data', (d: Buffer) => (stderr += String(d)));
    p.on('exit', (code) => resolve({ code, stdout, stderr }));
  });
  expect(run.stdout).not.toMatch(/"msg":"listening"/);
  expect(run.code).toBe(2);
  const lines = run.stderr.trimEnd().split('\n');
  expect(lines).toHaveLength(1);
  const error = JSON.parse(lines[0]!) as { error: string; error_description: string };
  expect(error.error).toBe('invalid_config');
  expect(error.error_description).toMatch(/^JOB_SIGNING_KEY differs from the value the gateway recorded/);
  expect(await state()).toEqual(before);
}, 600_000);
