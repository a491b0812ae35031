// Our nftables client against this machine's kernel, in a fresh network namespace, with `nft` as the oracle.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NetlinkError, Nft, NftBatch, NftBatchError, addTunnelgateRuleset, ipv4MapElement, ipv4ObjElement } from '../../agent/netlink/client.ts';
import { EXPECTED_RULES } from '../../agent/dataplane/kernel/table.ts';
import { elementId, tunnelCounterNames, tunnelElements } from '../../agent/dataplane/policy.ts';
import { synproxyName } from '../../agent/netlink/ruleset.ts';
import { addDynamicChain, addSynproxyObject, deleteDynamicChain } from '../../agent/netlink/ruleset-chains.ts';
import { sharedNeeds } from '../../agent/dataplane/policy.ts';
import { TEXT_CHAIN_SIZES } from './ruleset-text.ts';
import { bytesToIpv4 } from '../../agent/netlink/attrs.ts';
import { DEFAULT_POLICY } from '../../common/tunnel-policy.ts';
import { benchTunnel } from '../../bench/lib/tunnels.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

const T = 'tunnelgate';
const protectedIp = (i: number): string => `203.0.${112 + (i >> 8)}.${i & 255}`;
const innerIp = (i: number, gen = 0): string => `100.${64 + gen}.${i >> 6}.${((i & 63) << 2) + 2}`;

type NftJson = { nftables: Record<string, Record<string, unknown>>[] };

