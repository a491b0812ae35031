// The agent never stops serving whatever the kernel does (agent/housekeeping/activity.ts, docs/CONTRACTS.md "Agent
// watchdog", AGENT_WATCHDOG_S). A real agent process (test/helpers/agent-watchdog-process.ts: the production startAgent,
// createDataplane in a fresh namespace with the veth stand-in for GRE, the watchdog as agent/main.ts starts it) gets
// signed jobs over real SSH through the worker's own connection pool. What does not finish is made with the
// dataplane's TEST-ONLY seam (DataplaneOptions.testOnlyHang, TG_TEST_HANG_AT): the first `apply` that reaches the
// nftables commit hangs there, as one the kernel never answers would, or holds the event loop itself.
import { spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { generateSecret, parseSecret, type GatewaySshKey } from '../../server/secrets.ts';
import { signJob, signStatusJob } from '../../server/edge/job-signing.ts';
import { EdgeConnections, type EdgeNode } from '../../server/edge/connections.ts';
import { checkStatusResult, type StatusResult } from '../../common/tunnel-status.ts';
import { DNAT_MAP } from '../../agent/dataplane/kernel/context.ts';
import { STOP_BOUND_S, WATCHDOG_EXIT_CODE } from '../../agent/main.ts';
import { EDGE_IP, tunnelSpec } from '../helpers/tunnel-spec.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const NODE_BIN = join(ROOT, 'node_modules/.bin/node');
const NODE = randomUUID();
const KID = 'watchdog-test';
const jobSigning = generateKeyPairSync('ed25519');
const gatewayKey: GatewaySshKey = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));
const JOB_TIMEOUT_MS = 60_000;

