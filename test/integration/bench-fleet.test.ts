// bench:fleet at a tiny size, so the simulator cannot rot (docs/SCALE.md): 3 simulated edges (the agent's SSH
// server, job verification, status and events over the dataplane stand-in) x 20 standing tunnels against the two
// real gateway replicas on a fresh PostgreSQL database, a few seconds of purchases, provisions, settings changes
// and deletes. It must complete with every job the load queued answered by an edge and every figure of the
// table present; the figures themselves are not judged here (no test asserts on time).
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseReports } from '../../bench/lib/report.ts';

const ROOT = resolve(import.meta.dirname, '../..');

interface Figures {
  nodes: number;
  purchases: number;
  jobs: number;
  unanswered: number;
  refused: Record<string, number>;
  job_ms: { p50: number; p99: number; n: number };
  job_ms_by_kind: Record<string, { n: number }>;
  status_round_ms: { p50: number; max: number; n: number } | null;
  status_ops: number;
  ingest_per_node_ms: { p50: number; n: number } | null;
  ingest_per_round_ms: number | null;
  pg_cpu_pct: number;
  rows_written_per_s: number;
  gateways: { cpu_pct: number; rss_mb: number }[];
  webhooks: number;
  probes_missing: string[];
}

describe('bench:fleet at 3 nodes x 20 tunnels', () => {
  it('completes: every job the load queued answered by its edge, every figure present', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'tg-fleet-smoke-'));
    const json = join(dir, 'fleet.json');
    try {
      const child = spawn(process.execPath, ['--import', './loader/register.mjs', 'bench/fleet.ts'], {
        cwd: ROOT,
        env: {
          ...process.env,
          TG_FLEET_NODES: '3',
          TG_FLEET_TUNNELS: '20',
          TG_FLEET_SECONDS: '8',
          TG_FLEET_CLIENTS: '2',
          TG_FLEET_STATUS_SECONDS: '2',
          TG_FLEET_RECONCILE_SECONDS: '10',
          TG_FLEET_EDGES_PER_PROCESS: '2',
          TG_FLEET_PGBENCH: '0',
          TG_FLEET_JSON: json,
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d));
      child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-8000)));
      const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
      expect(code, err).toBe(0);

      const [r] = JSON.parse(readFileSync(json, 'utf8')) as Figures[];
      expect(r!.nodes).toBe(3);
      // The load really ran through both replicas and the edges: jobs of each kind, none left unanswered, none refused.
      expect(r!.purchases).toBeGreaterThan(0);
      expect(r!.refused).toEqual({});
      expect(r!.unanswered).toBe(0);
      expect(r!.jobs).toBe(r!.job_ms.n);
      for (const kind of ['provision', 'patch', 'delete']) expect(r!.job_ms_by_kind[kind]!.n).toBeGreaterThan(0);
      expect(Number.isFinite(r!.job_ms.p50) && Number.isFinite(r!.job_ms.p99)).toBe(true);
      // Status collection and its ingest ran and were timed by the probe (no method it wraps went missing).
      expect(r!.probes_missing).toEqual([]);
      expect(r!.status_ops).toBeGreaterThan(0);
      expect(r!.status_round_ms?.n).toBeGreaterThan(0);
      expect(r!.ingest_per_node_ms?.n).toBeGreaterThan(0);
      expect(r!.ingest_per_round_ms).not.toBeNull();
      // The database and both replicas were measured; the webhook endpoint got deliveries.
      expect(r!.rows_written_per_s).toBeGreaterThan(0);
      expect(r!.pg_cpu_pct).toBeGreaterThan(0);
      expect(r!.gateways).toHaveLength(2);
      for (const g of r!.gateways) expect(g.cpu_pct > 0 && g.rss_mb > 0).toBe(true);
      expect(r!.webhooks).toBeGreaterThan(0);
      // And bench:all's table gets its rows.
      const rows = parseReports(out);
      expect(rows.map((x) => x.scenario.replace(/^fleet 3 nodes x 20 tunnels: (\S+ \S+).*$/, '$1'))).toEqual([
        'job latency',
        'status round',
        'traffic ingest',
        'PostgreSQL rows',
        'gateway CPU',
        'webhooks delivered',
      ]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 600_000);
});
