// The operator's Grafana dashboard (server/deploy/grafana/tunnelgate.json) charts only metrics the gateway
// really exports: every `tunnelgate_*` name in its queries is one a running gateway's /metrics declares
// (histograms as their _bucket, _count and _sum series), and it charts each health and traffic family.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';

const DASHBOARD = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../server/deploy/grafana/tunnelgate.json');

/** Every `expr` anywhere in a dashboard. */
function expressions(v: unknown): string[] {
  if (Array.isArray(v)) return v.flatMap(expressions);
  if (typeof v !== 'object' || v === null) return [];
  return Object.entries(v).flatMap(([k, x]) => (k === 'expr' && typeof x === 'string' ? [x] : expressions(x)));
}

/** Series names a Prometheus text exposition declares (from its # TYPE lines). */
function exported(text: string): Set<string> {
  const names = new Set<string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    const [, name, type] = m as unknown as [string, string, string];
    if (type === 'histogram') for (const s of ['_bucket', '_count', '_sum']) names.add(name + s);
    else if (type === 'summary') for (const s of ['', '_count', '_sum']) names.add(name + s);
    else names.add(name);
  }
  return names;
}

/** The metric names `exprs` use that `names` does not have. */
function unknownNames(exprs: string[], names: Set<string>): string[] {
  return [...new Set(exprs.flatMap((e) => [...e.matchAll(/\btunnelgate_[a-z0-9_]+/g)].map((m) => m[0])))].filter((n) => !names.has(n));
}

let gw: RunningGateway;
let names: Set<string>;
beforeAll(async () => {
  gw = await startGateway();
  const m = await call(gw.url, 'GET', '/metrics');
  expect(m.status).toBe(200);
  names = exported(m.text);
}, 60_000);
afterAll(async () => {
  await gw?.close();
});

it('every metric the dashboard queries is one /metrics exports', () => {
  const exprs = expressions(JSON.parse(fs.readFileSync(DASHBOARD, 'utf8')));
  expect(exprs.length).toBeGreaterThan(5);
  expect(unknownNames(exprs, names)).toEqual([]);
});

it('the check can fail: a misspelt metric is reported', () => {
  expect(unknownNames(['sum(rate(tunnelgate_edge_jobs_total[5m]))'], names)).toEqual(['tunnelgate_edge_jobs_total']);
});

it('the dashboard charts tunnels by status and health, node reachability, edge jobs and latency, queue depth and webhook deliveries', () => {
  const all = expressions(JSON.parse(fs.readFileSync(DASHBOARD, 'utf8'))).join('\n');
  for (const n of ['tunnelgate_tunnels', 'tunnelgate_edge_node_reachable', 'tunnelgate_edge_job_duration_seconds_count', 'tunnelgate_edge_job_duration_seconds_bucket', 'tunnelgate_edge_queue_depth', 'tunnelgate_webhook_deliveries_total']) {
    expect(all).toContain(n);
  }
  expect(all).toMatch(/by \(health\)/);
  expect(all).toMatch(/by \(status\)/);
});
