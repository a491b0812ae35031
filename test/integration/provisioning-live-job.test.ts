// One live edge job per tunnel (docs/CONTRACTS.md "Tunnel lifecycle"), with the real gateway, the pg-boss queue
// on the test PostgreSQL, two gateway replicas on one database (each with its own pools, queue and
// locks, as two processes would have), the real agent process over real SSH and its dataplane in a
// fresh network namespace (veth stand-in for GRE). Jobs are counted in pg-boss's own table (schema pgboss).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buyTunnel, provisionTunnel, tunnelStatus, type Bought } from '../helpers/queue.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, startWorkerReplica, type TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('one live edge job per tunnel, one probe in flight per tunnel', () => {
  let gw: RunningGateway;
  let gw2: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  const config = { edgeWaitMs: 1500, edgeJobTimeoutMs: 90_000, edgeRetryLimit: 30, edgeReconcileSeconds: 3600 };

  const buy = (name: string) => buyTunnel(gw.url, user.writeKey, name);
  const status = (id: string) => tunnelStatus(gw.testDb.raw, id);
  /** Every pg-boss job ever queued for this tunnel (any state). */
  const jobsFor = async (id: string) =>
    (await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where name = 'edge-job' and data->>'tunnelId' = $1`, [id])).rows[0]!.n;

  beforeAll(async () => {
    // The edge is down at first: every job stays live (retrying), the case where jobs used to pile up.
    ({ gw, edge } = await startProvisioningRig({ config, pool: '203.0.113.96/28', startAgent: false }));
    gw2 = await startWorkerReplica(gw, config);
    user = await seedUser(gw.testDb.db);
  }, 150_000);

  afterAll(async () => {
    await gw2?.close();
    await gw?.close();
    await edge?.close();
  });

  it('20 parallel provisions over two replicas while the edge is down queue exactly one job; 20 deletes add none', async () => {
    const t = await buy('hammered');
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) => call((i % 2 ? gw2 : gw).url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey })),
    );
    for (const a of answers) expect([a.status, a.body.tunnel?.status]).toEqual([202, 'provisioning']);
    expect(await jobsFor(t.id)).toBe(1);

    // Again, one by one: each answers the current state and queues nothing.
    const again = await call(gw2.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect([again.status, again.body.tunnel.status]).toEqual([202, 'provisioning']);
    expect(await jobsFor(t.id)).toBe(1);

    // Deletes while that job is live: the job does what the status asks when it runs (remove), so none is added.
    const deletes = await Promise.all(Array.from({ length: 20 }, (_, i) => call((i % 2 ? gw2 : gw).url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey })));
    for (const d of deletes) expect([d.status, d.body.tunnel?.status]).toEqual([202, 'deleting']);
    expect(await jobsFor(t.id)).toBe(1);

    // The edge comes back: the one job removes the tunnel and the IP returns to the pool.
    await edge.start();
    await until('deleted', async () => (await status(t.id)) === 'deleted');
    expect(edge.count('apply', t.id)).toBe(0);
    expect(edge.links()).not.toContain(t.tunnel_name);
    const owner = await gw.testDb.raw.query<{ tunnel_id: string | null }>('select tunnel_id from protected_ip where ip = $1', [t.protected_ip]);
    expect(owner.rows[0]!.tunnel_id).toBeNull();
    expect(await jobsFor(t.id)).toBe(1);
  }, 90_000);

  it('concurrent sweeps on both replicas re-queue an orphan once', async () => {
    await edge.start();
    const t = await buy('orphan');
    // A crash between commit and enqueue: provisioning with no job.
    await gw.testDb.raw.query(`update tunnel set status = 'provisioning' where id = $1`, [t.id]);
    const sent = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 ? gw2 : gw).services.provisioning.sweep(0)));
    await until('provisioned', async () => (await status(t.id)) === 'provisioned');
    expect(await jobsFor(t.id)).toBe(1);
    expect(sent.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(1);
    expect(edge.count('apply', t.id)).toBe(1);
    expect(edge.links()).toContain(t.tunnel_name);
  }, 150_000);

  it("a delete that arrives while the tunnel's apply is running on the agent adds no job: that job removes it next", async () => {
    await edge.start();
    // Warm the connection, so the job below goes straight to its channel.
    const warm = await buy('warm');
    // 200 or 202: on a loaded host the first SSH handshake may outlast edgeWaitMs; what matters is the warm channel.
    await provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, warm.id);
    const t = await buy('changes-mind');
    const appliesBefore = edge.count('apply', t.id);
    edge.signal('SIGSTOP');
    try {
      const provision = call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
      // The worker read `provisioning` and sent the job: its bytes wait, unread, at the frozen agent.
      await until('the job sent to the frozen agent', async () => edge.unreadBytes() > 0, 40_000);
      const del = call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey });
      await until('deleting', async () => (await status(t.id)) === 'deleting', 40_000);
      edge.signal('SIGCONT');
      expect([200, 202]).toContain((await provision).status);
      expect([200, 202]).toContain((await del).status);
    } finally {
      edge.signal('SIGCONT');
    }
    // The running job applied, saw the status moved to deleting, and removed the tunnel itself (the
    // sweeper would only look after EDGE_SWEEP_SECONDS, 30 s here).
    await until('deleted', async () => (await status(t.id)) === 'deleted', 15_000);
    expect(await jobsFor(t.id)).toBe(1);
    expect(edge.count('apply', t.id) - appliesBefore).toBe(1);
    expect(edge.count('remove', t.id)).toBe(1);
    expect(edge.links()).not.toContain(t.tunnel_name);
  }, 150_000);

  it('concurrent activates share one probe, within a replica and across two; all get its answer', async () => {
    await edge.start();
    const t = await buy('probed');
    await provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, t.id);

    // One replica: ten concurrent activates, one probe (no origin answers: 409 telling the buyer to run the script).
    const one = await Promise.all(Array.from({ length: 10 }, () => call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey })));
    for (const a of one) {
      expect([a.status, a.body.error]).toEqual([409, 'invalid_state']);
      expect(a.body.error_description).toMatch(/origin script/);
    }
    expect(edge.count('probe', t.id)).toBe(1);

    // Two replicas: one probes (it holds the tunnel's advisory lock), the other's callers get its answer
    // over NOTIFY. (All twenty requests leave together; the unanswered probe lasts the agent's 3 s.)
    const two = await Promise.all(
      Array.from({ length: 20 }, (_, i) => call((i % 2 ? gw2 : gw).url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey })),
    );
    for (const a of two) {
      expect([a.status, a.body.error]).toEqual([409, 'invalid_state']);
      expect(a.body.error_description).toMatch(/origin script/);
    }
    expect(edge.count('probe', t.id)).toBe(2);
    expect(await status(t.id)).toBe('provisioned');
  }, 150_000);
});
