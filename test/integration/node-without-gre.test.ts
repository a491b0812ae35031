// An edge whose kernel cannot make GRE links (docs/CONTRACTS.md "Tunnel links"), end to end on this host:
// the real agent with the production GRE link driver, on this kernel, which has no GRE. It warns at start
// and says so in hello and status; the gateway records it, the admin CLI shows the node unable to carry
// tunnels, and neither pricing's stock nor any purchase takes an IP from it, while a second edge (the
// veth stand-in, which does carry its tunnels) keeps selling. Nothing about the kernel is faked here.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, TestEdge } from '../helpers/edge.ts';
import { runAdminCli } from '../helpers/admin-cli.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

/** Whether this kernel makes GRE links, asked of iproute2 in a namespace of its own (the test needs one that does not). */
function kernelHasGre(): boolean {
  if (!isRoot) return false;
  const ns = new TestNetns();
  try {
    ns.run('ip', 'link', 'add', 'tgoracle', 'type', 'gre', 'local', '192.0.2.2', 'remote', '198.51.100.2');
    return true;
  } catch {
    return false;
  } finally {
    ns.delete();
  }
}

describe.skipIf(skipUnless(isRoot && !kernelHasGre(), 'root (network namespaces) on a kernel without GRE'))('an edge on a kernel without GRE', () => {
  let gw: RunningGateway;
  let standin: TestEdge;
  let noGre: TestEdge;
  let user: SeededUser;

  beforeAll(async () => {
    const rig = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeSweepSeconds: 3600 }, pool: '203.0.113.80/30', startAgent: false });
    gw = rig.gw;
    standin = rig.edge;
    noGre = await TestEdge.create(gw.testDb.db, rig.secrets, '203.0.113.88/29');
    await Promise.all([standin.start({ log: true, healthIntervalS: 3600 }), noGre.start({ linkKind: 'gre', log: true, healthIntervalS: 3600 })]);
    // Rounds only when the test asks (collectNow): nothing here depends on timing.
    gw.services.health.startCollector(createLogger('silent', { service: 'test' }, () => {}), { intervalSeconds: 3600 });
    user = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
  }, 120_000);

  afterAll(async () => {
    await gw?.services.health.stopCollector();
    await gw?.close();
    await standin?.close();
    await noGre?.close();
  });

  it('the agent warns at start, naming the reason', () => {
    const warning = noGre.logs.find((l) => typeof l.msg === 'string' && l.msg.startsWith('tunnel links unusable'));
    expect(warning, JSON.stringify(noGre.logs.slice(0, 10))).toMatchObject({ level: 'warn', kind: 'gre', usable: false, reason: expect.stringMatching(/cannot create GRE links \(EOPNOTSUPP/) });
    expect(standin.logs.find((l) => l.msg === 'tunnel links usable')).toMatchObject({ kind: 'veth-standin', usable: true });
    expect(standin.logs.some((l) => typeof l.msg === 'string' && l.msg.startsWith('tunnel links unusable'))).toBe(false);
  });

  it('node show / node list: unable to carry tunnels, with the reason; not selling; the stand-in sells', async () => {
    // A status round contacts both agents (hello, then status): each says what it can.
    await until('both nodes reported their tunnel links', async () => {
      await gw.services.health.collectNow();
      const { rows } = await gw.testDb.raw.query<{ n: string }>('select count(*)::text as n from edge_node where tunnel_links_kind is not null');
      return rows[0]!.n === '2';
    }, 60_000);
    const env = { DATABASE_URL: gw.testDb.url };
    const shown = await runAdminCli(env, ['node', 'show', '--id', noGre.nodeId]);
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.json).toMatchObject({
      node_id: noGre.nodeId,
      sellable: true,
      selling: false,
      can_carry_tunnels: false,
      tunnel_links: { kind: 'gre', usable: false, reason: expect.stringMatching(/EOPNOTSUPP.*modprobe ip_gre/), since: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) },
      last_poll: { reachable: true },
    });
    const list = await runAdminCli(env, ['node', 'list']);
    expect(list.code, list.stderr).toBe(0);
    const byId = new Map((list.json.items as { node_id: string }[]).map((n) => [n.node_id, n]));
    expect(byId.get(noGre.nodeId)).toMatchObject({ can_carry_tunnels: false, selling: false });
    expect(byId.get(standin.nodeId)).toMatchObject({ can_carry_tunnels: true, selling: true, tunnel_links: { kind: 'veth-standin', usable: true, reason: null } });
  }, 120_000);

  it("sells nothing from it: pricing counts only the stand-in's IPs, and purchases end out of stock with the other pool free", async () => {
    const pricing = await call(gw.url, 'GET', '/api/dedicated/pricing');
    // The stand-in's /30 has two usable addresses; the GRE-less node's six are not stock.
    expect(pricing.body.availability).toEqual({ total: 2, available: 2, in_stock: true });
    const ips: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: `ok-${i}`, origin_ip: '8.8.4.4' } });
      expect(r.status, JSON.stringify(r.body)).toBe(201);
      ips.push(r.body.tunnel.protected_ip as string);
    }
    expect(ips.sort()).toEqual(['203.0.113.81', '203.0.113.82']);
    const refused = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'none-left', origin_ip: '8.8.4.4' } });
    expect([refused.status, refused.body.error]).toEqual([409, 'out_of_stock']);
    const { rows } = await gw.testDb.raw.query<{ taken: string; free: string }>(
      'select count(*) filter (where tunnel_id is not null)::text as taken, count(*) filter (where tunnel_id is null)::text as free from protected_ip where node_id = $1',
      [noGre.nodeId],
    );
    expect(rows[0]).toEqual({ taken: '0', free: '6' });
    expect((await call(gw.url, 'GET', '/api/dedicated/pricing')).body.availability).toEqual({ total: 2, available: 0, in_stock: false });
  }, 120_000);
});
