// A tunnel's policy end to end through the product (the last proof; docs/CONTRACTS.md
// "Tunnel settings", "Edge jobs"): bought with `ports: "8080"` and protection over REST, provisioned by the
// real gateway, queue and worker through the real agent process (speaking job version 3 after `hello`), its
// dataplane in a namespace (veth stand-in for GRE, as test/integration/provisioning.test.ts), with a client
// namespace upstream and the origin on the stand-in's far end, activated (the edge forwards to an origin only
// once it answered the probe). Then `PATCH ports` on the live tunnel: the
// gateway answers 200 only once the agent applied it, so the new port passing right after the 200 is the
// "within the request's own wait" of the contract (EDGE_WAIT_MS, 5 s by default), and a connection on the
// port it keeps carries on (a change of policy alone flushes no conntrack).
//
// Then the traffic proof on a second tunnel (UDP port 7000, 100 packets/s per source):
// exact packet and byte counts sent by hping3 through the real agent, collected by the real gateway
// collector over SSH (op `status`), read back from `GET /api/dedicated/{id}/traffic`, with drops by reason
// (not_allowed, rate_limited, spoofed) under `dropped` (docs/CONTRACTS.md "Health and traffic", "Dataplane").
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { flowsChainName, meterChainName } from '../../agent/netlink/ruleset.ts';
import { DROP_REASONS, type DropReason } from '../../common/tunnel-status.ts';
import { innerSubnet, parseCidr } from '../../server/domain/ip.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, TestEdge } from '../helpers/edge.ts';
import { counterArgv, counterPackets, observeRuleset } from '../helpers/nft-observe.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { attachStandinOrigin, KEEP, Proc, SERVER } from '../netns/origin-standin.ts';

const CLIENT = '198.51.100.10';