interface AgentUnderTest {
  child: ChildProcess;
  node: EdgeNode;
  netns: TestNetns;
  /** Its structured log lines (stderr), the watchdog thread's included. */
  logs: Record<string, unknown>[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  exit?: { code: number | null; signal: NodeJS.Signals | null };
}

const started: { agent: AgentUnderTest; stateDir: string }[] = [];
const pools: EdgeConnections[] = [];

/** A fresh connection pool: its first job opens a new SSH connection (a new handshake) to the agent. */
function pool(): EdgeConnections {
  const p = new EdgeConnections(gatewayKey.privateKey, { connectTimeoutMs: 20_000 });
  pools.push(p);
  return p;
}

async function startAgentProcess(env: Record<string, string>): Promise<AgentUnderTest> {
  const netns = new TestNetns();
  const stateDir = mkdtempSync(join(tmpdir(), 'tg-agent-watchdog-'));
  const child = spawn(NODE_BIN, ['--import', join(ROOT, 'loader/register.mjs'), join(ROOT, 'test/helpers/agent-watchdog-process.ts')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      AGENT_NODE_ID: NODE,
      AGENT_LISTEN: '127.0.0.1:0',
      AGENT_STATE_DIR: stateDir,
      AGENT_AUTHORIZED_KEY: gatewayKey.publicKey,
      AGENT_JOB_KEY: JSON.stringify({ ...jobSigning.publicKey.export({ format: 'jwk' }), kid: KID }),
      AGENT_EDGE_IP: EDGE_IP,
      AGENT_LOG_LEVEL: 'info',
      // The status op (health checks are started with it); an interval long enough that none runs meanwhile.
      AGENT_HEALTH_INTERVAL_S: '3600',
      TG_TEST_NETNS: netns.name,
      ...env,
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  child.stdin!.on('error', () => undefined);
  const logs: Record<string, unknown>[] = [];
  createInterface({ input: child.stderr! }).on('line', (line) => {
    if (!line.startsWith('{')) return;
    try {
      logs.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // not a log line
    }
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.once('exit', (code, signal) => r({ code, signal })));
  const ready = await new Promise<{ port: number; fingerprint: string }>((resolveReady, reject) => {
    void exited.then((e) => reject(new Error(`agent exited (${e.code ?? e.signal}) before it was ready: ${JSON.stringify(logs.slice(-5))}`)));
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const o = JSON.parse(line) as { ready?: boolean; port: number; fingerprint: string };
      if (o.ready) resolveReady(o);
    });
  });
  const agent: AgentUnderTest = { child, netns, logs, exited, node: { id: NODE, host: '127.0.0.1', port: ready.port, hostKeyFingerprint: ready.fingerprint } };
  void exited.then((e) => (agent.exit = e));
  started.push({ agent, stateDir });
  return agent;
}

const apply = async (agent: AgentUnderTest, p: EdgeConnections, t = tunnelSpec()) => p.run(agent.node, await signJob(jobSigning.privateKey, KID, NODE, 'apply', { tunnel: t }, { version: 2 }), JOB_TIMEOUT_MS);
const status = async (agent: AgentUnderTest, p: EdgeConnections) => p.run(agent.node, await signStatusJob(jobSigning.privateKey, KID, NODE, { version: 2 }), JOB_TIMEOUT_MS);
const logged = (agent: AgentUnderTest, msg: string) => agent.logs.find((l) => l.msg === msg);

afterEach(async () => {
  for (const p of pools.splice(0)) await p.close();
  for (const { agent, stateDir } of started.splice(0)) {
    if (!agent.exit) {
      agent.child.kill('SIGKILL');
      await agent.exited;
    }
    agent.netns.delete();
    rmSync(stateDir, { recursive: true, force: true });
  }
});

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('agent watchdog (a real agent process)', () => {
  it('a job that never finishes answers kernel_error naming its step; the agent keeps serving, reports it stuck, and the next job repairs', async () => {
    const agent = await startAgentProcess({ AGENT_WATCHDOG_S: '3', TG_TEST_HANG_AT: 'apply:nftables commit' });
    const t = tunnelSpec();
    const stuck = await apply(agent, pool(), t);
    expect(stuck).toMatchObject({ ok: false, error: 'kernel_error' });
    expect(stuck.ok ? '' : stuck.error_description).toMatch(/^apply: nftables commit did not finish within 3 s/);
    expect(logged(agent, 'watchdog.stuck')).toMatchObject({ op: 'apply', step: 'nftables commit', stuck_s: 3 });

    // A new SSH connection (handshake and all) is served while the operation is still stuck, and status says so.
    const st = await status(agent, pool());
    expect(st.ok).toBe(true);
    const result = (st as { result: StatusResult }).result;
    expect(checkStatusResult(result)).toBeUndefined();
    expect(result.agent.stuck).toMatchObject({ op: 'apply', step: 'nftables commit' });
    expect(Date.parse(result.agent.stuck!.since)).not.toBeNaN();

    // The stuck operation ends (as a late kernel answer would end it): nothing more of it reaches the kernel, and it
    // is no longer reported.
    agent.child.stdin!.write(`${JSON.stringify({ release_hang: true })}\n`);
    const p = pool();
    await until('status without a stuck operation', async () => {
      const s = await status(agent, p);
      return s.ok && !(s as { result: StatusResult }).result.agent.stuck;
    }, 30_000);
    expect(agent.exit).toBeUndefined();

    // The next job reads the kernel back and finishes what the stuck one left: the tunnel's mapping is committed.
    expect(await apply(agent, p, t)).toMatchObject({ ok: true, op: 'apply' });
    expect(agent.netns.run('nft', 'list', 'map', 'ip', 'tunnelgate', DNAT_MAP)).toContain(t.protected_ip);
    expect(agent.exit).toBeUndefined();
  });

  it('an operation that never settles: the watchdog logs which one and exits non-zero, for systemd to restart the agent', async () => {
    const agent = await startAgentProcess({ AGENT_WATCHDOG_S: '2', TG_TEST_HANG_AT: 'apply:nftables commit' });
    const stuck = await apply(agent, pool());
    expect(stuck).toMatchObject({ ok: false, error: 'kernel_error' });
    const exit = await until('the agent to exit', () => agent.exit, 60_000);
    expect(exit).toEqual({ code: WATCHDOG_EXIT_CODE, signal: null });
    expect(logged(agent, 'watchdog.unrecoverable')).toMatchObject({ op: 'apply', step: 'nftables commit' });
  });

  it('the event loop held by a call that never returns: the watchdog thread names it and kills the agent', async () => {
    const agent = await startAgentProcess({ AGENT_WATCHDOG_S: '2', TG_TEST_HANG_AT: 'apply:nftables commit', TG_TEST_HANG_BLOCK: '1' });
    // The job never answers: its connection dies with the agent.
    const job = apply(agent, pool()).catch((e: unknown) => e);
    const exit = await until('the agent to exit', () => agent.exit, 60_000);
    expect(exit.signal).toBe('SIGKILL');
    const line = agent.logs.find((l) => typeof l.msg === 'string' && l.msg.startsWith('watchdog: the event loop has not turned'));
    expect(line).toMatchObject({ component: 'watchdog', operation: 'apply: nftables commit', kernel_call: 'TEST SEAM: nftables commit held on the event loop' });
    // Where the kernel held the thread: the seam waits in futex_wait (Atomics.wait), asleep, not running.
    expect(line).toMatchObject({ main_thread_state: 'S' });
    expect(String(line!.main_thread_wchan ?? (line!.main_thread_kernel_stack as string[] | undefined)?.join(' '))).toMatch(/futex/);
    expect(await job).toBeInstanceOf(Error);
  });

  it('SIGTERM ends the agent within its stop bound while a job hangs, the dataplane left in place', async () => {
    const agent = await startAgentProcess({ AGENT_WATCHDOG_S: '600', TG_TEST_HANG_AT: 'apply:nftables commit' });
    const t = tunnelSpec();
    const job = apply(agent, pool(), t).catch((e: unknown) => e);
    // The apply has begun in the dataplane: its link is there, its commit never comes.
    await until('the tunnel link', () => agent.netns.run('ip', '-o', 'link', 'show').includes(t.tunnel_name), 30_000);
    agent.child.kill('SIGTERM');
    const exit = await until('the agent to exit', () => agent.exit, 60_000);
    expect(exit).toEqual({ code: 1, signal: null });
    expect(logged(agent, 'the stop did not finish within its bound; exiting, the dataplane stays as it is')).toMatchObject({ component: 'watchdog', stop_s: STOP_BOUND_S });
    // Nothing was torn down on the way out.
    expect(agent.netns.run('ip', '-o', 'link', 'show')).toContain(t.tunnel_name);
    await job;
  });
});
