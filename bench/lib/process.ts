// Starts a server as a child process and waits for its "listening" JSON log line.
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '../..');

export interface Child {
  url: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

/** `nodeArgs` go before the loader (e.g. --cpu-prof, or the V8 flags a deployed entry point sets). */
export function startTs(script: string, env: Record<string, string>, nodeArgs: readonly string[] = []): Promise<Child> {
  const proc = spawn(process.execPath, [...nodeArgs, '--import', './loader/register.mjs', script], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not start:\n${out}`)), 60_000);
    const onData = (d: Buffer) => {
      out += d;
      const m = /"msg":"listening".*?"url":"(http:\/\/[^"]+)"/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve({
          url: m[1]!,
          proc,
          stop: () =>
            new Promise<void>((r) => {
              proc.once('exit', () => r());
              proc.kill('SIGTERM');
            }),
        });
      }
    };
    proc.stdout!.on('data', onData);
    proc.stderr!.on('data', (d: Buffer) => (out += d));
    proc.once('exit', (code) => reject(new Error(`${script} exited ${code}:\n${out}`)));
  });
}
