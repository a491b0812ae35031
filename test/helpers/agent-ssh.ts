// The agent's SSH server on 127.0.0.1 for the tests of test/integration/agent-ssh*.test.ts: the agent's own
// startAgent over a FAKE dataplane (RecordingDataplane, no kernel: the kernel side has its own namespace tests),
// the gateway's signing key and SSH key, raw ssh2 clients and the worker's connection pool (server/edge/
// connections.ts) to reach it, and cleanup() for a file's afterAll: the pools closed, the state dirs removed.
import { spawn, spawnSync } from 'node:child_process';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import type { ClientChannel, ConnectConfig } from 'ssh2';
import { expect } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { parseSecret, generateSecret, type GatewaySshKey } from '../../server/secrets.ts';
import { signJob } from '../../server/edge/job-signing.ts';
import type { JobVersion } from '../../common/job-contract.ts';
import { EdgeConnections, type EdgeNode } from '../../server/edge/connections.ts';
import { loadConfig, type AgentConfig } from '../../agent/config.ts';
import { startAgent, startHealth, type RunningAgent, type RunningHealth } from '../../agent/main.ts';
import type { ChangeCounts, Dataplane, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../../agent/dataplane/types.ts';
import { EDGE_IP, tunnelSpec } from './tunnel-spec.ts';

/** FAKE dataplane (test double, no kernel): records every call, keeps tunnels in a map. */
export class RecordingDataplane implements Dataplane {
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

export const NODE = randomUUID();
const dirs: string[] = [];
export const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'tg-agent-ssh-'));
  dirs.push(d);
  return d;
};

export const jobSigning = generateKeyPairSync('ed25519');
export const KID = 'test-kid';
export const gatewayKey: GatewaySshKey = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));
export const otherKey: GatewaySshKey = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));

export function configFor(stateDir: string, over: Record<string, string> = {}): AgentConfig {
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

export const tunnel = tunnelSpec;

export const sign = (op: 'apply' | 'remove' | 'reconcile' | 'probe', body: object, nodeId = NODE, version: JobVersion = 1) => signJob(jobSigning.privateKey, KID, nodeId, op, body as never, { version });

export interface Agent {
  running: RunningAgent;
  health: RunningHealth;
  dataplane: RecordingDataplane;
  logs: Record<string, unknown>[];
  stateDir: string;
  node: EdgeNode;
}

/** `env`: configuration beyond the test's defaults (AGENT_JOB_VERSIONS, AGENT_LISTEN). */
export async function start(stateDir = tmp(), inputTimeoutMs?: number, env: Record<string, string> = {}): Promise<Agent> {
  const dataplane = new RecordingDataplane();
  const logs: Record<string, unknown>[] = [];
  const log = createLogger('debug', {}, (l) => logs.push(JSON.parse(l) as Record<string, unknown>));
  // The health checks run on demand here (timer off): the status op reports what they decided.
  const health = startHealth(dataplane, { intervalS: 30, timer: false });
  const running = await startAgent(configFor(stateDir, env), { dataplane, log, status: health.status, ...(inputTimeoutMs ? { inputTimeoutMs } : {}) });
  return { running, health, dataplane, logs, stateDir, node: { id: NODE, host: '127.0.0.1', port: running.address.port, hostKeyFingerprint: running.hostKey.fingerprint } };
}

/** A raw ssh2 client, connected and authenticated, or the connection error. */
export function connect(agent: Agent, over: Partial<ConnectConfig> = {}): Promise<ssh2.Client> {
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
export async function withConnection(agent: Agent, use: (conn: ssh2.Client) => Promise<void>, over: Partial<ConnectConfig> = {}): Promise<void> {
  const conn = await connect(agent, over);
  try {
    await use(conn);
  } finally {
    conn.end();
  }
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  code: number | undefined;
}

/** exec `command`, write `stdin` (closing it unless `keepOpen`), collect everything until the channel closes. */
export function exec(conn: ssh2.Client, command: string, stdin: string | Buffer, keepOpen = false): Promise<ExecResult> {
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

export const oneLine = (r: ExecResult): Record<string, unknown> => {
  expect(r.stdout.endsWith('\n')).toBe(true);
  expect(r.stdout.indexOf('\n')).toBe(r.stdout.length - 1);
  expect(r.stderr).toBe('');
  return JSON.parse(r.stdout) as Record<string, unknown>;
};

/** Runs a command without blocking this process's event loop (the agent under test lives in it). */
export function run(cmd: string, args: string[], input: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
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

export const has = (cmd: string) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;

const pools: EdgeConnections[] = [];
/** The worker's own SSH path (server/edge/connections.ts): warm connections, the host key pinned, logging in with `privateKey`. */
export function pool(privateKey: string = gatewayKey.privateKey, connectTimeoutMs = 10_000, onLost?: (nodeId: string) => void): EdgeConnections {
  const p = new EdgeConnections(privateKey, { connectTimeoutMs, ...(onLost ? { onLost } : {}) });
  pools.push(p);
  return p;
}

export function envOf(stateDir: string): Record<string, string> {
  return {
    AGENT_NODE_ID: NODE,
    AGENT_LISTEN: '127.0.0.1:0',
    AGENT_STATE_DIR: stateDir,
    AGENT_AUTHORIZED_KEY: gatewayKey.publicKey,
    AGENT_JOB_KEY: JSON.stringify({ ...jobSigning.publicKey.export({ format: 'jwk' }), kid: KID }),
    AGENT_EDGE_IP: EDGE_IP,
  };
}

/** For a test file's afterAll: closes every pool made by pool(), removes every directory made by tmp(). */
export async function cleanup(): Promise<void> {
  for (const p of pools) await p.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}
