// The agent's listener under strangers (docs/CONTRACTS.md "Hardening of the listener"): real
// TCP connections on loopback that never send an SSH banner, from 127.0.0.1 and from other loopback
// addresses (all of 127/8 is local on Linux), against the production startAgent(); the job comes from
// the gateway's own SSH path (the worker's server/edge/connections.ts), with the host key pinned. The
// gateway reaches the agent over ::1 (the agent listens dual-stack on [::]), so it has a source address
// of its own, as it does in production: the per-source cap would refuse it if it shared the attacker's.
// The dataplane is a FAKE (records calls; the kernel side has its own namespace tests).
import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { parseSecret, generateSecret, type GatewaySshKey } from '../../server/secrets.ts';
import { signJob } from '../../server/edge/job-signing.ts';
import { EdgeConnections, type EdgeNode } from '../../server/edge/connections.ts';
import { loadConfig } from '../../agent/config.ts';
import { startAgent, type RunningAgent } from '../../agent/main.ts';
import type { ChangeCounts, Dataplane, ProbeResult, TunnelRef, TunnelSpec } from '../../agent/dataplane/types.ts';
import { EDGE_IP, tunnelSpec } from '../helpers/tunnel-spec.ts';
import { sourceKey } from '../../agent/ssh/admission.ts';

/** FAKE dataplane (test double, no kernel): counts applies. */
class CountingDataplane implements Dataplane {
  applied = 0;
  async apply(_t: TunnelSpec): Promise<ChangeCounts> {
    this.applied++;
    return { added: 1, changed: 0, removed: 0, unchanged: 0 };
  }
  async remove(_t: TunnelRef): Promise<ChangeCounts> {
    return { added: 0, changed: 0, removed: 0, unchanged: 0 };
  }
  async reconcile(_ts: TunnelSpec[]): Promise<ChangeCounts & { failed: [] }> {
    return { added: 0, changed: 0, removed: 0, unchanged: 0, failed: [] };
  }
  async probe(_t: TunnelSpec): Promise<ProbeResult> {
    return { reachable: false };
  }
  async has(): Promise<boolean> {
    return false;
  }
  async close(): Promise<void> {}
}

const NODE = randomUUID();
const KID = 'listener-kid';
const jobSigning = generateKeyPairSync('ed25519');
const gatewayKey: GatewaySshKey = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));
/** The gateway's normal per-job timeout (EDGE_JOB_TIMEOUT_MS default, docs/CONFIGURATION.md). */
const JOB_TIMEOUT_MS = 10_000;

const dirs: string[] = [];
const running: RunningAgent[] = [];
const sockets: net.Socket[] = [];
const pools: EdgeConnections[] = [];

/** The gateway's side as its worker runs it: warm, host-key-pinned connections (server/edge/connections.ts). */
function gatewayConnections(): EdgeConnections {
  const p = new EdgeConnections(gatewayKey.privateKey, { connectTimeoutMs: JOB_TIMEOUT_MS });
  pools.push(p);
  return p;
}

interface Started {
  agent: RunningAgent;
  dataplane: CountingDataplane;
  logs: Record<string, unknown>[];
  /** The agent as the gateway addresses it (over ::1 unless `host` says otherwise). */
  node: (host?: string) => EdgeNode;
}

async function start(env: Record<string, string> = {}, handshakeTimeoutMs?: number): Promise<Started> {
  const stateDir = mkdtempSync(join(tmpdir(), 'tg-agent-listener-'));
  dirs.push(stateDir);
  const config = loadConfig({
    AGENT_NODE_ID: NODE,
    AGENT_LISTEN: '[::]:0',
    AGENT_STATE_DIR: stateDir,
    AGENT_AUTHORIZED_KEY: gatewayKey.publicKey,
    AGENT_JOB_KEY: JSON.stringify({ ...jobSigning.publicKey.export({ format: 'jwk' }), kid: KID }),
    AGENT_EDGE_IP: EDGE_IP,
    ...env,
  });
  const dataplane = new CountingDataplane();
  const logs: Record<string, unknown>[] = [];
  const log = createLogger('debug', {}, (l) => logs.push(JSON.parse(l) as Record<string, unknown>));
  const agent = await startAgent(config, { dataplane, log, ...(handshakeTimeoutMs !== undefined ? { handshakeTimeoutMs } : {}) });
  running.push(agent);
  return { agent, dataplane, logs, node: (host = '::1') => ({ id: NODE, host, port: agent.address.port, hostKeyFingerprint: agent.hostKey.fingerprint }) };
}