async function batchError(p: Promise<unknown>): Promise<NftBatchError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(NftBatchError);
  return e as NftBatchError;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('nftables in a fresh namespace', () => {
  let ns: TestNetns;
  let nft: Nft;
  const listJson = (...what: string[]): NftJson => JSON.parse(ns.run('nft', '-j', 'list', ...what)) as NftJson;
  const mapElemsByNft = (): Map<string, string> => {
    const set = listJson('map', 'ip', T, 'protected').nftables.find((o) => o.map)!.map as { elem?: [string, string][] };
    return new Map((set.elem ?? []).map(([k, v]) => [k, v]));
  };

  beforeAll(() => {
    ns = new TestNetns();
    nft = Nft.open({ netns: ns.path });
  });
  afterAll(() => {
    nft?.close();
    ns?.delete();
  });

  it('builds the table in one batch; nft prints the intended ruleset', async () => {
    const b = new NftBatch();
    addTunnelgateRuleset(b, { table: T, ifnamePrefix: 'tg-' });
    await nft.commit(b);
    const text = ns.run('nft', 'list', 'ruleset');
    expect(text).toContain('type nat hook prerouting priority dstnat; policy accept;');
    expect(text).toContain('meta l4proto { tcp, udp } counter packets 0 bytes 0 dnat to ip daddr map @protected');
    expect(text).toContain('counter name ip daddr map @tunnel_counters');
    expect(text).toContain('type filter hook forward priority filter; policy accept;');
    expect(text).toContain('tcp flags syn oifname "tg-*" tcp option maxseg size set rt mtu');
    expect(text).toContain('ct status dnat iifname != "tg-*" accept');
    expect(text).toContain('tcp flags syn / fin,syn,rst,ack ip daddr @synproxied notrack');
    expect(text).toContain('tcp flags syn / fin,syn,rst,ack ip daddr @synproxied counter name ip daddr map @drop_invalid drop');
    expect(text).toContain('ip frag-off & 8191 == 0 jump allowlist');
    expect(text).toContain('counter name ip daddr map @tunnel_counters jump inbound');
    expect(text).toContain('iifname "tg-*" goto tunnel_to_p');
    expect(text).toContain('ip saddr @bogons counter name ip daddr map @drop_spoofed_in drop');
    expect(text).toContain('ip daddr vmap @flow_limits');
    expect(text).toContain('ip daddr . meta l4proto . th dport & 65280 @allowed_256 return');
    expect(text).toContain('ip daddr . meta l4proto . th dport @allowed_1 return');
    expect(text).toContain('ct direction reply ct status dnat iifname . ip saddr . ct original ip daddr @replies jump tunnel_reply');
    expect(text).toContain('counter name iifname map @tunnel_out');
    expect(text).toContain('ct state invalid,untracked jump guard_ct');
    expect(text).toContain('synproxy name ip daddr map @syn_proxy');
    expect(text).toContain('ct status ! dnat jump guard_nodnat');
    const json = listJson('ruleset').nftables;
    expect(json.filter((o) => o.map).map((o) => o.map)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ family: 'ip', name: 'protected', table: T, type: 'ipv4_addr', map: 'ipv4_addr' }),
        expect.objectContaining({ family: 'ip', name: 'tunnel_counters', table: T, type: 'ipv4_addr', map: 'counter' }),
        expect.objectContaining({ name: 'drop_spoofed', type: 'ifname', map: 'counter' }),
        expect.objectContaining({ name: 'rate_limits', type: 'ipv4_addr', map: 'verdict' }),
        expect.objectContaining({ name: 'flow_limits', type: 'ipv4_addr', map: 'verdict' }),
        expect.objectContaining({ name: 'drop_spoofed_in', type: 'ipv4_addr', map: 'counter' }),
      ]),
    );
    expect(json.filter((o) => o.chain).map((o) => o.chain)).toEqual(
      expect.arrayContaining([
        // one lookup of every packet for `inbound` (per-tunnel counters, bogus sources, fragments, the allowlist, the
        // per-source meters and the SYN proxy's notrack: every packet to P, before defragmentation and conntrack)
        expect.objectContaining({ name: 'early', type: 'filter', hook: 'prerouting', prio: -450, policy: 'accept' }),
        expect.objectContaining({ name: 'prerouting', type: 'nat', hook: 'prerouting', prio: -100, policy: 'accept' }),
        expect.objectContaining({ name: 'nat_out', type: 'nat', hook: 'output', prio: -100, policy: 'accept' }),
        // one forward chain (the MSS clamp its first rule): a second base chain costs every forwarded packet
        expect.objectContaining({ name: 'guard', type: 'filter', hook: 'forward', prio: 0, policy: 'accept' }),
      ]),
    );
    expect(json.filter((o) => o.chain && (o.chain as { hook?: string }).hook === 'forward')).toHaveLength(1);
    // two chains on prerouting (early, and the nat chain, which sees first packets only): every base chain costs
    // every packet (the policy must cost little forwarding rate)
    expect(json.filter((o) => o.chain && (o.chain as { hook?: string }).hook === 'prerouting')).toHaveLength(2);
    expect(json.filter((o) => o.rule)).toHaveLength(EXPECTED_RULES.length);
    expect((await nft.listRules(T)).map((r) => `${r.chain}: ${r.exprs.join(' ')}`)).toEqual(EXPECTED_RULES);
  });

  it('1,000 tunnels (map element + named counter + counter-map element) in one batch, listed back', async () => {
    const b = new NftBatch();
    for (let i = 0; i < 1000; i++) b.addCounter({ table: T, name: `tun-${i}` });
    b.addElements({ table: T, set: 'protected', elements: Array.from({ length: 1000 }, (_, i) => ipv4MapElement(protectedIp(i), innerIp(i))) });
    b.addElements({ table: T, set: 'tunnel_counters', elements: Array.from({ length: 1000 }, (_, i) => ipv4ObjElement(protectedIp(i), `tun-${i}`)) });
    await nft.commit(b);

    const ours = await nft.listIpv4Map(T, 'protected');
    expect(ours.size).toBe(1000);
    for (let i = 0; i < 1000; i++) expect(ours.get(protectedIp(i))).toBe(innerIp(i));
    expect(mapElemsByNft()).toEqual(ours);

    const counters = await nft.listCounters(T);
    expect(counters).toHaveLength(1000);
    expect(counters.find((c) => c.name === 'tun-7')).toMatchObject({ bytes: 0n, packets: 0n, use: 1 });
    const objmap = await nft.listSetElements(T, 'tunnel_counters');
    expect(objmap).toHaveLength(1000);
    expect(new Set(objmap.map((e) => e.objref))).toEqual(new Set(Array.from({ length: 1000 }, (_, i) => `tun-${i}`)));
    // The lean listings the dataplane reads back with agree with the full ones.
    const objByIp = await nft.listIpv4ObjMap(T, 'tunnel_counters');
    expect(objByIp.size).toBe(1000);
    for (let i = 0; i < 1000; i++) expect(objByIp.get(protectedIp(i))).toBe(`tun-${i}`);
    expect(await nft.listCounterNames(T)).toEqual(new Set(counters.map((c) => c.name)));
    expect(listJson('counters', 'table', 'ip', T).nftables.filter((o) => o.counter)).toHaveLength(1000);
    // the rule count does not grow with tunnels
    expect(await nft.listRules(T)).toHaveLength(EXPECTED_RULES.length);
    // Many counters by name in one request (the health checks' read per tick), over the 256-GET chunk: a
    // missing one is absent, not an error for the others.
    const wanted = [...Array.from({ length: 600 }, (_, i) => `tun-${Math.floor(i * 1.5)}`), 'no-such-counter'];
    const got = await nft.getCounters(T, wanted);
    expect(got.size).toBe(new Set(wanted).size - 1);
    expect(got.has('no-such-counter')).toBe(false);
    expect(got.get('tun-898')).toMatchObject({ name: 'tun-898', packets: 0n, bytes: 0n });
  });

  it('gets one element by key without a dump: map, object map and interval set; ENOENT for a missing key is undefined', async () => {
    const got = await nft.getSetElement(T, 'protected', ipv4MapElement(protectedIp(7), '0.0.0.0'));
    expect(got && bytesToIpv4(got.key)).toBe(protectedIp(7));
    expect(got?.data && bytesToIpv4(got.data)).toBe(innerIp(7));
    expect(await nft.getSetElement(T, 'tunnel_counters', ipv4ObjElement(protectedIp(7), ''))).toMatchObject({ objref: 'tun-7' });
    await expect(nft.getSetElement(T, 'protected', ipv4MapElement('198.18.0.1', '0.0.0.0'))).resolves.toBeUndefined();
    // A tunnel's policy elements (interval concatenation, ifname keys, verdicts) read back as the dump spells them.
    const spec = { ...benchTunnel(9), protected_ip: protectedIp(900), policy: { ...DEFAULT_POLICY, ports: [[80, 81]] as [number, number][], source_pps_limit: 100, syn_proxy: true, drop_fragments: true } };
    const b = new NftBatch();
    for (const c of sharedNeeds(spec).chains) addDynamicChain(b, T, c, TEXT_CHAIN_SIZES);
    addSynproxyObject(b, T, spec.mtu - 40);
    for (const c of tunnelCounterNames(spec)) b.addCounter({ table: T, name: c });
    const els = tunnelElements(spec);
    for (const e of els) b.addElements({ table: T, set: e.set, elements: [e.el] });
    await nft.commit(b);
    for (const e of els) {
      const k = await nft.getSetElement(T, e.set, e.el);
      expect(k && elementId(e.set, k)).toBe(e.id);
    }
    // The allowlist's blocks are exact keys: a port inside a block but not its first one is no element.
    const allowed = els.find((e) => e.set === 'allowed_1')!;
    const inside = Buffer.from(allowed.el.key);
    inside.writeUInt16BE(82, inside.length - 4);
    await expect(nft.getSetElement(T, 'allowed_1', { key: inside })).resolves.toBeUndefined();
    const cleanup = new NftBatch();
    for (const e of els) cleanup.deleteElements({ table: T, set: e.set, elements: [e.el] });
    for (const c of tunnelCounterNames(spec)) cleanup.deleteCounter(T, c);
    cleanup.deleteSynproxy(T, synproxyName(spec.mtu - 40));
    for (const c of sharedNeeds(spec).chains) deleteDynamicChain(cleanup, T, c);
    await nft.commit(cleanup);
    for (const e of els) await expect(nft.getSetElement(T, e.set, e.el)).resolves.toBeUndefined();
  });

  it('changes 250 mappings atomically (delete + add in one batch)', async () => {
    const changed = Array.from({ length: 250 }, (_, i) => i * 4);
    const b = new NftBatch();
    b.deleteElements({ table: T, set: 'protected', elements: changed.map((i) => ipv4MapElement(protectedIp(i), innerIp(i))) });
    b.addElements({ table: T, set: 'protected', elements: changed.map((i) => ipv4MapElement(protectedIp(i), innerIp(i, 1))) });
    await nft.commit(b);
    const byNft = mapElemsByNft();
    expect(byNft.size).toBe(1000);
    expect(byNft.get(protectedIp(4))).toBe(innerIp(4, 1));
    expect(byNft.get(protectedIp(5))).toBe(innerIp(5));
    expect(await nft.listIpv4Map(T, 'protected')).toEqual(byNft);
  });

  it('adding an existing key with a new value is EEXIST, and nothing of that batch is applied', async () => {
    const b = new NftBatch();
    b.addElements({ table: T, set: 'protected', elements: [ipv4MapElement('198.18.0.1', '100.127.0.2')] });
    b.addElements({ table: T, set: 'protected', elements: [ipv4MapElement(protectedIp(1), '100.127.0.6')] });
    const e = await batchError(nft.commit(b));
    expect(e.code).toBe('EEXIST');
    expect(e.index).toBe(1);
    expect(e.failures.map((f) => f.index)).toEqual([1]);
    const now = mapElemsByNft();
    expect(now.has('198.18.0.1')).toBe(false);
    expect(now.get(protectedIp(1))).toBe(innerIp(1));
  });

  it('a batch with one bad message fails whole: typed error with extack text and the failing index', async () => {
    const b = new NftBatch();
    b.addCounter({ table: T, name: 'would-be-new' });
    b.addElements({ table: T, set: 'protected', elements: [ipv4MapElement('198.18.0.2', '100.127.0.10')] });
    b.addTable('x'.repeat(300)); // longer than NFT_NAME_MAXLEN: fails the kernel's attribute policy
    b.addCounter({ table: T, name: 'also-new' });
    const e = await batchError(nft.commit(b));
    expect(e).toBeInstanceOf(NetlinkError);
    expect(e.index).toBe(2);
    expect(e.code).toBe('ERANGE');
    expect(e.extackMessage).toBe('Attribute failed policy validation');
    expect(e.extackOffset).toBe(20); // NFTA_TABLE_NAME right after nlmsghdr + nfgenmsg
    expect(e.message).toContain('[batch message 2]');
    expect((await nft.listCounters(T)).map((c) => c.name)).not.toContain('would-be-new');
    expect(mapElemsByNft().has('198.18.0.2')).toBe(false);
  });

  it('ENOENT for a missing set or element, EEXIST for `create` of an existing one', async () => {
    let e = await batchError(nft.commit(new NftBatch().addElements({ table: T, set: 'nope', elements: [ipv4MapElement('1.1.1.1', '2.2.2.2')] })));
    expect(e.code).toBe('ENOENT');
    e = await batchError(nft.commit(new NftBatch().deleteElements({ table: T, set: 'protected', elements: [ipv4MapElement('198.18.9.9', '0.0.0.0')] })));
    expect(e.code).toBe('ENOENT');
    e = await batchError(nft.commit(new NftBatch().addElements({ table: T, set: 'protected', exclusive: true, elements: [ipv4MapElement(protectedIp(5), innerIp(5))] })));
    expect(e.code).toBe('EEXIST');
    // without exclusive, re-adding an identical element is fine (idempotent apply)
    await nft.commit(new NftBatch().addElements({ table: T, set: 'protected', elements: [ipv4MapElement(protectedIp(5), innerIp(5))] }));
  });

  it('generation check: a stale genid refuses the batch (ERESTART), the current one passes', async () => {
    const gen = await nft.getGeneration();
    await nft.commit(new NftBatch().addCounter({ table: T, name: 'gen-a' }), { genId: gen });
    const e = await batchError(nft.commit(new NftBatch().addCounter({ table: T, name: 'gen-b' }), { genId: gen }));
    expect(e.code).toBe('ERESTART');
    expect(e.failures[0]!.description).toBe('batch begin');
    const names = (await nft.listCounters(T)).map((c) => c.name);
    expect(names).toContain('gen-a');
    expect(names).not.toContain('gen-b');
  });

  it('removes all 1,000 tunnels in one batch', async () => {
    const b = new NftBatch();
    b.deleteElements({ table: T, set: 'tunnel_counters', elements: Array.from({ length: 1000 }, (_, i) => ipv4ObjElement(protectedIp(i), `tun-${i}`)) });
    b.deleteElements({ table: T, set: 'protected', elements: Array.from({ length: 1000 }, (_, i) => ipv4MapElement(protectedIp(i), '0.0.0.0')) });
    for (let i = 0; i < 1000; i++) b.deleteCounter(T, `tun-${i}`);
    await nft.commit(b);
    expect((await nft.listIpv4Map(T, 'protected')).size).toBe(0);
    expect(mapElemsByNft().size).toBe(0);
    expect((await nft.listCounters(T)).map((c) => c.name)).toEqual(['gen-a']);
    expect(await nft.listRules(T)).toHaveLength(EXPECTED_RULES.length);
  });

  it('10,000 elements in one batch (split under 64 KiB per message) round-trip', async () => {
    const els = Array.from({ length: 10_000 }, (_, i) => ipv4MapElement(`10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, `100.64.${(i >> 8) & 255}.${i & 255}`));
    await nft.commit(new NftBatch().addElements({ table: T, set: 'protected', elements: els }));
    // The kernel grows the set's hash table in deferred work after a bulk insert; a dump that spans such a
    // resize can skip entries (the walk resumes by position). Read until the dump is whole (a lost element
    // in our encoding would make every read short).
    let back = await nft.listIpv4Map(T, 'protected');
    for (let i = 0; i < 5 && back.size !== 10_000; i++) {
      await new Promise((r) => setTimeout(r, 200));
      back = await nft.listIpv4Map(T, 'protected');
    }
    expect(back.size).toBe(10_000);
    expect(back.get('10.0.39.15')).toBe('100.64.39.15');
    await nft.commit(new NftBatch().deleteElements({ table: T, set: 'protected', elements: els }));
    expect((await nft.listIpv4Map(T, 'protected')).size).toBe(0);
  });

  it('deletes the table', async () => {
    await nft.commit(new NftBatch().deleteTable(T));
    expect(ns.run('nft', 'list', 'ruleset').trim()).toBe('');
    expect(await nft.listTables()).toEqual([]);
  });
});
