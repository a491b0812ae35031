// SECRETS_FROM_ENV=required (gateway): the real gateway process (`npm start`'s command) with
// SECRETS_FROM_ENV=required refuses to start while a secret variable is missing, naming it (never a
// value), and starts when all are set, generating nothing into the database.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { generateSecret, SECRET_ENV, SECRET_NAMES } from '../../server/secrets.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NODE = path.join(ROOT, 'node_modules/.bin/node');
// A cold start of the whole gateway took over 90 s once on a loaded 2-core host: a safety bound, not a timing check.
const DEADLINE_MS = 150_000;

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => t?.drop());

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Starts the gateway; resolves when it exits, or (then stopping it with SIGTERM) once it logs `listening`. */
function gateway(env: Record<string, string>): Promise<Run & { listened: boolean }> {
  return new Promise((resolve, reject) => {
    const p = spawn(NODE, ['--import', './loader/register.mjs', 'server/main.ts'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', HOST: '127.0.0.1', PORT: '0', EDGE_WORKER: 'false', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    let listened = false;
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`gateway neither exited nor listened: ${stderr}`));
    }, DEADLINE_MS);
    p.stdout.on('data', (d: Buffer) => {
      stdout += String(d);
      if (!listened && /"msg":"listening"/.test(stdout)) {
        listened = true;
        p.kill('SIGTERM');
      }
    });
    p.stderr.on('data', (d: Buffer) => (stderr += String(d)));
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, listened });
    });
  });
}

const secrets = () => Object.fromEntries(SECRET_NAMES.map((n) => [SECRET_ENV[n], generateSecret(n)])) as Record<string, string>;

it('a missing secret is a start-up error naming the variable; with all set the gateway starts and stores none', async () => {
  const all = secrets();
  const { GATEWAY_SSH_KEY: _missing, ...partial } = all;
  const failed = await gateway({ DATABASE_URL: t.url, SECRETS_FROM_ENV: 'required', ...partial });
  expect(failed.listened).toBe(false);
  expect(failed.code).not.toBe(0);
  const error = JSON.parse(failed.stderr.trim().split('\n').pop()!) as { error: string; error_description: string };
  expect(error.error).toBe('invalid_config');
  expect(error.error_description).toContain('GATEWAY_SSH_KEY');
  for (const value of Object.values(partial)) expect(failed.stderr + failed.stdout).not.toContain(value.trim().split('\n')[0]);

  const started = await gateway({ DATABASE_URL: t.url, SECRETS_FROM_ENV: 'required', ...all });
  expect(started.listened, started.stderr).toBe(true);
  expect(started.code).toBe(0);
  // No "secrets kept in the database" warning, and no secret value generated into server_secret.
  expect(started.stdout).not.toMatch(/kept in the database/);
  const { rows } = await t.raw.query(`select name from server_secret where name not like 'env_fingerprint.%'`);
  expect(rows).toEqual([]);
  // Two cold starts of the whole gateway: a generous safety bound on a loaded 2-core machine.
}, 2 * DEADLINE_MS);
