// API-only replicas (EDGE_WORKER=false) (docs/CONFIGURATION.md and docs/OPERATOR.md "How provisioning works"): a gateway process
// started with EDGE_WORKER=false takes purchases and provisions over REST and queues their jobs, but never runs
// one: no SSH connection from it reaches the agent (read from the kernel's socket table, ss), it logs no
// edge work, and pg-boss's rows show nobody started the jobs. With only API-only replicas the jobs wait,
// queued (202, provisioning), even across one of them exiting; a worker replica started later on the same
// database finishes every one. Real PostgreSQL, real gateway processes, the real agent over real SSH with its
// dataplane in a network namespace (veth stand-in for GRE).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProcessRig, type ProcessRig } from '../helpers/edge.ts';
import { call } from '../helpers/gateway.ts';
import { GATEWAY_START_DEADLINE_MS, type GatewayProcess } from '../helpers/gateway-process.ts';
import { buyTunnel, edgeJobsFor, tunnelStatus, type Bought } from '../helpers/queue.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';

/** What only a replica that runs the worker logs (server/provisioning/worker.ts, service.ts). */
const WORKER_LINES = ['"edge job done"', '"edge job failed"', '"edge reconciled"', '"edge reconcile job done"', '"sweeper queued stuck tunnels"'];
const workedHere = (g: GatewayProcess) => g.lines.filter((l) => WORKER_LINES.some((w) => l.includes(w)));

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('API-only replicas (EDGE_WORKER=false) queue edge jobs and never run them', () => {
  let rig: ProcessRig;
  const start = (worker: boolean): Promise<GatewayProcess> => rig.start({ EDGE_WORKER: String(worker), EDGE_WAIT_MS: '1000', EDGE_RECONCILE_SECONDS: '3600' });
  const provision = (g: GatewayProcess, b: Bought) => call(g.url, 'POST', `/api/dedicated/${b.id}/provision`, { token: rig.user.writeKey });

  beforeAll(async () => {
    rig = await startProcessRig({ pool: '203.0.113.192/28' });
  }, 60_000);

  afterAll(async () => rig?.close());

  it('with only API-only replicas the jobs stay queued (202, provisioning), one replica exits, and a worker started later finishes them', async () => {
    const { db: t, edge, user } = rig;
    const [c, d] = await Promise.all([start(false), start(false)]);
    for (const g of [c, d]) expect((await g.waitForLog((l) => l.msg === 'provisioning ready')).worker).toBe(false);

    const t1 = await buyTunnel(c.url, user.writeKey, 'api-only-1');
    const t2 = await buyTunnel(d.url, user.writeKey, 'api-only-2');
    for (const [g, b] of [[c, t1], [d, t2]] as const) {
      const r = await provision(g, b);
      // Accepted over REST: the wait (EDGE_WAIT_MS) ends with nobody having run the job.
      expect([r.status, r.body.tunnel?.status]).toEqual([202, 'provisioning']);
      expect(await edgeJobsFor(t.raw, b.id)).toMatchObject([{ state: 'created', retry_count: 0, started: false, singleton_key: edge.nodeId }]);
    }
    // Nothing reached the agent: no call, no connection from either replica.
    expect(edge.calls).toEqual([]);
    expect(edge.clientPids()).toEqual([]);

    // An API-only replica leaves (SIGTERM, drained): the jobs it queued are in PostgreSQL, not in it.
    d.kill('SIGTERM');
    expect(await d.exited).toBe(0);
    for (const b of [t1, t2]) {
      expect(await tunnelStatus(t.raw, b.id)).toBe('provisioning');
      expect(await edgeJobsFor(t.raw, b.id)).toMatchObject([{ state: 'created', started: false }]);
    }

    const w = await start(true);
    expect((await w.waitForLog((l) => l.msg === 'provisioning ready')).worker).toBe(true);
    for (const b of [t1, t2]) await until(`${b.tunnel_name} provisioned`, async () => (await tunnelStatus(t.raw, b.id)) === 'provisioned');
    for (const b of [t1, t2]) {
      // The job queued by the API-only replica, run once, by W, on its first attempt (nobody had started it).
      // (pg-boss marks it completed just after the handler moved the tunnel: wait for that state.)
      await until(`${b.tunnel_name}'s job completed`, async () => (await edgeJobsFor(t.raw, b.id)).every((j) => j.state === 'completed'));
      expect(await edgeJobsFor(t.raw, b.id)).toMatchObject([{ state: 'completed', retry_count: 0 }]);
      await w.waitForLog((l) => l.msg === 'edge job done' && l.tunnel_id === b.id);
      expect(edge.links()).toContain(b.tunnel_name);
    }

    // With a worker running, the API-only replica still only queues: its provision is done by W.
    const t3 = await buyTunnel(c.url, user.writeKey, 'api-only-3');
    expect(await settle(await provision(c, t3), 'provisioned', async () => tunnelStatus(t.raw, t3.id))).toBe('provisioned');
    await w.waitForLog((l) => l.msg === 'edge job done' && l.tunnel_id === t3.id);
    expect(edge.links()).toContain(t3.tunnel_name);

    // The agent's only SSH client is the worker (warm connections stay open, so a replica that ever ran a job shows here).
    expect(edge.clientPids()).toEqual([w.child.pid]);
    // And the API-only replicas' logs carry no edge work at all.
    expect(workedHere(c)).toEqual([]);
    expect(workedHere(d)).toEqual([]);
    expect(workedHere(w).length).toBeGreaterThan(0);
  }, 3 * GATEWAY_START_DEADLINE_MS + 180_000);
});
