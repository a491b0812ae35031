// Real SSH between the gateway side (the worker's server/edge/connections.ts, plain ssh2 clients, and OpenSSH's own
// `ssh` where installed) and the agent's SSH server (agent/main.ts startAgent) on 127.0.0.1: signed jobs,
// exit statuses and result lines, every refused kind of authentication and channel request, oversize
// and unterminated input, host-key persistence and pinning. The dataplane is a FAKE (RecordingDataplane
// below): the kernel side has its own namespace tests.
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CompactSign } from 'jose';
import ssh2 from 'ssh2';
import type { ClientChannel, ConnectConfig } from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { parseSecret, generateSecret, type GatewaySshKey } from '../../server/secrets.ts';
import { signJob } from '../../server/edge/job-signing.ts';
import { EdgeConnections, type EdgeNode } from '../../server/edge/connections.ts';
import { EdgeSshError } from '../../server/edge/result-line.ts';
import { loadConfig, type AgentConfig } from '../../agent/config.ts';
import { startAgent, startHealth, type RunningAgent, type RunningHealth } from '../../agent/main.ts';
import { checkStatusResult } from '../../common/tunnel-status.ts';
import { HOST_KEY_FILE } from '../../agent/ssh/keys.ts';
import { MAX_INPUT_BYTES } from '../../common/job-contract.ts';
import type { ChangeCounts, Dataplane, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../../agent/dataplane/types.ts';
import { EDGE_IP, tunnelSpec } from '../helpers/tunnel-spec.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

/** FAKE dataplane (test double, no kernel): records every call, keeps tunnels in a map. */
class RecordingDataplane implements Dataplane {
  readonly calls: { op: string; arg: unknown }[] = [];
  readonly tunnels = new Map<string, TunnelSpec>();
  async apply(t: TunnelSpec): Promise<ChangeCounts> {
    this.calls.push({ op: 'apply', arg: t });
    const had = this.tunnels.has(t.id);
    this.tunnels.set(t.id, t);
    return { added: had ? 0 : 1, changed: 0, removed: 0, unchanged: had ? 1 : 0 };
  }
  async remove(t: TunnelRef): Promise<ChangeCounts> {
    this.calls.push({ op: 'remove', arg: t });
    return { added: 0, changed: 0, removed: this.tunnels.delete(t.id) ? 1 : 0, unchanged: 0 };
  }
  async reconcile(ts: TunnelSpec[]): Promise<ReconcileResult> {
    this.calls.push({ op: 'reconcile', arg: ts });
    return { added: ts.length, changed: 0, removed: 0, unchanged: 0, failed: [] };
  }
  async probe(t: TunnelSpec): Promise<ProbeResult> {
    this.calls.push({ op: 'probe', arg: t });
    return { reachable: true, rtt_ms: 2 };
  }
  async has(id: string): Promise<boolean> {
    return this.tunnels.has(id);
  }
  // What the health checks and the status op read (agent/main.ts startHealth): the FAKE's tunnels, and a
  // named counter `<tunnel_name>` of 7 packets / 700 bytes each (its traffic toward the origin).
  desiredTunnels(): TunnelSpec[] {
    return [...this.tunnels.values()];
  }
  async counters(): Promise<Map<string, { packets: bigint; bytes: bigint }>> {
    return new Map([...this.tunnels.values()].map((t) => [t.tunnel_name, { packets: 7n, bytes: 700n }]));
  }
  async counterPackets(): Promise<Map<string, bigint>> {
    return new Map();
  }
  async close(): Promise<void> {}
}

const NODE = randomUUID();
const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'tg-agent-ssh-'));
  dirs.push(d);
  return d;
};

const jobSigning = generateKeyPairSync('ed25519');
const KID = 'test-kid';
const gatewayKey: GatewaySshKey = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));
const otherKey: GatewaySshKey = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));

function configFor(stateDir: string, over: Record<string, string> = {}): AgentConfig {
  return loadConfig({
    AGENT_NODE_ID: NODE,
    AGENT_LISTEN: '127.0.0.1:0',
    AGENT_STATE_DIR: stateDir,
    AGENT_AUTHORIZED_KEY: gatewayKey.publicKey,
    AGENT_JOB_KEY: JSON.stringify({ ...jobSigning.publicKey.export({ format: 'jwk' }), kid: KID }),
    AGENT_EDGE_IP: EDGE_IP,
    ...over,
  });
}

const tunnel = tunnelSpec;

