// `npm run demo`: a first sale on one machine, with no router (README "Quick start", "First sale").
//
//   gateway   `npm start`'s own process (server/main.ts) on the embedded database, in its own directory
//             (DEMO_DATA_DIR, default ./.data/demo, made afresh at each start: it never mixes with ./.data),
//             on HOST 127.0.0.1 and PORT (default 4000), with ALLOW_PRIVATE_ORIGINS=true for the demo origin's
//             documentation-range address
//   edge      as root on Linux, the real agent (demo/edge-process.ts) with its dataplane in a network
//             namespace and the veth stand-in for GRE; anywhere else the SIMULATED EDGE (no kernel work),
//             named so in the node's name, its log lines and the summary. DEMO_EDGE=simulated picks it anyway.
//   origin    a namespace holding the far end of each tunnel, answering the activate probe (demo/origin.ts)
//   buyer     a user with a balance, a write `svc_` key and a generated password for the login page; an OAuth
//             client whose redirect comes back here, so the login page can be tried in a browser
//
// Everything is set up through the admin CLI's commands (over the gateway's admin socket, as `npm run admin`
// does while a gateway holds the embedded database), the operator's own path: `node add`, the agent started
// with what it printed, `node update --host-key` with the agent's fingerprint. What a newcomer needs next goes
// to $DEMO_DATA_DIR/demo.env (mode 0600: TG_URL, TG_KEY, TG_ORIGIN, ...), which README's first sale sources.
//
// Ctrl-C or SIGTERM stops the edge and the gateway and deletes the namespaces (their links go with them). A
// run that was killed is cleaned up by the next one: its namespaces (named after the directory) are deleted
// and its processes (recorded in demo.pids) stopped, before the directory is made afresh.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync, closeSync } from 'node:fs';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { adminSocketPath, forwardToGateway } from '../server/cli/admin-socket.ts';
import { deleteNetns, Netns, netnsNamed } from './netns.ts';
import { DEMO_ORIGIN_IP, DemoOrigin } from './origin.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const HOST = '127.0.0.1';
/** The edge router's underlay address, and the protected IPs it sells (documentation ranges). */
const EDGE_PUBLIC_IP = '192.0.2.1';
const POOL = '203.0.113.0/28';
const USER_EMAIL = 'demo@example.com';
const BALANCE_USD = '10';
/** How long the gateway may take to become ready before the demo gives up (a cold start under load took 90 s once). */
const GATEWAY_START_BOUND_MS = 300_000;
/** Marks a directory this demo made, so a start never wipes anything else. */
const MARKER = '.tunnelgate-demo';

type EdgeKind = 'agent' | 'simulated';

class DemoError extends Error {
  override name = 'DemoError';
}

const say = (line = '') => process.stdout.write(`${line}\n`);
const note = (line: string) => process.stdout.write(`demo: ${line}\n`);

interface Settings {
  dir: string;
  port: number;
  edge: EdgeKind;
  /** Why the simulated edge was chosen (printed), when it was. */
  simulatedBecause?: string;
  /** Namespace names of this directory's demo: `${prefix}edge`, `${prefix}origin`. */
  prefix: string;
}

function onPath(cmd: string): boolean {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin'];
  return dirs.some((d) => d !== '' && existsSync(path.join(d, cmd)));
}

function settings(): Settings {
  const rawPort = process.env.PORT ?? '4000';
  if (!/^\d+$/.test(rawPort) || Number(rawPort) < 1 || Number(rawPort) > 65535) throw new DemoError(`PORT must be a port number (1-65535), got ${JSON.stringify(rawPort)}`);
  const dir = path.resolve(process.env.DEMO_DATA_DIR || '.data/demo');
  // Named after the directory: a second demo elsewhere never touches these, a rerun here finds them.
  const prefix = `tgdemo-${createHash('sha256').update(dir).digest('hex').slice(0, 8)}-`;
  const forced = process.env.DEMO_EDGE;
  if (forced !== undefined && forced !== '' && forced !== 'agent' && forced !== 'simulated') throw new DemoError(`DEMO_EDGE must be agent or simulated, got ${JSON.stringify(forced)}`);
  const missing =
    process.platform !== 'linux' ? `this is ${process.platform}, not Linux` : process.getuid?.() !== 0 ? 'not running as root' : !onPath('ip') ? 'the ip command (iproute2) is missing' : undefined;
  if (forced === 'agent' && missing) throw new DemoError(`DEMO_EDGE=agent needs root on Linux with iproute2: ${missing}`);
  const base = { dir, port: Number(rawPort), prefix };
  if (forced === 'simulated') return { ...base, edge: 'simulated', simulatedBecause: 'DEMO_EDGE=simulated' };
  return missing ? { ...base, edge: 'simulated', simulatedBecause: missing } : { ...base, edge: 'agent' };
}

