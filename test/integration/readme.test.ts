// README's quick start and first sale, run exactly as written, so they cannot go stale: the two fenced `sh`
// blocks that follow the `<!-- readme-test: quick-start ... -->` and `<!-- readme-test: first-sale ... -->`
// markers are taken from README.md as they stand (the markers, not headings, find them: README can be
// reorganised around them).
//
// The quick start block is `npm install && npm run demo`. The test does not run `npm install` again (it runs
// inside an installed checkout; reinstalling would change the tree every other test runs from): it checks
// the block is that command and runs the rest of the block, `npm run demo ...`, as a real process, on a free
// PORT and with its data directory (DEMO_DATA_DIR) under a temporary directory; the first sale block then
// runs in bash from that temporary directory, where `.data/demo/demo.env` is the demo's. So the block must use
// $TG_URL, never a fixed port. The tunnel it bought must end `active` (polled, no clock), the outputs the
// block shows in its comments must be the statuses it got, in order, and after a SIGTERM the demo must be gone
// with all it made: its processes, its namespaces (and the links in them). The login page it prints is tried
// too, with the password it generated.
//
// As root on Linux the demo's edge is the real agent in a namespace (veth stand-in for GRE); that path is
// required in CI (TUNNELGATE_TESTS=require: a missing prerequisite fails the file). The simulated edge, what
// the demo runs anywhere else, is run too (DEMO_EDGE=simulated), through the same blocks.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { deleteNetns, netnsNamed } from '../../demo/netns.ts';
import { driveAuthorize } from '../helpers/oidc.ts';
import { freePort } from '../helpers/ports.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const README = readFileSync(path.join(ROOT, 'README.md'), 'utf8');

/** The body of the first ```sh block after `<!-- readme-test: NAME`. */
function markedBlock(name: string): string {
  const at = README.indexOf(`<!-- readme-test: ${name}`);
  if (at < 0) throw new Error(`README.md has no <!-- readme-test: ${name} --> marker`);
  const m = /```sh\n([\s\S]*?)```/.exec(README.slice(at));
  if (!m) throw new Error(`no \`\`\`sh block after the ${name} marker`);
  return m[1]!;
}

/** KEY='value' lines of the demo's env file. */
function readEnvFile(file: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    const m = /^([A-Z_]+)='(.*)'$/.exec(line);
    if (m) out[m[1]!] = m[2]!.replace(/'\\''/g, "'");
  }
  return out;
}

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const canRunAgent = process.platform === 'linux' && process.getuid?.() === 0 && onPath('ip');
// The first sale is curl commands; npm runs the demo.
const haveTools = onPath('curl') && onPath('npm');

interface Run {
  demo: ChildProcess;
  out: () => string;
  exited: Promise<number | null>;
  dir: string;
  /** The names of the demo's namespaces start with this (demo/main.ts names them after its directory). */
  prefix: string;
}

const started: Run[] = [];

