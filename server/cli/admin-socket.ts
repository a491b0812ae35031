// The embedded database (PGlite) lives inside one process, so while a gateway runs on it the admin
// CLI cannot open it too. The gateway therefore serves admin commands on a Unix socket in DATA_DIR
// (mode 0600: only the gateway's user), and the CLI hands its command line over when it finds a live
// one. The command runs in the gateway's process through the same code as a direct CLI run.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export interface AdminReply {
  status: number;
  stdout: string;
  stderr: string;
}

export const adminSocketPath = (dataDir: string) => path.join(dataDir, 'admin.sock');

const MAX_REQUEST = 64 * 1024;

function connect(socketPath: string): Promise<net.Socket | null> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socketPath);
    s.once('connect', () => resolve(s));
    s.once('error', (e: NodeJS.ErrnoException) => {
      // No socket, or one left behind by a gateway that died: nobody is serving.
      if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED') resolve(null);
      else reject(e);
    });
  });
}

function readLine(s: net.Socket, limit: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => {
      buf += d;
      const nl = buf.indexOf('\n');
      if (nl >= 0) resolve(buf.slice(0, nl));
      else if (buf.length > limit) reject(new Error('admin request too large'));
    });
    s.once('end', () => resolve(buf));
    s.once('error', reject);
  });
}

/** Sends a command line to a running gateway; null when no gateway serves this DATA_DIR. */
export async function forwardToGateway(socketPath: string, argv: readonly string[]): Promise<AdminReply | null> {
  const s = await connect(socketPath);
  if (!s) return null;
  s.write(JSON.stringify({ argv }) + '\n');
  const line = await readLine(s, Infinity);
  s.destroy();
  return JSON.parse(line) as AdminReply;
}

/** Throws when a live gateway already serves this data directory: a second one must not even open it. */
export async function assertNoLiveGateway(socketPath: string): Promise<void> {
  const live = await connect(socketPath);
  if (live) {
    live.destroy();
    throw new Error(`another gateway is already running on this embedded database (${path.dirname(socketPath)}); stop it or set DATABASE_URL`);
  }
}

/** Serves admin commands until closed. Refuses to start when another live gateway already serves here. */
export async function serveAdminSocket(socketPath: string, run: (argv: string[]) => Promise<AdminReply>): Promise<net.Server> {
  await assertNoLiveGateway(socketPath);
  fs.rmSync(socketPath, { force: true });
  const server = net.createServer((conn) => {
    readLine(conn, MAX_REQUEST)
      .then(async (line) => {
        const req = JSON.parse(line) as { argv?: unknown };
        if (!Array.isArray(req.argv) || !req.argv.every((a) => typeof a === 'string')) throw new Error('malformed admin request');
        return run(req.argv as string[]);
      })
      .catch((e: unknown): AdminReply => ({
        status: 3,
        stdout: '',
        stderr: JSON.stringify({ error: 'server_error', error_description: (e as Error).message }) + '\n',
      }))
      .then((reply) => conn.end(JSON.stringify(reply) + '\n'));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    // Create the socket with no access for others, then make it explicit.
    const old = process.umask(0o177);
    server.listen(socketPath, () => {
      process.umask(old);
      resolve();
    });
  });
  fs.chmodSync(socketPath, 0o600);
  return server;
}
