// The edge agent: `npm run agent -- [--config FILE]` or `tunnel-agent [--config FILE]`.
//   config -> dataplane -> restore the last desired state -> replay cache -> host key -> SSH server; prints
//   the host-key fingerprint.
// SIGTERM/SIGINT stop accepting jobs, let a running job finish, and exit without touching the dataplane:
// traffic keeps flowing while the agent is down (docs/CONTRACTS.md "Dataplane").
//
// `tunnel-agent fingerprint [--config FILE]` prints the host-key fingerprint (generating the key on
// first use) and exits: what the operator records with `node add --host-key`.
import agentPackage from './package.json' with { type: 'json' };
import { createLogger, type Logger } from '../common/log.ts';
import { ConfigError, loadConfig, type AgentConfig } from './config.ts';
import type { Dataplane, TunnelSpec } from './dataplane/types.ts';
import type { DataplaneHandle } from './dataplane/index.ts';
import { JobHandler } from './jobs/handle.ts';
import { addressRefusal, type AddressRule } from './jobs/verify.ts';
import type { StatusCursor, StatusResult } from '../common/tunnel-status.ts';
import { HealthScheduler, type CheckRecord, type HealthClock } from './health/scheduler.ts';
import { StatusReporter } from './health/status.ts';
import { AttackMonitor } from './attacks/monitor.ts';
import { TrafficRing } from './traffic/ring.ts';
import { feedRing } from './traffic/feed.ts';
import type { TrafficResult } from '../common/traffic-live.ts';
import { EventHub } from './events/hub.ts';
import { outCounterName } from './dataplane/policy.ts';
import { releaseMemory } from './housekeeping/memory.ts';
import { TunnelLinksState } from './dataplane/link-support.ts';
import { ReplayCache } from './jobs/replay-cache.ts';
import { loadOrCreateHostKey, type HostKey } from './ssh/keys.ts';
import { AgentSshServer } from './ssh/server.ts';
import { activity, type StuckOperation } from './housekeeping/activity.ts';
import { startWatchdogThread, type WatchdogThread } from './housekeeping/watchdog-thread.ts';

export interface RunningAgent {
  address: { host: string; port: number };
  hostKey: HostKey;
  /** Connections accepted and not authenticated yet (diagnostics, tests). */
  unauthenticated(): number;
  /** Stops the SSH server and closes the replay cache; the dataplane is the caller's. */
  stop(drainMs?: number): Promise<void>;
}

export interface StartOptions {
  dataplane: Dataplane;
  log: Logger;
  /** Seconds since the epoch (tests move it). */
  now?: () => number;
  /** Per-job stdin timeout (default 30 s). */
  inputTimeoutMs?: number;
  /** Accept to authenticated (default 10 s, docs/CONTRACTS.md "Hardening of the listener"); tests shorten it. */
  handshakeTimeoutMs?: number;
  /** The status op's answer (startHealth); without it the agent answers status with kernel_error. */
  status?: (since?: StatusCursor | null) => Promise<StatusResult>;
  /** The traffic op's answer (startHealth's ring); without it the agent answers traffic with kernel_error. */
  traffic?: (ids: readonly string[], sinceS?: number) => TrafficResult;
  /** Whether it can make its tunnels' links, as `hello` says it (dataplane/link-support.ts); absent: not said. */
  tunnelLinks?: TunnelLinksState;
  /** The `events` op's source (startHealth); without it hello does not list `events` and the gateway only pulls. */
  events?: EventHub;
}

/** The health checks' probe timeout. */
const HEALTH_PROBE_TIMEOUT_MS = 1000;

export interface RunningHealth {
  scheduler: HealthScheduler;
  /** Attack detection over the same counters, once a second (agent/attacks; docs/CONTRACTS.md "Attacks"). */
  attacks: AttackMonitor;
  /** The last 300 s of every tunnel, one point a second, from the attack monitor's reads (agent/traffic/ring.ts). */
  traffic: TrafficRing;
  status: (since?: StatusCursor | null) => Promise<StatusResult>;
  /** Attack starts and ends and health changes as they are decided, for the `events` op (docs/CONTRACTS.md "Events stream"). */
  events: EventHub;
  stop(): Promise<void>;
}

/**
 * Starts the health checks over the dataplane's desired state and builds the status op's answer (agent/health;
 * DESIGN 3.6 and 3.7). Checks at most 16 tunnels at once, each at its own slot in the interval.
 */
