// Job version 2 through a rolling upgrade (docs/CONTRACTS.md "Versions"), in both orders, with
// the real gateway (worker, queue, signer, SSH pool) and the real agent process, its dataplane in a
// fresh network namespace (veth stand-in for GRE; test/helpers/edge.ts):
//   (a) the agent upgraded first: a version 1 job, signed by the gateway's signer told to use version 1
//       and sent without any hello (as a gateway from before version 2 does), is accepted and applied;
//   (b) the gateway upgraded first: an agent that speaks version 1 only gets only version 1 jobs, the
//       tunnel is applied, and a policy it cannot carry is left out with one warning per connection; once
//       that agent is upgraded and restarted, the gateway asks hello again and sends version 2.
//   (c) job version 3 (tunnel.forwarding): an agent from before it gets version 2 jobs without the field, so it
//       forwards to an origin nobody probed, as it always did, with one warning per connection; upgraded, it
//       gets version 3 and the reconcile after its restart takes that DNAT away until the tunnel is activated.
// The old agents are STAND-INS: today's agent started with AGENT_JOB_VERSIONS=1 (or 1,2), which answers hello
// with exit 127 and refuses v 2 as unsupported_version (or lists [1, 2] and refuses v 3), exactly what an agent
// from before version 2 (or 3) does.
import ssh2 from 'ssh2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { sshFingerprint } from '../../common/openssh.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';
import type { TunnelSpec } from '../../common/tunnel-spec.ts';
import { EdgeConnections, type EdgeNode } from '../../server/edge/connections.ts';
import { signJob, type ResultLine } from '../../server/edge/job-signing.ts';
import { parseResultLine } from '../../server/edge/result-line.ts';
import { edgeNode, edgeTunnel } from '../../server/provisioning/edge-state.ts';
import { EdgeWorker } from '../../server/provisioning/worker.ts';
import type { ServerSecrets } from '../../server/secrets.ts';
import { buyTunnel, provisionTunnel, tunnelStatus, type Bought } from '../helpers/queue.ts';
import type { RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

const POLICY: TunnelPolicy = { ports: [[443, 443]], protocol: 'tcp', syn_proxy: false, source_pps_limit: 1000, drop_fragments: true };

/**
 * What a gateway from before version 2 does: connect, `tunnel-agent job` with the JWS, no hello. A plain
 * ssh2 client with the gateway's key and the pinned host key.
 */
function oldGatewayJob(edge: TestEdge, secrets: ServerSecrets, jws: string): Promise<ResultLine> {
  return new Promise((resolve, reject) => {
    const c = new ssh2.Client();
    c.on('error', reject);
    c.on('ready', () => {
      c.exec('tunnel-agent job', (err, stream) => {
        if (err) return reject(err);
        const out: Buffer[] = [];
        let code: number | undefined;
        stream.on('data', (d: Buffer) => out.push(d));
        stream.on('exit', (x: number | null) => (code = x ?? undefined));
        stream.on('close', () => {
          c.end();
          try {
            resolve(parseResultLine(Buffer.concat(out).toString('utf8'), code));
          } catch (e) {
            reject(e);
          }
        });
        stream.end(jws);
      });
    });
    c.connect({
      host: '127.0.0.1',
      port: edge.port,
      username: 'tunnelgate',
      privateKey: secrets.gatewaySshKey.privateKey,
      readyTimeout: 10_000,
      hostVerifier: (blob: Buffer) => sshFingerprint(blob) === edge.fingerprint,
    });
  });
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('job versions 2 and 3 through a rolling upgrade, in both orders', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let secrets: ServerSecrets;
  let user: SeededUser;

  beforeAll(async () => {
    // No periodic reconcile round during the test (an hour away): every job here is one the test caused.
    ({ gw, edge, secrets } = await startProvisioningRig({ config: { edgeWaitMs: 5000, edgeJobTimeoutMs: 10_000, edgeReconcileSeconds: 3600 }, pool: '203.0.113.160/28', startAgent: false }));
    user = await seedUser(gw.testDb.db);
  }, 90_000);
  afterAll(async () => {
    await edge?.close();
    await gw?.close();
  });

  const buy = (name: string) => buyTunnel(gw.url, user.writeKey, name);
  const status = (id: string) => tunnelStatus(gw.testDb.raw, id);
  const provision = (t: Bought) => provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, t.id);
  /** The agent's `job done` lines of its current run. */
  const jobsDone = (run: number) => edge.logs.filter((l) => l.msg === 'job done' && l.run === run);
  const currentRun = () => Math.max(...edge.logs.map((l) => l.run));

  /**
   * Runs `use` with the production worker class on its own SSH pool (its log lines in `logs`), the node, and
   * the tunnel's spec carrying POLICY: what the gateway sends once the buyer set a policy.
   */
  const withPolicyWorker = async (tunnelId: string, use: (w: { worker: EdgeWorker; logs: Record<string, unknown>[]; node: EdgeNode; spec: TunnelSpec }) => Promise<void>) => {
    const logs: Record<string, unknown>[] = [];
    const connections = new EdgeConnections(secrets.gatewaySshKey.privateKey, { connectTimeoutMs: 10_000 });
    const worker = new EdgeWorker({
      db: gw.testDb.db,
      connections,
      signingKey: secrets.jobSigningKey,
      transitions: gw.services.provisioning.transitions,
      log: createLogger('debug', {}, (l) => logs.push(JSON.parse(l) as Record<string, unknown>)),
      jobTimeoutMs: 10_000,
    });
    try {
      const node = (await edgeNode(gw.testDb.db, edge.nodeId))!;
      const spec = { ...(await edgeTunnel(gw.testDb.db, tunnelId))!.spec, policy: POLICY };
      await use({ worker, logs, node, spec });
    } finally {
      await connections.close();
    }
  };

  it('(a) agent upgraded first: a v 1 job from a gateway that never asks hello is accepted and applied', async () => {
    await edge.start({ log: true });
    const t = await buy('old-gateway');
    // A gateway from before version 3 knows no `forwarding`: the agent forwards, as every agent did before.
    const { forwarding: _unknownToOldGateways, ...spec } = (await edgeTunnel(gw.testDb.db, t.id))!.spec;
    const jws = await signJob(secrets.jobSigningKey.privateKey, secrets.jobSigningKey.kid, edge.nodeId, 'apply', { tunnel: spec }, { version: 1 });
    expect(JSON.parse(Buffer.from(jws.split('.')[1]!, 'base64url').toString()).v).toBe(1);
    expect(await oldGatewayJob(edge, secrets, jws)).toMatchObject({ ok: true, op: 'apply', result: { added: 1 } });
    expect(edge.links()).toContain(t.tunnel_name);
    expect(edge.mapElements()).toContain(t.protected_ip);
    expect(jobsDone(currentRun())).toContainEqual(expect.objectContaining({ op: 'apply', tunnel_id: t.id, v: 1 }));
    // The agent was never asked hello: nothing but the job reached it.
    expect(edge.logs.filter((l) => l.msg === 'hello')).toEqual([]);
  }, 120_000);

  it('(b) gateway upgraded first: an agent speaking v 1 only gets only v 1 jobs, the tunnel is applied, a policy is left out with one warning', async () => {
    await edge.kill('SIGTERM');
    await edge.start({ jobVersions: '1', log: true });
    const run = currentRun();
    const t = await buy('old-agent');
    await provision(t);
    expect(edge.links()).toContain(t.tunnel_name);
    // A version 1 agent cannot be told to hold the DNAT back (job version 3): it forwards, as before the upgrade.
    expect(edge.mapElements()).toContain(t.protected_ip);
    const done = jobsDone(run);
    expect(done.map((l) => l.op)).toContain('apply');
    expect(done.every((l) => l.v === 1), JSON.stringify(done)).toBe(true);
    // The gateway asked hello (the old agent refused it as an unknown command) and never tried v 2.
    const refused = edge.logs.filter((l) => l.run === run && l.msg === 'job refused');
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.every((l) => l.code === 'unsupported_command' && l.command === 'tunnel-agent hello'), JSON.stringify(refused)).toBe(true);

    // A tunnel whose policy is not the default, bound for this agent: sent as v 1 without it, so it keeps
    // forwarding, and the warning names the node once per connection.
    await withPolicyWorker(t.id, async ({ worker, logs, node, spec }) => {
      const from = done.length;
      expect(await worker.run(node, 'apply', { tunnel: spec })).toMatchObject({ ok: true });
      expect(await worker.run(node, 'reconcile', { tunnels: [spec] })).toMatchObject({ ok: true });
      expect(jobsDone(run).slice(from).map((l) => [l.op, l.v])).toEqual([
        ['apply', 1],
        ['reconcile', 1],
      ]);
      const warned = logs.filter((l) => l.msg === 'edge_policy_not_enforced');
      expect(warned).toHaveLength(1);
      expect(warned[0]).toMatchObject({ level: 'warn', node_id: edge.nodeId, agent_versions: [1], tunnel_ids: [t.id] });
      // The tunnel is not activated: its `forwarding: false` could not travel either, and says so once.
      expect(logs.filter((l) => l.msg === 'edge_forwarding_not_enforced')).toEqual([expect.objectContaining({ level: 'warn', node_id: edge.nodeId, agent_versions: [1], tunnel_ids: [t.id] })]);
      expect(logs).toContainEqual(expect.objectContaining({ msg: 'edge agent hello', node_id: edge.nodeId, agent: null, job_version: 1 }));
      expect(edge.links()).toContain(t.tunnel_name);
    });
  }, 180_000);

  it('(b, then) the agent is upgraded: after its restart the gateway asks hello again and sends v 3 (v 2 and forwarding)', async () => {
    const t = await buy('after-upgrade');
    await edge.kill('SIGTERM');
    await edge.start({ log: true });
    const run = currentRun();
    // The dropped connection makes the gateway reconcile the node; on the new connection it asked hello
    // first and signed version 3.
    await until('a reconcile reached the upgraded agent', () => jobsDone(run).find((l) => l.op === 'reconcile'));
    expect(edge.logs).toContainEqual(expect.objectContaining({ run, msg: 'hello', versions: [1, 2, 3] }));
    await provision(t);
    expect(edge.links()).toContain(t.tunnel_name);
    // Now the agent can hold the DNAT back: provisioned, not activated, nothing forwarded.
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    const done = jobsDone(run);
    expect(done).toContainEqual(expect.objectContaining({ op: 'apply', tunnel_id: t.id, v: 3 }));
    expect(done.every((l) => l.v === 3), JSON.stringify(done)).toBe(true);

    // A policy now travels, with no warning.
    await withPolicyWorker(t.id, async ({ worker, logs, node, spec }) => {
      const from = done.length;
      expect(await worker.run(node, 'apply', { tunnel: spec })).toMatchObject({ ok: true });
      expect(jobsDone(run).slice(from)).toContainEqual(expect.objectContaining({ op: 'apply', tunnel_id: t.id, v: 3 }));
      expect(logs.filter((l) => l.msg === 'edge_policy_not_enforced' || l.msg === 'edge_forwarding_not_enforced')).toEqual([]);
      expect(logs).toContainEqual(expect.objectContaining({ msg: 'edge agent hello', node_id: edge.nodeId, agent_versions: [1, 2, 3], job_version: 3 }));
    });
  }, 180_000);

  it('(c) an agent from before version 3 forwards a tunnel nobody activated (v 2, one warning); upgraded, the reconcile after its restart takes that DNAT away', async () => {
    await edge.kill('SIGTERM');
    await edge.start({ jobVersions: '1,2', log: true });
    let run = currentRun();
    const t = await buy('before-v3');
    await provision(t);
    expect(edge.mapElements()).toContain(t.protected_ip);
    const done = jobsDone(run);
    expect(done).toContainEqual(expect.objectContaining({ op: 'apply', tunnel_id: t.id, v: 2 }));
    expect(done.every((l) => l.v === 2), JSON.stringify(done)).toBe(true);
    await withPolicyWorker(t.id, async ({ worker, logs, node, spec }) => {
      expect(await worker.run(node, 'apply', { tunnel: spec })).toMatchObject({ ok: true });
      expect(await worker.run(node, 'apply', { tunnel: spec })).toMatchObject({ ok: true });
      expect(logs.filter((l) => l.msg === 'edge_forwarding_not_enforced')).toEqual([expect.objectContaining({ level: 'warn', node_id: edge.nodeId, agent_versions: [1, 2], tunnel_ids: [t.id] })]);
      expect(logs.filter((l) => l.msg === 'edge_policy_not_enforced')).toEqual([]);
    });

    await edge.kill('SIGTERM');
    await edge.start({ log: true });
    run = currentRun();
    await until('the reconcile after the upgrade', () => jobsDone(run).find((l) => l.op === 'reconcile' && l.v === 3));
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    expect(await status(t.id)).toBe('provisioned');
  }, 180_000);
});
