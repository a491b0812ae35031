// A crashed worker's job handed over after EDGE_JOB_EXPIRE_SECONDS (docs/OPERATOR.md "How provisioning works"; docs/CONTRACTS.md
// "Tunnel lifecycle"): two real gateway processes on one PostgreSQL database, the real agent over real SSH with
// its dataplane in a network namespace (veth stand-in for GRE). Gateway A takes a tunnel's job and is
// SIGKILLed while the agent holds that job's first call (held by state: the test sees the call and the job
// row `active` before it kills); gateway B, started afterwards, gets the same job once it expired and
// finishes it. The hand-over is read from pg-boss's job row (one job, retried) and from B's own log.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startProcessRig, type AgentCall, type ProcessRig } from '../helpers/edge.ts';
import { call } from '../helpers/gateway.ts';
import { GATEWAY_START_DEADLINE_MS, type GatewayProcess } from '../helpers/gateway-process.ts';
import { buyTunnel, edgeJobsFor, tunnelStatus } from '../helpers/queue.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { isRoot } from '../netns/netns.ts';

/** Small, so the hand-over comes soon; pg-boss notices expiry on its next monitor pass (every 10 s, queue.ts). */
const EXPIRE_SECONDS = 2;

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('a crashed worker: its job is handed to another replica after EDGE_JOB_EXPIRE_SECONDS', () => {
  let rig: ProcessRig;
  const start = (): Promise<GatewayProcess> =>
    rig.start({
      EDGE_WORKER: 'true',
      EDGE_JOB_EXPIRE_SECONDS: String(EXPIRE_SECONDS),
      // The held call must not time out on the gateway's side: only the crash may end A's attempt.
      EDGE_JOB_TIMEOUT_MS: '120000',
      EDGE_WAIT_MS: '500',
      EDGE_RECONCILE_SECONDS: '3600',
    });

  beforeAll(async () => {
    // Every dataplane call waits for the test's release before it reaches the kernel.
    rig = await startProcessRig({ pool: '203.0.113.176/28', hold: 'before' });
  }, 60_000);

  afterAll(async () => rig?.close());

  it('A is SIGKILLed holding the job; B finishes that same job once it expired; the tunnel ends provisioned', async () => {
    const { db: t, edge, user } = rig;
    const a = await start();
    const tun = await buyTunnel(a.url, user.writeKey, 'crashed-worker');
    const carries = (c: AgentCall) => c.ids.includes(tun.id);
    edge.holding = carries;

    const provision = await call(a.url, 'POST', `/api/dedicated/${tun.id}/provision`, { token: user.writeKey });
    // The agent holds the job's first call (the reconcile before A's first job on this node): nothing answers it.
    expect([provision.status, provision.body.tunnel?.status]).toEqual([202, 'provisioning']);
    const held = await edge.waitForCall(carries);
    const [taken] = await edgeJobsFor(t.raw, tun.id);
    expect(taken).toMatchObject({ state: 'active', retry_count: 0, singleton_key: edge.nodeId });
    // A really is the process talking to the agent.
    expect(edge.clientPids()).toEqual([a.child.pid]);

    a.kill('SIGKILL');
    await a.exited;
    // The call A was waiting on may go on now: its answer goes nowhere (A's connection died with A).
    edge.holding = () => false;
    edge.release(held);
    // The job is still A's: active, and nothing else will take it before it expires.
    expect(await edgeJobsFor(t.raw, tun.id)).toMatchObject([{ id: taken!.id, state: 'active', retry_count: 0 }]);
    expect(await tunnelStatus(t.raw, tun.id)).toBe('provisioning');

    const b = await start();
    // Bounded by state, not by time: B's pg-boss expires the job (started + EXPIRE_SECONDS) on a monitor pass and retries it.
    await until('the tunnel provisioned by B', async () => (await tunnelStatus(t.raw, tun.id)) === 'provisioned', 120_000);
    const done = await b.waitForLog((l) => l.msg === 'edge job done' && l.tunnel_id === tun.id);
    // The same job, handed over: still one job row for the tunnel (B's sweeper queued no second one),
    // completed on a later attempt than the one A held. (pg-boss marks it completed just after the handler
    // moved the tunnel: wait for that state.)
    const jobs = await until('the job completed', async () => {
      const rows = await edgeJobsFor(t.raw, tun.id);
      return rows.every((j) => j.state === 'completed') && rows;
    });
    expect(jobs).toHaveLength(1);
    expect(jobs[0]).toMatchObject({ id: taken!.id, state: 'completed' });
    expect(jobs[0]!.retry_count).toBeGreaterThanOrEqual(1);
    expect(done.attempt).toBe(jobs[0]!.retry_count + 1);
    // B ran it on the agent: its connection is the one there now, and the kernel has the tunnel.
    expect(edge.clientPids()).toEqual([b.child.pid]);
    expect(edge.links()).toContain(tun.tunnel_name);
    expect(edge.count('apply', tun.id)).toBeGreaterThanOrEqual(1);
    // A logged nothing of it as done (it died holding it).
    expect(a.lines.some((l) => l.includes('"edge job done"'))).toBe(false);
  }, 2 * GATEWAY_START_DEADLINE_MS + 180_000);
});
