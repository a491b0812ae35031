// Environment -> one typed Config object, read once at start. Everything else takes a Config.
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root: the default panel build sits at `panel/dist` beside the gateway's sources, wherever the process was started. */
const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export interface Config {
  host: string;
  port: number;
  publicUrl: string;
  issuerUrl: string;
  /** Unset: the embedded PostgreSQL (PGlite) under `dataDir`. */
  databaseUrl: string | null;
  dataDir: string;
  /** Lab setups may sell tunnels to private/documentation-range origins; production never. */
  allowPrivateOrigins: boolean;
  /** The admin SSH port reported in pricing and on tunnels. */
  adminSshPort: number;
  /** Per-credential request budget (token bucket): sustained rate per minute and burst size. */
  rateLimitPerMinute: number;
  rateLimitBurst: number;
  /** Maximum JSON body accepted on the REST routes and GraphQL, in bytes. */
  bodyLimitBytes: number;
  logLevel: 'debug' | 'info' | 'warn' | 'error' | 'silent';
  /** One log line per HTTP request (errors are always logged). */
  accessLog: boolean;
  /** Provisioning (server/provisioning): wait for the agent before 202, per-job timeout, retries, worker. */
  edgeWaitMs: number;
  edgeJobTimeoutMs: number;
  edgeRetryLimit: number;
  /** Whether this process runs the edge worker (an API-only replica sets EDGE_WORKER=false). */
  edgeWorker: boolean;
  edgeWorkerConcurrency: number;
  edgeSweepSeconds: number;
  edgeJobExpireSeconds: number;
  /** Every node is reconciled about this often (jittered ±20%), besides on every reconnect (docs/CONTRACTS.md "Dataplane" drift). */
  edgeReconcileSeconds: number;
  /** EDGE_STATUS_SECONDS (docs/CONTRACTS.md "Health and traffic"): how often every node is asked for op `status`. */
  edgeStatusSeconds: number;
  /**
   * TRUST_PROXY=N (docs/CONTRACTS.md "Starting it"): the client address is the N-th X-Forwarded-For entry from the right
   * (the one the outermost of our N proxies appended); 0 = the socket's address.
   */
  trustProxy: number;
  /** METRICS_TOKEN (docs/CONTRACTS.md "Starting it"): when set, /metrics needs `Authorization: Bearer <token>`; null = open. */
  metricsToken: string | null;
  /** Open GraphQL WebSocket connections allowed per client address (IPv6: per /64). */
  wsConnectionsPerAddress: number;
  /** How often a live WebSocket re-checks its credential (revoked key, expired token, revoked grant). */
  wsAuthRecheckMs: number;
  /** SIGTERM/SIGINT: how long in-flight requests may finish before their connections are cut. */
  drainTimeoutMs: number;
  /** ALLOW_PRIVATE_WEBHOOKS (docs/CONTRACTS.md "Webhooks"): http URLs and private addresses allowed (labs, tests). */
  allowPrivateWebhooks: boolean;
  /** WEBHOOK_WORKER: whether this process sends webhook deliveries; default: as EDGE_WORKER. */
  webhookWorker: boolean;
  /**
   * PANEL_DIR (docs/CONFIGURATION.md): the panel's build output served at `/` (server/http/panel.ts).
   * Absolute; default `<repository>/panel/dist`.
   */
  panelDir: string;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

function int(env: NodeJS.ProcessEnv, key: string, fallback: number, min: number, max: number): number {
  const raw = env[key];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${key} must be an integer, got ${JSON.stringify(raw)}`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${key} must be between ${min} and ${max}, got ${n}`);
  return n;
}

function bool(env: NodeJS.ProcessEnv, key: string): boolean {
  const raw = (env[key] ?? '').toLowerCase();
  if (raw === '' || raw === '0' || raw === 'false' || raw === 'no') return false;
  if (raw === '1' || raw === 'true' || raw === 'yes') return true;
  throw new ConfigError(`${key} must be true or false, got ${JSON.stringify(env[key])}`);
}

