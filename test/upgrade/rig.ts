// What both upgrade tests set up (docs/RELEASES.md "The upgrade test"): the previous release's tree, a
// fresh database, gateway processes of either release on one port, an edge whose agent the previous
// release registers and starts (its host key made by its own code), an origin namespace with a TCP echo
// service behind the active tunnel, and a client namespace holding one connection through it
// (stream-client.ts). from-previous-release.test.ts upgrades the gateway first, agents-first.test.ts the
// agents first (the order the README gives operators); each test says what it checks, this module only
// builds and reads.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { expect } from 'vitest';
import { runAdminCli } from '../helpers/admin-cli.ts';
import { TestEdge } from '../helpers/edge.ts';
import { call } from '../helpers/gateway.ts';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { freePort } from '../helpers/ports.ts';
import { dropDatabase, withDatabase } from '../helpers/postgres.ts';
import { settle, until } from '../helpers/wait.ts';
import { joinUpstream, TestNetns } from '../netns/netns.ts';
import { attachStandinOrigin, Proc, SERVER } from '../netns/origin-standin.ts';
import { materialisePreviousRelease, readPreviousRecord, type PreviousRelease } from './previous-release.ts';
import { STREAM_CLIENT, type StreamFigures } from './stream-client.ts';

export const ROOT = resolve(import.meta.dirname, '../..');
const NODE = join(ROOT, 'node_modules/.bin/node');
export const VERSION = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
export const PREVIOUS = readPreviousRecord();
const POOL = '203.0.113.224/28';
const CLIENT = '198.51.100.10';
const CLIENT_GW = '198.51.100.1';
/**
 * The longest pause between two echoes the connection may show over a whole test, agent restart
 * included: a bound that turns an outage TCP would ride out into a failure, far above a loaded host's
 * scheduling stalls. The proof that a restart costs no packet is structural (the connection flows with
 * no agent at all; the new agent changes nothing), not this figure.
 */
export const GAP_BOUND_MS = 15_000;
/**
 * Each step's bound (a hang becomes a failure; nothing is expected to take this long): a step starts a
 * gateway, which alone took over 90 s once on a loaded host (test/helpers/gateway-process.ts), beside CLI
 * processes and agents.
 */
export const START_BOUND_MS = 300_000;

/** A tunnel as REST shows it (the fields the upgrade tests read). */
export interface Tunnel {
  id: string;
  name: string | null;
  protected_ip: string;
  tunnel_name: string;
  status: string;
  ports: string;
}

