// Builds the domain services once per process. REST routes, GraphQL resolvers and the admin CLI all
// receive this object, so they call the same code.
import type { Config } from './config.ts';
import { Database } from './db/database.ts';
import { migrate, openOrm } from './db/orm.ts';
import { Authenticator } from './auth/authenticate.ts';
import { PricingService } from './domain/pricing.ts';
import { TunnelService } from './domain/tunnels/index.ts';
import { createLogger, type Logger } from '../common/log.ts';
import { ProvisioningService } from './provisioning/service.ts';
import { loadSecrets } from './secrets.ts';
import { WebhookService } from './webhooks/service.ts';
import { HealthService } from './health/index.ts';
import { ApplicationService } from './domain/applications.ts';
import { AttackService } from './attacks/index.ts';

export interface Services {
  config: Config;
  db: Database;
  auth: Authenticator;
  pricing: PricingService;
  tunnels: TunnelService;
  /** Edge work: the queue, the status bus, and (once started with the secrets) the worker. */
  provisioning: ProvisioningService;
  /** Webhooks: registration (REST, GraphQL, CLI) and, where started, the delivery worker. */
  webhooks: WebhookService;
  /** Health and traffic: the traffic query, the status ingest and, where started, the collector. */
  health: HealthService;
  /** The developer portal's OAuth applications of an account (GraphQL), over the CLI's client functions. */
  applications: ApplicationService;
  /** Attacks the edges reported (docs/CONTRACTS.md "Attacks"): the query REST and GraphQL share, and the ingest the status rounds call. */
  attacks: AttackService;
}

/** `clock`: milliseconds now for the domain's time-based limits (the origin-change limit); tests move it themselves. */
export function buildServices(config: Config, db: Database, log: Logger = createLogger('silent'), opts: { clock?: () => number } = {}): Services {
  const pricing = new PricingService(db, config.adminSshPort);
  const provisioning = new ProvisioningService(db, config, log, () => pricing.invalidate());
  // The secret-encryption key as app.ts and the CLI load it (environment or database), once, on first use.
  let key: Promise<Buffer> | null = null;
  const encryptionKey = () =>
    (key ??= loadSecrets(db, process.env)
      .then((l) => l.secrets.secretEncryptionKey)
      .catch((e: unknown) => {
        key = null;
        throw e;
      }));
  const attacks = new AttackService(db, { events: provisioning.events, bus: provisioning.bus });
  return {
    config,
    db,
    auth: new Authenticator(db),
    pricing,
    tunnels: new TunnelService(db, pricing, { adminSshPort: config.adminSshPort, allowPrivateOrigins: config.allowPrivateOrigins, ...(opts.clock ? { clock: opts.clock } : {}) }, provisioning),
    provisioning,
    webhooks: new WebhookService(db, { allowPrivate: config.allowPrivateWebhooks, adminSshPort: config.adminSshPort, encryptionKey }),
    health: new HealthService(db, provisioning, attacks.ingest, log.child({ component: 'live-traffic' })),
    applications: new ApplicationService(db, encryptionKey),
    attacks,
  };
}

/** Opens the database named by the config and applies pending migrations. */
export async function openDatabase(config: Config, opts: { poolMax?: number } = {}): Promise<Database> {
  const orm = await openOrm({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, poolMax: opts.poolMax });
  await migrate(orm);
  return new Database(orm);
}
