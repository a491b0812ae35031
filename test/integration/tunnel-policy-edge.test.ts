// A tunnel's policy end to end through the product (issue 10 item 5, the last proof; docs/CONTRACTS.md
// "Tunnel settings", "Edge jobs"): bought with `ports: "8080"` and protection over REST, provisioned by the
// real gateway, queue and worker through the real agent process (speaking job version 2 after `hello`), its
// dataplane in a namespace (veth stand-in for GRE, as test/integration/provisioning.test.ts), with a client
// namespace upstream and the origin on the stand-in's far end. Then `PATCH ports` on the live tunnel: the
// gateway answers 200 only once the agent applied it, so the new port passing right after the 200 is the
// "within the request's own wait" of the contract (EDGE_WAIT_MS, 5 s by default), and a connection on the
// port it keeps carries on (a change of policy alone flushes no conntrack).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { innerSubnet, parseCidr } from '../../server/domain/ip.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, TestEdge } from '../helpers/edge.ts';
import { counterArgv, counterPackets, observeRuleset } from '../helpers/nft-observe.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { settle } from '../helpers/wait.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { attachStandinOrigin, KEEP, Proc, SERVER } from '../netns/origin-standin.ts';

const CLIENT = '198.51.100.10';

describe.skipIf(skipUnless(isRoot && onPath('hping3'), 'root (network namespaces) and hping3'))('a tunnel policy through the product (gateway, real agent v2, namespaces)', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  let client: TestNetns;
  let origin: TestNetns;
  const procs: Proc[] = [];
  const proc = (ns: TestNetns, script: string, args: string[] = []): Proc => {
    const p = new Proc(ns, script, args);
    procs.push(p);
    return p;
  };
  const status = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;
  const counted = (name: string): number => counterPackets(origin.run(...counterArgv(name)));

  beforeAll(async () => {
    // The longest wait the gateway allows, so the 200 path is the one taken whenever the agent answers at all
    // (a loaded 2-core host): the test asserts the 200, never a duration.
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeJobTimeoutMs: 30_000, edgeRetryLimit: 20 }, pool: '203.0.113.48/28' }));
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
    expect(edge.netns.run('nft', 'list', 'map', 'ip', 'tunnelgate', 'rate_limits')).toContain(`${t.protected_ip} : jump ratelimit_1000`);

    // The origin on the stand-in's far end, with the inner address the gateway allocated.
    const { rows } = await gw.testDb.raw.query<{ inner_index: number; inner_pool: string }>(
      'select t.inner_index, n.inner_pool from tunnel t join edge_node n on n.id = t.node_id where t.id = $1',
      [t.id],
    );
    const inner = innerSubnet(parseCidr(rows[0]!.inner_pool), rows[0]!.inner_index);
    origin = new TestNetns();
    origin.run('ip', 'link', 'set', 'lo', 'up');
    attachStandinOrigin(edge.netns, origin, { tunnel_name: t.tunnel_name, origin_inner: inner.originInner });
    origin.run('bash', '-c', `nft -f - <<'EOF'\n${observeRuleset('input', { syn9090: 'tcp dport 9090 tcp flags & (syn|ack) == syn' })}EOF`);
    await edge.netns.waitForPing(inner.originInner.split('/')[0]!);
    await proc(origin, SERVER).saw((l) => l === 'ready');

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
});
