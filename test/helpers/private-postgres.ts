// A throw-away PostgreSQL cluster of its own (initdb + pg_ctl as the postgres user, in a temp dir, on a
// free loopback port) for tests that restart or stop the server: the shared test cluster serves every
// other test file in parallel and must never be restarted.
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { existsSync, readdirSync } from 'node:fs';
import { freePort } from './ports.ts';

function binDir(): string {
  const base = '/usr/lib/postgresql';
  const versions = existsSync(base) ? readdirSync(base).sort((a, b) => Number(b) - Number(a)) : [];
  for (const v of versions) if (existsSync(join(base, v, 'bin/pg_ctl'))) return join(base, v, 'bin');
  throw new Error('no PostgreSQL server binaries under /usr/lib/postgresql');
}

export const canRunPrivatePostgres = (() => {
  try {
    return process.getuid?.() === 0 && binDir() !== '' && execFileSync('id', ['-u', 'postgres']).length > 0;
  } catch {
    return false;
  }
})();

export interface PrivatePostgres {
  /** Superuser URL of database `postgres`. */
  url: string;
  urlFor(database: string): string;
  /**
   * pg_ctl restart -m fast: every connection is cut, the server is back when this resolves. Run
   * asynchronously so the gateway under test (in this process) keeps running through it.
   */
  restart(): Promise<void>;
  stop(): void;
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), 'tg-pg-'));
  const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
  const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
  chownSync(dir, uid, gid);
  chmodSync(dir, 0o700);
  const data = join(dir, 'data');
  const asPostgres = (cmd: string, args: string[]) =>
    execFileSync('runuser', ['-u', 'postgres', '--', join(bin, cmd), ...args], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 60_000 });
  asPostgres('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8']);
  const port = await freePort();
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
  const ctl = (...args: string[]) => asPostgres('pg_ctl', ['-D', data, '-w', '-t', '60', ...args]);
  ctl('-o', opts, '-l', join(dir, 'log'), 'start');
  const urlFor = (db: string) => `postgresql://postgres@127.0.0.1:${port}/${db}`;
  return {
    url: urlFor('postgres'),
    urlFor,
    restart: () =>
      new Promise<void>((resolve, reject) => {
        execFile('runuser', ['-u', 'postgres', '--', join(bin, 'pg_ctl'), '-D', data, '-w', '-t', '120', '-m', 'fast', '-o', opts, '-l', join(dir, 'log'), 'restart'], (err, _out, stderr) =>
          err ? reject(new Error(`pg_ctl restart: ${err.message} ${stderr}`)) : resolve(),
        );
      }),
    stop: () => {
      try {
        ctl('-m', 'immediate', 'stop');
      } catch {
        // already stopped
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
