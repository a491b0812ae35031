// Live traffic end to end (docs/CONTRACTS.md "Live traffic"): a real agent (its dataplane in a namespace, the veth
// stand-in for GRE) keeps per-second points from its attack monitor's counter reads; the gateway's
// `tunnelTraffic` subscription over graphql-ws gets the backfill first, then new points as its poller asks the
// agent (op `traffic` over real SSH, once a second). 300 UDP packets from a client namespace this test made add
// up, across the points, to exactly what was sent; another account's tunnel is not_found; completing the
// subscription stops the agent's traffic jobs (its own job log stops growing); an agent without the feature is
// refused as edge_unavailable before any job. Nothing decides by the clock:
// each step waits for what it needs (test/helpers/wait.ts until).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { connect, type Socket } from '../helpers/graphql-ws-client.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { isRoot, joinUpstream, TestNetns } from '../netns/netns.ts';

const CLIENT = '198.51.100.10';
const SENT = 300;
const LIVE = `subscription L($id: ID!) { tunnelTraffic(id: $id) { tunnelId backfill points { t ppsIn bpsIn ppsOut bpsOut dropped { notAllowed rateLimited spoofed invalid fragment } } } }`;

interface Point {
  t: string;
  ppsIn: number;
  bpsIn: number;
  ppsOut: number;
  bpsOut: number;
  dropped: Record<string, number>;
}
interface Event {
  tunnelId: string;
  backfill: boolean;
  points: Point[];
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('live traffic from a real agent', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  let other: SeededUser;
  let client: TestNetns;
  /** Traffic jobs the gateway finished (its job observer), whatever their outcome. */
  let gatewayJobs = 0;

  beforeAll(async () => {
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeSweepSeconds: 3600 }, pool: '203.0.113.80/28', startAgent: false }));
    // The ring is fed by attack detection, which runs with health; its checks every 30 s. Logs kept: the
    // agent's job log is how the test sees its traffic jobs.
    await edge.start({ healthIntervalS: 30, log: true });
    gw.services.provisioning.onJob((op) => {
      if (op === 'traffic') gatewayJobs++;
    });
    user = await seedUser(gw.testDb.db);
    other = await seedUser(gw.testDb.db);
    client = new TestNetns();
    await joinUpstream(edge.netns, client, '198.51.100.1', CLIENT, { edgeRoutes: false });
  }, 150_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
    client?.delete();
  });

  const agentTrafficJobs = () => edge.logs.filter((l) => l.msg === 'job done' && l.op === 'traffic').length;

  async function socketOf(u: SeededUser): Promise<Socket> {
    const s = await connect(gw);
    expect(await s.init(`Bearer ${u.readKey}`)).toBe('ack');
    return s;
  }

  /** The events of subscription `id` so far, and the refusal if it was refused. */
  function eventsOf(s: Socket, id: string): { events: Event[]; errors: { extensions?: { code?: string } }[] } {
    const events: Event[] = [];
    const errors: { extensions?: { code?: string } }[] = [];
    for (const f of s.frames) {
      if (f.id !== id || f.type !== 'next') continue;
      const p = f.payload as { data?: { tunnelTraffic: Event } | null; errors?: { extensions?: { code?: string } }[] };
      if (p.errors?.length) errors.push(...p.errors);
      else if (p.data) events.push(p.data.tunnelTraffic);
    }
    return { events, errors };
  }

  it('backfill first, then per-second points that add up to the packets sent; another account is refused; completing stops the polls', async () => {
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'watched', origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    const id = bought.body.tunnel.id as string;
    const protectedIp = bought.body.tunnel.protected_ip as string;
    const p = await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey });
    const status = async () => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;
    expect(await settle(p, 'provisioned', status)).toBe('provisioned');

    // Another account: not_found, before anything is asked of the agent.
    const stranger = await socketOf(other);
    stranger.send({ type: 'subscribe', id: 'x', payload: { query: LIVE, variables: { id } } });
    await until('the stranger refused', () => eventsOf(stranger, 'x').errors.length > 0 || null, 30_000);
    expect(eventsOf(stranger, 'x').errors[0]!.extensions?.code).toBe('not_found');
    expect(eventsOf(stranger, 'x').events).toEqual([]);
    stranger.ws.close();

    const s = await socketOf(user);
    s.send({ type: 'subscribe', id: 'live', payload: { query: LIVE, variables: { id } } });
    const [first] = await until('the backfill', () => {
      const e = eventsOf(s, 'live');
      expect(e.errors).toEqual([]);
      return e.events.length > 0 ? e.events : null;
    }, 60_000);
    expect(first).toMatchObject({ tunnelId: id, backfill: true });
    expect(first!.points.length).toBeLessThanOrEqual(300);
    expect(gw.services.health.live.polling().has(edge.nodeId)).toBe(true);
    // The agent keeps points from the tunnel's first counter reads: the backfill has some once two reads passed.
    await until('a live point after the backfill', () => eventsOf(s, 'live').events.length > 1 || null, 60_000);

    await client.runAsync('bash', '-c', `for i in $(seq ${SENT}); do echo traffic > /dev/udp/${protectedIp}/7000; done`);

    const inbound = (pts: Point[]) => pts.reduce((n, q) => n + q.ppsIn + Object.values(q.dropped).reduce((a, b) => a + b, 0), 0);
    const live = () => eventsOf(s, 'live').events.slice(1).flatMap((e) => e.points);
    await until(`${SENT} packets counted in the live points`, () => inbound(live()) >= SENT || null, 60_000);
    // Every event after the first is live, every second once, in order: the points follow each other without overlap.
    const events = eventsOf(s, 'live').events;
    expect(events.slice(1).every((e) => !e.backfill && e.points.length > 0)).toBe(true);
    const seconds = events.flatMap((e) => e.points).map((q) => Date.parse(q.t) / 1000);
    expect(seconds.every((t, i) => i === 0 || t > seconds[i - 1]!)).toBe(true);
    expect(inbound(live())).toBe(SENT);
    // Bits are whole bytes' worth: each packet is at least a 28-byte IP and UDP header and the 8-byte payload.
    const bits = live().reduce((n, q) => n + q.bpsIn, 0);
    expect(bits % 8).toBe(0);
    expect(bits).toBeGreaterThanOrEqual(SENT * 36 * 8);

    // Completed: the poller stops at once, and the agent's traffic jobs stop with it.
    s.send({ type: 'complete', id: 'live' });
    await until('the poller stopped', () => !gw.services.health.live.polling().has(edge.nodeId) || null, 30_000);
    // Every job the gateway sent has been answered and logged by the agent, none after.
    const done = await until('the agent logged every traffic job the gateway finished', () => (agentTrafficJobs() === gatewayJobs ? gatewayJobs : null), 30_000);
    expect(done).toBeGreaterThan(1);
    // Two status jobs later (each a round trip to the agent over the same connection), still none.
    for (let i = 0; i < 2; i++) {
      await gw.services.provisioning.nodeStatus({ id: edge.nodeId, host: '127.0.0.1', port: edge.port, hostKeyFingerprint: edge.fingerprint });
      await new Promise((r) => setTimeout(r, 1000));
    }
    expect(agentTrafficJobs()).toBe(done);
    expect(gatewayJobs).toBe(done);
    s.ws.close();
  }, 240_000);

  it('an agent without the feature (one that speaks job version 1 only): edge_unavailable at subscribe time, no traffic job', async () => {
    const [t] = (await gw.testDb.raw.query<{ id: string }>(`select id from tunnel where account_id = $1 and status = 'provisioned'`, [user.accountId])).rows;
    expect(t).toBeDefined();
    // Restarted as an older agent: the gateway's connection to it drops, and the next contact asks hello again.
    await edge.kill();
    await edge.start({ healthIntervalS: 30, log: true, jobVersions: '1' });
    const before = gatewayJobs;
    const s = await socketOf(user);
    await until('the subscription refused', async () => {
      s.send({ type: 'subscribe', id: `old-${s.frames.length}`, payload: { query: LIVE, variables: { id: t!.id } } });
      const f = await s.next((x) => x.id?.startsWith('old-') === true && x.type === 'next');
      const code = (f?.payload as { errors?: { extensions?: { code?: string }; message: string }[] }).errors?.[0];
      // Right after the restart the old connection may still be closing: edge_unavailable either way, and the
      // answer this test waits for names the older agent.
      s.frames.splice(0);
      return code?.extensions?.code === 'edge_unavailable' && /older agent/.test(code.message) ? code : null;
    }, 60_000);
    expect(gatewayJobs).toBe(before);
    expect(gw.services.health.live.polling().size).toBe(0);
    s.ws.close();
  }, 120_000);
});
