// The admin CLI as operators run it: the real `server/cli/admin.ts` in a child process, with a clean
// environment, checked by its exit status and the JSON it prints (docs/CONTRACTS.md "Admin CLI").
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NODE = path.join(ROOT, 'node_modules/.bin/node');

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed (success) or stderr parsed (failure). */
  json: Record<string, any>;
}

export function adminCli(databaseUrl: string, args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    execFile(
      NODE,
      ['--import', './loader/register.mjs', 'server/cli/admin.ts', ...args],
      { cwd: ROOT, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATABASE_URL: databaseUrl, ...env }, timeout: 90_000 },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
        if (err && code === -1) return reject(err);
        let json: Record<string, unknown> = {};
        try {
          json = JSON.parse(code === 0 ? stdout : stderr) as Record<string, unknown>;
        } catch {
          json = { unparsable: code === 0 ? stdout : stderr };
        }
        resolve({ code, stdout, stderr, json });
      },
    );
  });
}

/** The success contract: exit 0, one JSON line on stdout, nothing on stderr. Returns the object. */
export function cliOk(r: CliRun): Record<string, any> {
  expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
  expect(r.stdout.trimEnd().split('\n')).toHaveLength(1);
  return r.json;
}

/** The failure contract: exit `code`, one `{error, error_description}` line on stderr, nothing on stdout. */
export function cliFailed(r: CliRun, code: number, error: string, description?: RegExp): void {
  expect({ code: r.code, stdout: r.stdout, error: r.json.error }).toEqual({ code, stdout: '', error });
  expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(Object.keys(r.json).sort()).toEqual(['error', 'error_description']);
  if (description) expect(r.json.error_description).toMatch(description);
}
