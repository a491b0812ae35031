// One job per node at a time (docs/OPERATOR.md "How provisioning works": pg-boss policy `singleton` keyed by the edge node;
// server/provisioning/queue.ts): two gateway replicas on one PostgreSQL database (each its own pools, queue,
// worker and SSH connections, as two processes have), two edge nodes, each the real agent over real SSH with its
// dataplane in its own network namespace (veth stand-in for GRE). Every agent call is held until the test
// releases it, and the agent reports when each is done, so the test counts the calls in flight on each node
// and across both: one node's first job is kept running (held) while the rest of its jobs wait queued, and
// the other node's jobs, queued after them, run meanwhile. Nothing here waits on time; only state is read.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSecrets } from '../../server/secrets.ts';
import { InFlightMeter, startProvisioningRig, startWorkerReplica, TestEdge } from '../helpers/edge.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { buyTunnel, edgeJobsFor, tunnelStatus, type Bought } from '../helpers/queue.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';

const PER_NODE = 3;

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('one edge job per node at a time, across replicas; nodes in parallel', () => {
  let gw1: RunningGateway;
  let gw2: RunningGateway;
  let edge1: TestEdge;
  let edge2: TestEdge;
  let user: SeededUser;
  // Held calls must not time out, and a job held this long must not expire (which would hand it out again).
  const config = { edgeWaitMs: 200, edgeJobTimeoutMs: 120_000, edgeJobExpireSeconds: 600, edgeRetryLimit: 30, edgeReconcileSeconds: 3600 };

  beforeAll(async () => {
    ({ gw: gw1, edge: edge1 } = await startProvisioningRig({ config, pool: '203.0.113.208/28', startAgent: false }));
    const secrets = (await loadSecrets(gw1.testDb.db, {})).secrets;
    edge2 = await TestEdge.create(gw1.testDb.db, secrets, '203.0.113.224/28');
    gw2 = await startWorkerReplica(gw1, config);
    user = await seedUser(gw1.testDb.db);
  }, 120_000);

  afterAll(async () => {
    await gw2?.close();
    await gw1?.close();
    await edge1?.close();
    await edge2?.close();
  });

  it("a node's jobs run one at a time while the other node's run beside them", async () => {
    const raw = gw1.testDb.raw;
    // Purchases take the first free IP of any selling node: node 2 sells only once node 1's tunnels are bought.
    await raw.query('update edge_node set sellable = false where id = $1', [edge2.nodeId]);
    const on1: Bought[] = [];
    for (let i = 0; i < PER_NODE; i++) on1.push(await buyTunnel(gw1.url, user.writeKey, `node1-${i}`));
    await raw.query('update edge_node set sellable = (id = $1)', [edge2.nodeId]);
    const on2: Bought[] = [];
    for (let i = 0; i < PER_NODE; i++) on2.push(await buyTunnel(gw1.url, user.writeKey, `node2-${i}`));
    const nodeOf = async (b: Bought) => (await raw.query<{ node_id: string }>('select node_id from tunnel where id = $1', [b.id])).rows[0]!.node_id;
    for (const b of on1) expect(await nodeOf(b)).toBe(edge1.nodeId);
    for (const b of on2) expect(await nodeOf(b)).toBe(edge2.nodeId);

    const both = new InFlightMeter();
    edge1.meters.push(both);
    edge2.meters.push(both);
    edge1.holding = () => true;
    edge2.holding = () => true;
    await edge1.start({ hold: 'before' });
    await edge2.start({ hold: 'before' });
    const provisionAll = (bs: Bought[]) =>
      Promise.all(bs.map((b, i) => call((i % 2 ? gw2 : gw1).url, 'POST', `/api/dedicated/${b.id}/provision`, { token: user.writeKey })));

    // Node 1's jobs are queued first, from both replicas at once; its first job reaches the agent and is held there.
    for (const r of await provisionAll(on1)) expect([r.status, r.body.tunnel?.status]).toEqual([202, 'provisioning']);
    await until('a call held on node 1', () => edge1.inFlight.now >= 1);
    // Then node 2's, queued after every one of node 1's: a worker that took them fetched past node 1's waiting jobs.
    for (const r of await provisionAll(on2)) expect([r.status, r.body.tunnel?.status]).toEqual([202, 'provisioning']);
    await until('a call held on node 2 beside the one on node 1', () => edge2.inFlight.now >= 1);
    // The two nodes work at the same time: serialisation is per node, not global.
    expect(both.now).toBeGreaterThanOrEqual(2);

    // Node 2 goes on (each of its calls released as it comes); node 1's first call stays held throughout.
    edge2.holding = () => false;
    for (const c of edge2.calls) if (c.held !== undefined) edge2.release(c);
    for (const b of on2) await until(`${b.tunnel_name} provisioned`, async () => (await tunnelStatus(raw, b.id)) === 'provisioned');
    // All of node 2's jobs ran while node 1's first one was running, and none of node 1's others started,
    // though every fetch that gave out node 2's jobs met node 1's waiting ones first (queued earlier).
    const started1 = (await Promise.all(on1.map((b) => edgeJobsFor(raw, b.id)))).flat().filter((j) => j.started);
    expect(started1.map((j) => j.state)).toEqual(['active']);
    expect(edge1.inFlight.now).toBe(1);
    for (const b of on1) expect(await tunnelStatus(raw, b.id)).toBe('provisioning');

    edge1.holding = () => false;
    for (const c of edge1.calls) if (c.held !== undefined) edge1.release(c);
    for (const b of on1) await until(`${b.tunnel_name} provisioned`, async () => (await tunnelStatus(raw, b.id)) === 'provisioned');

    // Every job ran (each tunnel applied on its own node), never two at once on a node, two at once across nodes.
    for (const [edge, bs] of [[edge1, on1], [edge2, on2]] as const) {
      for (const b of bs) {
        expect(edge.count('apply', b.id)).toBeGreaterThanOrEqual(1);
        expect(edge.links()).toContain(b.tunnel_name);
      }
    }
    expect([edge1.inFlight.max, edge2.inFlight.max, both.max]).toEqual([1, 1, 2]);
  }, 300_000);
});