const sign = (op: 'apply' | 'remove' | 'reconcile' | 'probe', body: object, nodeId = NODE, version: 1 | 2 = 1) => signJob(jobSigning.privateKey, KID, nodeId, op, body as never, { version });

interface Agent {
  running: RunningAgent;
  health: RunningHealth;
  dataplane: RecordingDataplane;
  logs: Record<string, unknown>[];
  stateDir: string;
  node: EdgeNode;
}

/** `env`: configuration beyond the test's defaults (AGENT_JOB_VERSIONS, AGENT_LISTEN). */
async function start(stateDir = tmp(), inputTimeoutMs?: number, env: Record<string, string> = {}): Promise<Agent> {
  const dataplane = new RecordingDataplane();
  const logs: Record<string, unknown>[] = [];
  const log = createLogger('debug', {}, (l) => logs.push(JSON.parse(l) as Record<string, unknown>));
  // The health checks run on demand here (timer off): the status op reports what they decided.
  const health = startHealth(dataplane, { intervalS: 30, timer: false });
  const running = await startAgent(configFor(stateDir, env), { dataplane, log, status: health.status, ...(inputTimeoutMs ? { inputTimeoutMs } : {}) });
  return { running, health, dataplane, logs, stateDir, node: { id: NODE, host: '127.0.0.1', port: running.address.port, hostKeyFingerprint: running.hostKey.fingerprint } };
}

/** A raw ssh2 client, connected and authenticated, or the connection error. */
function connect(agent: Agent, over: Partial<ConnectConfig> = {}): Promise<ssh2.Client> {
  return new Promise((resolve, reject) => {
    const c = new ssh2.Client();
    c.on('ready', () => resolve(c));
    c.on('error', reject);
    c.connect({
      host: '127.0.0.1',
      port: agent.node.port,
      username: 'tunnelgate',
      privateKey: gatewayKey.privateKey,
      readyTimeout: 10_000,
      hostVerifier: () => true,
      ...over,
    });
  });
}

/** Runs `use` on a fresh connection to `agent` (ssh2 options `over`), ended afterwards whatever `use` did. */
async function withConnection(agent: Agent, use: (conn: ssh2.Client) => Promise<void>, over: Partial<ConnectConfig> = {}): Promise<void> {
  const conn = await connect(agent, over);
  try {
    await use(conn);
  } finally {
    conn.end();
  }
}

interface ExecResult {
  stdout: string;
  stderr: string;
  code: number | undefined;
}

/** exec `command`, write `stdin` (closing it unless `keepOpen`), collect everything until the channel closes. */
function exec(conn: ssh2.Client, command: string, stdin: string | Buffer, keepOpen = false): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    conn.exec(command, (err, stream: ClientChannel) => {
      if (err) return reject(err);
      const out: Buffer[] = [];
      const errOut: Buffer[] = [];
      let code: number | undefined;
      stream.on('data', (d: Buffer) => out.push(d));
      stream.stderr.on('data', (d: Buffer) => errOut.push(d));
      stream.on('exit', (c: number | null) => (code = c ?? undefined));
      stream.on('close', () => resolve({ stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(errOut).toString(), code }));
      stream.on('error', () => undefined);
      if (keepOpen) stream.write(stdin);
      else stream.end(stdin);
    });
  });
}

const oneLine = (r: ExecResult): Record<string, unknown> => {
  expect(r.stdout.endsWith('\n')).toBe(true);
  expect(r.stdout.indexOf('\n')).toBe(r.stdout.length - 1);
  expect(r.stderr).toBe('');
  return JSON.parse(r.stdout) as Record<string, unknown>;
};

/** Runs a command without blocking this process's event loop (the agent under test lives in it). */
function run(cmd: string, args: string[], input: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => p.kill('SIGKILL'), 20_000);
    p.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
    p.stdin.on('error', () => undefined);
    p.stdin.end(input);
  });
}

const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;

const pools: EdgeConnections[] = [];
/** The worker's own SSH path (server/edge/connections.ts): warm connections, the host key pinned, logging in with `privateKey`. */
function pool(privateKey: string = gatewayKey.privateKey, connectTimeoutMs = 10_000, onLost?: (nodeId: string) => void): EdgeConnections {
  const p = new EdgeConnections(privateKey, { connectTimeoutMs, ...(onLost ? { onLost } : {}) });
  pools.push(p);
  return p;
}

