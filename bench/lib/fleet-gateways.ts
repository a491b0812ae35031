// The fleet's gateway replicas (server/main.ts with the timing probe, bench/lib/fleet-probe.ts) and the webhook
// endpoint that counts their deliveries.
import { spawn, type ChildProcess } from 'node:child_process';
import { appendFileSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { createInterface } from 'node:readline';
import { ROOT } from './process.ts';
import { PROBE_PREFIX } from './fleet-probe-prefix.ts';

const NODE_BIN = process.execPath;

export interface ProbeLine {
  probe: 'round' | 'poll' | 'ingest' | 'missing';
  ms?: number;
  polled?: number;
  tunnels?: number;
  what?: string;
}

export interface Gateway {
  url: string;
  proc: ChildProcess;
  probes: (ProbeLine & { t: number })[];
  /** SIGTERM, then SIGKILL past STOP_BOUND_MS; resolves with the seconds a SIGTERM took, or null when it was killed. */
  stop(): Promise<number | null>;
}
/** A gateway whose graceful stop waits on a stuck status round is killed after this: the run must end. */
export const STOP_BOUND_MS = 30_000;

export function startGateway(env: Record<string, string>, logFile?: string): Promise<Gateway> {
  const proc = spawn(NODE_BIN, ['--enable-source-maps', '--import', './loader/register.mjs', '--import', './bench/lib/fleet-probe.ts', 'server/main.ts'], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const probes: Gateway['probes'] = [];
  let out = '';
  createInterface({ input: proc.stderr! }).on('line', (line) => {
    if (line.startsWith(PROBE_PREFIX)) {
      try {
        probes.push({ ...(JSON.parse(line.slice(PROBE_PREFIX.length)) as ProbeLine), t: Date.now() });
      } catch {
        // a torn line: left out
      }
    } else out = (out + line + '\n').slice(-8000);
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start:\n${out}`)), 180_000);
    proc.once('exit', (code) => reject(new Error(`gateway exited ${code}:\n${out}`)));
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      if (logFile) appendFileSync(logFile, `${line}\n`);
      const m = /"msg":"listening".*?"url":"(http:\/\/[^"]+)"/.exec(line);
      if (!m) return;
      clearTimeout(timer);
      resolve({
        url: m[1]!,
        proc,
        probes,
        stop: () =>
          new Promise<number | null>((r) => {
            if (proc.exitCode !== null || proc.signalCode !== null) return r(0);
            const t0 = Date.now();
            const kill = setTimeout(() => proc.kill('SIGKILL'), STOP_BOUND_MS);
            proc.once('exit', (_code, signal) => {
              clearTimeout(kill);
              r(signal === 'SIGKILL' ? null : (Date.now() - t0) / 1000);
            });
            proc.kill('SIGTERM');
          }),
      });
    });
  });
}

export function rssBytes(pid: number): number {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

// ---------------------------------------------------------------- webhooks

export async function webhookCounter(): Promise<{ url: string; count: () => number; close: () => Promise<void> }> {
  let n = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      n++;
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/fleet-hook`, count: () => n, close: () => new Promise((r) => server.close(() => r())) };
}

