// The world a storefront browser test runs in (docs/TESTING.md "Browser tests"), one per test file:
//
//   database  a fresh PostgreSQL database cloned from the migrated template (test/helpers/db.ts)
//   edge      a node added with the admin CLI's `node add` (host key pinned), its real agent process with the
//             dataplane in a network namespace and the veth stand-in for GRE (test/helpers/edge.ts), health
//             checks on so the gateway's status rounds collect health and traffic
//   origin    a namespace standing for the buyer's server, at a documentation-range address (the gateway runs
//             with ALLOW_PRIVATE_ORIGINS=true, as the demo does); connectOrigin() gives it a tunnel's far end
//             set up as the origin script would (demo/standin-origin.ts), so `activate` is answered
//   client    made on first use: a namespace upstream of the edge that sends traffic to protected IPs
//   gateway   the real gateway process (`npm start`'s server/main.ts) serving the BUILT panel at `/`, with its
//             edge and webhook workers, on a port fixed before it starts (PUBLIC_URL names it: the panel's
//             redirect URI is built from it)
//   people    an owner (made with `admin user create`, password on stdin, topped up with `balance add`, a
//             write API key) and a viewer (role viewer, a read key); a promocode; the USD/RUB rate
//   webhooks  a receiver on loopback (ALLOW_PRIVATE_WEBHOOKS=true) checked with `standardwebhooks`
//
// Everything is set up the operator's way, through the admin CLI against the database, except what only
// a test needs (the inner addresses read back from the database to wire the origin).
import { randomBytes } from 'node:crypto';
import { innerSubnet, parseCidr } from '../../server/domain/ip.ts';
import { attachStandinOriginRouted } from '../../demo/standin-origin.ts';
import { DEMO_ORIGIN_IP, DemoOrigin } from '../../demo/origin.ts';
import { joinUpstream, TestNetns } from '../netns/netns.ts';
import { runAdminCli } from './admin-cli.ts';
import { createTestDatabase, type TestDatabase } from './db.ts';
import { TestEdge } from './edge.ts';
import { call } from './gateway.ts';
import { startGatewayProcess, type GatewayProcess } from './gateway-process.ts';
import { ensurePanelBuilt } from './panel-build.ts';
import { freePort } from './ports.ts';
import { WebhookReceiver } from './webhook-receiver.ts';

/** Someone who signs in to the panel. */
export interface Person {
  email: string;
  password: string;
  name: string;
  /** An API key of this person's account: write for the owner, read for the viewer. */
  key: string;
}

export interface StorefrontOptions {
  /** The edge's protected pool (each file its own, so two files' kernel state never meet). */
  pool: string;
  /** The owner's balance after `balance add`, USD (default 50). */
  balanceUsd?: string;
  /**
   * Whether the world checks, once the gateway listens, that it serves the built panel and /config.json
   * (default true; the rig's own test, which opens no panel page, says false).
   */
  panel?: boolean;
  /** EDGE_STATUS_SECONDS and the agent's health interval: how soon health and traffic reach the gateway (default 5). */
  statusSeconds?: number;
}

export interface Storefront {
  /** The gateway's PUBLIC_URL: the panel at `/`, REST at /api, GraphQL at /graphql, the issuer. */
  url: string;
  db: TestDatabase;
  gateway: GatewayProcess;
  edge: TestEdge;
  /** The origin's namespace and its address (what a buyer types as the origin IP). */
  origin: TestNetns;
  originIp: string;
  owner: Person;
  viewer: Person;
  promocode: { code: string; percent: number };
  /** USD/RUB as set with `rate set`. */
  usdRubRate: string;
  webhooks: WebhookReceiver;
  /** One admin CLI command against the world's database; its JSON answer (throws on a failure, with stderr). */
  admin(args: string[], stdin?: string): Promise<Record<string, unknown>>;
  /** A REST call to the gateway (test/helpers/gateway.ts `call`). */
  api: (method: string, path: string, opts?: Parameters<typeof call>[3]) => ReturnType<typeof call>;
  /** A tunnel's status as the database holds it (read around the code under test). */
  tunnelStatus(id: string): Promise<string>;
  /**
   * Moves the provisioned tunnel's far end into the origin namespace and routes its replies back into it, as
   * the origin script does; resolves once the edge reaches the origin's inner address through the tunnel.
   */
  connectOrigin(tunnelId: string): Promise<void>;
  /** Sends `packets` UDP datagrams from the client namespace to `protectedIp`:`port`. */
  sendTraffic(protectedIp: string, packets: number, port?: number): Promise<void>;
  close(): Promise<void>;
}