let agent: Agent;
/** The gateway's connections to the shared agent. */
let edge: EdgeConnections;
beforeAll(async () => {
  agent = await start();
  edge = pool();
});
afterAll(async () => {
  for (const p of pools) await p.close();
  await agent?.running.stop(1000);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('agent SSH: jobs', () => {
  it('runs signed jobs end to end through the worker\'s connection pool, which pins the host key', async () => {
    const t = tunnel();
    const apply = await edge.run(agent.node, await sign('apply', { tunnel: t }), 10_000);
    expect(apply).toMatchObject({ ok: true, op: 'apply', result: { added: 1, changed: 0, removed: 0, unchanged: 0 } });
    expect(agent.dataplane.calls.at(-1)).toEqual({ op: 'apply', arg: t });
    const probe = await edge.run(agent.node, await sign('probe', { tunnel: t }), 10_000);
    expect(probe).toMatchObject({ ok: true, op: 'probe', result: { reachable: true, rtt_ms: 2 } });
    const remove = await edge.run(agent.node, await sign('remove', { tunnel: { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip } }), 10_000);
    expect(remove).toMatchObject({ ok: true, op: 'remove', result: { added: 0, changed: 0, removed: 1, unchanged: 0 } });
    // An agent refusal is a result (exit 1), not a transport error.
    const unknown = await edge.run(agent.node, await sign('probe', { tunnel: t }), 10_000);
    expect(unknown).toMatchObject({ ok: false, error: 'unknown_tunnel' });
    const other = await edge.run(agent.node, await sign('apply', { tunnel: t }, randomUUID()), 10_000);
    expect(other).toMatchObject({ ok: false, error: 'wrong_audience' });
  });

  it('answers exactly one JSON line on stdout, exit status 0 for ok and 1 for a refusal', async () => {
    await withConnection(agent, async (conn) => {
      const jws = await sign('apply', { tunnel: tunnel() });
      const ok = await exec(conn, 'tunnel-agent job', jws);
      expect(ok.code).toBe(0);
      expect(oneLine(ok)).toMatchObject({ ok: true, op: 'apply' });
      // The same connection, the same JWS again: a replay.
      const again = await exec(conn, 'tunnel-agent job', jws);
      expect(again.code).toBe(1);
      expect(oneLine(again)).toMatchObject({ ok: false, error: 'replayed' });
      const bad = await exec(conn, 'tunnel-agent job', 'not a jws');
      expect(bad.code).toBe(1);
      expect(oneLine(bad)).toMatchObject({ ok: false, error: 'malformed' });
      const empty = await exec(conn, 'tunnel-agent job', '');
      expect(empty.code).toBe(1);
      expect(oneLine(empty)).toMatchObject({ ok: false, error: 'malformed' });
    });
  });

  it('allows one trailing newline after the JWS, not two', async () => {
    await withConnection(agent, async (conn) => {
      const one = await exec(conn, 'tunnel-agent job', `${await sign('apply', { tunnel: tunnel() })}\n`);
      expect(one.code).toBe(0);
      const two = await exec(conn, 'tunnel-agent job', `${await sign('apply', { tunnel: tunnel() })}\n\n`);
      expect(two.code).toBe(1);
      expect(oneLine(two)).toMatchObject({ ok: false, error: 'malformed' });
    });
  });

  it('any other exec command: exit 127 and unsupported_command, the job never runs', async () => {
    const before = agent.dataplane.calls.length;
    await withConnection(agent, async (conn) => {
      const jws = await sign('apply', { tunnel: tunnel() });
      for (const command of ['tunnel-agent job; ls', 'tunnel-agent job && id', 'tunnel-agent job ', ' tunnel-agent job', 'tunnel-agent  job', 'tunnel-agent', 'ls', 'sh -c "tunnel-agent job"', 'TUNNEL-AGENT JOB']) {
        const r = await exec(conn, command, jws);
        expect(r.code, command).toBe(127);
        expect(oneLine(r), command).toMatchObject({ ok: false, error: 'unsupported_command' });
      }
      expect(agent.dataplane.calls.length).toBe(before);
      expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'job refused', code: 'unsupported_command', command: 'tunnel-agent job; ls' }));
      // The JWS sent with the refused commands was never consumed: it still runs once.
      expect((await exec(conn, 'tunnel-agent job', jws)).code).toBe(0);
    });
  });

  it('refuses input over 16 MiB as malformed', async () => {
    await withConnection(agent, async (conn) => {
      const r = await exec(conn, 'tunnel-agent job', Buffer.alloc(MAX_INPUT_BYTES + 1, 0x41));
      expect(r.code).toBe(1);
      expect(oneLine(r)).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('16777216') });
    });
  });

  it('refuses as malformed a job whose input never ends', async () => {
    const slow = await start(tmp(), 300);
    const conn = await connect(slow);
    try {
      const r = await exec(conn, 'tunnel-agent job', await sign('apply', { tunnel: tunnel() }), true);
      expect(r.code).toBe(1);
      expect(oneLine(r)).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('no end of input') });
      expect(slow.dataplane.calls).toEqual([]);
    } finally {
      conn.end();
      await slow.running.stop(1000);
    }
  });
});