type Fate = 'admitted' | 'refused';

/**
 * A stranger's connection from `localAddress` that never sends anything. Resolves 'admitted' when the
 * agent's SSH identification arrives (the agent took the connection), 'refused' when it is closed first.
 * The socket stays open (and in `sockets`) until the agent closes it or the test ends.
 */
function idle(port: number, localAddress: string, to = '127.0.0.1'): { socket: net.Socket; fate: Promise<Fate>; closed: Promise<void> } {
  const socket = net.connect({ host: to, port, localAddress });
  sockets.push(socket);
  socket.on('error', () => undefined);
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  const fate = new Promise<Fate>((resolve) => {
    socket.once('data', () => resolve('admitted'));
    socket.once('close', () => resolve('refused'));
  });
  return { socket, fate, closed };
}

/** Opens `n` idle connections per address, `batch` at a time, and waits until each one's fate is known. */
async function flood(port: number, addresses: string[], n: number, batch = 60): Promise<Map<string, Fate[]>> {
  const all: { addr: string; fate: Promise<Fate> }[] = [];
  for (const addr of addresses) for (let i = 0; i < n; i++) all.push({ addr, fate: Promise.resolve('refused') });
  const out = new Map<string, Fate[]>(addresses.map((a) => [a, []]));
  for (let i = 0; i < all.length; i += batch) {
    const fates = await Promise.all(all.slice(i, i + batch).map(({ addr }) => idle(port, addr).fate.then((f) => [addr, f] as const)));
    for (const [addr, f] of fates) out.get(addr)!.push(f);
  }
  return out;
}

const sign = (t: TunnelSpec) => signJob(jobSigning.privateKey, KID, NODE, 'apply', { tunnel: t });
const count = (fates: Fate[], f: Fate) => fates.filter((x) => x === f).length;