export function startHealth(
  dataplane: Pick<DataplaneHandle, 'desiredTunnels' | 'probe' | 'counters' | 'counterPackets'> & Partial<Pick<DataplaneHandle, 'capacity' | 'vector'>>,
  opts: {
    intervalS: number;
    log?: Logger;
    startedAt?: number;
    clock?: HealthClock;
    concurrency?: number;
    timer?: boolean;
    probeTimeoutMs?: number;
    tunnelLinks?: TunnelLinksState;
    /** The operation the watchdog gave up as stuck, for `agent.stuck` (default: the process's tracker). */
    stuck?: () => StuckOperation | undefined;
    /** Between the events stream's keep-alives (default common/edge-events.ts KEEPALIVE_MS). */
    keepaliveMs?: number;
  },
): RunningHealth {
  // Pushed on the check or tick that decides them: the ≤ 5 s from flood to webhook cannot wait for a pull.
  const events = new EventHub({ ...(opts.keepaliveMs ? { keepaliveMs: opts.keepaliveMs } : {}), ...(opts.clock ? { now: () => opts.clock!.now() } : {}) });
  const scheduler = new HealthScheduler({
    tunnels: () => dataplane.desiredTunnels(),
    // 1 s (the job probe's default is 3 s): a failed check then holds its slot a third as long, and one lost
    // echo is absorbed by the hysteresis (3 failures in a row before down).
    probe: (t) => dataplane.probe(t, { timeoutMs: opts.probeTimeoutMs ?? HEALTH_PROBE_TIMEOUT_MS }),
    outPackets: async (ts) => {
      const names = ts.map((t) => outCounterName(t));
      const got = await dataplane.counterPackets(names);
      return names.map((n) => got.get(n));
    },
    intervalMs: opts.intervalS * 1000,
    ...(opts.clock ? { clock: opts.clock } : {}),
    ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
    ...(opts.log ? { log: (event: string, fields?: Record<string, unknown>) => opts.log!.info(event, fields) } : {}),
    // Each check at debug (AGENT_LOG_LEVEL=debug): which slot it ran for and what it decided, so an outage's
    // checks can be counted (test/vm/gre.test.ts); at info and above the logger drops it.
    ...(opts.log ? { onCheck: (c: CheckRecord) => opts.log!.debug('health check', { ...c, slot: new Date(c.slot).toISOString() }) } : {}),
    onChange: (id, health, at) => events.health(id, health, at),
  });
  const traffic = new TrafficRing();
  const attacks = new AttackMonitor({
    tunnels: () => dataplane.desiredTunnels(),
    counters: () => dataplane.counters(),
    onRead: (at, tunnels, counters) => feedRing(traffic, at, tunnels, counters),
    ...(dataplane.vector ? { vector: dataplane.vector } : {}),
    ...(opts.clock ? { now: () => opts.clock!.now() } : {}),
    ...(opts.log ? { log: opts.log.child({ component: 'attacks' }) } : {}),
    onEvent: (e) => events.attack(e),
  });
  const reporter = new StatusReporter({
    tunnels: () => dataplane.desiredTunnels(),
    counters: () => dataplane.counters(),
    attacks: () => attacks.report(),
    health: (id) => scheduler.get(id),
    version: agentVersion(),
    ...(opts.tunnelLinks ? { tunnelLinks: () => opts.tunnelLinks!.refresh() } : {}),
    ...(dataplane.capacity ? { capacity: () => dataplane.capacity!() } : {}),
    stuck: opts.stuck ?? (() => activity.stuck()),
    startedAt: opts.startedAt ?? Date.now(),
    ...(opts.clock ? { now: () => opts.clock!.now() } : {}),
  });
  // timer: false leaves the checks to whoever calls scheduler.runDue() (tests with an injected clock).
  let release: NodeJS.Timeout | undefined;
  if (opts.timer !== false) {
    scheduler.start();
    attacks.start();
    // Probes leave freed native memory in glibc's arenas that only malloc_trim hands back, and they are no
    // dataplane operation (which releases after itself): once per interval, as bench:agent-health measures
    // (RSS flat over 8 intervals with it, creeping without). One full collection of a ~15 MB heap per interval.
    release = setInterval(() => releaseMemory(), opts.intervalS * 1000);
    release.unref();
  }
  return {
    scheduler,
    attacks,
    traffic,
    status: (since) => reporter.status(since),
    events,
    stop: async () => {
      if (release) clearInterval(release);
      await attacks.stop();
      return scheduler.stop();
    },
  };
}

