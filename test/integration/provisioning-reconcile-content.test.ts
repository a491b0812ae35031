// What a node's reconcile carries (the desired set, whole), with the real gateway, worker, queue,
// SSH and agent process in a fresh network namespace (veth stand-in for GRE): the desired set is exactly
// the node's provisioning, provisioned and active tunnels (docs/CONTRACTS.md "Edge jobs": `reconcile`
// carries the node's whole desired set), so a pending, failed or deleted tunnel is never put on the edge
// and one left there is removed; an active tunnel survives the agent's restart untouched (same link, still
// active); and after an SSH cut in the middle of a job, the node is reconciled before the job runs again.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buyTunnel, provisionTunnel, tunnelStatus, type Bought } from '../helpers/queue.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('a node reconcile carries exactly the tunnels that belong on the edge', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;

  beforeAll(async () => {
    // No periodic round during the test (an hour away): every reconcile here is one the test caused (an
    // operator's `node reconcile` runs at once; a periodic one is spread over a fifth of the period).
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 5000, edgeJobTimeoutMs: 10_000, edgeReconcileSeconds: 3600 }, pool: '203.0.113.128/28' }));
    user = await seedUser(gw.testDb.db);
  }, 90_000);
  afterAll(async () => {
    await edge?.close();
    await gw?.close();
  });

  const buy = (name: string) => buyTunnel(gw.url, user.writeKey, name);
  const provision = (t: Bought) => provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, t.id);
  const setStatus = (id: string, status: string) => gw.testDb.raw.query('update tunnel set status = $1 where id = $2', [status, id]);
  const status = (id: string) => tunnelStatus(gw.testDb.raw, id);
  const ifindex = (name: string): number => (JSON.parse(edge.netns.run('ip', '-j', 'link', 'show', 'dev', name)) as { ifindex: number }[])[0]!.ifindex;

  it('pending, failed and deleted tunnels are left out (and removed from the edge); the others are all sent', async () => {
    const pending = await buy('pending');
    const provisioned = await buy('provisioned');
    const active = await buy('active');
    const failed = await buy('failed');
    const deleted = await buy('deleted');
    for (const t of [provisioned, active, failed, deleted]) await provision(t);
    // Activation needs an origin answering the probe; the reconcile reads statuses from the database, so
    // the test puts them there. `failed` is still on the edge from its provision: the reconcile must take it off.
    await setStatus(active.id, 'active');
    await setStatus(failed.id, 'failed');
    const del = await call(gw.url, 'DELETE', `/api/dedicated/${deleted.id}`, { token: user.writeKey });
    expect([200, 202]).toContain(del.status);
    await until('the deleted tunnel is deleted', async () => (await status(deleted.id)) === 'deleted');
    expect(edge.links()).toContain(failed.tunnel_name);

    const from = edge.calls.length;
    expect((await gw.services.provisioning.queueReconcile(edge.nodeId, 'operator')).queued).toBe(true);
    const rec = await edge.waitForCall((c) => c.call === 'reconcile', from);
    expect([...rec.ids].sort()).toEqual([provisioned.id, active.id].sort());
    await until('the failed tunnel is off the edge', async () => !edge.links().includes(failed.tunnel_name));
    expect(edge.links().sort()).toEqual([provisioned.tunnel_name, active.tunnel_name].sort());
    // Both are on the edge; only the active one is forwarded to (docs/CONTRACTS.md "Dataplane").
    expect(edge.mapElements()).toEqual([active.protected_ip]);
    expect(await status(pending.id)).toBe('pending');
  }, 180_000);

  it('an active tunnel survives the agent restart: reconciled, the same link, still active', async () => {
    const t = await buy('survivor');
    await provision(t);
    await setStatus(t.id, 'active');
    const before = ifindex(t.tunnel_name);
    const from = edge.calls.length;
    await edge.kill('SIGTERM');
    await edge.start();
    const rec = await edge.waitForCall((c) => c.call === 'reconcile' && c.ids.includes(t.id), from);
    expect(rec.run).toBeGreaterThan(1);
    expect(ifindex(t.tunnel_name)).toBe(before);
    expect(await status(t.id)).toBe('active');
    // Nothing but reconciles reached the agent for it: no tunnel job was needed.
    expect(edge.calls.slice(from).filter((c) => c.ids.includes(t.id)).every((c) => c.call === 'reconcile')).toBe(true);
  }, 180_000);

  it('after an SSH cut in the middle of a job, the node is reconciled before the job runs again', async () => {
    await edge.kill('SIGTERM');
    await edge.start({ hold: 'before' });
    const t = await buy('cut');
    const from = edge.calls.length;
    edge.holding = (c) => c.call === 'apply' && c.ids.includes(t.id);
    const answer = call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    const held = await edge.waitForCall((c) => c.call === 'apply' && c.ids.includes(t.id), from);
    // The job is in the agent, held before the kernel: the gateway's connection to it goes now.
    gw.services.provisioning.connections!.disconnect(edge.nodeId);
    edge.holding = () => false;
    edge.release(held);
    await answer;
    await until('provisioned after the cut', async () => (await status(t.id)) === 'provisioned', 120_000);
    const after = edge.calls.slice(edge.calls.indexOf(held) + 1);
    const firstReconcile = after.findIndex((c) => c.call === 'reconcile');
    const nextApply = after.findIndex((c) => c.call === 'apply' && c.ids.includes(t.id));
    expect(firstReconcile).toBeGreaterThanOrEqual(0);
    // Either the reconcile itself put the tunnel back (no apply needed), or it came before the retried apply.
    if (nextApply >= 0) expect(firstReconcile).toBeLessThan(nextApply);
    else expect(after[firstReconcile]!.ids).toContain(t.id);
  }, 240_000);
});