describe('agent SSH: hello and job version 2 (docs/CONTRACTS.md "Versions")', () => {
  const AGENT_VERSION = (JSON.parse(readFileSync(new URL('../../agent/package.json', import.meta.url), 'utf8')) as { version: string }).version;
  const policy = { ports: [[80, 80], [443, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 200, drop_fragments: true };

  it('`tunnel-agent hello` answers one line with the versions and the agent\'s own version, exit 0, reading no stdin', async () => {
    const before = agent.dataplane.calls.length;
    await withConnection(agent, async (conn) => {
      const r = await exec(conn, 'tunnel-agent hello', '');
      expect(r.code).toBe(0);
      expect(oneLine(r)).toEqual({ ok: true, versions: [1, 2], agent: AGENT_VERSION, features: ['attacks'] });
      // stdin never closed, or something written to it: the same answer, at once.
      const open = await exec(conn, 'tunnel-agent hello', 'ignored', true);
      expect(open.code).toBe(0);
      expect(oneLine(open)).toEqual({ ok: true, versions: [1, 2], agent: AGENT_VERSION, features: ['attacks'] });
      for (const command of ['tunnel-agent hello ', 'tunnel-agent hello; ls', 'tunnel-agent  hello', 'TUNNEL-AGENT HELLO', 'tunnel-agent version']) {
        const no = await exec(conn, command, '');
        expect(no.code, command).toBe(127);
        expect(oneLine(no), command).toMatchObject({ ok: false, error: 'unsupported_command' });
      }
      expect(agent.dataplane.calls.length).toBe(before);
    });
  });

  it('status over SSH: a v 2 job answers the shape both ends check; a v 1 status is unsupported_command', async () => {
    const t = tunnel({ tunnel_name: 'tg-status' });
    expect(await edge.run(agent.node, await sign('apply', { tunnel: t }, NODE, 2), 10_000)).toMatchObject({ ok: true });
    // Signed here, not by the gateway's signer (server/edge/job-signing.ts, the gateway's side, another change):
    // the standard claims of a signed apply, with op status and no body.
    const statusJob = async (version: 1 | 2): Promise<string> => {
      const [h, p] = (await sign('apply', { tunnel: tunnel() }, NODE, version)).split('.');
      const claims: Record<string, unknown> = { ...(JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>), op: 'status' };
      delete claims.tunnel;
      return new CompactSign(Buffer.from(JSON.stringify(claims))).setProtectedHeader(JSON.parse(Buffer.from(h!, 'base64url').toString()) as { alg: string }).sign(jobSigning.privateKey);
    };
    const r = await edge.run(agent.node, await statusJob(2), 10_000);
    expect(r).toMatchObject({ ok: true, op: 'status' });
    const result = (r as { result: unknown }).result;
    expect(checkStatusResult(result)).toBeUndefined();
    expect(result).toMatchObject({ agent: { version: AGENT_VERSION, tunnels: agent.dataplane.tunnels.size } });
    expect((result as { tunnels: unknown[] }).tunnels).toContainEqual({
      id: t.id,
      health: 'unknown',
      checked_at: null,
      counters: { packets_in: 7, bytes_in: 700, packets_out: 0, bytes_out: 0, dropped: { not_allowed: 0, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 } },
    });
    // A v 1 status: exit 1, unsupported_command.
    await withConnection(agent, async (conn) => {
      const v1 = await exec(conn, 'tunnel-agent job', await statusJob(1));
      expect(v1.code).toBe(1);
      expect(oneLine(v1)).toMatchObject({ ok: false, error: 'unsupported_command' });
    });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'job done', op: 'status', v: 2 }));
  });

  it('a v 2 job carrying a policy runs, and the dataplane gets the policy unchanged; v 1 with a policy is malformed', async () => {
    const t = tunnel({ policy } as never);
    const ok = await edge.run(agent.node, await sign('apply', { tunnel: t }, NODE, 2), 10_000);
    expect(ok).toMatchObject({ ok: true, op: 'apply' });
    expect(agent.dataplane.calls.at(-1)).toEqual({ op: 'apply', arg: t });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'job done', op: 'apply', tunnel_id: t.id, v: 2 }));
    // A v1 job with a policy, forged past the gateway's signer (which refuses to sign it).
    await withConnection(agent, async (conn) => {
      const forged = await signJob(jobSigning.privateKey, KID, NODE, 'apply', { tunnel: tunnel() }, { version: 1 });
      const [h, p] = forged.split('.');
      const claims = { ...(JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>), tunnel: tunnel({ policy } as never) };
      const jws = await new CompactSign(Buffer.from(JSON.stringify(claims))).setProtectedHeader(JSON.parse(Buffer.from(h!, 'base64url').toString()) as { alg: string }).sign(jobSigning.privateKey);
      const r = await exec(conn, 'tunnel-agent job', jws);
      expect(r.code).toBe(1);
      expect(oneLine(r)).toMatchObject({ ok: false, error: 'malformed', error_description: expect.stringContaining('policy') });
    });
  });

  it('the gateway\'s pool asks hello once per connection and signs for it: version 2 here', async () => {
    const p = pool();
    const s1 = await p.session(agent.node, 10_000);
    expect(s1).toMatchObject({ nodeId: NODE, version: 2, hello: { versions: [1, 2], agent: AGENT_VERSION } });
    const hellos = () => agent.logs.filter((l) => l.msg === 'hello').length;
    const asked = hellos();
    // More jobs and sessions on the same connection: no new hello.
    expect(await p.session(agent.node, 10_000)).toBe(s1);
    expect(await s1.run(await sign('apply', { tunnel: tunnel() }, NODE, 2), 10_000)).toMatchObject({ ok: true });
    expect(await p.run(agent.node, await sign('apply', { tunnel: tunnel() }), 10_000)).toMatchObject({ ok: true });
    expect(hellos()).toBe(asked);
    // A new connection asks again; a job signed for the old one is not sent over the new one.
    p.disconnect(NODE);
    const s2 = await p.session(agent.node, 10_000);
    expect(s2).not.toBe(s1);
    expect(hellos()).toBe(asked + 1);
    await expect(s1.run(await sign('apply', { tunnel: tunnel() }, NODE, 2), 10_000)).rejects.toMatchObject({ kind: 'connect_failed' });
  });

  it('an agent with AGENT_JOB_VERSIONS=1 (stand-in for an agent from before version 2) answers hello with 127 and refuses v 2; the pool then signs version 1, and re-asks after the agent restarts upgraded', async () => {
    const stateDir = tmp();
    const old = await start(stateDir, undefined, { AGENT_JOB_VERSIONS: '1' });
    const port = old.node.port;
    const lost: string[] = [];
    const p = pool(gatewayKey.privateKey, 10_000, (id) => lost.push(id));
    try {
      await withConnection(old, async (conn) => {
        const h = await exec(conn, 'tunnel-agent hello', '');
        expect(h.code).toBe(127);
        expect(oneLine(h)).toMatchObject({ ok: false, error: 'unsupported_command' });
        const v2 = await exec(conn, 'tunnel-agent job', await sign('apply', { tunnel: tunnel() }, NODE, 2));
        expect(v2.code).toBe(1);
        expect(oneLine(v2)).toMatchObject({ ok: false, error: 'unsupported_version' });
        expect(old.dataplane.calls).toEqual([]);
      });
      const s = await p.session(old.node, 10_000);
      expect(s).toMatchObject({ version: 1, hello: { versions: [1], agent: null } });
      expect(await s.run(await sign('apply', { tunnel: tunnel() }, NODE, s.version), 10_000)).toMatchObject({ ok: true, op: 'apply' });
      expect(old.logs).toContainEqual(expect.objectContaining({ msg: 'job done', v: 1 }));
    } finally {
      await old.running.stop(1000);
    }
    // The agent is upgraded: the same host key, state and port, every version. The pool notices the
    // dropped connection, and on the next contact asks hello again.
    const upgraded = await start(stateDir, undefined, { AGENT_LISTEN: `127.0.0.1:${port}` });
    try {
      await until('the pool noticed the old agent\'s connection closed', () => lost.length > 0);
      expect(lost).toEqual([NODE]);
      const s = await p.session(upgraded.node, 10_000);
      expect(s).toMatchObject({ version: 2, hello: { versions: [1, 2] } });
      expect(await s.run(await sign('apply', { tunnel: tunnel({ policy } as never) }, NODE, s.version), 10_000)).toMatchObject({ ok: true });
      expect(upgraded.logs).toContainEqual(expect.objectContaining({ msg: 'job done', v: 2 }));
    } finally {
      await upgraded.running.stop(1000);
    }
  });
});

