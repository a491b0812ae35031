// An agent upgraded over the table the previous release's agent built (release/previous.json; the table as that
// release printed it: test/fixtures/previous-table/table.nft, with its tunnels): one meter per rate-limit value
// shared by every tunnel with it, the allowlist after conntrack, no flow caps. At start the table is rebuilt in one
// batch (its rules differ) keeping every element, counter and mapping, so a connection established through the old
// table goes on without a break; the restore that follows gives each tunnel its own meter and its flow caps, and the
// old shared meter goes. Veth stand-in for GRE; the client, the edge and the origin in namespaces made here.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataplaneHandle, TunnelSpec } from '../../agent/dataplane/index.ts';
import { EXPECTED_RULES } from '../../agent/dataplane/kernel/table.ts';
import { flowsChainName, meterChainName } from '../../agent/netlink/ruleset.ts';
import { DYNAMIC_CHAIN_RULES } from '../../agent/netlink/ruleset-chains.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';
import { counterArgv, counterPackets, observeRuleset } from '../helpers/nft-observe.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { DataplaneEdge, EDGE_IP, NFT_TABLE as T } from './dataplane-edge.ts';
import { isRoot, TestNetns } from './netns.ts';
import { attachStandinOrigin, KEEP, Proc, SERVER } from './origin-standin.ts';

const FIXTURE = join(import.meta.dirname, '../fixtures/previous-table');
const CLIENT = '198.51.100.10';

/** The fixture's tunnels (test/fixtures/previous-table/tunnels.json), as the desired state. */
const fixtureTunnels = (JSON.parse(readFileSync(join(FIXTURE, 'tunnels.json'), 'utf8')) as { tunnel_name: string; protected_ip: string; origin_inner: string; mtu: number; policy?: TunnelPolicy }[]).map(
  (t, i): TunnelSpec => {
    const [a, b, c, d] = t.origin_inner.split('/')[0]!.split('.').map(Number) as [number, number, number, number];
    return {
      id: `00000000-0000-4000-8000-0000000000a${i + 1}`,
      tunnel_name: t.tunnel_name,
      protected_ip: t.protected_ip,
      origin_ip: `198.18.2.${i + 1}`,
      edge_ip: EDGE_IP,
      edge_inner: `${a}.${b}.${c}.${d - 1}/30`,
      origin_inner: t.origin_inner,
      mtu: t.mtu,
      ...(t.policy ? { policy: t.policy } : {}),
    };
  },
);
const [U1, U2] = fixtureTunnels as [TunnelSpec, TunnelSpec];

describe.skipIf(skipUnless(isRoot && onPath('hping3'), 'upgrade test: root (network namespaces) and hping3'))('upgrade over the previous release\'s table (shared meters, no flow caps)', () => {
  let edge: DataplaneEdge;
  let client: TestNetns;
  let origin: TestNetns;
  let dp: DataplaneHandle | undefined;
  let server: Proc | undefined;
  let conn: Proc | undefined;

  beforeAll(() => {
    edge = new DataplaneEdge('tg-upmeter');
    client = new TestNetns();
    origin = new TestNetns();
    for (const n of [client, origin]) n.run('ip', 'link', 'set', 'lo', 'up');
    edge.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client.name);
    edge.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    edge.run('ip', 'link', 'set', 'up0', 'up');
    edge.run('ip', 'route', 'add', 'default', 'via', CLIENT);
    edge.run('sysctl', '-qw', 'net.ipv4.ip_forward=1');
    client.run('ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
    client.run('ip', 'link', 'set', 'c0', 'up');
    client.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
  });
  afterAll(async () => {
    conn?.stop();
    server?.stop();
    await dp?.close();
    for (const n of [client, origin]) n?.delete();
    edge?.delete();
  });

  const nft = (...args: string[]): string => edge.run('nft', ...args);
  const rules = (): number =>
    nft('-a', 'list', 'table', 'ip', T)
      .split('\n')
      .filter((l) => l.includes('# handle') && !l.includes('{ # handle')).length;

  it('a connection made through the old table lives on; each tunnel gets its own meter and its flow caps', async () => {
    // The links and the agent's records, as the previous release left them: made by this agent, then its table
    // replaced by the one that release builds for the same tunnels.
    dp = await edge.openDataplane();
    expect((await dp.reconcile([U1, U2])).failed).toEqual([]);
    await dp.close();
    dp = undefined;
    nft('delete', 'table', 'ip', T);
    nft('-f', join(FIXTURE, 'table.nft'));
    expect(nft('list', 'chain', 'ip', T, 'ratelimit_100')).toContain('ip daddr . ip saddr limit rate over 100/second');
    expect(nft('list', 'table', 'ip', T)).not.toContain('flow_limits');

    // A client's connection to U1's origin, through the old table.
    attachStandinOrigin(edge, origin, U1);
    origin.run('bash', '-c', `nft -f - <<'EOF'\n${observeRuleset('prerouting', { flood: 'udp dport 7000' }, -300)}EOF`);
    await client.waitForPing('198.51.100.1');
    await edge.waitForPing(U1.origin_inner.split('/')[0]!);
    server = new Proc(origin, SERVER);
    await server.saw((l) => l === 'ready');
    conn = new Proc(client, KEEP, [U1.protected_ip, '8080']);
    await conn.saw((l) => l === 'open');
    conn.send('before');
    expect(await conn.saw((l) => l.includes('echo=before'))).toBe(`peer=${CLIENT} echo=before`);

    // The upgraded agent starts: the table is rebuilt, then the desired state restored, as at every start.
    dp = await edge.openDataplane();
    expect(dp.table).toBe('rebuilt');
    expect((await dp.restore()).failed).toEqual([]);
    conn.send('after');
    expect(await conn.saw((l) => l.includes('echo=after'))).toBe(`peer=${CLIENT} echo=after`);
    expect(conn.lines.some((l) => l.startsWith('closed'))).toBe(false);

    // The new shape: U1's own meter, both tunnels' flow caps, the old shared meter gone with its elements.
    const meter = meterChainName(U1.tunnel_name, 100);
    expect(rules()).toBe(EXPECTED_RULES.length + DYNAMIC_CHAIN_RULES.flows.length + DYNAMIC_CHAIN_RULES.meter.length);
    expect(nft('list', 'table', 'ip', T)).not.toContain('ratelimit_100 ');
    expect(nft('list', 'map', 'ip', T, 'rate_limits')).toContain(`${U1.protected_ip} : jump ${meter}`);
    expect(nft('list', 'map', 'ip', T, 'flow_limits')).toContain(`${U2.protected_ip} : jump ${flowsChainName(65_536)}`);
    // The meter meters: one client far over U1's limit gets through at most a small part.
    client.run('bash', '-c', `hping3 -q --udp -c 500 -i u1000 -p 7000 ${U1.protected_ip} >/dev/null 2>&1 || true`);
    const passed = counterPackets(origin.run(...counterArgv('flood')));
    expect(passed).toBeGreaterThan(0);
    expect(passed).toBeLessThan(250);
  }, 180_000);
});
