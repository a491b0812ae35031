// The real gateway as `npm start` runs it (server/main.ts in its own process), for tests of what only
// a process shows: its signals, its exit status, its stdout log lines. Resolves once it logs
// `listening`; every stdout line is kept (parsed when JSON) so tests can wait for one.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const NODE = path.join(ROOT, 'node_modules/.bin/node');
// A cold start of the whole gateway took over 90 s once on a loaded 2-core host: a safety bound, not a timing check.
export const GATEWAY_START_DEADLINE_MS = 150_000;

export interface GatewayProcess {
  url: string;
  child: ChildProcess;
  /** Every stdout line so far, raw. */
  lines: string[];
  stderr(): string;
  /** Resolves with the first log line (parsed) for which `match` holds, seen already or later. */
  waitForLog(match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
  /** Resolves with the exit code once the process has exited. */
  exited: Promise<number | null>;
  kill(signal?: NodeJS.Signals): void;
}

/**
 * `root`: the checkout whose gateway runs (default this one); the upgrade test runs the previous release's
 * from its own tree (test/upgrade/previous-release.ts), on this checkout's Node.
 */
export function startGatewayProcess(env: Record<string, string>, opts: { root?: string } = {}): Promise<GatewayProcess> {
  const child = spawn(NODE, ['--import', './loader/register.mjs', 'server/main.ts'], {
    cwd: opts.root ?? ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', HOST: '127.0.0.1', PORT: '0', EDGE_WORKER: 'false', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let partial = '';
  let stderr = '';
  const waiters: { match: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }[] = [];
  const parse = (line: string): Record<string, unknown> | null => {
    try {
      const v = JSON.parse(line) as unknown;
      return v && typeof v === 'object' ? (v as Record<string, unknown>) : null;
    } catch {
      return null;
    }
  };
  child.stdout!.on('data', (d: Buffer) => {
    partial += String(d);
    const parts = partial.split('\n');
    partial = parts.pop()!;
    for (const line of parts) {
      lines.push(line);
      const parsed = parse(line);
      if (!parsed) continue;
      for (const w of [...waiters]) {
        if (w.match(parsed)) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(parsed);
        }
      }
    }
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += String(d)));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const waitForLog = (match: (l: Record<string, unknown>) => boolean) =>
    new Promise<Record<string, unknown>>((resolve) => {
      for (const line of lines) {
        const parsed = parse(line);
        if (parsed && match(parsed)) return resolve(parsed);
      }
      waiters.push({ match, resolve });
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gateway did not listen: ${stderr}`));
    }, GATEWAY_START_DEADLINE_MS);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited (${code}) before listening: ${stderr}`));
    });
    void waitForLog((l) => l.msg === 'listening').then((l) => {
      clearTimeout(timer);
      resolve({
        url: String(l.url),
        child,
        lines,
        stderr: () => stderr,
        waitForLog,
        exited,
        kill: (signal = 'SIGTERM') => {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
        },
      });
    });
  });
}