describe('agent SSH: shutdown', () => {
  it('stop lets a running job finish and answer, then closes; the dataplane is not closed', async () => {
    const a = await start(tmp());
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const apply = a.dataplane.apply.bind(a.dataplane);
    let entered = false;
    a.dataplane.apply = async (t) => {
      entered = true;
      await gate;
      return apply(t);
    };
    let closed = false;
    a.dataplane.close = async () => void (closed = true);
    let lost!: () => void;
    const connectionLost = new Promise<void>((r) => (lost = r));
    const job = pool(gatewayKey.privateKey, 10_000, () => lost()).run(a.node, await sign('apply', { tunnel: tunnel() }), 10_000);
    for (let i = 0; !entered && i < 500; i++) await new Promise((r) => setTimeout(r, 10));
    expect(entered).toBe(true);
    let stopped = false;
    const stopping = a.running.stop(10_000).then(() => (stopped = true));
    await new Promise((r) => setTimeout(r, 100));
    expect(stopped).toBe(false); // still draining: the job holds it
    release();
    expect(await job).toMatchObject({ ok: true, op: 'apply' });
    await stopping;
    expect(stopped).toBe(true);
    expect(closed).toBe(false);
    // The agent ended the gateway's warm connection, and is no longer listening for a new one.
    await connectionLost;
    await expect(pool(gatewayKey.privateKey, 5_000).run(a.node, await sign('apply', { tunnel: tunnel() }), 5_000)).rejects.toMatchObject({ kind: 'connect_failed' });
  });
});

