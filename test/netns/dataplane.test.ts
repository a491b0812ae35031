// The dataplane against this machine's kernel, in fresh network namespaces, with `nft -j` and `ip -j -d`
// as oracles. This kernel has no GRE: links are the veth stand-in (linkKind 'veth-standin'); the GRE path
// runs in the VM (grevm). Everything else (nftables table, map elements, counters, conntrack, state,
// drift repair) is the production code path.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KernelError, standinPeerName, type DataplaneHandle, type TunnelSpec } from '../../agent/dataplane/index.ts';
import { STATE_FILE } from '../../agent/dataplane/state.ts';
import { DataplaneEdge, NFT_TABLE as T, numberedTunnels } from './dataplane-edge.ts';
import { EXPECTED_RULES } from '../../agent/dataplane/kernel/table.ts';
import { DYNAMIC_CHAIN_RULES } from '../../agent/netlink/ruleset-chains.ts';

/** Rules of a flow-cap chain (one per max_flows value in use) and of a tunnel's meter (one per tunnel with a per-source limit). */
const FLOW_RULES = DYNAMIC_CHAIN_RULES.flows.length;
const METER_RULES = DYNAMIC_CHAIN_RULES.meter.length;
import { tunnelCounterNames } from '../../agent/dataplane/policy.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

/** Tunnel i: protected 203.0.(112+i/256).(i%256), inner /30 number i of 100.64.0.0/10. */
const tun = numberedTunnels('tg-t', 112);

interface IpLink {
  ifname: string;
  ifindex: number;
  mtu: number;
  flags: string[];
  linkinfo?: { info_kind: string };
}
interface IpAddr {
  ifname: string;
  addr_info: { family: string; local: string; prefixlen: number }[];
}
type NftObj = Record<string, Record<string, unknown>>;