function url(env: NodeJS.ProcessEnv, key: string, fallback: string): string {
  const raw = env[key] || fallback;
  try {
    const u = new URL(raw);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('not http(s)');
  } catch {
    throw new ConfigError(`${key} must be an absolute http(s) URL, got ${JSON.stringify(raw)}`);
  }
  return raw.replace(/\/+$/, '');
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const port = int(env, 'PORT', 4000, 0, 65535);
  const publicUrl = url(env, 'PUBLIC_URL', `http://localhost:${port}`);
  const level = (env.LOG_LEVEL ?? 'info') as Config['logLevel'];
  if (!['debug', 'info', 'warn', 'error', 'silent'].includes(level)) {
    throw new ConfigError(`LOG_LEVEL must be one of debug, info, warn, error, silent`);
  }
  const edgeWorker = env.EDGE_WORKER === undefined || env.EDGE_WORKER === '' ? true : bool(env, 'EDGE_WORKER');
  return {
    host: env.HOST || '127.0.0.1',
    port,
    publicUrl,
    issuerUrl: url(env, 'ISSUER_URL', publicUrl),
    databaseUrl: env.DATABASE_URL || null,
    // Relative to the installation, never the working directory: the gateway and an admin CLI started
    // from another directory must find the same database and admin socket (docs/SECURITY.md row 22).
    dataDir: path.resolve(REPO_ROOT, env.DATA_DIR || '.data'),
    allowPrivateOrigins: bool(env, 'ALLOW_PRIVATE_ORIGINS'),
    adminSshPort: int(env, 'ADMIN_SSH_PORT', 52222, 1, 65535),
    rateLimitPerMinute: int(env, 'RATE_LIMIT_PER_MINUTE', 600, 1, 100_000_000),
    rateLimitBurst: int(env, 'RATE_LIMIT_BURST', 100, 1, 100_000_000),
    bodyLimitBytes: int(env, 'BODY_LIMIT_BYTES', 64 * 1024, 1024, 16 * 1024 * 1024),
    logLevel: level,
    accessLog: env.ACCESS_LOG === undefined || env.ACCESS_LOG === '' ? true : bool(env, 'ACCESS_LOG'),
    edgeWaitMs: int(env, 'EDGE_WAIT_MS', 5000, 0, 60_000),
    edgeJobTimeoutMs: int(env, 'EDGE_JOB_TIMEOUT_MS', 10_000, 100, 120_000),
    edgeRetryLimit: int(env, 'EDGE_RETRY_LIMIT', 10, 0, 1000),
    edgeWorker,
    edgeWorkerConcurrency: int(env, 'EDGE_WORKER_CONCURRENCY', 8, 1, 256),
    edgeSweepSeconds: int(env, 'EDGE_SWEEP_SECONDS', 30, 1, 3600),
    edgeJobExpireSeconds: int(env, 'EDGE_JOB_EXPIRE_SECONDS', 30, 1, 3600),
    edgeReconcileSeconds: int(env, 'EDGE_RECONCILE_SECONDS', 300, 1, 86_400),
    edgeStatusSeconds: int(env, 'EDGE_STATUS_SECONDS', 30, 1, 3600),
    trustProxy: trustProxy(env),
    metricsToken: metricsToken(env),
    wsConnectionsPerAddress: int(env, 'WS_CONNECTIONS_PER_ADDRESS', 32, 1, 100_000),
    wsAuthRecheckMs: int(env, 'WS_AUTH_RECHECK_MS', 5_000, 100, 60_000),
    drainTimeoutMs: int(env, 'DRAIN_TIMEOUT_MS', 10_000, 0, 600_000),
    allowPrivateWebhooks: bool(env, 'ALLOW_PRIVATE_WEBHOOKS'),
    webhookWorker: env.WEBHOOK_WORKER === undefined || env.WEBHOOK_WORKER === '' ? edgeWorker : bool(env, 'WEBHOOK_WORKER'),
    // Relative to the working directory (unlike DATA_DIR, which is relative to the installation).
    panelDir: env.PANEL_DIR ? path.resolve(env.PANEL_DIR) : path.join(REPO_ROOT, 'panel/dist'),
  };
}

/** TRUST_PROXY: a count of proxies. `true` is taken as 1 (its meaning before counts existed). */
function trustProxy(env: NodeJS.ProcessEnv): number {
  const raw = (env.TRUST_PROXY ?? '').trim().toLowerCase();
  if (raw === 'true') return 1;
  if (raw === 'false') return 0;
  return int({ TRUST_PROXY: raw }, 'TRUST_PROXY', 0, 0, 32);
}

function metricsToken(env: NodeJS.ProcessEnv): string | null {
  const raw = env.METRICS_TOKEN ?? '';
  if (raw === '') return null;
  // A header value: visible ASCII only, and long enough not to be guessed.
  if (!/^[\x21-\x7e]{16,512}$/.test(raw)) throw new ConfigError('METRICS_TOKEN must be 16 to 512 visible ASCII characters');
  return raw;
}
