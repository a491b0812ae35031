// The events stream end to end (docs/CONTRACTS.md "Events stream"; DESIGN 3.11): the real agent process (its
// dataplane in a namespace, the veth stand-in for GRE) and the real gateway over real SSH and PostgreSQL. The
// gateway's status pull is an hour apart and its rounds are counted, so what reaches the webhook receiver can only
// have come by the push: a bounded UDP flood (hping3, a fixed count at 500 pps for 3 s, into namespaces this test
// made) over a tunnel's alert_pps starts an attack on the agent, which writes it on its events stream on the tick
// that decides it; the gateway stores it and delivers `tunnel.attack_started` (verified with `standardwebhooks`),
// and the `tunnelStatus` subscription fires. Then the node's SSH connection is cut mid-stream: the gateway opens
// the stream again, and the attack's end, sixty quiet seconds later, comes by the new stream, once. An agent
// without the feature (no health checks, so no hub: its hello lists `attacks` only) is never sent `events`.
// The latency from the flood's first packet to the webhook's receipt is printed, never asserted (no test asserts
// on wall-clock time); each step waits for what it needs (test/helpers/wait.ts until).
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import type { AttackRecord } from '../../common/attacks.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { WebhookReceiver, verified } from '../helpers/webhook-receiver.ts';
import { isRoot, joinUpstream, TestNetns } from '../netns/netns.ts';

const CLIENT = '198.51.100.10';
const quiet = () => createLogger('silent', { service: 'test' }, () => {});

describe.skipIf(skipUnless(isRoot && onPath('hping3'), 'events stream end to end: root (network namespaces) and hping3'))('attacks pushed on the events stream', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  let client: TestNetns;
  let receiver: WebhookReceiver;
  let secret: string;
  let id: string;
  let attackId: string;
  let statusJobs = 0;
  let statusJobsBefore = 0;
  type Seen = { status: string; attacks: { id: string; endedAt: string | null }[] };
  const seen: Seen[] = [];
  let stopSubscription: (() => Promise<void>) | undefined;

  const deliveries = () => receiver.to('/push').map((d) => ({ d, body: verified(secret, d) as unknown as { type: string; data: { tunnel: { id: string }; attack: AttackRecord } } }));

  beforeAll(async () => {
    receiver = await WebhookReceiver.start();
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeSweepSeconds: 3600, edgeStatusSeconds: 3600, allowPrivateWebhooks: true }, pool: '203.0.113.80/28', startAgent: false }));
    // Health on (the hub comes with it); its checks every 30 s. Logs kept: the agent's side of each stream.
    await edge.start({ healthIntervalS: 30, log: true });
    gw.services.provisioning.onJob((op) => {
      if (op === 'status') statusJobs++;
    });
    // The pull an hour apart (its first round runs at start, before any tunnel): nothing later comes by it.
    gw.services.health.startCollector(quiet(), { intervalSeconds: 3600 });
    gw.services.health.startEvents(quiet(), { refreshMs: 1000, backoffMs: 200, maxBackoffMs: 2000 });
    // The production poll (1 s): the latency printed below is what a deployment sees.
    gw.services.webhooks.startDelivery(quiet(), { backoffBaseMs: 1 });
    user = await seedUser(gw.testDb.db);
    client = new TestNetns();
    await joinUpstream(edge.netns, client, '198.51.100.1', CLIENT, { edgeRoutes: false });
  }, 150_000);

  afterAll(async () => {
    await stopSubscription?.();
    await gw?.services.health.stopEvents();
    await gw?.services.health.stopCollector();
    await gw?.close();
    await edge?.close();
    client?.delete();
    await receiver?.close();
  });

  it('a flood starts an attack on the agent and its webhook and tunnelStatus event come by the push, with no status pull', async () => {
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: receiver.url('/push'), events: ['tunnel.attack_started', 'tunnel.attack_ended'] } });
    expect(hook.status).toBe(201);
    secret = hook.body.secret as string;
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'pushed', origin_ip: '8.8.4.4', protection: { alert_pps: 100 } } });
    expect(bought.status).toBe(201);
    id = bought.body.tunnel.id as string;
    const protectedIp = bought.body.tunnel.protected_ip as string;
    const p = await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey });
    const status = async () => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;
    expect(await settle(p, 'provisioned', status)).toBe('provisioned');

    const streams = gw.services.health.events!;
    await until('the events stream open', () => streams.state(edge.nodeId) === 'open');
    expect(edge.logs.filter((l) => l.msg === 'events stream opened')).toEqual([expect.objectContaining({ op: 'events', v: expect.any(Number) })]);

    const ws = createClient({ url: `${gw.url.replace('http', 'ws')}/graphql`, webSocketImpl: WebSocket, connectionParams: { Authorization: `Bearer ${user.readKey}` }, retryAttempts: 0 });
    const sub = ws.iterate<{ tunnelStatus: Seen }>({ query: `subscription($id: ID!) { tunnelStatus(id: $id) { status attacks { id endedAt } } }`, variables: { id } });
    const reading = (async () => {
      for await (const m of sub) seen.push(m.data!.tunnelStatus);
    })();
    stopSubscription = async () => {
      await sub.return?.();
      await ws.dispose();
      await reading;
    };
    await until('the subscription\'s first event', () => seen.length >= 1);
    expect(seen[0]!.attacks).toEqual([]);

    statusJobsBefore = statusJobs;
    // 1,500 UDP packets at 500 a second: five times alert_pps for 3 s, longer than the 2 seconds that start an attack.
    const floodStarted = Date.now();
    const flood = client.runAsync('bash', '-c', `hping3 -q --udp -c 1500 -i u2000 -p 7000 ${protectedIp} >/dev/null 2>&1 || true`);
    const [started] = await until('the attack_started delivery', () => (deliveries().length >= 1 ? deliveries() : null), 60_000);
    const latencyMs = started!.d.receivedAt - floodStarted;
    await flood;
    expect(started!.body.type).toBe('tunnel.attack_started');
    expect(started!.body.data.tunnel.id).toBe(id);
    expect(started!.body.data.attack).toMatchObject({ tunnel_id: id, ended_at: null });
    attackId = started!.body.data.attack.id;
    // No status job ran since the flood began: the push delivered it.
    expect(statusJobs).toBe(statusJobsBefore);
    expect(streams.stats.events).toBeGreaterThanOrEqual(1);
    const rows = (await gw.testDb.raw.query('select id from attack where tunnel_id = $1', [id])).rows;
    expect(rows).toEqual([{ id: attackId }]);
    await until('tunnelStatus with the attack', () => seen.some((s) => s.attacks.some((a) => a.id === attackId && a.endedAt === null)));
    // Figures for the report: never asserted (the agent and this test share the host's clock).
    process.stdout.write(`events-stream: first flood packet -> tunnel.attack_started received: ${latencyMs} ms (the record's started_at is ${Date.parse(started!.body.data.attack.started_at) - floodStarted} ms after the flood began)\n`);
  }, 120_000);

  it('a stream cut mid-way (its SSH connection dropped) is opened again, and the attack\'s end comes by the new one, once', async () => {
    expect(attackId).toBeDefined();
    const streams = gw.services.health.events!;
    const opened = streams.stats.opened;
    gw.services.provisioning.connections!.disconnect(edge.nodeId);
    await until('the stream opened again', () => streams.stats.opened > opened && streams.state(edge.nodeId) === 'open');
    await until('the agent saw the first stream close and the second open', () => edge.logs.filter((l) => l.msg === 'events stream opened').length >= 2 && edge.logs.some((l) => l.msg === 'events stream closed'));

    const ended = await until('the attack_ended delivery', () => (deliveries().length >= 2 ? deliveries() : null), 150_000);
    expect(ended.map((x) => [x.body.type, x.body.data.attack.id])).toEqual([
      ['tunnel.attack_started', attackId],
      ['tunnel.attack_ended', attackId],
    ]);
    expect(ended[1]!.body.data.attack.ended_at).not.toBeNull();
    expect(statusJobs).toBe(statusJobsBefore);
    await until('tunnelStatus with the end', () => seen.some((s) => s.attacks.some((a) => a.id === attackId && a.endedAt !== null)));

    // The pull now sees the same record: one row, and no second event.
    await gw.services.health.collectNow();
    expect(statusJobs).toBe(statusJobsBefore + 1);
    expect((await gw.testDb.raw.query('select count(*)::int as n from attack where tunnel_id = $1', [id])).rows[0].n).toBe(1);
    await new Promise((r) => setTimeout(r, 1500)); // one delivery poll and more: a duplicate would be sent by now
    expect(receiver.to('/push')).toHaveLength(2);
  }, 180_000);
});

