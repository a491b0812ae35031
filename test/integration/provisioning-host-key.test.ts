// The worker's pinned host key (server/edge/connections.ts) tested with a wrong key (it never was before).
// A node with a wrong or missing host key: no login reaches the agent, the job fails without retrying."
// Through the worker's real path: the gateway's REST provision, the pg-boss queue on the test PostgreSQL,
// the edge worker and its warm SSH connections, against the real agent SSH server (startAgent, in this
// process) behind a TCP relay that counts the connections reaching the agent's port. The agent's
// dataplane is a FAKE (records calls; the kernel side has its own namespace tests). Nothing here waits
// on the clock to decide a result: every wait is for a state, bounded by the test timeout.
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import type { ChangeCounts, Dataplane, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../../agent/dataplane/types.ts';
import { loadConfig } from '../../agent/config.ts';
import { startAgent, type RunningAgent } from '../../agent/main.ts';
import { addNode, updateNode } from '../../server/domain/nodes.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { fakeHostKey, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { until } from '../helpers/wait.ts';

/** FAKE dataplane (test double, no kernel): records every call. */
class RecordingDataplane implements Dataplane {
  readonly calls: string[] = [];
  async apply(_t: TunnelSpec): Promise<ChangeCounts> {
    this.calls.push('apply');
    return { added: 1, changed: 0, removed: 0, unchanged: 0 };
  }
  async remove(_t: TunnelRef): Promise<ChangeCounts> {
    this.calls.push('remove');
    return { added: 0, changed: 0, removed: 1, unchanged: 0 };
  }
  async reconcile(ts: TunnelSpec[]): Promise<ReconcileResult> {
    this.calls.push('reconcile');
    return { added: ts.length, changed: 0, removed: 0, unchanged: 0, failed: [] };
  }
  async probe(_t: TunnelSpec): Promise<ProbeResult> {
    return { reachable: false };
  }
  async has(): Promise<boolean> {
    return false;
  }
  async close(): Promise<void> {}
}

/** A TCP relay in front of the agent: counts the connections the gateway opens to the agent's port. */
class CountingRelay {
  connections = 0;
  target = 0;
  private readonly sockets: net.Socket[] = [];
  readonly server = net.createServer((inbound) => {
    this.connections++;
    const outbound = net.connect(this.target, '127.0.0.1');
    this.sockets.push(inbound, outbound);
    for (const [a, b] of [
      [inbound, outbound],
      [outbound, inbound],
    ] as const) {
      a.on('error', () => b.destroy());
      a.on('close', () => b.destroy());
      a.pipe(b);
    }
  });
  async listen(): Promise<number> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    return (this.server.address() as net.AddressInfo).port;
  }
  close(): void {
    for (const s of this.sockets) s.destroy();
    this.server.close();
  }
}

const EDGE_IP = '192.0.2.1';
/** Enough retries that a retried job would still be retrying when the test looks (1 s, 2 s, 4 s ... apart). */
const RETRY_LIMIT = 5;

let gw: RunningGateway;
let user: SeededUser;
let agent: RunningAgent;
let nodeId: string;
let stateDir: string;
const relay = new CountingRelay();
const dataplane = new RecordingDataplane();
const agentLogs: Record<string, unknown>[] = [];
const gatewayLogs: Record<string, unknown>[] = [];

interface BossJob {
  state: string;
  retry_count: number;
  output: { name?: string; message?: string; kind?: string; presentedFingerprint?: string } | null;
}

/** The tunnel's edge job once it has left `created`/`active`: completed, failed, or waiting to be retried. */
function settledJob(tunnelId: string): Promise<BossJob> {
  return until(`the edge job of ${tunnelId} to settle`, async () => {
    const { rows } = await gw.testDb.raw.query<BossJob>(
      `select state::text as state, retry_count, output from pgboss.job where name = 'edge-job' and data->>'tunnelId' = $1 order by created_on desc limit 1`,
      [tunnelId],
    );
    const job = rows[0];
    return job && !['created', 'active'].includes(job.state) ? job : null;
  });
}

const tunnelStatus = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;

async function buyAndProvision(name: string): Promise<string> {
  const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name, origin_ip: '8.8.4.4' } });
  expect(bought.status).toBe(201);
  const id = bought.body.tunnel.id as string;
  const p = await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey });
  // 200 with the final status when the worker settled it within EDGE_WAIT_MS, else 202 provisioning.
  expect([200, 202]).toContain(p.status);
  return id;
}

const loginsSeen = () => agentLogs.filter((l) => l.msg === 'ssh client authenticated' || l.msg === 'ssh authentication refused');

