// The admin CLI as operators run it: the real `server/cli/admin.ts` in a child process, with a clean
// environment, checked by its exit status and the JSON it prints (docs/CONTRACTS.md "Admin CLI").
import { execFile, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
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

const ARGV = ['--import', './loader/register.mjs', 'server/cli/admin.ts'];
/** Only PATH and HOME of this process reach the CLI: what it needs must be said in `env`. */
const cleanEnv = (env: Record<string, string>) => ({ PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', ...env });

/** Runs the real CLI with a clean environment: only PATH, HOME and `env` (DATABASE_URL, or DATA_DIR for the
 *  embedded database, plus whatever the test sets). `stdin`: written to its standard input, which is then
 *  closed (for `--password -`, the form operators should use). `root`: the checkout whose CLI runs (default
 *  this one; the upgrade test runs the previous release's, test/upgrade/previous-release.ts). */
export function runAdminCli(env: Record<string, string>, args: string[], stdin?: string, opts: { root?: string } = {}): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      NODE,
      [...ARGV, ...args],
      // The kill timeout only ends a hung process; the tests' own bounds are what fail.
      { cwd: opts.root ?? ROOT, env: cleanEnv(env), timeout: 300_000 },
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
    if (stdin !== undefined) child.stdin?.end(stdin);
  });
}

/** The CLI against the PostgreSQL database at `databaseUrl`; `env` adds to (or overrides) that. */
export function adminCli(databaseUrl: string, args: string[], env: Record<string, string> = {}, stdin?: string): Promise<CliRun> {
  return runAdminCli({ DATABASE_URL: databaseUrl, ...env }, args, stdin);
}

/** The CLI started with its stdin, stdout and stderr as pipes, for a test that feeds stdin or watches the process. */
export function spawnAdminCli(env: Record<string, string>, args: string[]): ChildProcessWithoutNullStreams {
  return spawn(NODE, [...ARGV, ...args], { cwd: ROOT, env: cleanEnv(env), stdio: ['pipe', 'pipe', 'pipe'] });
}

/** The success contract: exit 0, one JSON line on stdout, nothing on stderr. Returns the object. */
export function cliOk(r: CliRun): Record<string, any> {
  expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
  expect(r.stdout.endsWith('\n')).toBe(true);
  expect(r.stdout.trimEnd().split('\n')).toHaveLength(1);
  return r.json;
}

/** The failure contract: exit `code`, one `{error, error_description}` line on stderr, nothing on stdout. */
export function cliFailed(r: CliRun, code: number, error: string, description?: RegExp): void {
  expect({ code: r.code, stdout: r.stdout, error: r.json.error }).toEqual({ code, stdout: '', error });
  expect(r.stderr.trimEnd().split('\n')).toHaveLength(1);
  expect(Object.keys(r.json).sort()).toEqual(['error', 'error_description']);
  expect(typeof r.json.error_description).toBe('string');
  if (description) expect(r.json.error_description).toMatch(description);
}

/** One refused command: its arguments, exit status, error code and (optionally) what the description says. */
export type CliRefusal = [args: string[], code: number, error: string, description?: RegExp];

/**
 * Runs each refused command against `databaseUrl` and checks the failure contract, naming the command
 * that broke it. Two at a time (this host's cores): each process loads the whole gateway, and fourteen
 * at once on a loaded 2-core host took over 30 s, starving each other and the tests beside them.
 */
export async function expectCliRefusals(databaseUrl: string, cases: readonly CliRefusal[]): Promise<void> {
  const runs: CliRun[] = new Array(cases.length);
  let next = 0;
  const lane = async () => {
    while (next < cases.length) {
      const i = next++;
      runs[i] = await adminCli(databaseUrl, cases[i]![0]);
    }
  };
  await Promise.all([lane(), lane()]);
  runs.forEach((r, i) => {
    const [args, code, error, description] = cases[i]!;
    try {
      cliFailed(r, code, error, description);
    } catch (e) {
      throw new Error(`admin ${args.join(' ')}: ${(e as Error).message}`);
    }
  });
}
