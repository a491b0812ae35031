// The gateway in this process on the embedded database (no DATABASE_URL: PGlite under `dataDir`, migrated
// when opened), on a real http.Server on 127.0.0.1. Booting it again on the same directory is a restart:
// what the first boot wrote must be there.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createLogger } from '../../common/log.ts';
import { loadConfig, type Config } from '../../server/config.ts';
import type { Database } from '../../server/db/database.ts';
import { createGateway } from '../../server/http/app.ts';
import { loadSecrets, type ServerSecrets } from '../../server/secrets.ts';
import { buildServices, openDatabase, type Services } from '../../server/services.ts';

export interface EmbeddedGateway {
  db: Database;
  services: Services;
  /** The server secrets in the embedded database (made on the first boot, read on later ones). */
  secrets: ServerSecrets;
  url: string;
  close(): Promise<void>;
}

/** `worker`: also start the provisioning queue with its edge worker, as the gateway does by default. */
export async function bootEmbeddedGateway(dataDir: string, opts: { config?: Partial<Config>; worker?: boolean } = {}): Promise<EmbeddedGateway> {
  const config: Config = { ...loadConfig({ DATA_DIR: dataDir }), logLevel: 'silent', ...opts.config };
  const db = await openDatabase(config);
  const services = buildServices(config, db);
  const { secrets } = await loadSecrets(db, {});
  if (opts.worker) await services.provisioning.start(secrets, { worker: true });
  const server = http.createServer();
  const gateway = await createGateway(services, createLogger('silent'), server);
  server.on('request', gateway.app.callback());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    db,
    services,
    secrets,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await gateway.stop();
      // A no-op when the queue was never started.
      await services.provisioning.stop();
      await db.close();
    },
  };
}
