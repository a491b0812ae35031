// One edge router for provisioning tests: a fresh network namespace, a node row whose pinned host key
// is the agent's, and the real agent as a child process (test/helpers/agent-process.ts) listening on
// 127.0.0.1 with its dataplane in the namespace (veth stand-in for GRE). The agent can be killed and
// started again on the same port with the same host key and state, like a restarted edge daemon.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { addNode } from '../../server/domain/nodes.ts';
import type { Config } from '../../server/config.ts';
import { loadSecrets, type ServerSecrets } from '../../server/secrets.ts';
import { loadOrCreateHostKey } from '../../agent/ssh/keys.ts';
import { DNAT_MAP } from '../../agent/dataplane/kernel/context.ts';
import { TestNetns } from '../netns/netns.ts';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { createTestDatabase, type TestDatabase } from './db.ts';
import { seedUser, type SeededUser } from './fixtures.ts';
import { startGateway, type RunningGateway } from './gateway.ts';
import { startGatewayProcess, type GatewayProcess } from './gateway-process.ts';
import { freePort } from './ports.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const NODE_BIN = join(ROOT, 'node_modules/.bin/node');
export const EDGE_PUBLIC_IP = '192.0.2.1';

export interface AgentCall {
  call: 'apply' | 'remove' | 'reconcile' | 'probe';
  ids: string[];
  /** Set when the agent runs with `hold` and this call is (or was) held: the number release() takes. */
  held?: number;
  /** Which start() of the agent reported it (1, 2, ...): a killed agent's held calls are gone with it. */
  run?: number;
}

/**
 * Where a held agent stops each dataplane call until the test releases it: `before` the kernel is touched,
 * or `after` it was changed but before the job's answer goes back to the gateway.
 */
export type HoldPoint = 'before' | 'after';

/**
 * Dataplane calls in flight (announced by a held agent, not yet done) and the most there ever were at once.
 * Each TestEdge has its own; one meter can also be added to several edges' `meters` to count across nodes.
 */
export class InFlightMeter {
  now = 0;
  max = 0;
  enter(): void {
    this.now++;
    this.max = Math.max(this.max, this.now);
  }
  leave(): void {
    this.now--;
  }
}

/** What an edge's node is registered with (everything `node add` takes but the pool). */
export interface EdgeNodeRequest {
  name: string;
  publicIp: string;
  sshHost: string;
  sshPort: number;
  /** The agent's host-key fingerprint, pinned at registration. */
  hostKey: string;
}

/** The gateway's keys the agent trusts, as `node add` prints them: its SSH public key, its job-signing JWK (JSON). */
export interface AgentKeys {
  authorizedKey: string;
  jobKey: string;
}

export class TestEdge {
  readonly calls: AgentCall[] = [];
  /** The agent's structured log lines (with start({ log: true }); each carries `run`, like calls). */
  readonly logs: (Record<string, unknown> & { run: number })[] = [];
  private child: ChildProcess | null = null;
  private readonly callWaiters: (() => void)[] = [];
  /**
   * With an agent started with `hold`: which calls the test keeps held (the rest are released at once).
   * Held calls wait for release(); a test that cuts the agent or its connection there does so at an
   * exact point of the job, not after some time.
   */
  holding: (c: AgentCall) => boolean = () => false;
  /** How many times start() launched the agent. */
  private runs = 0;
  /** Calls of the running agent (held numbers) announced and not yet done. */
  private readonly open = new Set<number>();
  /** This node's calls in flight (a held agent only: it reports when each call is done). */
  readonly inFlight = new InFlightMeter();
  /** Every meter this edge's calls count on: its own, plus any a test shares between edges. */
  readonly meters: InFlightMeter[] = [this.inFlight];

  private constructor(
    readonly netns: TestNetns,
    readonly nodeId: string,
    readonly port: number,
    readonly stateDir: string,
    readonly fingerprint: string,
    private readonly keys: AgentKeys,
  ) {}

  /** Adds a node (pool `pool`) with the agent's host key pinned; the agent is not started yet. */
  static async create(db: Database, secrets: Pick<ServerSecrets, 'jobSigningKey' | 'gatewaySshKey'>, pool: string): Promise<TestEdge> {
    return TestEdge.register(async (node) => ({
      nodeId: (await addNode(db, { ...node, pool })).node_id,
      authorizedKey: secrets.gatewaySshKey.publicKey,
      jobKey: JSON.stringify(secrets.jobSigningKey.publicJwk),
    }));
  }