describe.skipIf(skipUnless(isRoot && onPath('hping3'), 'root (network namespaces) and hping3'))('a tunnel policy through the product (gateway, real agent v2, namespaces)', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  let client: TestNetns;
  let origin: TestNetns;
  let origin2: TestNetns;
  const procs: Proc[] = [];
  const proc = (ns: TestNetns, script: string, args: string[] = []): Proc => {
    const p = new Proc(ns, script, args);
    procs.push(p);
    return p;
  };
  const status = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;
  const counted = (name: string): number => counterPackets(origin.run(...counterArgv(name)));
  /** provisioned -> active through the API: 200 once the edge forwards to the origin (docs/CONTRACTS.md "Dataplane"). */
  const activate = async (id: string): Promise<void> => {
    const a = await call(gw.url, 'POST', `/api/dedicated/${id}/activate`, { token: user.writeKey });
    expect([a.status, a.body.tunnel?.status], a.text).toEqual([200, 'active']);
  };
  /** The origin's inner address (with its /30) the gateway allocated to tunnel `id`. */
  const originInner = async (id: string): Promise<string> => {
    const { rows } = await gw.testDb.raw.query<{ inner_index: number; inner_pool: string }>(
      'select t.inner_index, n.inner_pool from tunnel t join edge_node n on n.id = t.node_id where t.id = $1',
      [id],
    );
    return innerSubnet(parseCidr(rows[0]!.inner_pool), rows[0]!.inner_index).originInner;
  };

  beforeAll(async () => {
    // The longest wait the gateway allows, so the 200 path is the one taken whenever the agent answers at all
    // (a loaded 2-core host): the test asserts the 200, never a duration.
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeJobTimeoutMs: 30_000, edgeRetryLimit: 20 }, pool: '203.0.113.48/28', startAgent: false }));
    // With health checks (the status op the traffic test collects), at the production interval.
    await edge.start({ healthIntervalS: 30 });
    user = await seedUser(gw.testDb.db);
    // The client upstream of the edge; the edge's default route points there, so a protected IP is not
    // local and the kernel forwards it (where the agent's SYN proxy and guard sit).
    client = new TestNetns();
    client.run('ip', 'link', 'set', 'lo', 'up');
    edge.netns.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client.name);
    edge.netns.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    edge.netns.run('ip', 'link', 'set', 'up0', 'up');
    edge.netns.run('ip', 'route', 'add', 'default', 'via', CLIENT);
    client.run('ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
    client.run('ip', 'link', 'set', 'c0', 'up');
    client.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
    await client.waitForPing('198.51.100.1');
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) p.stop();
    client?.delete();
    origin?.delete();
    origin2?.delete();
    await gw?.services.health.stopCollector();
    await gw?.close();
    await edge?.close();
  });

  it('bought with ports 8080 and protection: the agent holds the policy; PATCH ports is 200 once applied, 9090 then passes and the 8080 connection carries on', async () => {
    const bought = await call(gw.url, 'POST', '/api/dedicated', {
      token: user.writeKey,
      body: { name: 'policy-e2e', origin_ip: '8.8.4.4', ports: '8080', protocol: 'tcp', protection: { syn_proxy: true, source_pps_limit: 1000, drop_fragments: true } },
    });
    expect(bought.status).toBe(201);
    const t = bought.body.tunnel as { id: string; protected_ip: string; tunnel_name: string; ports: string };
    expect(t.ports).toBe('8080');
    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(await settle(p, 'provisioned', () => status(t.id))).toBe('provisioned');
    // The agent said `hello` with version 2, so the worker sent the policy (a v1 job would have been refused
    // with a policy in it): the tunnel's elements are in the agent's table.
    const table = edge.netns.run('nft', 'list', 'table', 'ip', 'tunnelgate');
    expect(table).toContain(`${t.protected_ip} . tcp . 8080`);
    expect(table).not.toContain(`${t.protected_ip} . tcp . 9090`);
    expect(table).not.toContain(`${t.protected_ip} . udp . 8080`);
    expect(edge.netns.run('nft', 'list', 'set', 'ip', 'tunnelgate', 'synproxied')).toContain(t.protected_ip);
    expect(edge.netns.run('nft', 'list', 'set', 'ip', 'tunnelgate', 'fragments')).toContain(t.protected_ip);
    // The tunnel's own per-source meter (docs/CONTRACTS.md "Dataplane", per-tunnel budgets), and its flow caps.
    expect(edge.netns.run('nft', 'list', 'map', 'ip', 'tunnelgate', 'rate_limits')).toContain(`${t.protected_ip} : jump ${meterChainName(t.tunnel_name, 1000)}`);
    expect(edge.netns.run('nft', 'list', 'map', 'ip', 'tunnelgate', 'flow_limits')).toContain(`${t.protected_ip} : jump ${flowsChainName(65_536)}`);

    // The origin on the stand-in's far end, with the inner address the gateway allocated.
    const inner = await originInner(t.id);
    origin = new TestNetns();
    origin.run('ip', 'link', 'set', 'lo', 'up');
    attachStandinOrigin(edge.netns, origin, { tunnel_name: t.tunnel_name, origin_inner: inner });
    origin.run('bash', '-c', `nft -f - <<'EOF'\n${observeRuleset('input', { syn9090: 'tcp dport 9090 tcp flags & (syn|ack) == syn' })}EOF`);
    await edge.netns.waitForPing(inner.split('/')[0]!);
    await proc(origin, SERVER).saw((l) => l === 'ready');
    // Activated: the origin answers the probe through the tunnel, and only then does the edge forward to it.
    await activate(t.id);

    const on8080 = proc(client, KEEP, [t.protected_ip, '8080']);
    await on8080.saw((l) => l === 'open');
    on8080.send('one');
    expect(await on8080.saw((l) => l.includes('echo=one'))).toBe(`peer=${CLIENT} echo=one`);
    // 9090 is not allowed yet: SYNs to it never reach the origin (the proxy answers none either: dropped before it).
    client.run('bash', '-c', `hping3 -q -S -c 3 -i u20000 -p 9090 ${t.protected_ip} >/dev/null 2>&1 || true`);
    expect(counted('syn9090')).toBe(0);

    const r = await call(gw.url, 'PATCH', `/api/dedicated/${t.id}`, { token: user.writeKey, body: { ports: '8080,9090' } });
    expectMatchesOpenApi('patch', '/api/dedicated/{id}', r.status, r.body, r.headers);
    expect(r.status).toBe(200);
    expect((r.body.tunnel as { ports: string }).ports).toBe('8080,9090');
    // The 200 came once the agent applied it: 9090 passes now, without waiting.
    expect(edge.netns.run('nft', 'list', 'table', 'ip', 'tunnelgate')).toContain(`${t.protected_ip} . tcp . 9090`);
    const on9090 = proc(client, KEEP, [t.protected_ip, '9090']);
    await on9090.saw((l) => l === 'open');
    on9090.send('two');
    expect(await on9090.saw((l) => l.includes('echo=two'))).toBe(`peer=${CLIENT} echo=two`);
    // The 8080 connection made before the change carries on.
    on8080.send('three');
    expect(await on8080.saw((l) => l.includes('echo=three'))).toBe(`peer=${CLIENT} echo=three`);
    expect(on8080.lines.some((l) => l.startsWith('closed'))).toBe(false);
  }, 120_000);

  it('exactly N packets and B bytes sent through a tunnel: the traffic API shows them after the next collection, drops by reason under `dropped`', async () => {
    const bought = await call(gw.url, 'POST', '/api/dedicated', {
      token: user.writeKey,
      body: { name: 'traffic-e2e', origin_ip: '8.8.4.4', ports: '7000', protocol: 'udp', protection: { syn_proxy: false, source_pps_limit: 100, drop_fragments: false } },
    });
    expect(bought.status).toBe(201);
    const t = bought.body.tunnel as { id: string; protected_ip: string; tunnel_name: string };
    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(await settle(p, 'provisioned', () => status(t.id))).toBe('provisioned');
    const inner = await originInner(t.id);
    origin2 = new TestNetns();
    origin2.run('ip', 'link', 'set', 'lo', 'up');
    attachStandinOrigin(edge.netns, origin2, { tunnel_name: t.tunnel_name, origin_inner: inner });
    await edge.netns.waitForPing(inner.split('/')[0]!);
    await activate(t.id);

    // The collector's own timer is an hour away: the test runs each round. This first one sees the tunnel
    // for the first time, which only sets the baseline (it adds 0), before anything is sent.
    gw.services.health.startCollector(createLogger('silent', { service: 'test' }, () => {}), { intervalSeconds: 3600 });
    expect((await gw.services.health.collectNow())?.nodes[edge.nodeId]).toBe('answered');

    // Every packet to the protected IP is counted `in` before the policy decides (the first rule of the `early`
    // chain, before the rate limit in it), so `in` is all that was sent to it. UDP with 100 bytes of data: 128 bytes of IP.
    const SIZE = 128;
    const udp = (n: number, port: number, gap: string) => client.run('bash', '-c', `hping3 -q --udp -d ${SIZE - 28} -c ${n} -i ${gap} -p ${port} ${t.protected_ip} >/dev/null 2>&1 || true`);
    const allowed = 200; // 50 a second, half the limit: passes
    const notAllowed = 20; // a port outside the list
    const flood = 400; // as fast as hping3 goes: over the limit
    udp(allowed, 7000, 'u20000');
    udp(notAllowed, 7001, 'u20000');
    udp(flood, 7000, 'u100');
    // From inside the tunnel, a source that is not the origin's inner address: dropped, counted spoofed.
    const spoofed = 10;
    origin2.run('bash', '-c', `hping3 -q --udp -a 192.0.2.99 -c ${spoofed} -i u20000 -p 7000 ${CLIENT} >/dev/null 2>&1 || true`);
    const sent = allowed + notAllowed + flood;

    // The kernel's own account on the edge first (softirq may finish after hping3 exited): its counter for
    // the tunnel is the truth the API must carry.
    const kernel = (name: string) => JSON.parse(edge.netns.run('nft', '-j', 'list', 'counter', 'ip', 'tunnelgate', name)) as { nftables: { counter?: { packets: number; bytes: number } }[] };
    const inCounter = await until('the edge counting every packet sent', () => {
      const c = kernel(t.tunnel_name).nftables.find((o) => o.counter)!.counter!;
      return c.packets >= sent ? c : null;
    }, 30_000);
    expect(inCounter).toMatchObject({ packets: sent, bytes: sent * SIZE });

    // One round, then the API.
    expect((await gw.services.health.collectNow())?.nodes[edge.nodeId]).toBe('answered');
    const r = await call(gw.url, 'GET', `/api/dedicated/${t.id}/traffic?step=1m`, { token: user.readKey });
    expectMatchesOpenApi('get', '/api/dedicated/{id}/traffic', r.status, r.body, r.headers);
    expect(r.status).toBe(200);
    const points = r.body.points as { packets_in: number; bytes_in: number; packets_out: number; bytes_out: number; dropped: Record<DropReason, number> }[];
    const sum = (f: (x: (typeof points)[number]) => number) => points.reduce((n, x) => n + f(x), 0);
    const dropped = Object.fromEntries(DROP_REASONS.map((k) => [k, sum((x) => x.dropped[k])])) as Record<DropReason, number>;
    // Exact to the packet: the history is the kernel's counter, moved into points, nothing lost or added.
    expect(sum((x) => x.packets_in)).toBe(sent);
    expect(sum((x) => x.bytes_in)).toBe(sent * SIZE);
    expect(dropped.not_allowed).toBe(notAllowed);
    expect(dropped.spoofed).toBe(spoofed);
    // The flood went over 100 a second; how much of it the meter let through depends on how fast hping3 ran.
    expect(dropped.rate_limited).toBeGreaterThan(0);
    expect(dropped.rate_limited).toBeLessThanOrEqual(flood);
    expect(dropped.invalid + dropped.fragment).toBe(0);
    // What the origin received is what was neither refused nor limited.
    const reached = (JSON.parse(origin2.run('ip', '-s', '-j', 'link', 'show', 'dev', t.tunnel_name)) as { stats64: { rx: { packets: number } } }[])[0]!.stats64.rx.packets;
    expect(reached).toBeGreaterThanOrEqual(allowed + flood - dropped.rate_limited);
  }, 120_000);
});