afterEach(async () => {
  for (const p of pools.splice(0)) await p.close();
  for (const s of sockets.splice(0)) s.destroy();
  for (const a of running.splice(0)) await a.stop(1000);
});
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('agent listener hardening', () => {
  it('300 idle connections from 127.0.0.1 and 300 from other loopback addresses do not keep the gateway\'s job out', async () => {
    const { agent, dataplane, node } = await start();
    const port = agent.address.port;
    // 300 from 127.0.0.1: four are held (the per-source cap), the rest are refused at accept.
    const one = await flood(port, ['127.0.0.1'], 300);
    // 300 from 100 other loopback addresses, three each: all of them are held, unauthenticated.
    const others = Array.from({ length: 100 }, (_, i) => `127.0.${1 + (i >> 6)}.${2 + (i & 63)}`);
    const many = await flood(port, others, 3);
    const manyFates = [...many.values()].flat();

    // The gateway's job, from its own address, while all of them are held.
    const result = await gatewayConnections().run(node(), await sign(tunnelSpec()), JOB_TIMEOUT_MS);
    expect(result).toMatchObject({ ok: true, op: 'apply', result: { added: 1 } });
    expect(dataplane.applied).toBe(1);

    expect(count(one.get('127.0.0.1')!, 'admitted')).toBe(4);
    expect(count(one.get('127.0.0.1')!, 'refused')).toBe(296);
    expect(count(manyFates, 'admitted')).toBe(300);
    // Still held by the agent after the job ran: 4 + 300 strangers, none of them authenticated.
    expect(agent.unauthenticated()).toBe(304);
  }, 120_000);

  it('closes a connection that has not authenticated by the deadline, banner or not; an authenticated one stays', async () => {
    const { agent, logs } = await start({}, 1500);
    const port = agent.address.port;
    // The gateway's connection, authenticated before the strangers arrive.
    const gw = await new Promise<ssh2.Client>((resolve, reject) => {
      const c = new ssh2.Client();
      c.on('ready', () => resolve(c));
      c.on('error', reject);
      c.connect({ host: '::1', port, username: 'tunnelgate', privateKey: gatewayKey.privateKey, hostVerifier: () => true });
    });
    try {
      const silent = idle(port, '127.0.0.20'); // never sends its banner
      const bannerOnly = idle(port, '127.0.0.21'); // sends a banner, then nothing
      expect(await silent.fate).toBe('admitted');
      expect(await bannerOnly.fate).toBe('admitted');
      bannerOnly.socket.write('SSH-2.0-stranger\r\n');
      await Promise.all([silent.closed, bannerOnly.closed]); // bounded by the test timeout
      expect(logs.filter((l) => l.msg === 'ssh connection closed: no authentication within the deadline').length).toBe(2);
      expect(agent.unauthenticated()).toBe(0);
      // The gateway's connection is past the deadline too, and still runs jobs.
      const ok = await new Promise<string>((resolve, reject) => {
        gw.exec('tunnel-agent job', (err, stream) => {
          if (err) return reject(err);
          let out = '';
          stream.on('data', (d: Buffer) => (out += d.toString()));
          stream.on('close', () => resolve(out));
          void sign(tunnelSpec()).then((jws) => stream.end(jws));
        });
      });
      expect(JSON.parse(ok)).toMatchObject({ ok: true, op: 'apply' });
    } finally {
      gw.end();
    }
  }, 30_000);

  it('the deadline is 10 s by default', async () => {
    const { agent, logs } = await start();
    const c = idle(agent.address.port, '127.0.0.22');
    expect(await c.fate).toBe('admitted');
    await c.closed; // the agent closes it (the test timeout bounds the wait)
    expect(logs.find((l) => l.msg === 'ssh connection closed: no authentication within the deadline')).toMatchObject({ deadline_ms: 10_000 });
  }, 20_000);

  it('refuses the 5th unauthenticated connection from one source at accept, and admits again once one goes', async () => {
    const { agent, logs } = await start();
    const port = agent.address.port;
    const held = Array.from({ length: 4 }, () => idle(port, '127.0.0.9'));
    expect(await Promise.all(held.map((h) => h.fate))).toEqual(['admitted', 'admitted', 'admitted', 'admitted']);
    const fifth = idle(port, '127.0.0.9');
    expect(await fifth.fate).toBe('refused');
    expect(logs.some((l) => l.msg === 'ssh connection refused: too many unauthenticated connections from this source' && l.source === '127.0.0.9')).toBe(true);
    // Another source is not affected.
    expect(await idle(port, '127.0.0.10').fate).toBe('admitted');
    // One of the four goes: its slot is free again.
    held[0]!.socket.destroy();
    await held[0]!.closed;
    const deadline = Date.now() + 10_000;
    while (agent.unauthenticated() !== 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(await idle(port, '127.0.0.9').fate).toBe('admitted');
  }, 30_000);

  it('AGENT_ALLOW_FROM closes other sources at accept; the gateway\'s source still runs jobs', async () => {
    const { agent, dataplane, logs, node } = await start({ AGENT_ALLOW_FROM: '127.0.0.1/32, ::1' });
    const port = agent.address.port;
    const outsider = idle(port, '127.0.0.5');
    expect(await outsider.fate).toBe('refused');
    expect(logs.some((l) => l.msg === 'ssh connection refused: source not in AGENT_ALLOW_FROM')).toBe(true);
    expect(await idle(port, '127.0.0.1').fate).toBe('admitted');
    const viaV4 = await gatewayConnections().run(node('127.0.0.1'), await sign(tunnelSpec()), JOB_TIMEOUT_MS);
    const viaV6 = await gatewayConnections().run(node('::1'), await sign(tunnelSpec()), JOB_TIMEOUT_MS);
    expect([viaV4.ok, viaV6.ok]).toEqual([true, true]);
    expect(dataplane.applied).toBe(2);
  }, 30_000);

  it('counts IPv4 sources per address (mapped or not) and IPv6 sources per /64', () => {
    expect(sourceKey('192.0.2.7')).toBe('192.0.2.7');
    expect(sourceKey('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(sourceKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(sourceKey('2001:0db8:0001:0002:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(sourceKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(sourceKey('::1')).toBe('0:0:0:0::/64');
    expect(sourceKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
  });
});