  /**
   * The namespace, the agent's host key and port, and a node registered by `add` (the admin CLI's `node add`,
   * as an operator does it, or the domain function), which answers the keys the agent must trust.
   */
  static async register(
    add: (node: EdgeNodeRequest) => Promise<{ nodeId: string } & AgentKeys>,
    opts: {
      /**
       * Makes the agent's host key in the state directory and answers its fingerprint (default: this
       * checkout's agent code); the upgrade test has the previous release's code make it.
       */
      makeHostKey?: (stateDir: string) => Promise<string>;
    } = {},
  ): Promise<TestEdge> {
    const netns = new TestNetns();
    try {
      // The router's underlay address exists on the edge (the probe sends from it).
      netns.run('ip', 'link', 'set', 'lo', 'up');
      netns.run('ip', 'addr', 'add', `${EDGE_PUBLIC_IP}/32`, 'dev', 'lo');
      const stateDir = mkdtempSync(join(tmpdir(), 'tg-edge-'));
      const fingerprint = opts.makeHostKey ? await opts.makeHostKey(stateDir) : (await loadOrCreateHostKey(stateDir)).fingerprint;
      const port = await freePort();
      const name = `edge-${netns.name.slice(-8)}`;
      const { nodeId, ...keys } = await add({ name, publicIp: EDGE_PUBLIC_IP, sshHost: '127.0.0.1', sshPort: port, hostKey: fingerprint });
      return new TestEdge(netns, nodeId, port, stateDir, fingerprint, keys);
    } catch (e) {
      netns.delete();
      throw e;
    }
  }

  get running(): boolean {
    return this.child !== null;
  }

