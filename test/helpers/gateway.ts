// The real gateway on a real http.Server on 127.0.0.1, against a per-file PostgreSQL database.
import 'reflect-metadata';
import type { AddressInfo } from 'node:net';
import { loadConfig, type Config } from '../../server/config.ts';
import { createLogger, type Logger } from '../../common/log.ts';
import { buildServices, type Services } from '../../server/services.ts';
import { createGateway } from '../../server/http/app.ts';
import { createHttpServer } from '../../server/http/server.ts';
import { createTestDatabase, type TestDatabase } from './db.ts';

export interface RunningGateway {
  url: string;
  services: Services;
  testDb: TestDatabase;
  close(): Promise<void>;
}

/**
 * `clock`: milliseconds now for the gateway's request gate (REST and GraphQL rate limits) and the domain's
 * limits (the origin-change limit), so a rate-limit test moves time itself instead of depending on how long
 * its requests took.
 */
/**
 * `publicUrlIsItself`: PUBLIC_URL is the address the gateway listens on (known only once it listens), for a
 * browser that must stay on it: the panel moves to PUBLIC_URL before it signs in.
 */
export async function startGateway(opts: { config?: Partial<Config>; testDb?: TestDatabase; log?: Logger; clock?: () => number; idempotencyPurgeMs?: number; publicUrlIsItself?: boolean } = {}): Promise<RunningGateway> {
  const testDb = opts.testDb ?? (await createTestDatabase());
  // Listen first: the issuer URL (ISSUER_URL) must be the address clients really reach.
  const server = createHttpServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const config: Config = {
    ...loadConfig({}),
    // Generous by default so functional tests never trip the limiter; the rate-limit test lowers it.
    rateLimitPerMinute: 1_000_000,
    rateLimitBurst: 100_000,
    // Most test gateways have no agent to wait for: answer 202 quickly. Provisioning tests set their own.
    edgeWaitMs: 300,
    logLevel: 'silent',
    issuerUrl: url,
    ...(opts.publicUrlIsItself ? { publicUrl: url } : {}),
    ...opts.config,
  };
  const services = buildServices(config, testDb.db, opts.log, opts.clock ? { clock: opts.clock } : {});
  const gateway = await createGateway(services, opts.log ?? createLogger(config.logLevel), server, {
    ...(opts.clock ? { clock: opts.clock } : {}),
    ...(opts.idempotencyPurgeMs ? { idempotencyPurgeMs: opts.idempotencyPurgeMs } : {}),
  });
  server.on('request', gateway.app.callback());
  return {
    url,
    services,
    testDb,
    async close() {
      // As main.ts drains: WebSockets end first (an upgraded socket would hold server.close() open).
      gateway.setDraining();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await gateway.stop();
      await services.webhooks.stopDelivery();
      await services.health.stopCollector();
      await services.provisioning.stop();
      if (!opts.testDb) await testDb.drop();
    },
  };
}

/** fetch with JSON in and out; returns status, headers and the parsed body (or text). */
export async function call(base: string, method: string, path: string, opts: { token?: string; body?: unknown; headers?: Record<string, string>; raw?: string | Uint8Array } = {}) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Uint8Array | undefined = opts.raw;
  if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(base + path, { method, headers, body });
  const text = await res.text();
  let json: unknown = undefined;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, body: json as any, text };
}
