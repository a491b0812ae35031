// The embedded database (PGlite) lives inside one process, so while a gateway runs on it the admin
// CLI cannot open it too. The gateway therefore serves admin commands on a Unix socket in DATA_DIR
// (mode 0600: only the gateway's user), and the CLI hands its command line over when it finds a live
// one. The command runs in the gateway's process through the same code as a direct CLI run. That line
// may carry a password, so the CLI first checks who owns the socket (checkSocketOwner, docs/SECURITY.md).
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

/** A socket the CLI must not talk to: its message says why and what to check. */
export class AdminSocketRefused extends Error {}

/**
 * Throws unless `socketPath` is a socket owned by this user or by root: the command line sent over it
 * may hold a password (`--password -` filled in), so a socket someone else made in DATA_DIR (a
 * directory they could write, a DATA_DIR taken from another working directory) must never hear it.
 * Returns false when there is no socket. Checked without following a link; the data directory is
 * 0700 (server/data-dir.ts), so nobody else can swap the file between this check and the connect.
 */
export function checkSocketOwner(socketPath: string, uid: number | undefined = process.getuid?.()): boolean {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(socketPath);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw e;
  }
  if (!st.isSocket()) throw new AdminSocketRefused(`refusing ${socketPath}: it is not a socket; remove it, or check DATA_DIR`);
  if (uid !== undefined && st.uid !== uid && st.uid !== 0) {
    throw new AdminSocketRefused(
      `refusing the admin socket ${socketPath}: it is owned by uid ${st.uid}, not by this user (uid ${uid}) or root, ` +
        'so it may not be the gateway\'s; nothing was sent. Run the CLI as the gateway\'s user, or check DATA_DIR',
    );
  }
  return true;
}

/**
 * Sends a command line to a running gateway; null when no gateway serves this DATA_DIR. The socket's
 * owner is checked first (checkSocketOwner): nothing is sent to one another user made.
 */
export async function forwardToGateway(socketPath: string, argv: readonly string[]): Promise<AdminReply | null> {
  if (!checkSocketOwner(socketPath)) return null;
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