  /**
   * Starts the agent process and waits until it listens; with `hold`, every call waits at that point for
   * release(). `jobVersions`: AGENT_JOB_VERSIONS (`1` stands in for an agent from before job version 2).
   * `log`: the agent logs at info and its lines are kept in `logs`. `linkKind: 'gre'`: the production
   * link driver, which this GRE-less kernel refuses (an edge that cannot carry tunnels). `root`: the checkout
   * whose agent runs, through that checkout's own test/helpers/agent-process.ts and loader (default this
   * one; the upgrade test starts the previous release's agent on the same state directory and port).
   */
  async start(opts: { hold?: HoldPoint; jobVersions?: string; log?: boolean; healthIntervalS?: number; linkKind?: 'gre' | 'veth-standin'; root?: string } = {}): Promise<void> {
    if (this.child) return;
    const root = opts.root ?? ROOT;
    const child = spawn(NODE_BIN, ['--import', join(root, 'loader/register.mjs'), join(root, 'test/helpers/agent-process.ts')], {
      cwd: root,
      env: {
        PATH: process.env.PATH,
        AGENT_NODE_ID: this.nodeId,
        AGENT_LISTEN: `127.0.0.1:${this.port}`,
        AGENT_STATE_DIR: this.stateDir,
        AGENT_AUTHORIZED_KEY: this.keys.authorizedKey,
        AGENT_JOB_KEY: this.keys.jobKey,
        AGENT_EDGE_IP: EDGE_PUBLIC_IP,
        AGENT_LOG_LEVEL: opts.log ? 'info' : 'silent',
        TG_TEST_NETNS: this.netns.name,
        ...(opts.hold ? { TG_TEST_HOLD: opts.hold } : {}),
        ...(opts.jobVersions !== undefined ? { AGENT_JOB_VERSIONS: opts.jobVersions } : {}),
        ...(opts.healthIntervalS !== undefined ? { AGENT_HEALTH_INTERVAL_S: String(opts.healthIntervalS) } : {}),
        ...(opts.linkKind !== undefined ? { TG_TEST_LINK_KIND: opts.linkKind } : {}),
      },
      stdio: [opts.hold ? 'pipe' : 'ignore', 'pipe', 'pipe'],
    });
    this.child = child;
    const run = ++this.runs;
    // A held agent killed by the test may close stdin under a pending release write.
    child.stdin?.on('error', () => {});
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
    createInterface({ input: child.stderr! }).on('line', (line) => {
      if (!line.startsWith('{')) return;
      try {
        this.logs.push({ ...(JSON.parse(line) as Record<string, unknown>), run });
      } catch {
        // not a log line
      }
    });
    const ready = new Promise<void>((resolveReady, reject) => {
      child.once('exit', (code) => reject(new Error(`agent exited (${code}) before it was ready: ${stderr}`)));
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const o = JSON.parse(line) as { ready?: boolean; done?: number } & Partial<AgentCall>;
        if (o.ready) return resolveReady();
        if (o.done !== undefined) {
          // A call that failed before it was announced (hold `after`) was never counted in flight.
          if (this.child === child && this.open.delete(o.done)) for (const m of this.meters) m.leave();
          return;
        }
        if (o.call) {
          const c: AgentCall = { call: o.call, ids: o.ids ?? [], run, ...(o.held === undefined ? {} : { held: o.held }) };
          this.calls.push(c);
          if (c.held !== undefined) {
            this.open.add(c.held);
            for (const m of this.meters) m.enter();
          }
          if (c.held !== undefined && !this.holding(c)) this.release(c);
          for (const w of this.callWaiters.splice(0)) w();
        }
      });
    });
    child.once('exit', () => {
      if (this.child !== child) return;
      this.child = null;
      this.dropOpen();
    });
    await ready;
  }

  /** Resolves at the next dataplane call the agent reports. */
  nextCall(): Promise<void> {
    return new Promise((r) => this.callWaiters.push(r));
  }

  /** The first call from index `from` of `calls` on that matches `match`, waiting for it if it has not come yet. */
  async waitForCall(match: (c: AgentCall) => boolean, from = 0): Promise<AgentCall> {
    for (;;) {
      const next = this.nextCall();
      const found = this.calls.slice(from).find(match);
      if (found) return found;
      await next;
    }
  }

  /** Lets a held call go on (nothing happens if the agent that held it is gone). */
  release(c: AgentCall): void {
    if (c.held === undefined) throw new Error(`${c.call} was not held`);
    if (c.run !== this.runs) return;
    this.child?.stdin?.write(`${JSON.stringify({ release: c.held })}\n`);
  }

  /** Kills the agent (SIGKILL: no drain, like a crash) and waits for it to be gone. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const c = this.child;
    if (!c) return;
    const gone = new Promise<void>((r) => c.once('exit', () => r()));
    c.kill(signal);
    await gone;
    this.child = null;
    this.dropOpen();
  }

  /** The agent is gone, and with it every call it had in flight. */
  private dropOpen(): void {
    for (const _ of this.open) for (const m of this.meters) m.leave();
    this.open.clear();
  }

  /**
   * Process ids holding an established TCP connection to the agent's port (ss, from the kernel): which
   * gateway processes have an SSH connection to this edge right now. Connections are warm (kept open), so a
   * process that ever ran a job here still shows.
   */
  clientPids(): number[] {
    const out = execFileSync('ss', ['-Htnp', 'state', 'established', `( dport = :${this.port} )`], { encoding: 'utf8' });
    return [...new Set([...out.matchAll(/pid=(\d+)/g)].map((m) => Number(m[1])))].sort((a, b) => a - b);
  }

  /** Sends the agent a signal (SIGSTOP/SIGCONT freeze and thaw it mid-job, like a stalled router). */
  signal(signal: NodeJS.Signals): void {
    if (!this.child) throw new Error('the agent is not running');
    this.child.kill(signal);
  }

  /** Bytes the gateway sent that the agent has not read yet, over its established connections (ss). */
  unreadBytes(): number {
    const out = execFileSync('ss', ['-Htn', 'state', 'established', `( sport = :${this.port} )`], { encoding: 'utf8' });
    return out
      .split('\n')
      .filter((l) => l.trim())
      .reduce((sum, l) => sum + Number(l.trim().split(/\s+/)[0]), 0);
  }

  /** How many times the agent ran `call` for tunnel `id` (reconciles counted when they list it). */
  count(call: AgentCall['call'], id: string): number {
    return this.calls.filter((c) => c.call === call && c.ids.includes(id)).length;
  }

  /** The veth stand-in links and dnat map elements the agent owns in the namespace. */
  links(): string[] {
    const all = JSON.parse(this.netns.run('ip', '-j', 'link', 'show')) as { ifname: string }[];
    return all.map((l) => l.ifname).filter((n) => n.startsWith('tg-'));
  }

  /** Keys of the agent's dnat map (protected IP -> origin inner IP). */
  mapElements(): string[] {
    const out = JSON.parse(this.netns.run('nft', '-j', 'list', 'ruleset')) as { nftables: Record<string, { name?: string; elem?: unknown[] }>[] };
    const keys: string[] = [];
    for (const o of out.nftables) {
      if (o.map?.name !== DNAT_MAP) continue;
      const elems = o.map.elem;
      if (!elems) continue;
      for (const e of elems) {
        const k = Array.isArray(e) ? e[0] : (e as { elem?: { val?: unknown } }).elem?.val;
        keys.push(typeof k === 'string' ? k : JSON.stringify(k));
      }
    }
    return keys;
  }

  async close(): Promise<void> {
    await this.kill();
    this.netns.delete();
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}

