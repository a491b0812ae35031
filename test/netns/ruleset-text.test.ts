// test/netns/ruleset-text.ts is the command line's twin of the agent's table (the agent benchmark's
// baseline loads it, dataplane-partial builds a table by hand with it). A hand copy drifts silently, so
// here the kernel is the judge: the table the agent builds (agent/netlink/ruleset-table.ts) and the one `nft -f`
// builds from the text must list the same, in two fresh namespaces.
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Nft, NftBatch, addTunnelgateRuleset, ipv4MapElement, ipv4ObjElement } from '../../agent/netlink/client.ts';
import { addDynamicChain, addSynproxyObject } from '../../agent/netlink/ruleset-chains.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';
import { sharedNeeds, tunnelCounterNames, tunnelElements } from '../../agent/dataplane/policy.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { isRoot, TestNetns } from './netns.ts';
import { TEXT_CHAIN_SIZES, rulesetNftText, tunnelsAddNftText, tunnelsDeleteNftText } from './ruleset-text.ts';

const T = 'tunnelgate';
const PREFIX = 'tg-';

/** `nft -j list table`, without what differs between two equal tables (handles). */
function listed(ns: TestNetns): unknown[] {
  const json = JSON.parse(ns.run('nft', '-j', 'list', 'table', 'ip', T)) as { nftables: Record<string, Record<string, unknown>>[] };
  return json.nftables
    .filter((o) => !o.metainfo)
    .map((o) => {
      const [kind, body] = Object.entries(o)[0]!;
      const { handle: _h, ...rest } = body as { handle?: number };
      return { [kind]: rest };
    });
}

type TwinTunnel = Parameters<typeof tunnelsAddNftText>[1][number] & { mtu: number };

/** What the agent's batch adds for these tunnels: counters, their policies' shared objects, map and set elements. */
async function agentAdds(ns: TestNetns, tunnels: readonly TwinTunnel[]): Promise<void> {
  const nft = Nft.open({ netns: ns.path });
  try {
    const b = new NftBatch();
    for (const t of tunnels) for (const c of tunnelCounterNames(t)) b.addCounter({ table: T, name: c });
    const needs = tunnels.map((t) => sharedNeeds(t));
    for (const m of new Set(needs.flatMap((n) => (n.mss === undefined ? [] : [n.mss])))) addSynproxyObject(b, T, m);
    for (const c of new Set(needs.flatMap((n) => n.chains))) addDynamicChain(b, T, c, TEXT_CHAIN_SIZES);
    b.addElements({ table: T, set: 'protected', elements: tunnels.map((t) => ipv4MapElement(t.protected_ip, t.origin_inner.split('/')[0]!)) });
    b.addElements({ table: T, set: 'tunnel_counters', elements: tunnels.map((t) => ipv4ObjElement(t.protected_ip, t.tunnel_name)) });
    const els = tunnels.flatMap((t) => tunnelElements({ ...t, id: '', origin_ip: '', edge_ip: '', edge_inner: '' }));
    for (const set of new Set(els.map((e) => e.set))) b.addElements({ table: T, set, elements: els.filter((e) => e.set === set).map((e) => e.el) });
    await nft.commit(b);
  } finally {
    nft.close();
  }
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('the nft -f twin of the agent table', () => {
  let ours: TestNetns;
  let theirs: TestNetns;

  beforeAll(() => {
    ours = new TestNetns();
    theirs = new TestNetns();
  });
  afterAll(() => {
    ours?.delete();
    theirs?.delete();
  });

  it('lists exactly as the table the agent builds', async () => {
    const nft = Nft.open({ netns: ours.path });
    try {
      const b = new NftBatch();
      addTunnelgateRuleset(b, { table: T, ifnamePrefix: PREFIX });
      await nft.commit(b);
    } finally {
      nft.close();
    }
    const file = join(mkdtempSync(join(tmpdir(), 'tg-ruleset-')), 'table.nft');
    writeFileSync(file, rulesetNftText({ table: T, ifnamePrefix: PREFIX }));
    theirs.run('nft', '-f', file);
    const a = listed(ours);
    expect(a.length).toBeGreaterThan(5); // table, two maps, three chains, their rules
    expect(listed(theirs)).toEqual(a);
  });

  it("the text twin of tunnels' counters and elements (the benchmark's baseline) lists as the agent's own", async () => {
    const tunnels = [1, 2, 3].map((i) => ({ tunnel_name: `tg-t${i}`, protected_ip: `203.0.113.${i}`, origin_inner: `100.64.0.${4 * i + 2}/30`, mtu: 1476 }));
    await agentAdds(ours, tunnels);
    const file = join(mkdtempSync(join(tmpdir(), 'tg-ruleset-')), 'tunnels.nft');
    writeFileSync(file, tunnelsAddNftText(T, tunnels).join('\n') + '\n');
    theirs.run('nft', '-f', file);
    expect(listed(theirs)).toEqual(listed(ours));
    writeFileSync(file, tunnelsDeleteNftText(T, tunnels).join('\n') + '\n');
    theirs.run('nft', '-f', file);
    expect(listed(theirs).length).toBeLessThan(listed(ours).length);
  });

  it('with policies too (port blocks, SYN proxy, rate limit, fragments), and their removal leaves the bare table', async () => {
    const edge: TunnelPolicy = { ports: [[22, 22], [80, 80], [443, 443], [5000, 10000]], protocol: 'both', syn_proxy: true, source_pps_limit: 1_000_000, drop_fragments: true };
    const tunnels = [
      { tunnel_name: 'tg-p1', protected_ip: '203.0.113.11', origin_inner: '100.64.1.2/30', mtu: 1476, policy: edge },
      { tunnel_name: 'tg-p2', protected_ip: '203.0.113.12', origin_inner: '100.64.1.6/30', mtu: 1400, policy: { ...edge, protocol: 'udp' as const, syn_proxy: false, source_pps_limit: 500 } },
      { tunnel_name: 'tg-p3', protected_ip: '203.0.113.13', origin_inner: '100.64.1.10/30', mtu: 1476 },
    ];
    // Both sides start from the bare table (the previous test's elements gone).
    const bare = join(mkdtempSync(join(tmpdir(), 'tg-ruleset-')), 'bare.nft');
    writeFileSync(bare, `flush ruleset\n${rulesetNftText({ table: T, ifnamePrefix: PREFIX })}`);
    ours.run('nft', '-f', bare);
    theirs.run('nft', '-f', bare);
    const bareListing = listed(theirs);
    await agentAdds(ours, tunnels);
    const file = join(mkdtempSync(join(tmpdir(), 'tg-ruleset-')), 'tunnels.nft');
    writeFileSync(file, tunnelsAddNftText(T, tunnels).join('\n') + '\n');
    theirs.run('nft', '-f', file);
    const a = listed(ours);
    expect(JSON.stringify(a)).toContain('synproxy_1436');
    // Each limited tunnel its own meter (tg-p1 and tg-p2), and the flow caps every tunnel jumps to.
    expect(JSON.stringify(a)).toContain('ratelimit_tg-p2_500');
    expect(JSON.stringify(a)).toContain('ratelimit_tg-p1_1000000');
    expect(JSON.stringify(a)).toContain('flows_65536');
    expect(listed(theirs)).toEqual(a);
    writeFileSync(file, tunnelsDeleteNftText(T, tunnels).join('\n') + '\n');
    theirs.run('nft', '-f', file);
    expect(listed(theirs)).toEqual(bareListing);
  });
});
