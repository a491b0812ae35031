// `npm start` on a port another program holds: the real gateway process (server/main.ts, as npm start
// runs it, on the embedded database) stops before it opens the database, with one line on stderr naming
// the address and what to change, and a non-zero exit. The other program is a real process of its own.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, expect, it } from 'vitest';
import { freePort } from '../helpers/ports.ts';
import { GATEWAY_START_DEADLINE_MS } from '../helpers/gateway-process.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NODE = path.join(ROOT, 'node_modules/.bin/node');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-port-in-use-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

let holder: ChildProcess | undefined;
afterEach(() => {
  holder?.kill('SIGKILL');
  holder = undefined;
});

/** Another program (a process of its own) listening on 127.0.0.1:port; resolves once it listens. */
function holdPort(port: number): Promise<ChildProcess> {
  const p = spawn(NODE, ['-e', `require('node:net').createServer().listen(${port}, '127.0.0.1', () => console.log('holding'))`], { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    p.once('exit', (code) => reject(new Error(`port holder exited (${code})`)));
    p.stdout!.once('data', () => resolve(p));
  });
}

/** `npm start`'s command with this environment, run to its exit (a bound turns a hang into a failure). */
function startGateway(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(NODE, ['--enable-source-maps', '--import', './loader/register.mjs', 'server/main.ts'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', HOST: '127.0.0.1', EDGE_WORKER: 'false', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += String(d)));
    p.stderr.on('data', (d: Buffer) => (stderr += String(d)));
    const timer = setTimeout(() => {
      p.kill('SIGKILL');
      reject(new Error(`gateway did not exit: ${stdout} ${stderr}`));
    }, GATEWAY_START_DEADLINE_MS);
    p.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

it('a held port stops the gateway before the database opens, naming the address and PORT', async () => {
  const port = await freePort();
  holder = await holdPort(port);
  const dataDir = path.join(tmp, 'plain');
  const run = await startGateway({ PORT: String(port), DATA_DIR: dataDir });
  expect(run.code).toBe(2);
  const lines = run.stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  const line = JSON.parse(lines[0]!) as { error: string; error_description: string };
  expect(line).toEqual({
    error: 'address_in_use',
    error_description: `cannot listen on 127.0.0.1:${port}: another program is using it; stop that program, or set PORT to a free port, e.g. PORT=${port + 1} npm start`,
  });
  // Nothing slow ran first: no log line (not even `database ready`), and the embedded database was never created.
  expect(run.stdout).toBe('');
  expect(fs.existsSync(dataDir)).toBe(false);
}, GATEWAY_START_DEADLINE_MS);

it('with PUBLIC_URL set, the line says to change it along with PORT', async () => {
  const port = await freePort();
  holder = await holdPort(port);
  const dataDir = path.join(tmp, 'public-url');
  const run = await startGateway({ PORT: String(port), PUBLIC_URL: `http://127.0.0.1:${port}`, DATA_DIR: dataDir });
  expect(run.code).toBe(2);
  const line = JSON.parse(run.stderr.trim()) as { error: string; error_description: string };
  expect(line.error).toBe('address_in_use');
  expect(line.error_description).toContain(`127.0.0.1:${port}`);
  expect(line.error_description).toContain('set PORT to a free port (and PUBLIC_URL to match it)');
  expect(fs.existsSync(dataDir)).toBe(false);
}, GATEWAY_START_DEADLINE_MS);