/** A test gateway whose provisioning worker drives a TestEdge: the setup every provisioning test shares. */
export interface ProvisioningRig {
  gw: RunningGateway;
  secrets: ServerSecrets;
  edge: TestEdge;
}

/**
 * Starts a gateway (on `testDb` if given), its worker, and a TestEdge with the protected pool `pool`; the
 * agent itself is started unless `startAgent` is false (a test of an edge that is down starts it later).
 */
export async function startProvisioningRig(opts: { config: Partial<Config>; pool: string; testDb?: TestDatabase; startAgent?: boolean }): Promise<ProvisioningRig> {
  const gw = await startGateway({ config: opts.config, testDb: opts.testDb });
  const secrets = (await loadSecrets(gw.testDb.db, {})).secrets;
  await gw.services.provisioning.start(secrets, { worker: true });
  const edge = await TestEdge.create(gw.testDb.db, secrets, opts.pool);
  if (opts.startAgent !== false) await edge.start();
  return { gw, secrets, edge };
}

/**
 * Another gateway replica on `gw`'s database, its worker running: its own ORM and pools, queue, worker, locks
 * and SSH connections, as a second process has. close() ends it and its ORM; the database stays `gw`'s.
 */
export async function startWorkerReplica(gw: RunningGateway, config: Partial<Config>): Promise<RunningGateway> {
  const db = new Database(await openOrm({ databaseUrl: gw.testDb.url, dataDir: '' }));
  const replica = await startGateway({ testDb: { ...gw.testDb, db }, config });
  await replica.services.provisioning.start((await loadSecrets(db, {})).secrets, { worker: true });
  return {
    ...replica,
    async close() {
      await replica.close();
      await db.close();
    },
  };
}

/** startProvisioningRig's counterpart for tests of real gateway processes (test/helpers/gateway-process.ts). */
export interface ProcessRig {
  db: TestDatabase;
  edge: TestEdge;
  /** A buyer with the default balance. */
  user: SeededUser;
  /** Every gateway process start() launched. */
  gateways: GatewayProcess[];
  /** Starts a gateway process on the rig's database (`env` on top of DATABASE_URL). */
  start(env: Record<string, string>): Promise<GatewayProcess>;
  /** SIGKILLs every gateway process, stops the agent and drops the database. */
  close(): Promise<void>;
}

/**
 * A fresh database, the agent of one edge node (pool `pool`) with its host key pinned, already listening
 * (with `hold`, every call waits for release()), and a buyer. The server secrets are generated here first,
 * so the gateway processes load the very keys the agent trusts.
 */
export async function startProcessRig(opts: { pool: string; hold?: HoldPoint }): Promise<ProcessRig> {
  const db = await createTestDatabase();
  const secrets = (await loadSecrets(db.db, {})).secrets;
  const edge = await TestEdge.create(db.db, secrets, opts.pool);
  await edge.start(opts.hold ? { hold: opts.hold } : {});
  const user = await seedUser(db.db);
  const gateways: GatewayProcess[] = [];
  return {
    db,
    edge,
    user,
    gateways,
    async start(env) {
      const g = await startGatewayProcess({ DATABASE_URL: db.url, ...env });
      gateways.push(g);
      return g;
    },
    async close() {
      for (const g of gateways) g.kill('SIGKILL');
      await Promise.all(gateways.map((g) => g.exited));
      await edge.close();
      await db.drop();
    },
  };
}
