// Health end to end on the host (namespace, veth stand-in for GRE): the real agent checks its tunnel
// (agent/health), answers the v2 `status` op over real SSH, and the gateway's collector stores what it
// said (server/health). The stand-in's far end has no origin, so the checks fail: `down` after three
// (DESIGN 3.7), and the buyer's webhook outbox gets exactly one `tunnel.health_changed`. Then the agent
// stops answering (SIGSTOP: the process is alive, its SSH port open, nothing comes back): its tunnels turn
// `unknown`, not `down` (we do not know), and /metrics says the node is unreachable (docs/CONTRACTS.md
// "Health and traffic", `tunnelgate_edge_node_reachable`); thawed, the next round brings `down` back.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('health collected from a real agent', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;

  beforeAll(async () => {
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeSweepSeconds: 3600 }, pool: '203.0.113.48/28', startAgent: false }));
    // Checks every second, so three failures come within a few seconds of the tunnel's first check.
    await edge.start({ healthIntervalS: 1 });
    // Its own timer is an hour away: the test runs each round (collectNow), nothing happens by timing.
    gw.services.health.startCollector(createLogger('silent', { service: 'test' }, () => {}), { intervalSeconds: 3600 });
    user = await seedUser(gw.testDb.db);
  }, 60_000);

  afterAll(async () => {
    await gw?.services.health.stopCollector();
    await gw?.close();
    await edge?.close();
  });

  it('a tunnel whose origin never answers: unknown, then down once the agent says so, with one webhook event', async () => {
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'watched', origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    const id = bought.body.tunnel.id as string;
    expect(bought.body.tunnel.health).toBe('unknown');
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: 'https://hooks.example.com/h', events: ['tunnel.health_changed'] } });
    expect(hook.status).toBe(201);
    const p = await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey });
    const status = async () => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;
    expect(await settle(p, 'provisioned', status)).toBe('provisioned');

    // Each round asks the agent over SSH; the agent's own checks move the health, the round brings it home.
    await until('health down, collected from the agent', async () => {
      const round = await gw.services.health.collectNow();
      expect(round).not.toBeNull();
      const t = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey });
      return t.body.tunnel.health === 'down' ? t.body.tunnel : null;
    }, 60_000);
    const t = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey });
    expect(typeof t.body.tunnel.health_checked_at).toBe('string');
    const events = await gw.testDb.raw.query<{ body: string }>(`select body from webhook_delivery where webhook_id = $1 and event_type = 'tunnel.health_changed'`, [hook.body.webhook.id]);
    expect(events.rows.map((r) => (JSON.parse(r.body) as { data: { tunnel: { id: string; health: string } } }).data.tunnel)).toEqual([
      expect.objectContaining({ id, health: 'down' }),
    ]);
    // The agent lists status_delta (docs/CONTRACTS.md "Status by change"): once a round stored its cursor, the next
    // is answered by change against it (the cursor moves, the last full answer's time does not).
    const cursor = async () => (await gw.testDb.raw.query<{ epoch: string; seq: string; full_at: Date }>('select epoch, seq::text as seq, full_at from traffic.node_cursor where node_id = $1', [edge.nodeId])).rows[0]!;
    const before = await cursor();
    expect((await gw.services.health.collectNow())?.nodes[edge.nodeId]).toBe('answered');
    const after = await cursor();
    expect(after.epoch).toBe(before.epoch);
    expect(Number(after.seq)).toBeGreaterThan(Number(before.seq));
    expect(after.full_at).toEqual(before.full_at);
    // The status op reached the agent as a version 2 job (its hello listed 2), and the traffic API answers.
    const traffic = await call(gw.url, 'GET', `/api/dedicated/${id}/traffic`, { token: user.readKey });
    expect(traffic.status).toBe(200);
    expect(traffic.body.tunnel_id).toBe(id);
  }, 120_000);

  it('an agent that stops answering: its tunnels unknown (not down), the node unreachable in /metrics; back once it answers', async () => {
    const { rows } = await gw.testDb.raw.query<{ id: string }>(`select id from tunnel where node_id = $1 and status = 'provisioned'`, [edge.nodeId]);
    expect(rows).toHaveLength(1);
    const id = rows[0]!.id;
    const health = async () => (await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey })).body.tunnel.health as string;
    /** This node's `tunnelgate_edge_node_reachable` value as /metrics shows it. */
    const reachable = async () =>
      [...(await call(gw.url, 'GET', '/metrics')).text.matchAll(/^tunnelgate_edge_node_reachable\{node_id="([^"]+)"\} (\d)$/gm)].find((m) => m[1] === edge.nodeId)?.[2];
    expect(await health()).toBe('down');
    expect(await reachable()).toBe('1');

    // Frozen, not dead: the connection stays open and the status job gets no answer (EDGE_JOB_TIMEOUT_MS).
    edge.signal('SIGSTOP');
    try {
      const round = await gw.services.health.collectNow();
      expect(round?.nodes[edge.nodeId]).toBe('unreachable');
      expect(await health()).toBe('unknown');
      expect(await reachable()).toBe('0');
      const m = (await call(gw.url, 'GET', '/metrics')).text;
      // A warm connection times out; a new one may fail its handshake instead: either is a status job that failed.
      expect(m).toMatch(/^tunnelgate_edge_job_duration_seconds_count\{op="status",outcome="(timeout|connect_failed)"\} [1-9]/m);
    } finally {
      edge.signal('SIGCONT');
    }
    // Thawed: the agent's own view (still down: its origin never answers) comes back with the next round.
    await until('the node answering again', async () => (await gw.services.health.collectNow())?.nodes[edge.nodeId] === 'answered', 60_000);
    expect(await health()).toBe('down');
    expect(await reachable()).toBe('1');
    const events = await gw.testDb.raw.query<{ h: string }>(
      `select body::jsonb #>> '{data,tunnel,health}' as h from webhook_delivery where event_type = 'tunnel.health_changed' and body::jsonb #>> '{data,tunnel,id}' = $1 order by created_at, id`,
      [id],
    );
    expect(events.rows.map((r) => r.h)).toEqual(['down', 'unknown', 'down']);
  }, 120_000);
});
