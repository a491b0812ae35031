// The admin CLI hands its command line (passwords filled in from standard input) to the admin socket in
// DATA_DIR only when that socket belongs to its own user or root (docs/SECURITY.md row 22). The real CLI in
// a child process, against a listener standing in for the gateway that records everything it is sent:
// chowned to `nobody`, the CLI refuses it before connecting; owned by root, the same run goes through.
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { adminSocketPath } from '../../server/cli/admin-socket.ts';
import { cliFailed, runAdminCli } from '../helpers/admin-cli.ts';
import { skipUnless } from '../helpers/requirements.ts';

const isRoot = process.getuid?.() === 0;
const NOBODY = 65534;

let dir = '';
let server: net.Server;
let connections = 0;
let received = '';

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-admin-sock-'));
  server = net.createServer((conn) => {
    connections++;
    conn.setEncoding('utf8');
    conn.on('data', (d: string) => {
      received += d;
      if (received.includes('\n')) conn.end(JSON.stringify({ status: 0, stdout: '{"forwarded":true}\n', stderr: '' }) + '\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(adminSocketPath(dir), resolve));
});
afterAll(async () => {
  await new Promise((resolve) => server?.close(resolve));
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const PASSWORD = 'correct horse socket staple';
const createUser = () => runAdminCli({ DATA_DIR: dir }, ['user', 'create', '--email', 'sock@example.test', '--name', 'S', '--password', '-'], `${PASSWORD}\n`);

it.skipIf(skipUnless(isRoot, 'root, to give the socket to another uid'))('a socket owned by another uid is refused before anything is sent; one owned by root gets the command', async () => {
  fs.chownSync(adminSocketPath(dir), NOBODY, NOBODY);
  const refused = await createUser();
  cliFailed(refused, 3, 'configuration_error', new RegExp(`refusing the admin socket .*owned by uid ${NOBODY}.*nothing was sent`));
  expect(refused.stderr).not.toContain(PASSWORD);
  // The listener saw no connection at all, so not a byte of the command line (or the password).
  expect(connections).toBe(0);
  expect(received).toBe('');

  // The same run against the same listener owned by root (the CLI's uid here): forwarded, password included.
  fs.chownSync(adminSocketPath(dir), 0, 0);
  const forwarded = await createUser();
  expect({ code: forwarded.code, stdout: forwarded.stdout }).toEqual({ code: 0, stdout: '{"forwarded":true}\n' });
  expect(connections).toBe(1);
  expect(JSON.parse(received.split('\n')[0]!).argv).toContain(PASSWORD);
});

it('a DATA_DIR file that is not a socket is refused, and nothing is opened in its place', async () => {
  const other = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-admin-nosock-'));
  try {
    fs.writeFileSync(adminSocketPath(other), '');
    const r = await runAdminCli({ DATA_DIR: other }, ['user', 'list']);
    cliFailed(r, 3, 'configuration_error', /is not a socket/);
    expect(fs.existsSync(path.join(other, 'pg'))).toBe(false);
  } finally {
    fs.rmSync(other, { recursive: true, force: true });
  }
});