/** The values the origin script is filled in with (its `readonly NAME='value'` lines): what the buyer's origin runs on. */
export function scriptValues(script: string): Record<string, string> {
  return Object.fromEntries([...script.matchAll(/^readonly ([A-Z_]+)='([^'\n]*)'$/gm)].map((m) => [m[1]!, m[2]!]));
}

const execFileP = promisify(execFile);

/** The agent's host key made in `stateDir` by the agent code of the tree at `root` (what its `tunnel-agent fingerprint` calls). */
function hostKeyBy(root: string): (stateDir: string) => Promise<string> {
  return async (stateDir) => {
    const script = 'const { loadOrCreateHostKey } = await import(process.env.TG_KEYS_MODULE); process.stdout.write((await loadOrCreateHostKey(process.env.TG_STATE_DIR)).fingerprint);';
    const { stdout } = await execFileP(NODE, ['--import', join(root, 'loader/register.mjs'), '--input-type=module', '-e', script], {
      cwd: root,
      env: { PATH: process.env.PATH ?? '', TG_KEYS_MODULE: pathToFileURL(join(root, 'agent/ssh/keys.ts')).href, TG_STATE_DIR: stateDir },
    });
    return stdout.trim();
  };
}

/** One upgrade test's installation: made in open(), torn down in close(). */
export class UpgradeRig {
  readonly dbName = `tg_upgrade_${randomBytes(4).toString('hex')}`;
  readonly dbUrl: string;
  raw!: pg.Pool;
  prev!: PreviousRelease;
  url!: string;
  /** The gateways' environment (both releases run with it, on the same port and database). */
  env!: Record<string, string>;
  /** Every gateway process started, in order. */
  readonly gateways: GatewayProcess[] = [];
  edge!: TestEdge;
  origin!: TestNetns;
  client!: TestNetns;
  readonly procs: Proc[] = [];
  /** The client's one connection through the active tunnel (openConnection). */
  stream!: Proc;
  /** The buyer's write key (the REST calls' default credential). */
  writeKey = '';

  constructor(private readonly adminUrl: string) {
    this.dbUrl = withDatabase(adminUrl, this.dbName);
  }

  /** The previous release's tree, a fresh database, a free port and the gateways' environment (`env` added to it). */
  async open(env: Record<string, string> = {}): Promise<void> {
    this.prev = materialisePreviousRelease();
    this.origin = new TestNetns();
    this.client = new TestNetns();
    const a = new pg.Client({ connectionString: this.adminUrl });
    await a.connect();
    await a.query(`create database ${this.dbName}`);
    await a.end();
    this.raw = new pg.Pool({ connectionString: this.dbUrl, max: 2 });
    this.raw.on('error', () => {});
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    this.env = {
      DATABASE_URL: this.dbUrl,
      PORT: String(port),
      PUBLIC_URL: this.url,
      EDGE_WORKER: 'true',
      ALLOW_PRIVATE_WEBHOOKS: 'true',
      // The agent is local: provision and delete answer with the final status whenever it answers at all.
      EDGE_WAIT_MS: '60000',
      EDGE_JOB_TIMEOUT_MS: '30000',
      EDGE_RETRY_LIMIT: '20',
      // No status rounds unless the test asks: agents run without health checks unless it asks (test/helpers/edge.ts).
      EDGE_STATUS_SECONDS: '3600',
      ...env,
    };
  }

  async close(): Promise<void> {
    for (const p of this.procs) p.stop();
    for (const g of this.gateways) g.kill('SIGKILL');
    await Promise.all(this.gateways.map((g) => g.exited));
    await this.edge?.close();
    this.origin?.delete();
    this.client?.delete();
    await this.raw?.end();
    const a = new pg.Client({ connectionString: this.adminUrl });
    await a.connect();
    await dropDatabase(a, this.dbName);
    await a.end();
    this.prev?.remove();
  }

  /** Starts a gateway: the previous release's (`previous`) or this one's, and waits until it is ready (migrated). */
  async startGateway(release: 'previous' | 'this'): Promise<GatewayProcess> {
    const gw = await startGatewayProcess(this.env, release === 'previous' ? { root: this.prev.root } : {});
    this.gateways.push(gw);
    const health = (await call(this.url, 'GET', '/healthz')).body as { status: string; version?: string };
    expect(health.status).toBe('ok');
    if (release === 'previous') expect(health.version).not.toBe(VERSION);
    else expect(health.version).toBe(VERSION);
    await until(`${release === 'previous' ? PREVIOUS.version : VERSION} ready (migrated)`, async () => (await fetch(`${this.url}/readyz`)).status === 200);
    return gw;
  }

  /** The admin CLI of this release, or of the previous one (`previous`): its JSON answer; throws when it fails. */
  async admin(args: string[], opts: { previous?: boolean; stdin?: string } = {}): Promise<Record<string, unknown>> {
    const r = await runAdminCli({ DATABASE_URL: this.dbUrl }, args, opts.stdin, opts.previous ? { root: this.prev.root } : {});
    if (r.code !== 0) throw new Error(`admin ${args.slice(0, 2).join(' ')} (${opts.previous ? PREVIOUS.version : VERSION}) exited ${r.code}: ${r.stderr}`);
    return r.json;
  }

  /** The previous release's CLI registers the node, whose agent (the previous release's code) then starts; `agent` as TestEdge.start's. */
  async registerPreviousEdge(agent: Parameters<TestEdge['start']>[0] = {}): Promise<void> {
    this.edge = await TestEdge.register(async (n) => {
      const r = await this.admin(['node', 'add', '--name', n.name, '--public-ip', n.publicIp, '--ssh-host', n.sshHost, '--ssh-port', String(n.sshPort), '--pool', POOL, '--host-key', n.hostKey], { previous: true });
      return { nodeId: String(r.node_id), authorizedKey: String(r.gateway_ssh_public_key), jobKey: JSON.stringify(r.gateway_job_public_key) };
    }, { makeHostKey: hostKeyBy(this.prev.root) });
    await this.edge.start({ ...agent, root: this.prev.root });
  }

  /** The previous release's CLI makes a buyer with a balance; answers the buyer's write key (also kept as the default credential). */
  async makeBuyer(buyer: { email: string; name: string; password: string }): Promise<string> {
    await this.admin(['user', 'create', '--email', buyer.email, '--name', buyer.name, '--password', '-', '--balance-usd', '50'], { previous: true, stdin: `${buyer.password}\n` });
    this.writeKey = String((await this.admin(['apikey', 'create', '--email', buyer.email, '--permission', 'write'], { previous: true })).key);
    expect(this.writeKey).toMatch(/^svc_/);
    return this.writeKey;
  }

  api(method: string, path: string, opts: Parameters<typeof call>[3] = {}): ReturnType<typeof call> {
    return call(this.url, method, path, { token: this.writeKey, ...opts });
  }

  async statusOf(id: string): Promise<string> {
    return ((await this.api('GET', `/api/dedicated/${id}`)).body as { tunnel: Tunnel }).tunnel.status;
  }

  async buy(body: Record<string, unknown>): Promise<Tunnel> {
    const r = await this.api('POST', '/api/dedicated', { body });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return (r.body as { tunnel: Tunnel }).tunnel;
  }

  async provision(x: Tunnel): Promise<void> {
    const r = await this.api('POST', `/api/dedicated/${x.id}/provision`);
    expect(await settle(r, 'provisioned', () => this.statusOf(x.id))).toBe('provisioned');
  }

  async remove(x: Tunnel): Promise<void> {
    const r = await this.api('DELETE', `/api/dedicated/${x.id}`);
    expect(await settle(r, 'deleted', () => this.statusOf(x.id))).toBe('deleted');
  }

  /**
   * The tunnel's origin (the stand-in link's far end in the origin namespace, with the inner address its
   * setup script names, a TCP echo service behind it), the buyer's activate, and the client upstream of the
   * edge with its one connection through the protected IP (port 8080), kept to the end.
   */
  async openConnection(x: Tunnel): Promise<void> {
    const { edge, origin, client } = this;
    const setup = (await this.api('GET', `/api/dedicated/${x.id}/setup`)).body as { scripts: { origin: string } };
    const values = scriptValues(setup.scripts.origin);
    origin.run('ip', 'link', 'set', 'lo', 'up');
    attachStandinOrigin(edge.netns, origin, { tunnel_name: x.tunnel_name, origin_inner: values.ORIGIN_INNER! });
    await edge.netns.waitForPing(values.ORIGIN_INNER_IP!);
    const server = new Proc(origin, SERVER);
    this.procs.push(server);
    await server.saw((l) => l === 'ready');
    const activated = await until('activate answered 200', async () => {
      const r = await this.api('POST', `/api/dedicated/${x.id}/activate`);
      return r.status === 200 ? r : null;
    });
    expect((activated.body as { tunnel: Tunnel }).tunnel.status).toBe('active');

    await joinUpstream(edge.netns, client, CLIENT_GW, CLIENT);
    this.stream = new Proc(client, STREAM_CLIENT, [x.protected_ip, '8080', CLIENT]);
    this.procs.push(this.stream);
    await this.stream.saw((l) => l.startsWith('{"open"'));
  }

  async migrationsApplied(): Promise<string[]> {
    return (await this.raw.query<{ name: string }>('select name from mikro_orm_migrations order by id')).rows.map((r) => r.name);
  }

  /** The agent's tunnel links by name, with their ifindex: the same number after a restart is the same link, not a new one. */
  linkIndexes(): Record<string, number> {
    const names = this.edge.links();
    return Object.fromEntries(
      this.edge.netns
        .ipJson<{ ifname: string; ifindex: number }[]>('link', 'show')
        .filter((l) => names.includes(l.ifname))
        .map((l) => [l.ifname, l.ifindex]),
    );
  }

  /** The agent restart `systemctl restart tunnel-agent` does: SIGTERM, then this release's agent on the same state directory and port. */
  async restartAgentAsThisRelease(agent: Parameters<TestEdge['start']>[0] = {}): Promise<void> {
    await this.edge.kill('SIGTERM');
    await this.flows(50, 'with no agent running');
    await this.edge.start(agent);
  }

  private async streamLine(cmd: 'status' | 'stop', key: 'status' | 'done'): Promise<StreamFigures> {
    const from = this.stream.lines.length;
    this.stream.send(cmd);
    const line = await until(`the connection's ${key}`, () => this.stream.lines.slice(from).find((l) => l.startsWith(`{"${key}"`)), 60_000);
    return (JSON.parse(line) as Record<string, StreamFigures>)[key]!;
  }

  /** Waits until `n` more lines have come back over the connection than when it was called; answers the figures then. */
  async flows(n: number, what: string): Promise<StreamFigures> {
    const from = (await this.streamLine('status', 'status')).echoed;
    return until(`${n} more lines echoed over the connection ${what}`, async () => {
      const s = await this.streamLine('status', 'status');
      return s.echoed >= from + n ? s : null;
    }, 60_000);
  }

  /** Stops the connection and checks it: one socket all along, never closed, every line back in order. Answers its figures. */
  async endConnection(): Promise<StreamFigures> {
    const done = await this.streamLine('stop', 'done');
    const lines = this.stream.lines;
    expect(lines.filter((l) => l.startsWith('{"open"'))).toHaveLength(1);
    expect(lines.filter((l) => l.startsWith('{"closed"'))).toEqual([]);
    expect(done.bad).toBeNull();
    expect(done.echoed).toBe(done.sent);
    expect(done.local_port).toBe((JSON.parse(lines.find((l) => l.startsWith('{"open"'))!) as { open: { local_port: number } }).open.local_port);
    expect(done.max_gap_ms).toBeLessThan(GAP_BOUND_MS);
    return done;
  }
}
