// `npm start`: the gateway. Config -> database (migrated) -> one HTTP server -> listen. SIGTERM and
// SIGINT drain: /readyz turns 503, the listener closes, in-flight requests finish, then the
// database closes.
import 'reflect-metadata';
import { ConfigError, loadConfig, type Config } from './config.ts';
import { checkListen, ListenError, listenFailure, type ListenSettings } from './http/listen-check.ts';
import { createLogger } from '../common/log.ts';
import { buildServices, openDatabase } from './services.ts';
import { createHttpServer } from './http/server.ts';
import { createGateway } from './http/app.ts';
import { loadSecrets, requireSecretsFromEnv, SecretsError, startupWarning } from './secrets.ts';
import { adminSocketPath, assertNoLiveGateway, serveAdminSocket } from './cli/admin-socket.ts';
import { main as runAdminCommand } from './cli/admin.ts';
import { prepareDataDir } from './data-dir.ts';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig();
    // Before the database opens: a production start without its secrets stops here, naming them.
    requireSecretsFromEnv(process.env);
  } catch (e) {
    if (e instanceof ConfigError || e instanceof SecretsError) {
      process.stderr.write(`${JSON.stringify({ error: 'invalid_config', error_description: e.message })}\n`);
      process.exit(2);
    }
    throw e;
  }
  const log = createLogger(config.logLevel, { service: 'gateway' });
  const started = Date.now();
  // A second `npm start` on the same embedded database is named as such (it also holds the port).
  if (!config.databaseUrl) await assertNoLiveGateway(adminSocketPath(config.dataDir));
  // Before the database opens (seconds, more on a loaded machine): a port another program holds is
  // named at once, with what to change (server/http/listen-check.ts), and nothing is created first.
  await checkListen(listenSettings(config)).catch((e: unknown) => {
    if (e instanceof ListenError) failToListen(e);
    throw e;
  });
  // Private before the database or the admin socket is made in it (server/data-dir.ts).
  if (!config.databaseUrl) prepareDataDir(config.dataDir);
  const db = await openDatabase(config);
  log.info('database ready', { driver: config.databaseUrl ? 'postgresql' : 'pglite', data_dir: config.databaseUrl ? undefined : config.dataDir, ms: Date.now() - started });
  // A stale or missing secret variable (server/secrets/load.ts) is a setting to change: one line naming
  // it, the same exit as invalid_config above, and the database as it was.
  const loaded = await loadSecrets(db, process.env).catch(async (e: unknown) => {
    if (!(e instanceof SecretsError)) throw e;
    process.stderr.write(`${JSON.stringify({ error: 'invalid_config', error_description: e.message })}\n`);
    await db.close().catch(() => {});
    process.exit(2);
  });
  const warning = startupWarning(loaded);
  if (warning) log.warn(warning);
  const services = buildServices(config, db, log);
  // The edge side: warm SSH to the agents, and (unless EDGE_WORKER=false) the queue worker.
  await services.provisioning.start(loaded.secrets, { worker: config.edgeWorker });
  log.info('provisioning ready', { worker: config.edgeWorker, job_key: loaded.secrets.jobSigningKey.kid });
  // Health and traffic (server/health/): the status collector runs where the edge worker runs.
  if (config.edgeWorker) services.health.startCollector(log.child({ component: 'health' }), { intervalSeconds: config.edgeStatusSeconds });
  // Beside it, each node's events stream (server/events/): attacks and health changes as the agent decides them.
  if (config.edgeWorker) services.health.startEvents(log.child({ component: 'events' }));
  // Webhook deliveries (server/webhooks/delivery.ts): WEBHOOK_WORKER, by default wherever the edge worker runs.
  if (config.webhookWorker) services.webhooks.startDelivery(log.child({ component: 'webhooks' }));
  // On the embedded database the admin CLI cannot open the cluster this process holds; it sends its
  // command line here instead (server/cli/admin-socket.ts).
  const admin = config.databaseUrl
    ? null
    : await serveAdminSocket(adminSocketPath(config.dataDir), async (argv) => {
        let stdout = '';
        let stderr = '';
        const status = await runAdminCommand(argv, process.env, { stdout: (t) => (stdout += t), stderr: (t) => (stderr += t), progress: false }, { db, provisioning: services.provisioning, forwarded: true });
        log.info('admin command', { command: argv.slice(0, 2).join(' '), status });
        return { status, stdout, stderr };
      });

  const server = createHttpServer();
  const gateway = await createGateway(services, log, server);
  // Attach the handler only now: app.callback() freezes the middleware list it is called with.
  server.on('request', gateway.app.callback());
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e) => {
      // Taken since the check at start: the same line, then the same exit.
      const failure = listenFailure(e, listenSettings(config));
      if (failure) failToListen(failure);
      reject(e);
    });
    server.listen(config.port, config.host, resolve);
  });
  const addr = server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.port;

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info('shutting down', { signal });
    gateway.setDraining();
    const force = setTimeout(() => {
      log.warn('drain timeout; closing remaining connections');
      server.closeAllConnections();
    }, config.drainTimeoutMs);
    force.unref();
    server.closeIdleConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    admin?.close();
    await gateway.stop();
    await services.webhooks.stopDelivery();
    await services.health.stopEvents();
    await services.health.stopCollector();
    await services.provisioning.stop();
    await db.close();
    clearTimeout(force);
    log.info('stopped');
    // Everything is drained and closed; a timer or pool left behind by a library must not keep the
    // process alive after a SIGTERM (seen: a gateway that logged `stopped` and never exited).
    process.exit(0);
  };
  // Before `listening` is announced: a supervisor (or a test) that signals as soon as it reads that line
  // must find the drain installed, not the default action that kills the process mid-request.
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  log.info('listening', { url: `http://${config.host}:${port}`, public_url: config.publicUrl, ms: Date.now() - started });
}

function listenSettings(config: Config): ListenSettings {
  return { host: config.host, port: config.port, publicUrlSet: (process.env.PUBLIC_URL ?? '') !== '' };
}

/** One line on stderr, the documented error shape, exit 2 (a setting to change, as for invalid_config). */
function failToListen(e: ListenError): never {
  process.stderr.write(`${JSON.stringify({ error: e.code, error_description: e.message })}\n`);
  process.exit(2);
}

main().catch((e: unknown) => {
  process.stderr.write(`${JSON.stringify({ level: 'error', msg: 'gateway failed to start', err: e instanceof Error ? { name: e.name, message: e.message, stack: e.stack } : String(e) })}\n`);
  process.exit(1);
});