/** This agent's version, from agent/package.json (what `tunnel-agent hello` reports). */
function agentVersion(): string {
  // Imported, not read beside this file: in the prebuilt bundle (agent/dist) this module is not in agent/.
  if (typeof agentPackage.version !== 'string') throw new Error('agent/package.json has no version');
  return agentPackage.version;
}

/** Starts the job endpoint over an open dataplane. */
export async function startAgent(config: AgentConfig, opts: StartOptions): Promise<RunningAgent> {
  const { log } = opts;
  const now = opts.now ?? (() => Date.now() / 1000);
  const replay = await ReplayCache.open(config.stateDir, { now, warn: (m, f) => log.warn(m, f) });
  const hostKey = await loadOrCreateHostKey(config.stateDir);
  const jobs = new JobHandler(
    { nodeId: config.nodeId, edgeIp: config.edgeIp, jobKeys: config.jobKeys, replay, now, versions: config.jobVersions, ...(config.protectedPools ? { protectedPools: config.protectedPools } : {}) },
    opts.dataplane,
    log,
    opts.status,
    opts.traffic,
    opts.events,
  );
  const server = new AgentSshServer({
    host: config.listen.host,
    port: config.listen.port,
    hostKey,
    authorizedKey: config.authorizedKey,
    jobs,
    log,
    allowFrom: config.allowFrom,
    versions: config.jobVersions,
    agentVersion: agentVersion(),
    events: opts.events !== undefined,
    trafficLive: opts.traffic !== undefined,
    statusDelta: opts.status !== undefined,
    ...(opts.tunnelLinks ? { tunnelLinks: () => opts.tunnelLinks!.current() } : {}),
    ...(opts.inputTimeoutMs !== undefined ? { inputTimeoutMs: opts.inputTimeoutMs } : {}),
    ...(opts.handshakeTimeoutMs !== undefined ? { handshakeTimeoutMs: opts.handshakeTimeoutMs } : {}),
  });
  let address: { host: string; port: number };
  try {
    address = await server.listen();
  } catch (e) {
    await replay.close();
    throw e;
  }
  return {
    address,
    hostKey,
    unauthenticated: () => server.unauthenticated,
    async stop(drainMs) {
      await server.close(drainMs);
      await replay.close();
    },
  };
}

/** Exit code of an agent that restarts itself (EX_SOFTWARE): systemd's Restart=on-failure starts it again. */
export const WATCHDOG_EXIT_CODE = 70;
/**
 * How long a stop (SIGTERM, SIGINT) may take: the SSH server's drain (10 s, ssh/server.ts) and the rest. Below
 * systemd's TimeoutStopSec (agent/deploy/tunnel-agent.service), so the agent ends itself, never killed mid-write.
 */
export const STOP_BOUND_S = 15;

export interface RunningWatchdog {
  /** A stop began: the process ends within STOP_BOUND_S whatever happens (its own timer, and the watchdog thread's). */
  stopping(): void;
  stop(): Promise<void>;
}

/**
 * The watchdog (housekeeping/activity.ts): operations without progress for `watchdogS` are given up as stuck, and the
 * agent exits with WATCHDOG_EXIT_CODE when it cannot recover; its thread kills the agent when the event loop stops
 * turning for as long, or a stop outlives STOP_BOUND_S.
 */
export function startWatchdog(watchdogS: number, log: Logger, base: Record<string, unknown>, logFd = 1): RunningWatchdog {
  const wlog = log.child({ component: 'watchdog' });
  activity.configure({
    stuckAfterMs: watchdogS * 1000,
    log: (event, fields) => (event === 'watchdog.unrecoverable' ? wlog.error(event, fields) : wlog.warn(event, fields)),
    onUnrecoverable: () => {
      wlog.error('exiting so that systemd restarts the agent; the restore at start brings the dataplane back', { exit_code: WATCHDOG_EXIT_CODE });
      process.exit(WATCHDOG_EXIT_CODE);
    },
  });
  let thread: WatchdogThread | undefined = startWatchdogThread(
    { shared: activity.shared, limitMs: watchdogS * 1000, base, fd: logFd },
    () => activity.beat(),
    (e) => wlog.error('the watchdog thread failed; the agent goes on without it', { err: e }),
  );
  return {
    stopping() {
      activity.stopping(STOP_BOUND_S);
      const t = setTimeout(() => {
        wlog.error('the stop did not finish within its bound; exiting, the dataplane stays as it is', { stop_s: STOP_BOUND_S, ...(activity.stuck() ?? {}) });
        process.exit(1);
      }, STOP_BOUND_S * 1000);
      t.unref();
    },
    async stop() {
      activity.stop();
      await thread?.stop();
      thread = undefined;
    },
  };
}

