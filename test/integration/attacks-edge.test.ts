// Attacks end to end on the host (docs/CONTRACTS.md "Attacks"): the real agent (its dataplane in a namespace,
// the veth stand-in for GRE) is given a tunnel with `alert_pps` 100 over real SSH (its hello lists `attacks`, so
// the job carries the setting); a bounded UDP flood from a client namespace (hping3, a fixed count at 500 pps for
// 3 seconds, into namespaces this test made) passes the edge's per-tunnel counter; the agent's once-a-second
// detection starts an attack, its `status` answer carries the record, the gateway's collector stores it, and it
// shows in REST, GraphQL and as a `tunnel.attack_started` webhook verified with `standardwebhooks`. Sixty quiet
// seconds later the agent ends it, and the same path brings `tunnel.attack_ended`. Nothing here reads a clock
// to decide: each step waits for what it needs (test/helpers/wait.ts until).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import type { AttackRecord } from '../../common/attacks.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { WebhookReceiver, verified } from '../helpers/webhook-receiver.ts';
import { isRoot, joinUpstream, TestNetns } from '../netns/netns.ts';

const CLIENT = '198.51.100.10';

describe.skipIf(skipUnless(isRoot && onPath('hping3'), 'attack detection end to end: root (network namespaces) and hping3'))('an attack detected by a real agent', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  let client: TestNetns;
  let receiver: WebhookReceiver;
  let secret: string;
  let id: string;
  let protectedIp: string;

  /** One collection round (the agent's status over SSH, into the database), then the tunnel's attacks as REST answers them. */
  const collected = async (): Promise<AttackRecord[]> => {
    await gw.services.health.collectNow();
    const r = await call(gw.url, 'GET', `/api/dedicated/${id}/attacks`, { token: user.readKey });
    expectMatchesOpenApi('get', '/api/dedicated/{id}/attacks', r.status, r.body, r.headers);
    return r.body.attacks as AttackRecord[];
  };
  /** Rounds a second apart (the gateway's own rounds are 30 s apart; the test does not wait for them). */
  const pause = () => new Promise((r) => setTimeout(r, 1000));

  beforeAll(async () => {
    receiver = await WebhookReceiver.start();
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeSweepSeconds: 3600, allowPrivateWebhooks: true }, pool: '203.0.113.64/28', startAgent: false }));
    // The status op (and with it attack detection's report) runs only when health is on; checks every 30 s.
    await edge.start({ healthIntervalS: 30 });
    // Its own timer is an hour away: the test runs each round (collectNow).
    gw.services.health.startCollector(createLogger('silent', { service: 'test' }, () => {}), { intervalSeconds: 3600 });
    gw.services.webhooks.startDelivery(createLogger('silent'), { pollMs: 20, backoffBaseMs: 1 });
    user = await seedUser(gw.testDb.db);
    // A client namespace wired to the edge's: packets to the protected IP enter the edge there.
    client = new TestNetns();
    await joinUpstream(edge.netns, client, '198.51.100.1', CLIENT, { edgeRoutes: false });
  }, 150_000);

  afterAll(async () => {
    await gw?.services.health.stopCollector();
    await gw?.close();
    await edge?.close();
    client?.delete();
    await receiver?.close();
  });

  it('a flood over alert_pps: the agent starts an attack, and the record reaches the table, REST, GraphQL and a verified webhook', async () => {
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: receiver.url('/edge'), events: ['tunnel.attack_started', 'tunnel.attack_ended'] } });
    expect(hook.status).toBe(201);
    secret = hook.body.secret as string;
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'flooded', origin_ip: '8.8.4.4', protection: { alert_pps: 100 } } });
    expect(bought.status).toBe(201);
    id = bought.body.tunnel.id as string;
    protectedIp = bought.body.tunnel.protected_ip as string;
    const p = await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey });
    const status = async () => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;
    expect(await settle(p, 'provisioned', status)).toBe('provisioned');
    // Quiet first: a round with no attack.
    expect(await collected()).toEqual([]);

    // 1,500 UDP packets at 500 a second (3 s): five times alert_pps, for longer than the 2 seconds that start an attack.
    await client.runAsync('bash', '-c', `hping3 -q --udp -c 1500 -i u2000 -p 7000 ${protectedIp} >/dev/null 2>&1 || true`);

    const [a] = await until('the attack stored from the agent', async () => {
      const got = await collected();
      if (got.length === 0) await pause();
      return got.length > 0 ? got : null;
    });
    expect(a).toMatchObject({ tunnel_id: id, vector: { protocol: null, ports: null } });
    // Above the threshold, and no more than the flood itself could make (500 pps of 28-byte-payload UDP).
    expect(a!.peak_pps).toBeGreaterThan(100);
    expect(a!.peak_pps).toBeLessThanOrEqual(1500);
    expect(a!.packets_passed + a!.packets_dropped).toBeGreaterThan(200);
    expect(a!.packets_passed + a!.packets_dropped).toBeLessThanOrEqual(1500);
    const rows = (await gw.testDb.raw.query('select id, tunnel_id from attack where tunnel_id = $1', [id])).rows;
    expect(rows).toEqual([{ id: a!.id, tunnel_id: id }]);

    const g = await call(gw.url, 'POST', '/graphql', { token: user.readKey, body: { query: `query($id: ID!) { tunnel(id: $id) { attacks { id peakPps } } }`, variables: { id } } });
    expect(g.body.data.tunnel.attacks).toEqual([{ id: a!.id, peakPps: expect.any(Number) }]);

    await until('the attack_started delivery', () => receiver.to('/edge').length >= 1);
    const started = verified(secret, receiver.to('/edge')[0]!) as unknown as { type: string; data: { tunnel: { id: string }; attack: AttackRecord } };
    expect(started.type).toBe('tunnel.attack_started');
    expect(started.data.tunnel.id).toBe(id);
    expect(started.data.attack).toMatchObject({ id: a!.id, tunnel_id: id, started_at: a!.started_at });
  });

  it('sixty quiet seconds later the agent ends it: ended_at set, one tunnel.attack_ended, the same attack id', async () => {
    expect(id).toBeDefined();
    const [ended] = await until(
      'the attack ended by the agent',
      async () => {
        const got = await collected();
        if (got[0]?.ended_at === null) await pause();
        return got[0]?.ended_at ? got : null;
      },
      140_000,
    );
    expect(Date.parse(ended!.ended_at!)).toBeGreaterThan(Date.parse(ended!.started_at));
    await until('the attack_ended delivery', () => receiver.to('/edge').length >= 2);
    const deliveries = receiver.to('/edge').map((d) => verified(secret, d) as unknown as { type: string; data: { attack: AttackRecord } });
    expect(deliveries.map((d) => [d.type, d.data.attack.id])).toEqual([
      ['tunnel.attack_started', ended!.id],
      ['tunnel.attack_ended', ended!.id],
    ]);
    expect(deliveries[1]!.data.attack.ended_at).toBe(ended!.ended_at);
    // Another round changes nothing: the record is stored once, and no event follows.
    await collected();
    expect((await gw.testDb.raw.query('select count(*)::int as n from attack where tunnel_id = $1', [id])).rows[0].n).toBe(1);
  }, 150_000);
});