const EDGE_SIDE = '10.99.0.1';
const CLIENT_SIDE = '10.99.0.2';

/** Builds the panel if needed, then the whole world; on a failure part-way, what was made is taken down. */
export async function startStorefront(opts: StorefrontOptions): Promise<Storefront> {
  await ensurePanelBuilt();
  const undo: (() => Promise<void> | void)[] = [];
  try {
    return await build(opts, undo);
  } catch (e) {
    for (const u of undo.reverse()) await Promise.resolve(u()).catch(() => {});
    throw e;
  }
}

async function build(opts: StorefrontOptions, undo: (() => Promise<void> | void)[]): Promise<Storefront> {
  const statusSeconds = opts.statusSeconds ?? 5;
  const db = await createTestDatabase();
  undo.push(() => db.drop());
  const admin = async (args: string[], stdin?: string): Promise<Record<string, unknown>> => {
    const r = await runAdminCli({ DATABASE_URL: db.url }, args, stdin);
    if (r.code !== 0) throw new Error(`admin ${args.slice(0, 2).join(' ')} exited ${r.code}: ${r.stderr}`);
    return r.json;
  };

  const origin = new TestNetns();
  undo.push(() => origin.delete());
  DemoOrigin.prepare(origin);

  // The node first: its `node add` makes the gateway's secrets, which the agent then trusts.
  const edge = await TestEdge.register(async (n) => {
    const r = await admin(['node', 'add', '--name', n.name, '--public-ip', n.publicIp, '--ssh-host', n.sshHost, '--ssh-port', String(n.sshPort), '--pool', opts.pool, '--host-key', n.hostKey]);
    return { nodeId: String(r.node_id), authorizedKey: String(r.gateway_ssh_public_key), jobKey: JSON.stringify(r.gateway_job_public_key) };
  });
  undo.push(() => edge.close());

  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const tag = randomBytes(3).toString('hex');
  const owner = { email: `owner-${tag}@example.test`, password: `pw ${randomBytes(9).toString('base64url')}`, name: `Owner ${tag}`, key: '' };
  const viewer = { email: `viewer-${tag}@example.test`, password: `pw ${randomBytes(9).toString('base64url')}`, name: `Viewer ${tag}`, key: '' };
  const promocode = { code: `BROWSER${tag.toUpperCase()}`, percent: 10 };
  const usdRubRate = '90';

  // Two lanes of CLI commands (each loads the whole gateway: two cores) beside the gateway's and the agent's start.
  // Settled together: a lane that fails leaves the others' processes in `undo` to be taken down.
  const started = await Promise.allSettled([
    startGatewayProcess({
      DATABASE_URL: db.url,
      PORT: String(port),
      PUBLIC_URL: url,
      EDGE_WORKER: 'true',
      ALLOW_PRIVATE_ORIGINS: 'true',
      ALLOW_PRIVATE_WEBHOOKS: 'true',
      // The agent is local: provision and delete answer with the final status whenever it answers at all.
      EDGE_WAIT_MS: '60000',
      EDGE_JOB_TIMEOUT_MS: '30000',
      EDGE_RETRY_LIMIT: '20',
      EDGE_STATUS_SECONDS: String(statusSeconds),
    }).then((g) => {
      undo.push(async () => {
        g.kill('SIGKILL');
        await g.exited;
      });
      return g;
    }),
    edge.start({ healthIntervalS: statusSeconds }),
    (async () => {
      await admin(['user', 'create', '--email', owner.email, '--name', owner.name, '--password', '-'], `${owner.password}\n`);
      await admin(['balance', 'add', '--email', owner.email, '--usd', opts.balanceUsd ?? '50']);
      owner.key = String((await admin(['apikey', 'create', '--email', owner.email, '--permission', 'write'])).key);
    })(),
    (async () => {
      await admin(['rate', 'set', '--usd-rub', usdRubRate]);
      await admin(['promocode', 'create', '--code', promocode.code, '--percent', String(promocode.percent)]);
      await admin(['user', 'create', '--email', viewer.email, '--name', viewer.name, '--password', '-', '--role', 'viewer'], `${viewer.password}\n`);
      viewer.key = String((await admin(['apikey', 'create', '--email', viewer.email, '--permission', 'read'])).key);
    })(),
  ]);
  const failed = started.find((s) => s.status === 'rejected');
  if (failed) throw failed.reason;
  const gateway = (started[0] as PromiseFulfilledResult<GatewayProcess>).value;

  if (opts.panel !== false) await expectPanelServed(url);

  const webhooks = await WebhookReceiver.start();
  undo.push(() => webhooks.close());

  let client: TestNetns | undefined;
  let nextTable = 100;
  const tunnelStatus = async (id: string) => (await db.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;

  return {
    url,
    db,
    gateway,
    edge,
    origin,
    originIp: DEMO_ORIGIN_IP,
    owner,
    viewer,
    promocode,
    usdRubRate,
    webhooks,
    admin,
    api: (method, path, o) => call(url, method, path, o),
    tunnelStatus,
    async connectOrigin(tunnelId) {
      const { rows } = await db.raw.query<{ tunnel_name: string; inner_index: number; inner_pool: string }>(
        'select t.tunnel_name, t.inner_index, n.inner_pool from tunnel t join edge_node n on n.id = t.node_id where t.id = $1',
        [tunnelId],
      );
      const t = rows[0];
      if (!t) throw new Error(`no tunnel ${tunnelId} on an edge`);
      const originInner = innerSubnet(parseCidr(t.inner_pool), t.inner_index).originInner;
      attachStandinOriginRouted(edge.netns, origin, { tunnel_name: t.tunnel_name, origin_inner: originInner }, nextTable++);
      await edge.netns.waitForPing(originInner.split('/')[0]!);
    },
    async sendTraffic(protectedIp, packets, dport = 7000) {
      if (!client) {
        // Upstream of the edge (so a protected IP is forwarded, through the agent's chains, not delivered locally).
        const c = new TestNetns();
        client = c;
        undo.push(() => c.delete());
        await joinUpstream(edge.netns, c, EDGE_SIDE, CLIENT_SIDE);
      }
      await client.runAsync('bash', '-c', `for i in $(seq ${Number(packets)}); do echo traffic > /dev/udp/${protectedIp}/${Number(dport)}; done`);
    },
    async close() {
      for (const u of undo.reverse()) await Promise.resolve(u()).catch(() => {});
    },
  };
}

/**
 * Fails the world at once, saying why, when the gateway does not serve the built panel at `/` and its
 * sign-in settings at /config.json (docs/CONTRACTS.md "The storefront"), rather than every test timing out
 * on a page that never comes.
 */
async function expectPanelServed(url: string): Promise<void> {
  const index = await fetch(`${url}/`, { headers: { accept: 'text/html' } });
  const html = await index.text();
  if (!index.ok || !/<script type="module" src="\/assets\//.test(html)) {
    throw new Error(`the gateway at ${url} does not serve the built panel at / (${index.status}): ${html.slice(0, 200)}`);
  }
  const config = await fetch(`${url}/config.json`, { headers: { accept: 'application/json' } });
  const body = (await config.json().catch(() => null)) as { clientId?: unknown } | null;
  if (!config.ok || body?.clientId !== 'panel') throw new Error(`the gateway at ${url} answers GET /config.json with ${config.status} ${JSON.stringify(body)}, not the panel's sign-in settings`);
}