/**
 * Restores the last desired state and logs the outcome; never throws (the agent must come up regardless).
 * Each journaled tunnel is first held to the addresses a job's would be (jobs/verify.ts addressRefusal:
 * AGENT_EDGE_IP, AGENT_PROTECTED_POOLS as configured now): one outside them is logged and left out, and the
 * rest is reconciled as the desired state, which drops it from the journal and removes what the agent
 * created for it, as for any tunnel no longer desired (docs/CONFIGURATION.md AGENT_PROTECTED_POOLS).
 */
export async function restoreAtStart(dataplane: Pick<DataplaneHandle, 'restore' | 'reconcile' | 'desiredTunnels'>, log: Logger, rule: AddressRule): Promise<void> {
  const started = performance.now();
  try {
    const kept: TunnelSpec[] = [];
    let refused = 0;
    for (const t of dataplane.desiredTunnels()) {
      const why = addressRefusal([t.edge_ip], [t.protected_ip], rule);
      if (why === undefined) {
        kept.push(t);
        continue;
      }
      refused++;
      log.warn('tunnel not restored: outside this agent\'s configured addresses; removing it', { tunnel_id: t.id, tunnel_name: t.tunnel_name, code: 'wrong_audience', reason: why });
    }
    const r = refused === 0 ? await dataplane.restore() : await dataplane.reconcile(kept);
    const fields = { added: r.added, changed: r.changed, removed: r.removed, unchanged: r.unchanged, failed: r.failed.length, refused, ms: Math.round(performance.now() - started) };
    log.info('restored the last desired state', fields);
    for (const f of r.failed) log.warn('tunnel not restored', { tunnel_id: f.id, code: f.error, reason: f.error_description });
  } catch (e) {
    log.error('restoring the last desired state failed; the gateway\'s next reconcile will retry', { err: e });
  }
}