describe('agent SSH: authentication', () => {
  it('refuses another client key, through the worker\'s connection pool and a raw client', async () => {
    const jws = await sign('apply', { tunnel: tunnel() });
    const err = await pool(otherKey.privateKey).run(agent.node, jws, 10_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EdgeSshError);
    expect(err).toMatchObject({ kind: 'auth_failed', retryable: false });
    await expect(connect(agent, { privateKey: otherKey.privateKey })).rejects.toMatchObject({ level: 'client-authentication' });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', reason: "not the gateway's key" }));
  });

  it('refuses a client that offers the gateway\'s public key but cannot sign with it', async () => {
    // The public key is public: offering it must not be enough. This client presents the gateway's key
    // blob and signs the session with another key.
    const parse = (text: string) => {
      const k = ssh2.utils.parseKey(text);
      if (k instanceof Error || Array.isArray(k)) throw new Error('unexpected key');
      return k;
    };
    const forged = parse(gatewayKey.privateKey);
    const intruder = parse(otherKey.privateKey);
    forged.sign = (data: Buffer | string, algo?: string) => intruder.sign(data, algo);
    let offered = false;
    const err = await connect(agent, {
      privateKey: undefined,
      authHandler: (_left: unknown, _partial: unknown, next: (m: unknown) => void) => {
        if (offered) return next(false);
        offered = true;
        next({ type: 'publickey', username: 'tunnelgate', key: forged });
      },
    } as unknown as Partial<ConnectConfig>).catch((e: unknown) => e);
    expect(offered).toBe(true);
    expect(err).toMatchObject({ level: 'client-authentication' });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', reason: 'bad signature' }));
  });

  it('refuses another user, even with the gateway key', async () => {
    await expect(connect(agent, { username: 'root' })).rejects.toMatchObject({ level: 'client-authentication' });
  });

  it('refuses password, keyboard-interactive and none', async () => {
    await expect(connect(agent, { privateKey: undefined, password: 'hunter2', authHandler: ['password'] })).rejects.toMatchObject({ level: 'client-authentication' });
    await expect(connect(agent, { privateKey: undefined, tryKeyboard: true, authHandler: ['keyboard-interactive'] })).rejects.toMatchObject({ level: 'client-authentication' });
    await expect(connect(agent, { privateKey: undefined, authHandler: ['none'] })).rejects.toMatchObject({ level: 'client-authentication' });
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', method: 'password' }));
    expect(agent.logs).toContainEqual(expect.objectContaining({ msg: 'ssh authentication refused', method: 'keyboard-interactive' }));
  });
});