/** `npm run demo` as the quick start block has it, in the checkout, on a free port and a temporary directory. */
async function startDemo(edge: 'agent' | 'simulated', opts: { leftovers?: (prefix: string) => void } = {}): Promise<Run> {
  const block = markedBlock('quick-start');
  const commands = block.split('\n').filter((l) => l.trim() !== '' && !l.trim().startsWith('#'));
  // One command line, the one a newcomer copies.
  expect(commands).toHaveLength(1);
  expect(commands[0]).toMatch(/^npm install && npm run demo(\s|$)/);
  // `npm install` is not re-run (see the header); the rest of the block is run as written.
  const rest = block.replace('npm install && ', '');
  const dir = mkdtempSync(path.join(tmpdir(), 'tg-readme-'));
  const port = await freePort();
  const env: NodeJS.ProcessEnv = { ...process.env, PORT: String(port), DEMO_DATA_DIR: path.join(dir, '.data/demo') };
  delete env.DEMO_EDGE;
  if (edge === 'simulated') env.DEMO_EDGE = 'simulated';
  const prefix = `tgdemo-${createHash('sha256').update(env.DEMO_DATA_DIR!).digest('hex').slice(0, 8)}-`;
  opts.leftovers?.(prefix);
  let out = '';
  const demo = spawn('bash', ['-c', rest], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  demo.stdout!.on('data', (d: Buffer) => (out += String(d)));
  demo.stderr!.on('data', (d: Buffer) => (out += String(d)));
  const exited = new Promise<number | null>((r) => demo.once('exit', (code) => r(code)));
  const run = { demo, out: () => out, exited, dir, prefix };
  started.push(run);
  return run;
}

afterAll(async () => {
  // Only after a failure is anything left: the demo is stopped as a user would (SIGTERM, then its whole
  // process group killed if it does not end), its namespaces deleted, its directory removed.
  for (const r of started) {
    if (r.demo.exitCode === null && r.demo.signalCode === null) {
      try {
        process.kill(-r.demo.pid!, 'SIGTERM');
        await until('the demo stopped after a failed test', () => r.demo.exitCode !== null || r.demo.signalCode !== null, 60_000);
      } catch {
        try {
          process.kill(-r.demo.pid!, 'SIGKILL');
        } catch {
          // gone
        }
      }
    }
    for (const name of netnsNamed(r.prefix)) deleteNetns(name);
    rmSync(r.dir, { recursive: true, force: true });
  }
}, 120_000);

async function firstSale(run: Run, edge: 'agent' | 'simulated'): Promise<void> {
  const envFile = path.join(run.dir, '.data/demo/demo.env');
  let exitedEarly = false;
  void run.exited.then(() => (exitedEarly = true));
  // The demo writes its env file last, once everything is ready.
  await until('the demo ready (its env file written)', () => {
    if (exitedEarly) throw new Error(`the demo exited before it was ready:\n${run.out()}`);
    return existsSync(envFile);
  }, 240_000);
  expect(statSync(envFile).mode & 0o777).toBe(0o600);
  const env = readEnvFile(envFile);
  expect(env.TG_EDGE).toBe(edge);
  expect(env.TG_URL).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  expect(env.TG_KEY).toMatch(/^svc_/);
  expect(run.out()).toContain(edge === 'agent' ? 'Tunnelgate demo ready (real agent)' : 'Tunnelgate demo ready (simulated edge)');
  if (edge === 'simulated') expect(run.out()).toContain('simulated-edge: SIMULATED EDGE');
  const pids = JSON.parse(readFileSync(path.join(run.dir, '.data/demo/demo.pids'), 'utf8')) as { demo: number; gateway: number; edge: number };
  const { prefix } = run;
  if (edge === 'agent') expect(netnsNamed(prefix).sort()).toEqual([`${prefix}edge`, `${prefix}origin`]);

  // The login page it printed takes the demo buyer's password, and its redirect lands on the demo, which
  // redeems the code and shows who signed in.
  const login = await driveAuthorize(env.TG_LOGIN_URL!, { email: env.TG_EMAIL!, password: env.TG_PASSWORD! });
  expect(login.callback, JSON.stringify(login.last)).not.toBeNull();
  const signedIn = await fetch(login.callback!);
  const page = await signedIn.text();
  expect([signedIn.status, /<h1>([^<]*)<\/h1>/.exec(page)?.[1]]).toEqual([200, 'Signed in']);
  expect(page).toContain(`(${env.TG_EMAIL})`);

  // The first sale, as written, from the directory whose .data/demo is the demo's.
  const block = markedBlock('first-sale');
  const sale = spawnSync('bash', ['-c', block], { cwd: run.dir, env: { PATH: process.env.PATH, HOME: process.env.HOME }, encoding: 'utf8', timeout: 180_000 });
  expect(sale.status, `${sale.stdout}\n${sale.stderr}`).toBe(0);
  // Every JSON answer the block printed, in order; the statuses its comments show are the ones it got.
  type Shown = { id: string; status: string; tunnel_name: string };
  const answers = sale.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { tunnel?: Shown; tunnels?: Shown[]; next_cursor?: string | null; availability?: unknown });
  const shown = [...block.matchAll(/^# \{"tunnel":.*?"status":"(\w+)"/gm)].map((m) => m[1]);
  expect(shown).toEqual(['pending', 'provisioned', 'active']);
  expect(answers.filter((a) => a.tunnel).map((a) => a.tunnel!.status)).toEqual(shown);
  expect(answers[0]!.availability).toBeDefined();
  const tunnel = answers.find((a) => a.tunnel)!.tunnel!;
  // The list ends the block: the one tunnel sold, active (the embedded database lists what it sold).
  const listed = answers.at(-1)!;
  expect([listed.tunnels?.map((t) => [t.id, t.status]), listed.next_cursor]).toEqual([[[tunnel.id, 'active']], null]);
  expect(block).toMatch(/^# \{"tunnels":\[\{"id":.*"status":"active"/m);

  // And the gateway says so too.
  const status = await until('the tunnel active', async () => {
    const r = await fetch(`${env.TG_URL}/api/dedicated/${tunnel.id}`, { headers: { authorization: `Bearer ${env.TG_KEY}` } });
    const body = (await r.json()) as { tunnel?: { status: string } };
    return body.tunnel?.status === 'active' ? body.tunnel.status : null;
  });
  expect(status).toBe('active');
  if (edge === 'agent') {
    // The tunnel's link is on the demo edge, its stand-in's far end in the demo origin.
    const links = (ns: string) => (JSON.parse(spawnSync('ip', ['-n', ns, '-j', 'link', 'show'], { encoding: 'utf8' }).stdout) as { ifname: string }[]).map((l) => l.ifname);
    expect(links(`${prefix}edge`)).toContain(tunnel.tunnel_name);
    expect(links(`${prefix}origin`)).toContain(tunnel.tunnel_name);
  }

  // SIGTERM to the demo: it stops its edge and gateway and deletes what it made.
  process.kill(pids.demo, 'SIGTERM');
  expect(await run.exited).toBe(0);
  await until('the demo\'s gateway and edge gone', () => !alive(pids.gateway) && !alive(pids.edge));
  expect(netnsNamed(prefix)).toEqual([]);
  const hostLinks = (JSON.parse(spawnSync('ip', ['-j', 'link', 'show'], { encoding: 'utf8' }).stdout || '[]') as { ifname: string }[]).map((l) => l.ifname);
  expect(hostLinks).not.toContain(tunnel.tunnel_name);
  expect(existsSync(envFile)).toBe(false);
  expect(run.out()).toContain('demo: stopped');
}

describe.skipIf(skipUnless(canRunAgent && haveTools, 'README test of the demo with the real agent: root on Linux with iproute2 (network namespaces), curl and npm'))('README quick start and first sale, as written (the real agent in a namespace)', () => {
  it('npm run demo over the namespaces of a killed run, then the first sale: pending -> provisioned -> active; SIGTERM leaves nothing behind', async () => {
    // What a demo killed with SIGKILL leaves: its two namespaces, with links in them. The next start removes them.
    const leftovers = (prefix: string) => {
      for (const side of ['edge', 'origin']) spawnSync('ip', ['netns', 'add', `${prefix}${side}`]);
      expect(spawnSync('ip', ['-n', `${prefix}edge`, 'link', 'add', 'tg-stale', 'type', 'veth', 'peer', 'name', 'tgp-stale', 'netns', `${prefix}origin`]).status).toBe(0);
    };
    const run = await startDemo('agent', { leftovers });
    await firstSale(run, 'agent');
    expect(run.out()).toContain(`deleting namespace ${run.prefix}edge left by a demo that was killed`);
  }, 400_000);
});

describe.skipIf(skipUnless(haveTools, 'README test of the demo with the simulated edge: curl and npm'))('README quick start and first sale, as written (the simulated edge)', () => {
  it('DEMO_EDGE=simulated npm run demo, then the first sale: active through the simulated edge; SIGTERM leaves nothing behind', async () => {
    await firstSale(await startDemo('simulated'), 'simulated');
  }, 400_000);
});