beforeAll(async () => {
  const log = createLogger('info', { service: 'gateway' }, (line: string) => gatewayLogs.push(JSON.parse(line) as Record<string, unknown>));
  gw = await startGateway({ config: { edgeWaitMs: 10_000, edgeJobTimeoutMs: 10_000, edgeRetryLimit: RETRY_LIMIT, logLevel: 'info' }, log });
  const secrets = (await loadSecrets(gw.testDb.db, {})).secrets;
  await gw.services.provisioning.start(secrets, { worker: true });
  user = await seedUser(gw.testDb.db);
  // The node's SSH address is the relay; its pinned key is a fingerprint of no key the agent has.
  const relayPort = await relay.listen();
  nodeId = (await addNode(gw.testDb.db, { name: 'pinned-wrong', publicIp: EDGE_IP, sshHost: '127.0.0.1', sshPort: relayPort, pool: '198.18.40.0/29', hostKey: fakeHostKey() })).node_id;
  stateDir = mkdtempSync(join(tmpdir(), 'tg-host-key-'));
  const config = loadConfig({
    AGENT_NODE_ID: nodeId,
    AGENT_LISTEN: '127.0.0.1:0',
    AGENT_STATE_DIR: stateDir,
    AGENT_AUTHORIZED_KEY: secrets.gatewaySshKey.publicKey,
    AGENT_JOB_KEY: JSON.stringify(secrets.jobSigningKey.publicJwk),
    AGENT_EDGE_IP: EDGE_IP,
  });
  agent = await startAgent(config, { dataplane, log: createLogger('debug', {}, (l) => agentLogs.push(JSON.parse(l) as Record<string, unknown>)) });
  relay.target = agent.address.port;
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await agent?.stop(1000);
  relay.close();
  if (stateDir) rmSync(stateDir, { recursive: true, force: true });
});

describe('the worker and a node whose pinned host key is wrong or missing', () => {
  it('a wrong pinned host key: the connection stops before any login, the job fails once with no retry, the tunnel ends failed', async () => {
    const id = await buyAndProvision('wrong-key');
    const job = await settledJob(id);
    expect(job.state).toBe('failed');
    expect(job.retry_count).toBe(0);
    expect(job.output).toMatchObject({ name: 'EdgeSshError', kind: 'host_key_mismatch', presentedFingerprint: agent.hostKey.fingerprint });
    expect(await tunnelStatus(id)).toBe('failed');
    const shown = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.writeKey });
    expect(shown.body.tunnel.status).toBe('failed');
    expect(gatewayLogs).toContainEqual(expect.objectContaining({ msg: 'edge job failed', tunnel_id: id, attempt: 1, last: true }));

    // The worker did reach the agent's port, and gave up during the key exchange: no authentication
    // attempt (accepted or refused), no job, nothing on the dataplane.
    expect(relay.connections).toBeGreaterThan(0);
    expect(loginsSeen()).toEqual([]);
    expect(agentLogs.filter((l) => String(l.msg).startsWith('job'))).toEqual([]);
    expect(dataplane.calls).toEqual([]);

    // The same rig with the right pin reaches the agent: the operator pins it, the buyer provisions again.
    await updateNode(gw.testDb.db, { id: nodeId, hostKey: agent.hostKey.fingerprint });
    const again = await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey });
    expect([200, 202]).toContain(again.status);
    await until('the tunnel to be provisioned', async () => (await tunnelStatus(id)) === 'provisioned');
    expect(dataplane.calls).toEqual(['reconcile', 'apply']);
    expect(agentLogs).toContainEqual(expect.objectContaining({ msg: 'ssh client authenticated' }));
  }, 60_000);

  it('no pinned host key: the node is never contacted, the job fails once with no retry, the tunnel ends failed', async () => {
    const id = (await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'no-key', origin_ip: '8.8.4.4' } })).body.tunnel.id as string;
    // Purchases never take an IP from a node without a key, so the key goes after the purchase (as
    // only a hand edit of the database could do: the CLI replaces a key, it never clears one).
    await gw.testDb.raw.query('update edge_node set host_key = null where id = $1', [nodeId]);
    const connectionsBefore = relay.connections;
    const loginsBefore = loginsSeen().length;
    const callsBefore = dataplane.calls.length;
    const p = await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey });
    expect([200, 202]).toContain(p.status);
    const job = await settledJob(id);
    expect(job.state).toBe('failed');
    expect(job.retry_count).toBe(0);
    expect(job.output).toMatchObject({ name: 'AgentRefused', message: expect.stringContaining('no pinned host key') });
    expect(await tunnelStatus(id)).toBe('failed');
    expect(relay.connections).toBe(connectionsBefore);
    expect(loginsSeen().length).toBe(loginsBefore);
    expect(dataplane.calls.length).toBe(callsBefore);
  }, 60_000);
});
