// Prometheus metrics for the gateway, on a registry of our own so tests can build several apps.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export interface Metrics {
  registry: Registry;
  requests: Counter<'method' | 'route' | 'status'>;
  duration: Histogram<'method' | 'route'>;
  purchases: Counter<'outcome'>;
  /** Webhook delivery attempts of this process by outcome (server/webhooks/delivery.ts DeliveryOutcome). */
  webhookDeliveries: Counter<'outcome'>;
  /** Webhook deliveries not yet delivered nor given up, across replicas (read from the outbox at scrape). */
  webhookPending: Gauge;
}

/** `pendingWebhooks`: the outbox count the gauge reads at each scrape. */
export function createMetrics(withDefaults = true, pendingWebhooks?: () => Promise<number>): Metrics {
  const registry = new Registry();
  if (withDefaults) collectDefaultMetrics({ register: registry, prefix: 'tunnelgate_' });
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
        if (pendingWebhooks) this.set(await pendingWebhooks());
      },
    }),
  };
}
