// The one machine-readable result line every benchmark prints for `npm run bench:all` (bench/all.ts):
// a fixed prefix and one JSON object per scenario. Each bench keeps its own human-readable output; the
// runner reads only these lines, so a bench's layout can change without breaking the table.

/** What the runner greps for at the start of a line of a bench's stdout. */
export const REPORT_PREFIX = 'BENCH-RESULT ';

export interface BenchRow {
  /** What was measured, e.g. "GET /api/dedicated/pricing". */
  scenario: string;
  /** Its throughput (or time) in `unit`. */
  rate: number;
  unit: string;
  /** 99th percentile latency in ms, when the scenario has per-request latencies. */
  p99_ms?: number | null;
  /** The ceiling it is compared with (bare node:http, pgbench, ip -batch + nft -f, ...), null if none. */
  ceiling: string | null;
  /** The ceiling's rate in the same run, in its own unit. */
  ceiling_rate?: number | null;
  /** rate / ceiling_rate (or time / ceiling time for "at most" targets), null without a ceiling. */
  ratio: number | null;
  /** The target as the issue words it, e.g. ">= 0.5", "< 500 ms"; null for a figure only reported. */
  target: string | null;
  /** Whether the target was met; null without a target. */
  pass: boolean | null;
  /** Anything the reader of the table needs beside the numbers (sizes, rounds, failures). */
  note?: string;
}

/** Prints one result line (stdout: the runner reads the child's stdout). */
export function report(row: BenchRow): void {
  process.stdout.write(`${REPORT_PREFIX}${JSON.stringify(row)}\n`);
}

/** The rows in a bench's output, in order; anything else on the output is ignored. */
export function parseReports(output: string): BenchRow[] {
  const rows: BenchRow[] = [];
  for (const line of output.split('\n')) {
    if (!line.startsWith(REPORT_PREFIX)) continue;
    try {
      rows.push(JSON.parse(line.slice(REPORT_PREFIX.length)) as BenchRow);
    } catch {
      // A torn line (a bench killed mid-write) is left out, not fatal to the table.
    }
  }
  return rows;
}
