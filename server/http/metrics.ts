// Prometheus metrics for the gateway, on a registry of our own so tests can build several apps.
// server/deploy/grafana/tunnelgate.json charts them; test/integration/metrics-dashboard.test.ts checks that
// every metric its queries name is one this registry exports.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { VERSION } from '../version.ts';

export interface Metrics {
  registry: Registry;
  requests: Counter<'method' | 'route' | 'status'>;
  duration: Histogram<'method' | 'route'>;
  purchases: Counter<'outcome'>;
  /** Webhook delivery attempts of this process by outcome (server/webhooks/delivery.ts DeliveryOutcome). */
  webhookDeliveries: Counter<'outcome'>;
  /** Webhook deliveries not yet delivered nor given up, across replicas (read from the outbox at scrape). */
  webhookPending: Gauge;
  /** Edge jobs this process sent, by op and outcome (ok, the agent's error code, the transport failure). */
  edgeJobs: Histogram<'op' | 'outcome'>;
  /** Attacks this process stored as started, and as ended (server/attacks/ingest.ts; docs/CONTRACTS.md "Attacks"). */
  attacksStarted: Counter;
  attacksEnded: Counter;
}

/** What the gauges read at each scrape (all replicas' view, from the database); each optional. */
export interface MetricSources {
  pendingWebhooks?: () => Promise<number>;
  /** Edge jobs waiting to run; null when the queue does not exist yet. */
  queueDepth?: () => Promise<number | null>;
  /** Each node's last status round (server/health/collector.ts). */
  nodeReachability?: () => Promise<{ node_id: string; reachable: boolean }[]>;
  /** Tunnels by status and health, deleted ones left out. */
  tunnelCounts?: () => Promise<{ status: string; health: string; n: number }[]>;
}

/** `pendingWebhooks`: the outbox count the gauge reads at each scrape (or every source, as an object). */
export function createMetrics(withDefaults = true, sources: MetricSources | (() => Promise<number>) = {}): Metrics {
  const src: MetricSources = typeof sources === 'function' ? { pendingWebhooks: sources } : sources;
  const registry = new Registry();
  if (withDefaults) collectDefaultMetrics({ register: registry, prefix: 'tunnelgate_' });
  // The usual build-info gauge: always 1, the release in a label, so a dashboard can show which release each
  // replica runs during a rolling upgrade.
  new Gauge({ name: 'tunnelgate_build_info', help: 'The release this gateway runs (always 1).', labelNames: ['version'], registers: [registry] }).set({ version: VERSION }, 1);
  new Gauge({
    name: 'tunnelgate_edge_queue_depth',
    help: 'Edge jobs waiting to run (created or waiting for a retry), all replicas',
    registers: [registry],
    async collect() {
      const n = src.queueDepth ? await src.queueDepth() : null;
      if (n !== null) this.set(n);
    },
  });
  new Gauge({
    name: 'tunnelgate_edge_node_reachable',
    help: "1 when the node answered its last status round, 0 when it did not (its tunnels' health is then unknown)",
    labelNames: ['node_id'],
    registers: [registry],
    async collect() {
      if (!src.nodeReachability) return;
      this.reset();
      for (const r of await src.nodeReachability()) this.set({ node_id: r.node_id }, r.reachable ? 1 : 0);
    },
  });
  new Gauge({
    name: 'tunnelgate_tunnels',
    help: 'Tunnels by status and health (deleted ones left out; health is unknown off the edge)',
    labelNames: ['status', 'health'],
    registers: [registry],
    async collect() {
      if (!src.tunnelCounts) return;
      this.reset();
      for (const r of await src.tunnelCounts()) this.set({ status: r.status, health: r.health }, r.n);
    },
  });
  return {
    registry,
    requests: new Counter({ name: 'tunnelgate_http_requests_total', help: 'HTTP requests by route and status', labelNames: ['method', 'route', 'status'], registers: [registry] }),
    duration: new Histogram({
      name: 'tunnelgate_http_request_duration_seconds',
      help: 'HTTP request duration by route',
      labelNames: ['method', 'route'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    purchases: new Counter({ name: 'tunnelgate_purchases_total', help: 'Tunnel purchases by outcome (created, replayed, or the error code)', labelNames: ['outcome'], registers: [registry] }),
    webhookDeliveries: new Counter({
      name: 'tunnelgate_webhook_deliveries_total',
      help: 'Webhook delivery attempts sent by this process, by outcome: delivered, failed (non-2xx, network, timeout), refused (SSRF guard); given_up once per delivery',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    webhookPending: new Gauge({
      name: 'tunnelgate_webhook_deliveries_pending',
      help: 'Webhook deliveries neither delivered nor given up yet (all replicas)',
      registers: [registry],
      async collect() {
        if (src.pendingWebhooks) this.set(await src.pendingWebhooks());
      },
    }),
    edgeJobs: new Histogram({
      name: 'tunnelgate_edge_job_duration_seconds',
      help: 'Edge jobs sent by this process, by op (apply, remove, reconcile, probe, status) and outcome (ok, the agent error code, or timeout, connect_failed, ...)',
      labelNames: ['op', 'outcome'],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    // Counted where the status round that stored the start (or the end) ran: sum over the replicas.
    attacksStarted: new Counter({ name: 'tunnelgate_attacks_started_total', help: 'Attacks on tunnels that started, as stored from the edge agents by this process', registers: [registry] }),
    attacksEnded: new Counter({ name: 'tunnelgate_attacks_ended_total', help: 'Attacks on tunnels that ended, as stored from the edge agents by this process', registers: [registry] }),
  };
}