/** Whether `pid` is alive and its command line mentions `what`. */
function processRuns(pid: number, what: string): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(what);
  } catch {
    // No /proc (macOS): alive is all we can tell.
    return true;
  }
}

async function waitGone(pid: number, boundMs: number): Promise<boolean> {
  const end = Date.now() + boundMs;
  while (Date.now() < end) {
    try {
      process.kill(pid, 0);
    } catch {
      return true;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return false;
}

interface Pids {
  demo: number;
  gateway?: number;
  edge?: number;
}

/**
 * Cleans up after a demo that was killed (its namespaces, its processes), then makes the directory afresh.
 * Refuses when a demo still runs there, and when the directory exists but is not a demo's.
 */
async function prepare(s: Settings): Promise<void> {
  const pidFile = path.join(s.dir, 'demo.pids');
  if (existsSync(pidFile)) {
    let pids: Pids = { demo: 0 };
    try {
      pids = JSON.parse(readFileSync(pidFile, 'utf8')) as Pids;
    } catch {
      // Cut short by a crash while it was written: nothing to stop by it.
    }
    if (pids.demo !== process.pid && processRuns(pids.demo, 'demo/main.ts')) {
      throw new DemoError(`a demo is already running from ${s.dir} (pid ${pids.demo}): stop it first (Ctrl-C in its terminal), or run another with DEMO_DATA_DIR and PORT set`);
    }
    for (const [pid, what] of [[pids.gateway, 'server/main.ts'], [pids.edge, 'demo/edge-process.ts']] as const) {
      if (pid === undefined || !processRuns(pid, what)) continue;
      note(`stopping the gateway or edge (pid ${pid}) left by a demo that was killed`);
      process.kill(pid, 'SIGTERM');
      if (!(await waitGone(pid, 15_000))) process.kill(pid, 'SIGKILL');
    }
  }
  for (const name of netnsNamed(s.prefix)) {
    note(`deleting namespace ${name} left by a demo that was killed`);
    deleteNetns(name);
  }
  if (existsSync(s.dir)) {
    if (!existsSync(path.join(s.dir, MARKER))) throw new DemoError(`${s.dir} exists and was not made by the demo; move it away or set DEMO_DATA_DIR`);
    rmSync(s.dir, { recursive: true, force: true });
  }
  mkdirSync(s.dir, { recursive: true, mode: 0o700 });
  writeFileSync(path.join(s.dir, MARKER), 'made by npm run demo: deleted and made afresh at each start\n');
}

/** Refuses at once, with the fix, when the port is taken (rather than after the database has started). */
function checkPort(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', (e: NodeJS.ErrnoException) =>
      reject(e.code === 'EADDRINUSE' ? new DemoError(`port ${port} on ${HOST} is in use (another gateway, or npm start?); pick another: PORT=${port + 1} npm run demo`) : e),
    );
    probe.listen(port, HOST, () => probe.close(() => resolve()));
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, HOST, () => {
      const { port } = s.address() as AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

/** The last lines of a log file, for a start that failed. */
function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

/** One admin CLI command, run by the gateway that holds the embedded database; its JSON answer. */
async function admin(dir: string, argv: string[]): Promise<Record<string, unknown>> {
  const reply = await forwardToGateway(adminSocketPath(dir), argv);
  if (!reply) throw new DemoError(`the gateway serves no admin socket in ${dir}`);
  if (reply.status !== 0) throw new DemoError(`admin ${argv.slice(0, 2).join(' ')} failed: ${reply.stderr.trim()}`);
  return JSON.parse(reply.stdout) as Record<string, unknown>;
}

/** A path as the user would type it from the checkout (npm runs scripts there), or absolute when outside it. */
function shown(p: string): string {
  const rel = path.relative(process.cwd(), p);
  return rel.startsWith('..') || path.isAbsolute(rel) ? p : rel;
}

/** Single-quoted for sh (the env file is sourced with `.`). */
const shq = (v: string) => `'${v.replace(/'/g, `'\\''`)}'`;

class Demo {
  private gateway: ChildProcess | undefined;
  private edge: ChildProcess | undefined;
  private edgeNs: Netns | undefined;
  private originNs: Netns | undefined;
  private callback: http.Server | undefined;
  private stopping: Promise<void> | undefined;
  /** Set once this run owns the directory and its namespace names (not when it refused to start beside another). */
  private owns = false;
  private readonly pids: Pids = { demo: process.pid };

  constructor(private readonly s: Settings) {}

  private get url(): string {
    return `http://${HOST}:${this.s.port}`;
  }

  private file(name: string): string {
    return path.join(this.s.dir, name);
  }

  private savePids(): void {
    writeFileSync(this.file('demo.pids'), `${JSON.stringify(this.pids)}\n`);
  }

  /** A child the demo needs: its unexpected end stops the demo, saying why. */
  private watch(child: ChildProcess, what: string, log: string): void {
    child.once('exit', (code, signal) => {
      if (this.stopping) return;
      process.stderr.write(`demo: the ${what} stopped (${signal ?? `exit ${code}`}); the end of ${log}:\n${tail(log)}\n`);
      void this.stop(1);
    });
  }

  async start(): Promise<void> {
    const s = this.s;
    await prepare(s);
    this.owns = true;
    this.savePids();
    await checkPort(s.port);
    if (s.edge === 'agent') {
      // The edge router and the origin server, each a namespace; the tunnel's links will join them.
      this.edgeNs = new Netns(`${s.prefix}edge`);
      this.edgeNs.run('ip', 'link', 'set', 'lo', 'up');
      this.edgeNs.run('ip', 'addr', 'add', `${EDGE_PUBLIC_IP}/32`, 'dev', 'lo');
      this.originNs = new Netns(`${s.prefix}origin`);
      DemoOrigin.prepare(this.originNs);
    }
    await this.startGateway();
    const edgeName = s.edge === 'agent' ? 'demo-edge' : 'simulated-edge';
    const edgePort = await freePort();
    note(`adding the edge node ${edgeName} (admin: node add)`);
    const node = await admin(s.dir, ['node', 'add', '--name', edgeName, '--public-ip', EDGE_PUBLIC_IP, '--ssh-host', HOST, '--ssh-port', String(edgePort), '--pool', POOL]);
    const fingerprint = await this.startEdge(node, edgePort);
    note(`pinning the agent's host key ${fingerprint} (admin: node update --host-key)`);
    await admin(s.dir, ['node', 'update', '--id', String(node.node_id), '--host-key', fingerprint]);

    const password = randomBytes(12).toString('base64url');
    note(`creating the demo buyer ${USER_EMAIL} with ${BALANCE_USD} USD and a write key (admin: user create, apikey create)`);
    // Over the admin socket (mode 0600), never on a command line.
    await admin(s.dir, ['user', 'create', '--email', USER_EMAIL, '--name', 'Demo buyer', '--password', password, '--balance-usd', BALANCE_USD]);
    const key = String((await admin(s.dir, ['apikey', 'create', '--email', USER_EMAIL, '--permission', 'write'])).key);
    const login = await this.startLoginDemo();

    const env = [
      '# Written by npm run demo (README "First sale": . .data/demo/demo.env). Secrets: keep this file private.',
      `TG_URL=${shq(this.url)}`,
      `TG_KEY=${shq(key)}`,
      `TG_ORIGIN=${shq(DEMO_ORIGIN_IP)}`,
      `TG_EMAIL=${shq(USER_EMAIL)}`,
      `TG_PASSWORD=${shq(password)}`,
      `TG_LOGIN_URL=${shq(login)}`,
      `TG_EDGE=${shq(s.edge)}`,
      '',
    ].join('\n');
    const envFile = this.file('demo.env');
    // Complete or absent: whoever waits for the file never reads half of it.
    writeFileSync(`${envFile}.tmp`, env, { mode: 0o600 });
    chmodSync(`${envFile}.tmp`, 0o600);
    renameSync(`${envFile}.tmp`, envFile);
    this.summary({ key, password, login, envFile, edgeName });
  }

  private async startGateway(): Promise<void> {
    const log = this.file('gateway.log');
    const fd = openSync(log, 'a', 0o600);
    note(`starting the gateway on ${this.url} (embedded database in ${this.s.dir}; log: ${log})`);
    // A clean environment: an operator's DATABASE_URL or secrets in this shell must not reach the demo.
    const child = spawn(process.execPath, ['--enable-source-maps', '--import', './loader/register.mjs', 'server/main.ts'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '/tmp',
        ...(process.env.TMPDIR ? { TMPDIR: process.env.TMPDIR } : {}),
        DATA_DIR: this.s.dir,
        HOST,
        PORT: String(this.s.port),
        PUBLIC_URL: this.url,
        ALLOW_PRIVATE_ORIGINS: 'true',
        // The demo edge is local: let provision and delete wait for it as long as the gateway allows, so they
        // answer with the final status (README's first sale activates right after provisioning).
        EDGE_WAIT_MS: '60000',
        LOG_LEVEL: 'info',
      },
      stdio: ['ignore', fd, fd],
      // Its own process group: a Ctrl-C in the demo's terminal reaches the demo, which stops the children in
      // order (edge, gateway), then deletes the namespaces.
      detached: true,
    });
    closeSync(fd);
    this.gateway = child;
    this.pids.gateway = child.pid;
    this.savePids();
    let exited = false;
    child.once('exit', () => (exited = true));
    // Ready when /readyz says so (it turns 200 once the database, the queue and the listener are up). The
    // bound only turns a hang into a message: a first start on a slow machine takes well under it.
    const giveUp = Date.now() + GATEWAY_START_BOUND_MS;
    for (;;) {
      if (exited) throw new DemoError(`the gateway did not start; the end of ${log}:\n${tail(log)}`);
      if (Date.now() > giveUp) throw new DemoError(`the gateway did not become ready in ${GATEWAY_START_BOUND_MS / 1000} s; the end of ${log}:\n${tail(log)}`);
      const ready = await fetch(`${this.url}/readyz`).then((r) => r.ok, () => false);
      if (ready) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    this.watch(child, 'gateway', log);
  }

  /** Starts the demo edge with what `node add` printed; resolves with the agent's host-key fingerprint. */
  private async startEdge(node: Record<string, unknown>, port: number): Promise<string> {
    const s = this.s;
    const log = this.file('edge.log');
    const fd = openSync(log, 'a', 0o600);
    note(
      s.edge === 'agent'
        ? `starting the real agent, its dataplane in namespace ${this.edgeNs!.name} (veth stand-in for GRE), the demo origin in ${this.originNs!.name} (log: ${log})`
        : `starting the simulated edge: the agent's SSH job endpoint over a simulated dataplane, no kernel work (${s.simulatedBecause}; log: ${log})`,
    );
    const child = spawn(process.execPath, ['--enable-source-maps', '--import', './loader/register.mjs', 'demo/edge-process.ts'], {
      cwd: ROOT,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '/tmp',
        DEMO_EDGE: s.edge,
        ...(s.edge === 'agent' ? { DEMO_EDGE_NETNS: this.edgeNs!.name, DEMO_ORIGIN_NETNS: this.originNs!.name } : {}),
        AGENT_NODE_ID: String(node.node_id),
        AGENT_LISTEN: `${HOST}:${port}`,
        AGENT_STATE_DIR: this.file('edge'),
        AGENT_AUTHORIZED_KEY: String(node.gateway_ssh_public_key),
        AGENT_JOB_KEY: JSON.stringify(node.gateway_job_public_key),
        AGENT_EDGE_IP: EDGE_PUBLIC_IP,
        AGENT_PROTECTED_POOLS: POOL,
        AGENT_ALLOW_FROM: `${HOST}/32`,
        AGENT_LOG_LEVEL: 'info',
      },
      // stdin stays open: the edge stops when it closes, so a killed demo leaves no agent behind.
      stdio: ['pipe', 'pipe', fd],
      detached: true,
    });
    closeSync(fd);
    this.edge = child;
    this.pids.edge = child.pid;
    this.savePids();
    const ready = await new Promise<{ fingerprint: string }>((resolve, reject) => {
      child.once('exit', (code) => reject(new DemoError(`the edge stopped (exit ${code}) before it was ready; the end of ${log}:\n${tail(log)}`)));
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const o = JSON.parse(line) as { ready?: boolean; fingerprint?: string };
        if (o.ready && o.fingerprint) resolve({ fingerprint: o.fingerprint });
      });
    });
    this.watch(child, s.edge === 'agent' ? 'edge agent' : 'simulated edge', log);
    return ready.fingerprint;
  }

  /**
   * The login page, for a browser: an OAuth client registered with `client create` whose redirect comes back
   * to this process, which redeems the code (PKCE) and shows who signed in. Returns the URL to open.
   */
  private async startLoginDemo(): Promise<string> {
    const cbPort = await freePort();
    const redirectUri = `http://${HOST}:${cbPort}/signed-in`;
    const client = await admin(this.s.dir, ['client', 'create', '--name', 'Tunnelgate demo', '--redirect-uri', redirectUri, '--api-access', 'read']);
    const verifier = randomBytes(32).toString('base64url');
    const state = randomBytes(12).toString('base64url');
    const u = new URL(`${this.url}/oauth/authorize`);
    u.searchParams.set('client_id', String(client.client_id));
    u.searchParams.set('redirect_uri', redirectUri);
    u.searchParams.set('response_type', 'code');
    u.searchParams.set('scope', 'openid profile email');
    u.searchParams.set('state', state);
    u.searchParams.set('code_challenge', createHash('sha256').update(verifier).digest('base64url'));
    u.searchParams.set('code_challenge_method', 'S256');
    const page = (title: string, body: string) =>
      `<!doctype html><meta charset="utf-8"><title>${title}</title><body style="font-family:sans-serif;max-width:40em;margin:3em auto"><h1>${title}</h1>${body}</body>`;
    const esc = (t: string) => t.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
    this.callback = http.createServer((req, res) => {
      void (async () => {
        const q = new URL(req.url ?? '/', redirectUri).searchParams;
        if (q.get('state') !== state || !q.get('code')) {
          res.writeHead(400, { 'content-type': 'text/html' }).end(page('Not signed in', `<p>${esc(q.get('error_description') ?? q.get('error') ?? 'no code in this request')}</p>`));
          return;
        }
        const tokenRes = await fetch(`${this.url}/oauth/token`, {
          method: 'POST',
          headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
          body: new URLSearchParams({ grant_type: 'authorization_code', code: q.get('code')!, code_verifier: verifier, redirect_uri: redirectUri, client_id: String(client.client_id), client_secret: String(client.client_secret) }),
        });
        const tokens = (await tokenRes.json()) as { access_token?: string; error_description?: string };
        if (!tokens.access_token) throw new Error(tokens.error_description ?? `token endpoint answered ${tokenRes.status}`);
        const me = (await (await fetch(`${this.url}/oauth/userinfo`, { headers: { authorization: `Bearer ${tokens.access_token}` } })).json()) as { email?: string; name?: string };
        res.writeHead(200, { 'content-type': 'text/html' }).end(
          page('Signed in', `<p>The gateway's identity provider signed in <b>${esc(me.name ?? '')}</b> (${esc(me.email ?? '')}) and this demo client redeemed the code for tokens.</p><p>The demo has no panel: the tunnel API is at <code>${esc(this.url)}/api</code> (README "First sale").</p>`),
        );
      })().catch((e: unknown) => res.writeHead(502, { 'content-type': 'text/html' }).end(page('Sign-in failed', `<p>${esc((e as Error).message)}</p>`)));
    });
    await new Promise<void>((resolve) => this.callback!.listen(cbPort, HOST, resolve));
    return u.href;
  }

  private summary(o: { key: string; password: string; login: string; envFile: string; edgeName: string }): void {
    const s = this.s;
    const rel = shown(o.envFile);
    const edge =
      s.edge === 'agent'
        ? `${o.edgeName}: the real agent, dataplane in namespace ${this.edgeNs!.name} (veth stand-in for GRE)`
        : `${o.edgeName}: SIMULATED EDGE, the agent's job endpoint with no kernel work (${s.simulatedBecause}); run as root on Linux for the real agent`;
    const origin = s.edge === 'agent' ? `${DEMO_ORIGIN_IP} in namespace ${this.originNs!.name}, answers through each tunnel` : `${DEMO_ORIGIN_IP}, simulated: the simulated edge answers its probes`;
    say();
    say(`Tunnelgate demo ready (${s.edge === 'agent' ? 'real agent' : 'simulated edge'})`);
    say(`  gateway     ${this.url}   (API: ${this.url}/api, GraphQL: ${this.url}/graphql)`);
    say(`  login page  ${o.login}`);
    say(`  buyer       ${USER_EMAIL}  password ${o.password}  balance ${BALANCE_USD} USD`);
    say(`  write key   ${o.key}`);
    say(`  edge        ${edge}, pool ${POOL}`);
    say(`  origin      ${origin}`);
    say(`  env file    ${rel}  (TG_URL, TG_KEY, TG_ORIGIN; mode 0600)`);
    say(`  logs        ${shown(this.file('gateway.log'))}, ${shown(this.file('edge.log'))}`);
    say();
    say('Try it from another terminal (README "First sale" has every step):');
    say(`  . ${rel}`);
    say('  curl -s "$TG_URL/api/dedicated/pricing"');
    say(`  curl -s -X POST "$TG_URL/api/dedicated" -H "Authorization: Bearer $TG_KEY" -H 'Content-Type: application/json' -d "{\\"name\\":\\"web\\",\\"origin_ip\\":\\"$TG_ORIGIN\\"}"`);
    say();
    say(`Ctrl-C stops the demo${s.edge === 'agent' ? ' and deletes its namespaces' : ''}.`);
  }

  /** Stops everything this demo started; safe to call more than once. */
  stop(code: number): Promise<void> {
    this.stopping ??= (async () => {
      note('stopping');
      this.callback?.close();
      const ends = [this.edge, this.gateway].filter((c): c is ChildProcess => c !== undefined && c.exitCode === null && c.signalCode === null).map((c) => {
        const gone = new Promise<void>((r) => c.once('exit', () => r()));
        c.kill('SIGTERM');
        // The gateway drains for up to DRAIN_TIMEOUT_MS (10 s); past a bound well above that, it is killed.
        const timer = setTimeout(() => c.kill('SIGKILL'), 30_000);
        return gone.then(() => clearTimeout(timer));
      });
      await Promise.all(ends);
      for (const ns of [this.edgeNs, this.originNs]) ns?.delete();
      if (this.owns) {
        // Anything else under this demo's names (a namespace made by hand under them).
        for (const name of netnsNamed(this.s.prefix)) deleteNetns(name);
        rmSync(this.file('demo.pids'), { force: true });
        // Its key and password stop with the demo; a stale file would only mislead.
        rmSync(this.file('demo.env'), { force: true });
      }
      note(`stopped${this.s.edge === 'agent' ? '; namespaces deleted' : ''}`);
      process.exit(code);
    })();
    return this.stopping;
  }
}

const demo = (() => {
  try {
    return new Demo(settings());
  } catch (e) {
    process.stderr.write(`demo: ${(e as Error).message}\n`);
    process.exit(2);
  }
})();
process.on('SIGINT', () => void demo.stop(0));
process.on('SIGTERM', () => void demo.stop(0));
demo.start().catch((e: unknown) => {
  process.stderr.write(`demo: ${e instanceof DemoError ? e.message : ((e as Error).stack ?? String(e))}\n`);
  void demo.stop(1);
});