describe('agent SSH: channels', () => {
  it('refuses shell, pty, subsystems, X11 and every kind of forwarding; exec still works after', async () => {
    // strictVendor off: ssh2 would otherwise not send OpenSSH's streamlocal requests to a non-OpenSSH server.
    const conn = await connect(agent, { strictVendor: false });
    const refused = (fn: (cb: (err: Error | null | undefined) => void) => void) =>
      new Promise<Error | null | undefined>((resolve) => {
        const timer = setTimeout(() => resolve(undefined), 5000);
        fn((err) => {
          clearTimeout(timer);
          resolve(err);
        });
      });
    try {
      expect(await refused((cb) => conn.shell(false, (err) => cb(err)))).toBeInstanceOf(Error); // a shell without a pty
      expect(await refused((cb) => conn.shell({ term: 'xterm' }, (err) => cb(err)))).toBeInstanceOf(Error); // pty first
      expect(await refused((cb) => conn.exec('tunnel-agent job', { pty: true }, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.exec('tunnel-agent job', { x11: true }, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.sftp((err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.subsys('netconf', (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.forwardOut('127.0.0.1', 40000, '127.0.0.1', 22, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.forwardIn('127.0.0.1', 0, (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.openssh_forwardOutStreamLocal('/run/some.sock', (err) => cb(err)))).toBeInstanceOf(Error);
      expect(await refused((cb) => conn.openssh_forwardInStreamLocal('/tmp/tg-agent-test.sock', (err) => cb(err)))).toBeInstanceOf(Error);
      for (const request of ['shell', 'pty', 'sftp', 'subsystem', 'x11', 'direct-tcpip', 'tcpip-forward', 'direct-streamlocal', 'streamlocal-forward@openssh.com']) {
        expect(agent.logs, request).toContainEqual(expect.objectContaining({ msg: 'ssh request refused', request }));
      }
      const ok = await exec(conn, 'tunnel-agent job', await sign('apply', { tunnel: tunnel() }));
      expect(ok.code).toBe(0);
    } finally {
      conn.end();
    }
  });

  it('OpenSSH\'s own client runs a job too, checking the host key from known_hosts', async (ctx) => {
    if (skipUnless(has('ssh'), 'OpenSSH\'s client, ssh (apt-get install openssh-client)')) ctx.skip();
    const dir = tmp();
    writeFileSync(join(dir, 'id'), gatewayKey.privateKey, { mode: 0o600 });
    writeFileSync(join(dir, 'known_hosts'), `[127.0.0.1]:${agent.node.port} ${agent.running.hostKey.publicKey}\n`);
    const args = ['-F', '/dev/null', '-p', String(agent.node.port), '-i', join(dir, 'id'), '-o', 'IdentitiesOnly=yes', '-o', 'BatchMode=yes', '-o', `UserKnownHostsFile=${join(dir, 'known_hosts')}`, '-o', 'StrictHostKeyChecking=yes', '-o', 'LogLevel=ERROR'];
    const jws = await sign('apply', { tunnel: tunnel() });
    const r = await run('ssh', [...args, 'tunnelgate@127.0.0.1', 'tunnel-agent job'], jws);
    expect(r.status, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ ok: true, op: 'apply' });
    // hello with no stdin (OpenSSH's -n: stdin from /dev/null).
    const hello = await run('ssh', [...args, '-n', 'tunnelgate@127.0.0.1', 'tunnel-agent hello'], '');
    expect(hello.status, hello.stderr).toBe(0);
    expect(hello.stdout).toBe(`${JSON.stringify({ ok: true, versions: [1, 2], agent: JSON.parse(readFileSync(new URL('../../agent/package.json', import.meta.url), 'utf8')).version, features: ['attacks'] })}\n`);
    const no = await run('ssh', [...args, 'tunnelgate@127.0.0.1', 'tunnel-agent job; ls'], jws);
    expect(no.status).toBe(127);
    expect(JSON.parse(no.stdout)).toMatchObject({ ok: false, error: 'unsupported_command' });
    // An interactive login: pty and shell are refused, so ssh ends with an error instead of a prompt.
    const shell = await run('ssh', [...args, '-tt', 'tunnelgate@127.0.0.1'], 'id\n');
    expect(shell.status).not.toBe(0);
    expect(shell.status).not.toBeNull();
  });
});

describe('agent SSH: host key', () => {
  it('is generated once, kept 0600, and the same after a restart', async () => {
    const stateDir = tmp();
    const first = await start(stateDir);
    const fp = first.running.hostKey.fingerprint;
    expect(fp).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
    expect(first.running.hostKey.created).toBe(true);
    const path = join(stateDir, HOST_KEY_FILE);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, 'utf8')).toMatch(/^-----BEGIN OPENSSH PRIVATE KEY-----\n/);
    // The key the client sees is the one whose fingerprint was printed.
    let seen: string | undefined;
    const jws = await sign('apply', { tunnel: tunnel() });
    const { sshFingerprint } = await import('../../common/openssh.ts');
    const conn = await connect(first, { hostVerifier: (key: Buffer) => ((seen = sshFingerprint(key)), true) });
    conn.end();
    expect(seen).toBe(fp);
    await first.running.stop(1000);

    const second = await start(stateDir);
    try {
      expect(second.running.hostKey.created).toBe(false);
      expect(second.running.hostKey.fingerprint).toBe(fp);
      // The gateway's pin, recorded from the first start, still holds.
      expect(await pool().run(second.node, jws, 10_000)).toMatchObject({ ok: true });
    } finally {
      await second.running.stop(1000);
    }
  });

  it('matches what ssh-keygen reads from the stored key', async (ctx) => {
    if (skipUnless(has('ssh-keygen'), 'ssh-keygen (apt-get install openssh-client)')) ctx.skip();
    const path = join(agent.stateDir, HOST_KEY_FILE);
    const pub = execFileSync('ssh-keygen', ['-y', '-f', path], { encoding: 'utf8' }).trim();
    expect(pub.split(' ').slice(0, 2).join(' ')).toBe(agent.running.hostKey.publicKey.split(' ').slice(0, 2).join(' '));
    const listed = execFileSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', path], { encoding: 'utf8' });
    expect(listed.split(' ')[1]).toBe(agent.running.hostKey.fingerprint);
  });

  it('a wrong pinned fingerprint refuses to send the job', async () => {
    const before = agent.dataplane.calls.length;
    const logsBefore = agent.logs.length;
    const jws = await sign('apply', { tunnel: tunnel() });
    const wrong = { ...agent.node, hostKeyFingerprint: otherKey.fingerprint };
    const err = await edge.run(wrong, jws, 10_000).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(EdgeSshError);
    expect(err).toMatchObject({ kind: 'host_key_mismatch', retryable: false, presentedFingerprint: agent.running.hostKey.fingerprint });
    expect(agent.dataplane.calls.length).toBe(before);
    // The client gave up before authenticating: the agent never saw a login, let alone the job.
    const after = agent.logs.slice(logsBefore).map((l) => l.msg);
    expect(after).not.toContain('ssh client authenticated');
    expect(after.filter((m) => String(m).startsWith('job'))).toEqual([]);
    // The JWS was never delivered, so it is still fresh with the right pin.
    expect(await edge.run(agent.node, jws, 10_000)).toMatchObject({ ok: true });
    // A fingerprint with OpenSSH's optional padding is the same pin.
    expect(await edge.run({ ...agent.node, hostKeyFingerprint: `${agent.node.hostKeyFingerprint}=` }, await sign('apply', { tunnel: tunnel() }), 10_000)).toMatchObject({ ok: true });
  });

  it('`tunnel-agent fingerprint` prints the stored key\'s fingerprint', () => {
    const r = spawnSync(process.execPath, ['agent/bin/tunnel-agent.mjs', 'fingerprint'], {
      encoding: 'utf8',
      env: { ...process.env, ...envOf(agent.stateDir) },
      timeout: 30_000,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toBe(`${agent.running.hostKey.fingerprint}\n`);
    const bad = spawnSync(process.execPath, ['agent/bin/tunnel-agent.mjs', 'fingerprint'], { encoding: 'utf8', env: { ...process.env, ...envOf(agent.stateDir), AGENT_NODE_ID: 'x' }, timeout: 30_000 });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/AGENT_NODE_ID must be the node's UUID/);
  });

  it('reports an unreachable agent and a timeout as retryable transport errors', async () => {
    const closed = await start(tmp());
    const node = closed.node;
    await closed.running.stop(1000);
    const err = await pool(gatewayKey.privateKey, 5_000).run(node, 'x.y.z', 5_000).catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'connect_failed', retryable: true });
    // A 1 ms connect timeout: the handshake cannot finish in time.
    const t = await pool(gatewayKey.privateKey, 1).run(agent.node, 'x.y.z', 10_000).catch((e: unknown) => e);
    expect(t).toMatchObject({ kind: 'timeout', retryable: true });
  });
});

function envOf(stateDir: string): Record<string, string> {
  return {
    AGENT_NODE_ID: NODE,
    AGENT_LISTEN: '127.0.0.1:0',
    AGENT_STATE_DIR: stateDir,
    AGENT_AUTHORIZED_KEY: gatewayKey.publicKey,
    AGENT_JOB_KEY: JSON.stringify({ ...jobSigning.publicKey.export({ format: 'jwk' }), kid: KID }),
    AGENT_EDGE_IP: EDGE_IP,
  };
}
