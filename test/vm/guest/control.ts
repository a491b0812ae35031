// Runs inside the test VM (started by start.sh in the edge namespace): lets the host's test run commands
// in the lab's namespaces, keep processes running (origin servers, the agent), and drive the edge
// dataplane directly. A throw-away guest with no route out, reached only through a port QEMU forwards
// from the host's loopback, so it takes commands from whoever connects.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createDataplane, type DataplaneHandle } from '../../../agent/dataplane/index.ts';
import { LAB, type DataplaneRequest, type ExecRequest, type ExecResult, type ProcessOutput, type SpawnRequest } from '../protocol.ts';

const OUTPUT_LIMIT = 1 << 20;

function withNs(argv: string[], ns: string | undefined): string[] {
  return ns ? ['ip', 'netns', 'exec', ns, ...argv] : argv;
}

function exec(req: ExecRequest): Promise<ExecResult> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const [cmd, ...args] = withNs(req.argv, req.ns);
    const child = spawn(cmd!, args, { env: { ...process.env, ...req.env }, stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), req.timeoutMs ?? 60_000);
    child.on('error', (e) => (stderr += String(e)));
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, ms: Math.round(performance.now() - t0) });
    });
    child.stdin.end(req.input ?? '');
  });
}

interface Running {
  child: ChildProcess;
  output: string;
  code: number | null;
  exited: Promise<void>;
}
const processes = new Map<string, Running>();

async function spawnProcess(req: SpawnRequest): Promise<{ pid: number }> {
  if (processes.get(req.name)?.child.exitCode === null) throw new Error(`${req.name} is already running`);
  const [cmd, ...args] = withNs(req.argv, req.ns);
  const child = spawn(cmd!, args, { env: { ...process.env, ...req.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const p: Running = { child, output: '', code: null, exited: new Promise((r) => child.on('close', () => r())) };
  processes.set(req.name, p);
  const add = (d: Buffer) => {
    p.output = (p.output + String(d)).slice(-OUTPUT_LIMIT);
  };
  child.stdout!.on('data', add);
  child.stderr!.on('data', add);
  child.on('close', (code) => (p.code = code));
  if (req.readyText) {
    const until = Date.now() + (req.readyTimeoutMs ?? 60_000);
    while (!p.output.includes(req.readyText)) {
      if (p.code !== null || child.exitCode !== null) throw new Error(`${req.name} exited (${child.exitCode}) before "${req.readyText}":\n${p.output}`);
      if (Date.now() > until) throw new Error(`${req.name}: no "${req.readyText}" in time:\n${p.output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return { pid: child.pid! };
}

function output(name: string): ProcessOutput {
  const p = processes.get(name);
  if (!p) throw new Error(`no process ${name}`);
  return { running: p.child.exitCode === null && p.child.signalCode === null, code: p.code, output: p.output };
}

async function stop(name: string): Promise<ProcessOutput> {
  const p = processes.get(name);
  if (!p) throw new Error(`no process ${name}`);
  if (p.child.exitCode === null && p.child.signalCode === null) {
    p.child.kill('SIGTERM');
    const t = setTimeout(() => p.child.kill('SIGKILL'), 10_000);
    await p.exited;
    clearTimeout(t);
  }
  return output(name);
}

let dp: DataplaneHandle | undefined;
async function dataplane(req: DataplaneRequest): Promise<unknown> {
  if (req.op === 'open') {
    if (dp) throw new Error('dataplane already open');
    dp = await createDataplane({ edgeIp: req.edgeIp, nftTable: req.nftTable, stateDir: req.stateDir, netns: 'edge', linkKind: 'gre', ...(req.healOnTouch !== undefined ? { healOnTouch: req.healOnTouch } : {}) });
    return { ok: true };
  }
  if (!dp) throw new Error('dataplane not open');
  switch (req.op) {
    case 'apply':
      return dp.apply(req.tunnel);
    case 'remove':
      return dp.remove(req.tunnel);
    case 'reconcile':
      return dp.reconcile(req.tunnels);
    case 'probe':
      return dp.probe(req.tunnel);
    case 'dropped':
      return dp.dropped(req.tunnel);
    case 'table':
      return { table: dp.table };
    case 'close':
      await dp.close();
      dp = undefined;
      return { ok: true };
  }
}

async function body(req: IncomingMessage): Promise<unknown> {
  let text = '';
  for await (const chunk of req) text += chunk;
  return text ? JSON.parse(text) : {};
}

function reply(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value));
}

// If the host's test dies without shutting the VM down (a killed test worker), nobody talks to this
// server again: stop after a long silence, and init powers the guest off, so no orphaned QEMU lingers.
const IDLE_EXIT_MS = 10 * 60_000;
const idle = setTimeout(() => process.exit(3), IDLE_EXIT_MS);

const server = createServer((req, res) => {
  idle.refresh();
  void (async () => {
    const url = new URL(req.url ?? '/', 'http://guest');
    try {
      const route = `${req.method} ${url.pathname}`;
      if (route === 'GET /health') return reply(res, 200, { uptime: Number((await import('node:os')).uptime()) });
      if (route === 'POST /exec') return reply(res, 200, await exec((await body(req)) as ExecRequest));
      if (route === 'POST /spawn') return reply(res, 200, await spawnProcess((await body(req)) as SpawnRequest));
      if (route === 'GET /output') return reply(res, 200, output(url.searchParams.get('name') ?? ''));
      if (route === 'POST /stop') return reply(res, 200, await stop(((await body(req)) as { name: string }).name));
      if (route === 'POST /dataplane') return reply(res, 200, await dataplane((await body(req)) as DataplaneRequest));
      if (route === 'POST /shutdown') {
        reply(res, 200, { ok: true });
        for (const name of processes.keys()) await stop(name);
        await dp?.close();
        server.close();
        setTimeout(() => process.exit(0), 100).unref();
        return;
      }
      reply(res, 404, { error: 'not_found', error_description: route });
    } catch (e) {
      reply(res, 500, { error: 'failed', error_description: e instanceof Error ? e.message : String(e) });
    }
  })();
});
server.listen(LAB.controlPort, '0.0.0.0', () => console.log(`tg-vm: control server listening on ${LAB.controlPort}`));
