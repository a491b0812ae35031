// The whole product in the GRE lab (test/vm/gre-product.test.ts): the gateway and its worker here on the host, the
// two edges added as nodes the operator's way, and the real agent (agent/main.ts, GRE) running in each edge of the
// guest. The gateway's worker dials the agents' SSH ports through the ports QEMU forwards from 127.0.0.1, as it
// would dial routers over the internet. Also what the tests read back from the guest (the agent's logged health
// checks, the guest's clock) and the run's artifacts.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { expect } from 'vitest';
import type { CheckRecord } from '../../agent/health/scheduler.ts';
import { addNode, updateNode } from '../../server/domain/nodes.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { LAB } from './protocol.ts';
import type { TestVm } from './vm.ts';

// The guest console and the agents' logs are kept in test-results/ (git-ignored) for a failed run.
const ARTIFACTS = resolve(import.meta.dirname, '../../test-results');
export function keepArtifact(name: string, text: string): void {
  mkdirSync(ARTIFACTS, { recursive: true });
  writeFileSync(join(ARTIFACTS, name), text);
}

/** The product agent's health interval (AGENT_HEALTH_INTERVAL_S): short, so an outage takes seconds, not minutes. */
export const HEALTH_INTERVAL_S = 4;

export interface ProductLab {
  gw: RunningGateway;
  user: SeededUser;
  /** The node of the guest's `edge` (sells), and of `edge2` (sells only when a test says so). */
  node1: string;
  node2: string;
}

/** Starts the gateway, adds both edges as nodes and starts their agents; the agent in `edge` logs every health check. */
export async function startProduct(vm: TestVm): Promise<ProductLab> {
  // Slow guest: the gateway waits longer for the agent before answering 202, and each job may take longer.
  // Private webhooks: the health test's receiver listens on 127.0.0.1 here.
  const gw = await startGateway({ config: { allowPrivateOrigins: true, allowPrivateWebhooks: true, edgeWaitMs: 30_000, edgeJobTimeoutMs: 45_000, edgeRetryLimit: 20 } });
  const secrets = (await loadSecrets(gw.testDb.db, {})).secrets;
  await gw.services.provisioning.start(secrets, { worker: true });
  const envFor = (stateDir: string, edgeIp: string) => ({
    AGENT_LISTEN: `0.0.0.0:${LAB.agentPort}`,
    AGENT_STATE_DIR: stateDir,
    AGENT_AUTHORIZED_KEY: secrets.gatewaySshKey.publicKey,
    AGENT_JOB_KEY: JSON.stringify(secrets.jobSigningKey.publicJwk),
    AGENT_EDGE_IP: edgeIp,
    AGENT_LOG_LEVEL: 'info',
  });
  const env = envFor('/run/tg-agent', LAB.edge);
  const env2 = envFor('/run/tg-agent2', LAB.edge2);
  const agentArgv = ['node_modules/.bin/node', '--enable-source-maps', '--import', './loader/register.mjs', 'agent/main.ts'];
  // The operator's order: the agent's host key first (`tunnel-agent fingerprint`; the node id is not known
  // yet and not needed for it), then `node add` with that key pinned, then the agent with the node's id.
  // Both edges at once: each Node start costs seconds in the emulated guest.
  const fingerprint = async (ns: 'edge' | 'edge2', e: Record<string, string>) => {
    const fp = await vm.exec({ ns, argv: [...agentArgv, 'fingerprint'], env: { ...e, AGENT_NODE_ID: '00000000-0000-4000-8000-000000000000' }, timeoutMs: 240_000 });
    expect(fp.stdout.trim(), fp.stderr).toMatch(/^SHA256:/);
    return fp.stdout.trim();
  };
  const [fp, fp2] = await Promise.all([fingerprint('edge', env), fingerprint('edge2', env2)]);
  const node1 = (await addNode(gw.testDb.db, { name: 'vm-edge', publicIp: LAB.edge, sshHost: '127.0.0.1', sshPort: vm.agentPort, pool: '203.0.113.32/28', hostKey: fp })).node_id;
  const node2 = (await addNode(gw.testDb.db, { name: 'vm-edge-2', publicIp: LAB.edge2, sshHost: '127.0.0.1', sshPort: vm.agent2Port, pool: '203.0.113.64/28', hostKey: fp2 })).node_id;
  // Purchases take the lowest free pool position across nodes; edge2 sells only when a test says so.
  await updateNode(gw.testDb.db, { id: node2, sellable: false });
  await vm.spawn({ name: 'agent2-relay', ns: 'edge', argv: ['socat', `TCP4-LISTEN:${LAB.agent2RelayPort},fork,reuseaddr`, `TCP4:${LAB.edge2}:${LAB.agentPort}`] });
  await Promise.all([
    // Health checks every HEALTH_INTERVAL_S, each logged at debug: the health test counts them.
    vm.spawn({
      name: 'agent',
      ns: 'edge',
      argv: agentArgv,
      env: { ...env, AGENT_NODE_ID: node1, AGENT_HEALTH_INTERVAL_S: String(HEALTH_INTERVAL_S), AGENT_LOG_LEVEL: 'debug' },
      readyText: 'host key fingerprint',
      readyTimeoutMs: 300_000,
    }),
    vm.spawn({ name: 'agent2', ns: 'edge2', argv: agentArgv, env: { ...env2, AGENT_NODE_ID: node2 }, readyText: 'host key fingerprint', readyTimeoutMs: 300_000 }),
  ]);
  const user = await seedUser(gw.testDb.db);
  return { gw, user, node1, node2 };
}

/** Stops both agents, keeping their logs (keepArtifact), and closes the gateway. */
export async function stopProduct(vm: TestVm | undefined, gw: RunningGateway | undefined): Promise<void> {
  for (const [name, file] of [['agent', 'vm-agent.log'], ['agent2', 'vm-agent2.log']] as const) {
    const agent = await vm?.output(name).catch(() => undefined);
    if (agent) keepArtifact(file, agent.output);
    await vm?.stop(name).catch(() => undefined);
  }
  await gw?.close();
}

/** A health check as the agent logs it (its slot as the ISO string the log holds). */
export type LoggedCheck = Omit<CheckRecord, 'slot'> & { slot: string };

/** One tunnel's health checks as the agent in `edge` logged them, oldest first. */
export async function loggedChecks(vm: TestVm, tunnelId: string): Promise<LoggedCheck[]> {
  return (await vm.output('agent')).output
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"health check"'))
    .map((l) => JSON.parse(l) as LoggedCheck & { msg: string })
    .filter((c) => c.msg === 'health check' && c.tunnel_id === tunnelId);
}

/**
 * The guest's clock now, as a slot string: the agent runs in the guest, and its slots are due times on that clock,
 * so a later slot is a check that had not started yet (the log itself lags, so it cannot mark).
 */
export async function guestClock(vm: TestVm): Promise<string> {
  return new Date(Number((await vm.run('origin', ['date', '+%s%3N'])).trim())).toISOString();
}