function parseArgs(argv: string[]): { command: 'run' | 'fingerprint'; configPath?: string } {
  let command: 'run' | 'fingerprint' = 'run';
  let configPath: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--config') {
      configPath = argv[++i];
      if (!configPath) throw new ConfigError('--config needs a file name');
    } else if (a.startsWith('--config=')) {
      configPath = a.slice('--config='.length);
    } else if (a === 'fingerprint' && i === 0) {
      command = 'fingerprint';
    } else if (a === '--help' || a === '-h') {
      process.stdout.write('usage: tunnel-agent [fingerprint] [--config FILE] [--version]\n');
      process.exit(0);
    } else if (a === '--version') {
      process.stdout.write(`tunnel-agent ${agentVersion()}\n`);
      process.exit(0);
    } else {
      throw new ConfigError(`unknown argument "${a}" (usage: tunnel-agent [fingerprint] [--config FILE])`);
    }
  }
  return { command, ...(configPath !== undefined ? { configPath } : {}) };
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const config = loadConfig(process.env, args.configPath);
  if (args.command === 'fingerprint') {
    process.stdout.write(`${(await loadOrCreateHostKey(config.stateDir)).fingerprint}\n`);
    return;
  }
  const log = createLogger(config.logLevel, { service: 'tunnel-agent', node_id: config.nodeId });
  // Before the dataplane: the restore at start is watched too.
  const watchdog = startWatchdog(config.watchdogS, log, { service: 'tunnel-agent', node_id: config.nodeId });
  log.info('starting', {
    listen: `${config.listen.host}:${config.listen.port}`,
    state_dir: config.stateDir,
    edge_ip: config.edgeIp,
    nft_table: config.nftTable,
    allow_from: config.allowFrom?.entries ?? 'any',
    protected_pools: config.protectedPools?.entries ?? 'any',
    job_versions: config.jobVersions,
    health_interval_s: config.healthIntervalS,
    watchdog_s: config.watchdogS,
    edge_pps: config.edgePps,
    version: agentVersion(),
    gateway_key: config.authorizedKey.fingerprint,
    job_keys: config.jobKeys.map((k) => k.kid ?? k.thumbprint),
    sources: config.sources,
  });
  // Loaded here rather than at the top so `tunnel-agent fingerprint` needs no netlink.
  const { createDataplane } = await import('./dataplane/index.ts');
  const dpLog = log.child({ component: 'dataplane' });
  const dataplane: DataplaneHandle = await createDataplane({
    stateDir: config.stateDir,
    edgeIp: config.edgeIp,
    nftTable: config.nftTable,
    edgePps: config.edgePps,
    ...(config.protectedPools ? { protectedPools: config.protectedPools.entries } : {}),
    log: (event, fields) => (event.endsWith('.error') ? dpLog.warn(event, fields) : dpLog.info(event, fields)),
  });
  // Restore the last desired state before the first job can arrive (docs/CONTRACTS.md "Restart and reboot"): after a
  // reboot the links and the table are gone and nothing would bring them back until the gateway's next
  // reconcile. Tunnels already right are left alone; one the kernel refuses is logged, not fatal, and the
  // agent still starts, so the gateway can reach it.
  await restoreAtStart(dataplane, log, config);
  // Before the first job: a kernel that cannot make the tunnels' links (no GRE) is a warning here, and
  // `hello`/`status` tell the gateway, which then sells nothing from this node (docs/CONTRACTS.md "Tunnel links").
  const tunnelLinks = new TunnelLinksState(() => dataplane.tunnelLinks(), log);
  const links = await tunnelLinks.refresh();
  // Also in plain words beside the fingerprint line: whoever starts the agent by hand reads stderr, not the JSON log.
  if (links.usable === false) process.stderr.write(`tunnel-agent: warning: ${links.reason ?? 'this node cannot make its tunnel links'}; the gateway sells nothing from this node\n`);
  const health = startHealth(dataplane, { intervalS: config.healthIntervalS, log: log.child({ component: 'health' }), startedAt: Date.now() - Math.round(process.uptime() * 1000), tunnelLinks });
  let agent: RunningAgent;
  try {
    agent = await startAgent(config, { dataplane, log, status: health.status, traffic: (ids, since) => health.traffic.answer(ids, since), events: health.events, tunnelLinks });
  } catch (e) {
    await health.stop();
    await dataplane.close();
    throw e;
  }
  const { hostKey, address } = agent;

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    // Whatever hangs from here on (a job, the kernel, the event loop), the process ends within STOP_BOUND_S.
    watchdog.stopping();
    log.info('shutting down; the dataplane stays as it is', { signal, bound_s: STOP_BOUND_S });
    try {
      await agent.stop();
      await health.stop();
      await dataplane.close();
      await watchdog.stop();
      log.info('stopped');
    } catch (e) {
      log.error('shutdown failed', { err: e });
      process.exitCode = 1;
    }
    // Nothing is left to wait for; do not let a stray handle keep the process (and systemd's stop) waiting.
    process.exit();
  };
  // Before the fingerprint and `listening` are announced: whoever signals as soon as it reads either must
  // find the shutdown installed, not the default action.
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));
  process.stderr.write(`tunnel-agent: host key fingerprint ${hostKey.fingerprint} (ED25519); record it at the gateway with node add --host-key\n`);
  log.info('listening', { listen: `${address.host}:${address.port}`, host_key_fingerprint: hostKey.fingerprint, host_key_created: hostKey.created });
}

// The dataplane as the agent runs it, from the agent's bundle too (bench/lib/agent-dataplane.mjs measures it).
export { createDataplane } from './dataplane/index.ts';

/** The command line: runs the agent, or prints the fingerprint; on a start-up error exits 1 with the reason. */
export async function runCli(): Promise<void> {
  try {
    await main();
  } catch (e) {
    const msg = e instanceof ConfigError ? e.message : e instanceof Error ? (e.stack ?? e.message) : String(e);
    process.stderr.write(`tunnel-agent: ${msg}\n`);
    process.exit(1);
  }
}

if (import.meta.main) void runCli();