describe.skipIf(skipUnless(isRoot, 'an agent without the events feature: root (network namespaces)'))('an agent without the events feature', () => {
  let gw: RunningGateway;
  let edge: TestEdge;

  beforeAll(async () => {
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeSweepSeconds: 3600 }, pool: '203.0.113.96/28', startAgent: false }));
    // No health checks: no hub, so its hello lists `attacks` only (it speaks job version 2 and later all the same).
    await edge.start({ log: true });
  }, 150_000);

  afterAll(async () => {
    await gw?.services.health.stopEvents();
    await gw?.close();
    await edge?.close();
  });

  it('is asked (its hello) again and again, and never sent the op', async () => {
    const streams = gw.services.health.startEvents(quiet(), { refreshMs: 200, backoffMs: 100 });
    await until('three asks answered "no events op"', () => streams.stats.unsupported >= 3);
    expect(streams.state(edge.nodeId)).toBe('unsupported');
    expect(streams.stats.opened).toBe(0);
    const session = await gw.services.provisioning.connections!.session({ id: edge.nodeId, host: '127.0.0.1', port: edge.port, hostKeyFingerprint: edge.fingerprint }, 10_000);
    expect(session.version).toBeGreaterThanOrEqual(2);
    expect(session.hello.features).toEqual(['attacks']);
    // The agent's own log: every job it got, and no events among them.
    expect(edge.logs.filter((l) => l.op === 'events' || l.msg === 'events stream opened')).toEqual([]);
    expect(edge.logs.filter((l) => l.msg === 'hello').length).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
