// A closed-loop load generator for requests that differ one from the next (a new code per exchange,
// the refresh token returned by the previous refresh): `workers` loops over keep-alive node:http
// connections, each sending its next request when the previous answered. autocannon cannot chain a
// response into the next request of the same connection, hence this.
import http from 'node:http';

export interface LoadResult {
  ok: number;
  failed: number;
  /** Status counts of the failures, e.g. {"400": 3}. */
  failures: Record<string, number>;
  seconds: number;
  rate: number;
  p50: number;
  p99: number;
  /** Every latency in ms, sorted. */
  latencies: number[];
}

function summarize(ok: number, failed: number, failures: Record<string, number>, seconds: number, latencies: number[]): LoadResult {
  latencies.sort((a, b) => a - b);
  const pct = (p: number) => (latencies.length ? latencies[Math.min(latencies.length - 1, Math.floor((p / 100) * latencies.length))]! : NaN);
  return { ok, failed, failures, seconds, rate: ok / seconds, p50: pct(50), p99: pct(99), latencies };
}

/** Several runs as one: counts and time added, percentiles over all latencies. */
export function merge(runs: LoadResult[]): LoadResult {
  const failures: Record<string, number> = {};
  for (const r of runs) for (const [k, v] of Object.entries(r.failures)) failures[k] = (failures[k] ?? 0) + v;
  const sum = (f: (r: LoadResult) => number) => runs.reduce((a, r) => a + f(r), 0);
  return summarize(sum((r) => r.ok), sum((r) => r.failed), failures, sum((r) => r.seconds), runs.flatMap((r) => r.latencies));
}

export interface Job {
  path: string;
  headers: Record<string, string>;
  body: string;
}

/**
 * Runs until `next` returns null for every worker or `seconds` elapse. `next(worker, previous)` gets
 * the previous response of that worker (status and parsed JSON body) and returns its next request.
 */
export async function load(
  baseUrl: string,
  workers: number,
  next: (worker: number, previous: { status: number; body: Record<string, unknown> } | null) => Job | null,
  opts: { seconds?: number } = {},
): Promise<LoadResult> {
  const base = new URL(baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: workers });
  const latencies: number[] = [];
  const failures: Record<string, number> = {};
  let ok = 0;
  let failed = 0;
  const start = process.hrtime.bigint();
  const deadline = opts.seconds ? start + BigInt(Math.round(opts.seconds * 1e9)) : null;

  const send = (job: Job) =>
    new Promise<{ status: number; body: Record<string, unknown> }>((resolve, reject) => {
      const req = http.request(
        { host: base.hostname, port: base.port, path: job.path, method: 'POST', agent, headers: { ...job.headers, 'content-length': Buffer.byteLength(job.body) } },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            let body: Record<string, unknown> = {};
            try {
              body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
            } catch {
              body = {};
            }
            resolve({ status: res.statusCode ?? 0, body });
          });
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(job.body);
    });

  await Promise.all(
    Array.from({ length: workers }, async (_, w) => {
      let previous: { status: number; body: Record<string, unknown> } | null = null;
      for (;;) {
        // `next` always sees the previous response (a refresh chain must keep its newest token),
        // and only then does the deadline stop the worker.
        const job = next(w, previous);
        if (!job || (deadline && process.hrtime.bigint() >= deadline)) return;
        const t0 = process.hrtime.bigint();
        previous = await send(job);
        latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
        if (previous.status === 200) ok++;
        else {
          failed++;
          failures[previous.status] = (failures[previous.status] ?? 0) + 1;
          // One body per failing status is enough to tell what went wrong.
          if (failures[previous.status] === 1) process.stderr.write(`  first ${previous.status}: ${JSON.stringify(previous.body).slice(0, 300)}\n`);
        }
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  agent.destroy();
  return summarize(ok, failed, failures, seconds, latencies);
}