async function kernelError(p: Promise<unknown>): Promise<KernelError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(KernelError);
  return e as KernelError;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('dataplane in a fresh namespace (veth stand-in for GRE)', () => {
  let edge: DataplaneEdge;
  let client: TestNetns;
  let dp: DataplaneHandle;

  const open = (): Promise<DataplaneHandle> => edge.openDataplane();
  const ruleset = (): NftObj[] => (JSON.parse(edge.run('nft', '-j', 'list', 'ruleset')) as { nftables: NftObj[] }).nftables;
  const rules = (): NftObj[] => ruleset().filter((o) => o.rule);
  const mapElems = (name: string): Map<string, unknown> => {
    const m = ruleset().find((o) => o.map?.name === name)!.map as { elem?: [string, unknown][] };
    return new Map((m.elem ?? []).map(([k, v]) => [k, v]));
  };
  const counters = (): Map<string, number> => new Map(ruleset().filter((o) => o.counter).map((o) => [o.counter!.name as string, o.counter!.handle as number]));
  const links = (): Map<string, IpLink> => new Map(edge.ipJson<IpLink[]>('-d', 'link', 'show').map((l) => [l.ifname, l]));
  const addrs = (name: string): string[] =>
    edge
      .ipJson<IpAddr[]>('-4', 'addr', 'show', 'dev', name)
      .flatMap((a) => a.addr_info)
      .map((a) => `${a.local}/${a.prefixlen}`);
  const tgLinks = (): string[] => [...links().keys()].filter((n) => n.startsWith('tg-t')).sort();
  const conntrackDst = (ip: string): number => {
    const out = edge.run('bash', '-c', `conntrack -L -d ${ip} 2>/dev/null || true`);
    return out.split('\n').filter((l) => l.includes(`dst=${ip}`)).length;
  };

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-dp');
    client = new TestNetns();
    // A client on an "upstream" link, so packets to protected IPs cross the edge's prerouting hook.
    edge.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client.name);
    edge.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    edge.run('ip', 'link', 'set', 'up0', 'up');
    client.run('ip', 'addr', 'add', '198.51.100.10/24', 'dev', 'c0');
    client.run('ip', 'link', 'set', 'c0', 'up');
    client.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
    // Links the agent did not create, one of them even with the agent's prefix.
    edge.run('ip', 'link', 'add', 'tg-foreign', 'type', 'veth', 'peer', 'name', 'foreignp');
    edge.run('ip', 'link', 'add', 'other0', 'type', 'veth', 'peer', 'name', 'other0p');
    dp = await open();
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
    client?.delete();
  });

  it('start builds the table once, enables forwarding; no tunnel yet', () => {
    expect(dp.table).toBe('created');
    expect(edge.run('cat', '/proc/sys/net/ipv4/ip_forward').trim()).toBe('1');
    expect(rules()).toHaveLength(EXPECTED_RULES.length);
    expect(ruleset().filter((o) => o.table).map((o) => o.table!.name)).toEqual([T]);
    expect(mapElems('protected').size).toBe(0);
  });

  it('apply: a link (kind, MTU, up, inner address, loose rp_filter) and map elements + counter; no rule', async () => {
    const t = tun(1);
    expect(await dp.apply(t)).toEqual({ added: 1, changed: 0, removed: 0, unchanged: 0 });
    const l = links().get('tg-t1')!;
    expect(l.linkinfo?.info_kind).toBe('veth');
    expect(l.mtu).toBe(1476);
    expect(l.flags).toContain('UP');
    expect(links().has(standinPeerName('tg-t1'))).toBe(true);
    expect(addrs('tg-t1')).toEqual(['100.64.0.5/30']);
    expect(edge.run('cat', '/proc/sys/net/ipv4/conf/tg-t1/rp_filter').trim()).toBe('2');
    // The table is IPv4 only: IPv6 from an origin through its link would bypass the isolation, so the link has none.
    expect(edge.run('cat', '/proc/sys/net/ipv6/conf/tg-t1/disable_ipv6').trim()).toBe('1');
    expect(mapElems('protected')).toEqual(new Map([['203.0.112.1', '100.64.0.6']]));
    expect(mapElems('tunnel_counters')).toEqual(new Map([['203.0.112.1', 'tg-t1']]));
    expect([...counters().keys()].sort()).toEqual(tunnelCounterNames(tun(1)).sort());
    // The table's own rules and the flow caps of its max_flows (the default), a chain made with their first user.
    expect(rules()).toHaveLength(EXPECTED_RULES.length + FLOW_RULES);
    expect(await dp.has(t.id)).toBe(true);
  });

  it('apply is idempotent: the second apply changes nothing (same ifindex, same counter handle)', async () => {
    const before = { l: links().get('tg-t1')!.ifindex, c: counters().get('tg-t1'), rs: edge.run('nft', 'list', 'ruleset') };
    expect(await dp.apply(tun(1))).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1 });
    expect(links().get('tg-t1')!.ifindex).toBe(before.l);
    expect(counters().get('tg-t1')).toBe(before.c);
    expect(edge.run('nft', 'list', 'ruleset')).toBe(before.rs);
  });

  it('a single apply repairs its own lost policy elements (read back by key), and only its own', async () => {
    // Fails when a single apply trusts its records instead of reading its elements: it would answer unchanged.
    edge.run('nft', 'delete', 'element', 'ip', T, 'drop_not_allowed', '{ 203.0.112.1 }');
    edge.run('nft', 'delete', 'element', 'ip', T, 'drop_invalid', '{ 203.0.112.1 }');
    expect(mapElems('drop_not_allowed').has('203.0.112.1')).toBe(false);
    expect(await dp.apply(tun(1))).toEqual({ added: 0, changed: 1, removed: 0, unchanged: 0 });
    expect(mapElems('drop_not_allowed').get('203.0.112.1')).toBe('tg-t1.not_allowed');
    expect(mapElems('drop_invalid').get('203.0.112.1')).toBe('tg-t1.invalid');
    expect(await dp.apply(tun(1))).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1 });
  });

  it('change (new origin, new inner subnet): link and elements updated, counted as changed', async () => {
    const t = tun(1, { origin_ip: '198.18.9.9', edge_inner: '100.64.9.1/30', origin_inner: '100.64.9.2/30', mtu: 1400 });
    expect(await dp.apply(t)).toEqual({ added: 0, changed: 1, removed: 0, unchanged: 0 });
    expect(addrs('tg-t1')).toEqual(['100.64.9.1/30']);
    expect(links().get('tg-t1')!.mtu).toBe(1400);
    expect(mapElems('protected')).toEqual(new Map([['203.0.112.1', '100.64.9.2']]));
    expect(await dp.apply(t)).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1 });
    // only an inner-subnet change keeps the link (same ifindex) and moves the address
    const idx = links().get('tg-t1')!.ifindex;
    const t2 = { ...t, edge_inner: '100.64.10.1/30', origin_inner: '100.64.10.2/30' };
    expect(await dp.apply(t2)).toEqual({ added: 0, changed: 1, removed: 0, unchanged: 0 });
    expect(links().get('tg-t1')!.ifindex).toBe(idx);
    expect(addrs('tg-t1')).toEqual(['100.64.10.1/30']);
    expect(mapElems('protected').get('203.0.112.1')).toBe('100.64.10.2');
  });

  it('remove: link, elements and counter go; removing again is removed: 0', async () => {
    expect(await dp.remove(tun(1))).toEqual({ added: 0, changed: 0, removed: 1, unchanged: 0 });
    expect(links().has('tg-t1')).toBe(false);
    expect(links().has(standinPeerName('tg-t1'))).toBe(false);
    expect(mapElems('protected').size).toBe(0);
    expect(mapElems('tunnel_counters').size).toBe(0);
    expect(counters().size).toBe(0);
    expect(await dp.has(tun(1).id)).toBe(false);
    expect(await dp.remove(tun(1))).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 0 });
    expect(rules()).toHaveLength(EXPECTED_RULES.length);
  });

  it('refuses what it must not do, as KernelError, before touching the kernel', async () => {
    const foreign = links().get('tg-foreign')!;
    const e = await kernelError(dp.apply(tun(5, { tunnel_name: 'tg-foreign' })));
    expect(e.message).toContain('not created by this agent');
    expect(links().get('tg-foreign')!.ifindex).toBe(foreign.ifindex);
    expect(mapElems('protected').size).toBe(0);
    expect((await kernelError(dp.apply(tun(5, { edge_ip: '192.0.2.99' })))).message).toContain('edge_ip');
    expect((await kernelError(dp.apply(tun(5, { tunnel_name: 'eth5' })))).message).toContain('prefix');
    expect((await kernelError(dp.reconcile([tun(5), tun(6, { protected_ip: tun(5).protected_ip })]))).message).toContain('share protected_ip');
    expect(tgLinks()).toEqual([]);
  });

  it('reconcile: adds, changes and removes; untouched tunnels keep their link (ifindex) and counter', async () => {
    expect(await dp.reconcile([tun(1), tun(2), tun(3), tun(4)])).toEqual({ added: 4, changed: 0, removed: 0, unchanged: 0, failed: [] });
    const before = links();
    const ctr = counters();
    const res = await dp.reconcile([tun(1), tun(2, { origin_ip: '198.18.7.7', origin_inner: '100.64.0.10/30' }), tun(4), tun(7)]);
    expect(res).toEqual({ added: 1, changed: 1, removed: 1, unchanged: 2, failed: [] });
    const after = links();
    expect(after.get('tg-t1')!.ifindex).toBe(before.get('tg-t1')!.ifindex);
    expect(after.get('tg-t4')!.ifindex).toBe(before.get('tg-t4')!.ifindex);
    expect(after.get('tg-t2')!.ifindex).not.toBe(before.get('tg-t2')!.ifindex); // new origin: new link
    expect(counters().get('tg-t1')).toBe(ctr.get('tg-t1'));
    expect(counters().get('tg-t4')).toBe(ctr.get('tg-t4'));
    expect(tgLinks()).toEqual(['tg-t1', 'tg-t2', 'tg-t4', 'tg-t7']);
    expect([...mapElems('protected').keys()].sort()).toEqual(['203.0.112.1', '203.0.112.2', '203.0.112.4', '203.0.112.7']);
    expect(mapElems('protected').get('203.0.112.2')).toBe('100.64.0.10');
    expect([...counters().keys()].sort()).toEqual([1, 2, 4, 7].flatMap((i) => tunnelCounterNames(tun(i))).sort());
    expect(await dp.reconcile([tun(1), tun(2, { origin_ip: '198.18.7.7', origin_inner: '100.64.0.10/30' }), tun(4), tun(7)])).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 4, failed: [] });
  });

  it('drift: a link deleted, an element deleted, a link set down, a stray element: reconcile fixes only those', async () => {
    const desired = [tun(1), tun(2, { origin_ip: '198.18.7.7', origin_inner: '100.64.0.10/30' }), tun(4), tun(7)];
    const before = links();
    edge.run('ip', 'link', 'del', 'tg-t4');
    edge.run('nft', 'delete', 'element', 'ip', T, 'protected', '{ 203.0.112.7 }');
    edge.run('ip', 'link', 'set', 'tg-t2', 'down');
    edge.run('nft', 'add', 'element', 'ip', T, 'protected', '{ 203.0.113.250 : 100.127.0.2 }');
    expect(await dp.reconcile(desired)).toEqual({ added: 0, changed: 3, removed: 0, unchanged: 1, failed: [] });
    const after = links();
    expect(after.get('tg-t1')!.ifindex).toBe(before.get('tg-t1')!.ifindex);
    expect(after.get('tg-t2')!.ifindex).toBe(before.get('tg-t2')!.ifindex);
    expect(after.get('tg-t7')!.ifindex).toBe(before.get('tg-t7')!.ifindex);
    expect(after.get('tg-t4')!.ifindex).not.toBe(before.get('tg-t4')!.ifindex);
    expect(after.get('tg-t2')!.flags).toContain('UP');
    expect(addrs('tg-t4')).toEqual([tun(4).edge_inner]);
    const m = mapElems('protected');
    expect(m.get('203.0.112.7')).toBe('100.64.0.30');
    expect(m.has('203.0.113.250')).toBe(false);
    expect(m.size).toBe(4);
    expect(await dp.reconcile(desired)).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 4, failed: [] });
  });

  it('state survives re-creating the dataplane (agent restart) without touching the kernel', async () => {
    const rs = edge.run('nft', '-a', 'list', 'ruleset');
    const before = links();
    await dp.close();
    expect(readFileSync(join(edge.stateDir, STATE_FILE), 'utf8')).toContain('tg-t7');
    dp = await open();
    expect(dp.table).toBe('present');
    expect(edge.run('nft', '-a', 'list', 'ruleset')).toBe(rs);
    for (const n of ['tg-t1', 'tg-t2', 'tg-t4', 'tg-t7']) expect(links().get(n)!.ifindex).toBe(before.get(n)!.ifindex);
    expect(await dp.has(tun(7).id)).toBe(true);
    expect(dp.tunnels().map((t) => t.tunnel_name).sort()).toEqual(['tg-t1', 'tg-t2', 'tg-t4', 'tg-t7']);
    expect(await dp.reconcile([tun(1), tun(2, { origin_ip: '198.18.7.7', origin_inner: '100.64.0.10/30' }), tun(4), tun(7)])).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 4, failed: [] });
  });

  it('a tampered table is rebuilt at start with its elements and counters kept', async () => {
    await dp.close();
    const handle = ruleset().find((o) => o.rule && (o.rule.chain as string) === 'guard')!.rule!.handle as number;
    edge.run('nft', 'delete', 'rule', 'ip', T, 'guard', 'handle', String(handle));
    expect(rules()).toHaveLength(EXPECTED_RULES.length + FLOW_RULES - 1);
    dp = await open();
    expect(dp.table).toBe('rebuilt');
    expect(rules()).toHaveLength(EXPECTED_RULES.length + FLOW_RULES);
    expect(mapElems('protected').size).toBe(4);
    expect([...counters().keys()].sort()).toEqual([1, 2, 4, 7].flatMap((i) => tunnelCounterNames(tun(i))).sort());
  });

  it('a rule with the same expressions but another value (drop turned into accept) is tampering too: rebuilt at start', async () => {
    await dp.close();
    // from_tunnel's last rule drops whatever an origin sends that is neither a reply nor its probe's.
    const last = ruleset().filter((o) => o.rule && (o.rule.chain as string) === 'from_tunnel').at(-1)!.rule!;
    edge.run('nft', 'replace', 'rule', 'ip', T, 'from_tunnel', 'handle', String(last.handle as number), 'accept');
    expect(edge.run('nft', 'list', 'chain', 'ip', T, 'from_tunnel')).toMatch(/\n\s*accept\n/);
    expect(rules()).toHaveLength(EXPECTED_RULES.length + FLOW_RULES);
    dp = await open();
    expect(dp.table).toBe('rebuilt');
    expect(edge.run('nft', 'list', 'chain', 'ip', T, 'from_tunnel')).not.toMatch(/\n\s*accept\n/);
    expect(mapElems('protected').size).toBe(4);
    // The reference copy the check built is gone, and a table built as the agent builds it is left alone.
    expect(edge.run('nft', 'list', 'tables')).not.toContain('reference');
    await dp.close();
    // A copy left behind by a killed start goes with the next one, which finds the table as the agent builds it.
    edge.run('nft', 'add', 'table', 'ip', `${T}_reference`, '{ flags dormant; }');
    dp = await open();
    expect(dp.table).toBe('present');
    expect(edge.run('nft', 'list', 'tables')).not.toContain('reference');
  });

  it('conntrack entries of a changed and of a removed protected IP are flushed, others kept', async () => {
    // Real flows from the client to three protected IPs: the entries exist once the packets were forwarded.
    // A datagram can be lost on a loaded host (a CI run once saw none for .1), so each is sent until its entry
    // is there: every resend is a new flow (a new source port), hence counts are compared, not fixed. The
    // unreplied UDP entries must outlive a slow test (30 s by default): "others kept" must not read an expiry.
    edge.run('sysctl', '-qw', 'net.netfilter.nf_conntrack_udp_timeout=3600');
    for (const ip of ['203.0.112.1', '203.0.112.4', '203.0.112.7']) {
      await until(`a conntrack entry for ${ip}`, async () => {
        client.run('bash', '-c', `echo probe > /dev/udp/${ip}/5353`);
        return conntrackDst(ip) >= 1;
      });
    }
    client.run('bash', '-c', 'timeout 2 bash -c "exec 3<>/dev/tcp/203.0.112.4/80" 2>/dev/null || true');
    const kept = conntrackDst('203.0.112.1');
    expect(kept).toBeGreaterThanOrEqual(1);
    expect(conntrackDst('203.0.112.4')).toBeGreaterThanOrEqual(2);
    expect(conntrackDst('203.0.112.7')).toBeGreaterThanOrEqual(1);
    // The counters count per tunnel: traffic to .4 was counted on tg-t4 only.
    const ctr = ruleset().filter((o) => o.counter).map((o) => o.counter!) as { name: string; packets: number }[];
    expect(ctr.find((c) => c.name === 'tg-t4')!.packets).toBeGreaterThanOrEqual(2);
    expect(ctr.find((c) => c.name === 'tg-t2')!.packets).toBe(0);

    expect(await dp.remove(tun(4))).toEqual({ added: 0, changed: 0, removed: 1, unchanged: 0 });
    expect(conntrackDst('203.0.112.4')).toBe(0);
    expect(conntrackDst('203.0.112.1')).toBe(kept);
    expect(await dp.apply(tun(7, { origin_inner: '100.64.0.29/30', edge_inner: '100.64.0.30/30' }))).toEqual({ added: 0, changed: 1, removed: 0, unchanged: 0 });
    expect(conntrackDst('203.0.112.7')).toBe(0);
    expect(conntrackDst('203.0.112.1')).toBe(kept);
  });

  it('rules per tunnel: none but its own meter (4 rules) with a per-source limit; one flow-cap chain per max_flows value in use, at 1 and at 1,000 tunnels', async () => {
    expect(await dp.reconcile([tun(1)])).toMatchObject({ unchanged: 1, removed: 2 });
    expect(rules()).toHaveLength(EXPECTED_RULES.length + FLOW_RULES);
    // Every tunnel with a policy: its own port list, half of them syn-proxied, every other one with the same rate
    // limit (a meter of its own each: a meter's capacity is its set's, and a rule names its set), every third
    // dropping fragments, every tenth with a max_flows of its own kind (one more flow-cap chain for all of them).
    const policy = (i: number): TunnelSpec['policy'] => ({
      ports: [[1000 + i, 1000 + i], [8000, 8100]],
      protocol: 'both',
      syn_proxy: i % 2 === 0,
      source_pps_limit: i % 2 === 0 ? 5000 : null,
      drop_fragments: i % 3 === 0,
      ...(i % 10 === 0 ? { max_flows: 2_000 } : {}),
    });
    const many = Array.from({ length: 1000 }, (_, i) => tun(i + 1, { policy: policy(i + 1) }));
    expect(await dp.reconcile([many[0]!])).toMatchObject({ changed: 1, failed: [] });
    expect(rules()).toHaveLength(EXPECTED_RULES.length + FLOW_RULES);
    expect(await dp.reconcile(many)).toEqual({ added: 999, changed: 0, removed: 0, unchanged: 1, failed: [] });
    expect(rules()).toHaveLength(EXPECTED_RULES.length + 2 * FLOW_RULES + 500 * METER_RULES);
    expect(mapElems('protected').size).toBe(1000);
    expect(counters().size).toBe(1000 * tunnelCounterNames(tun(1)).length);
    expect(tgLinks()).toHaveLength(1000);
    expect(await dp.reconcile(many)).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1000, failed: [] });
    // One tunnel's policy changed alone: only its elements move.
    expect(await dp.apply(tun(7, { policy: { ...policy(7)!, ports: '*' } }))).toEqual({ added: 0, changed: 1, removed: 0, unchanged: 0 });
    expect(await dp.reconcile(many)).toMatchObject({ changed: 1, unchanged: 999 });
  }, 120_000);

  it('links the agent did not create are never touched, even by a reconcile to nothing', async () => {
    const foreign = links().get('tg-foreign')!;
    const other = links().get('other0')!;
    expect(await dp.reconcile([])).toEqual({ added: 0, changed: 0, removed: 1000, unchanged: 0, failed: [] });
    expect(tgLinks()).toEqual([]);
    expect(links().get('tg-foreign')!.ifindex).toBe(foreign.ifindex);
    expect(links().get('other0')!.ifindex).toBe(other.ifindex);
    expect(links().has('foreignp')).toBe(true);
    expect(mapElems('protected').size).toBe(0);
    expect(counters().size).toBe(0);
    expect(rules()).toHaveLength(EXPECTED_RULES.length);
  }, 120_000);
});
