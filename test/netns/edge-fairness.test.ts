// One tenant's flood never hurts another (DESIGN 3.11), on this kernel: per-tunnel meters whose overflow shares one
// budget of that tunnel, and flow caps that keep each tunnel to its max_flows of the connection table, with new
// flows a second capped too. A client, an attacker, the edge (the agent's dataplane in its namespace) and one
// origin per tunnel, all namespaces made here; the tunnel links are the dataplane's veth stand-in (this kernel has no
// GRE). Floods are hping3 runs with a fixed packet count inside these namespaces; what reached an origin is read from
// nftables counters there, what the edge holds from conntrack and nft listings in its namespace. No wall clock: a
// rate is measured between the kernel's timestamps of a flood's first and last packet (nft-observe firstLastSeconds).
//
// As in edge-protection.test.ts, a rule is proven by deleting it (by handle) and showing what it stopped now passes;
// which rule each step deletes is said where it does.
//
//  client   198.51.100.10/.11 ── up0 ┐                    ┌ tg-fa ≈≈ originA (A: 50 pps per source)
//  attacker 198.51.101.10     ── up1 ┴ edge (the agent)  ─┼ tg-fb ≈≈ originB (B: 50 pps per source, the same value)
//                                                          ├ tg-fc ≈≈ originC (C: max_flows 1,000)
//                                                          └ tg-fd ≈≈ originD (D: max_flows 16,000: 1,000 new flows a second)
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataplane, type DataplaneHandle, type TunnelSpec } from '../../agent/dataplane/index.ts';
import { flowsChainName, meterChainName } from '../../agent/netlink/ruleset.ts';
import { flowCapShape } from '../../agent/netlink/ruleset-chains.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';
import { counterArgv, counterPackets, firstLastSeconds, OBS_TABLE, observeRuleset, ruleHandle } from '../helpers/nft-observe.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { isRoot, TestNetns } from './netns.ts';
import { attachStandinOrigin, KEEP, Proc, SERVER } from './origin-standin.ts';
import { ATTACKER, CLIENT, EDGE, upstreamReady, wireUpstream } from './edge-upstream.ts';

const T = 'tunnelgate';
const CLIENT2 = '198.51.100.11';
/** The per-source limit of A and B: the same value, a meter each. */
const LIMIT = 50;
/** What each tunnel's meter holds in this test (the agent sizes it from its memory and AGENT_EDGE_PPS: millions). */
const METER_SOURCES = 16;

const policy = (over: Partial<TunnelPolicy>): TunnelPolicy => ({ ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false, ...over });
const tunnel = (i: number, name: string, p: TunnelPolicy): TunnelSpec => ({
  id: `00000000-0000-4000-8000-00000000f00${i}`,
  tunnel_name: name,
  protected_ip: `203.0.113.${20 + i}`,
  origin_ip: `198.18.1.${i}`,
  edge_ip: EDGE,
  edge_inner: `100.64.1.${4 * i - 3}/30`,
  origin_inner: `100.64.1.${4 * i - 2}/30`,
  mtu: 1476,
  policy: p,
});
const A = tunnel(1, 'tg-fa', policy({ source_pps_limit: LIMIT }));
const B = tunnel(2, 'tg-fb', policy({ source_pps_limit: LIMIT }));
const C = tunnel(3, 'tg-fc', policy({ max_flows: 1_000 }));
const D = tunnel(4, 'tg-fd', policy({ max_flows: 16_000 }));
const ALL = [A, B, C, D];

/** A bounded hping3 run (fixed count, stops by itself); its exit status says nothing about drops. */
const hping = (ns: TestNetns, args: string): void => void ns.run('bash', '-c', `hping3 -q ${args} >/dev/null 2>&1 || true`);
/** The same, in the background: the returned promise settles when it ends. */
function hpingBackground(ns: TestNetns, args: string): { done: Promise<void>; child: ChildProcess } {
  const child = spawn('ip', ['netns', 'exec', ns.name, 'hping3', '-q', ...args.split(' ')], { stdio: 'ignore' });
  return { child, done: new Promise((r) => child.on('exit', () => r())) };
}
const running = (c: ChildProcess): boolean => c.exitCode === null && c.signalCode === null;

describe.skipIf(skipUnless(isRoot && onPath('hping3') && onPath('conntrack'), 'edge-fairness tests: root (network namespaces), hping3 and conntrack'))('one tunnel\'s flood never hurts another (veth stand-in for GRE)', () => {
  const ns = {} as Record<'client' | 'attacker' | 'edge' | 'oA' | 'oB' | 'oC' | 'oD', TestNetns>;
  const origins = (): [TunnelSpec, TestNetns][] => [
    [A, ns.oA],
    [B, ns.oB],
    [C, ns.oC],
    [D, ns.oD],
  ];
  let stateDir: string;
  let dp: DataplaneHandle;
  const servers: Proc[] = [];

  const counted = (n: TestNetns, name: string): number => counterPackets(n.run(...counterArgv(name)));
  const drops = (t: TunnelSpec) => dp.dropped(t);
  /** Connections conntrack holds for a protected IP (every state: what the tunnel takes of the table). */
  const tracked = (t: TunnelSpec): number => Number(ns.edge.run('bash', '-c', `conntrack -L -d ${t.protected_ip} 2>/dev/null | wc -l`).trim());
  /** conntrack -S: connections refused because the table was full (drop) or evicted to make room (early_drop). */
  const tableFull = (): { drop: number; early_drop: number } => {
    const out = { drop: 0, early_drop: 0 };
    for (const line of ns.edge.run('conntrack', '-S').split('\n'))
      for (const k of ['drop', 'early_drop'] as const) {
        const m = new RegExp(`\\b${k}=(\\d+)`).exec(line);
        if (m) out[k] += Number(m[1]);
      }
    return out;
  };
  const deleteRule = (chain: string, text: string): void => {
    ns.edge.run('nft', 'delete', 'rule', 'ip', T, chain, 'handle', ruleHandle(ns.edge.run('nft', '-a', 'list', 'chain', 'ip', T, chain), text));
  };
  const meterOf = (t: TunnelSpec): string => ns.edge.run('nft', 'list', 'set', 'ip', T, meterChainName(t.tunnel_name, LIMIT));

  beforeAll(async () => {
    for (const k of ['client', 'attacker', 'edge', 'oA', 'oB', 'oC', 'oD'] as const) {
      ns[k] = new TestNetns();
      ns[k].run('ip', 'link', 'set', 'lo', 'up');
    }
    const e = ns.edge;
    wireUpstream(ns);
    ns.client.run('ip', 'addr', 'add', `${CLIENT2}/24`, 'dev', 'c0');
    stateDir = mkdtempSync(join(tmpdir(), 'tg-fair-'));
    // The repair the agent starts when it hears its table touched would race the rule deletions below.
    dp = await createDataplane({ edgeIp: EDGE, nftTable: T, stateDir, netns: e.name, linkKind: 'veth-standin', meterSources: METER_SOURCES, healOnTouch: false });
    expect(await dp.reconcile(ALL)).toMatchObject({ added: 4, failed: [] });
    for (const [t, o] of origins()) {
      attachStandinOrigin(e, o, t);
      // What arrives, counted before the origin's own conntrack, and the kernel's timestamps of a flood's first and
      // last packet (their destination is the origin's one inner address: one element each).
      o.run('bash', '-c', `nft -f - <<'EOF'\n${observeRuleset('prerouting', { flood: 'udp dport 7000 add @first { ip daddr } update @last { ip daddr }', probe: 'udp dport 7001', calm: `udp dport 7002 ip saddr ${CLIENT2}`, loud: `udp dport 7002 ip saddr ${CLIENT}` }, -300)}EOF`);
    }
    await upstreamReady(ns);
    for (const [t] of origins()) await ns.edge.waitForPing(t.origin_inner.split('/')[0]!);
    const p = new Proc(ns.oD, SERVER);
    servers.push(p);
    await p.saw((l) => l === 'ready');
  }, 180_000);

  afterAll(async () => {
    for (const s of servers) s.stop();
    await dp?.close();
    for (const n of Object.values(ns)) n?.delete();
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  });

  it('a flood of more sources than A\'s meter holds: the overflow shares A\'s one budget; B, with the same limit, keeps its limit and meters its new sources', async () => {
    const before = { a: await drops(A), b: await drops(B) };
    // A: 3,000 packets from random sources (some are bogus, and dropped as spoofed before any meter), at a nominal
    // 1,000 a second: the 16 first genuine sources fill A's meter, every later one meets the full meter.
    const flood = hpingBackground(ns.attacker, `--udp --rand-source -c 3000 -i u1000 -p 7000 ${A.protected_ip}`);
    // B meanwhile: one loud source far over the limit and one calm one under it, both metered in B's own meter.
    const loud = hpingBackground(ns.client, `--udp -c 300 -i u2000 -p 7002 ${B.protected_ip}`);
    const calm = hpingBackground(ns.client, `--udp -a ${CLIENT2} -c 10 -i u100000 -p 7002 ${B.protected_ip}`);
    await until('A\'s meter full and B\'s holding both its sources, while they send', () => {
      const a = meterOf(A).match(/limit rate/g)?.length ?? 0;
      const b = meterOf(B);
      return a === METER_SOURCES && b.includes(CLIENT) && b.includes(CLIENT2) ? true : running(flood.child) ? undefined : 'the flood ended first';
    });
    await Promise.all([flood.done, loud.done, calm.done]);

    // A: never unlimited. What passed is the sources its meter took (16 at a time, each forgotten 1 s after its one
    // packet) and A's one overflow budget (its burst of 5, then 50 a second), over the flood's length as the origin's
    // kernel timed it; at least the meter's sources and the budget's burst.
    const passedA = counted(ns.oA, 'flood');
    const seconds = firstLastSeconds(ns.oA.run('nft', 'list', 'table', 'ip', OBS_TABLE));
    const dA = await drops(A);
    const spoofed = dA.spoofed - before.a.spoofed;
    expect(passedA + (dA.rate_limited - before.a.rate_limited) + spoofed).toBe(3000);
    expect(passedA).toBeGreaterThanOrEqual(METER_SOURCES + 5);
    expect(passedA).toBeLessThanOrEqual(METER_SOURCES * Math.ceil(seconds + 2) + 5 + LIMIT * 1.1 * seconds);
    expect(passedA).toBeLessThan((3000 - spoofed) / 4);
    // B: its loud source got its limit (a burst of 5, then 50 a second over at most the 0.6 s it sent for, and the
    // flood's length bounds it too), its calm one all it sent.
    const loudB = counted(ns.oB, 'loud');
    expect(loudB).toBeLessThan(300);
    expect(loudB).toBe(300 - ((await drops(B)).rate_limited - before.b.rate_limited));
    expect(counted(ns.oB, 'calm')).toBe(10);
  }, 120_000);

  it('A\'s overflow budget lets a new source through while A\'s meter is held full, and stops it beyond (the rules proven one by one)', async () => {
    // 16 sources that keep sending under the limit (20 a second each, for up to 20 s) hold A's meter full: an element
    // lives 1 s after its last packet, so none of theirs ever leaves. A 17th source, the probe, meets the full meter:
    // it has A's overflow budget, and no more.
    const holderIps = Array.from({ length: METER_SOURCES }, (_, i) => `198.51.101.${100 + i}`);
    const holders = holderIps.map((ip) => hpingBackground(ns.attacker, `--udp -a ${ip} -c 400 -i u50000 -p 7000 ${A.protected_ip}`));
    await until('A\'s meter held full by the holders', () => {
      const m = meterOf(A);
      return holderIps.every((ip) => m.includes(`${ip} `)) ? true : holders.every((h) => running(h.child)) ? undefined : 'a holder ended first';
    });
    const probe = (count: number): number => {
      const before = counted(ns.oA, 'probe');
      hping(ns.attacker, `--udp -a 198.51.101.200 -c ${count} -i u1000 -p 7001 ${A.protected_ip}`);
      return counted(ns.oA, 'probe') - before;
    };
    // The budget's burst is 5: five packets at once all pass (the chain's third rule returns them), 200 do not
    // (its second rule drops the rest).
    const chain = meterChainName(A.tunnel_name, LIMIT);
    const five = probe(5);
    const many = probe(200);
    expect(meterOf(A)).not.toContain('198.51.101.200');
    expect(five).toBe(5);
    expect(many).toBeLessThan(100);
    // Without the second rule (the overflow budget's drop), the overflow passes whole: 200 of 200.
    deleteRule(chain, 'limit rate over');
    expect(probe(200)).toBe(200);
    // Without the third too (the overflow's return), what the full meter did not take falls to the last rule: dropped.
    deleteRule(chain, `ip saddr != @${chain} return`);
    expect(probe(5)).toBe(0);
    for (const h of holders) h.child.kill('SIGTERM');
    await Promise.all(holders.map((h) => h.done));
    // A reconcile builds the damaged chain again, whole.
    expect(await dp.reconcile(ALL)).toMatchObject({ failed: [] });
    expect(ns.edge.run('nft', 'list', 'chain', 'ip', T, chain)).toContain('limit rate over 50/second');
    // Without the first rule (the meter's update), no source is metered at all: B's sources never enter its meter.
    const chainB = meterChainName(B.tunnel_name, LIMIT);
    deleteRule(chainB, 'update @');
    hping(ns.client, `--udp -a ${CLIENT2} -c 3 -i u100000 -p 7002 ${B.protected_ip}`);
    expect(meterOf(B)).not.toContain(CLIENT2);
    expect(await dp.reconcile(ALL)).toMatchObject({ failed: [] });
  }, 120_000);

  it('C\'s flows never exceed its max_flows while D opens new TCP connections, every one of them; the table is never full', async () => {
    const shape = flowCapShape(1_000);
    expect(shape.buckets * shape.perBucket).toBeLessThanOrEqual(1_000);
    const full = tableFull();
    const beforeC = await drops(C);
    // C: 5,000 new flows (random sources and ports) as fast as hping3 goes: each would be a conntrack entry.
    const flood = hpingBackground(ns.attacker, `--udp --rand-source -c 5000 -i u10 -p 7000 ${C.protected_ip}`);
    let most = 0;
    // D meanwhile: new TCP connections one after another, each answered through the tunnel.
    let opened = 0;
    const samples: number[] = [];
    while (running(flood.child) || opened < 10) {
      samples.push(tracked(C));
      if (opened < 10) {
        const conn = new Proc(ns.client, KEEP, [D.protected_ip, '8080']);
        await conn.saw((l) => l === 'open');
        conn.send(`conn-${opened}`);
        expect(await conn.saw((l) => l.includes(`echo=conn-${opened}`))).toBe(`peer=${CLIENT} echo=conn-${opened}`);
        conn.stop();
        opened++;
      }
    }
    await flood.done;
    samples.push(tracked(C));
    most = Math.max(...samples);
    // Never more than max_flows: the connections are counted in buckets of at most perBucket each.
    expect(most).toBeLessThanOrEqual(shape.buckets * shape.perBucket);
    // It did reach its cap (more flows were offered than it may hold), the rest refused, counted rate_limited.
    expect(tracked(C)).toBeGreaterThan(900);
    expect((await drops(C)).rate_limited - beforeC.rate_limited).toBeGreaterThan(0);
    expect(opened).toBe(10);
    expect(tableFull()).toEqual(full);
    expect(full).toEqual({ drop: 0, early_drop: 0 });
    // Without the flow caps' count (the second rule of C's max_flows chain), the same flood takes more than max_flows.
    deleteRule(flowsChainName(1_000), 'ct count');
    hping(ns.attacker, `--udp --rand-source -c 5000 -i u10 -p 7000 ${C.protected_ip}`);
    expect(tracked(C)).toBeGreaterThan(1_000);
    expect(await dp.reconcile(ALL)).toMatchObject({ failed: [] });
    // Nor without the nat chain's jump to the flow caps (C's connections of the floods before deleted first).
    ns.edge.run('bash', '-c', `conntrack -D -d ${C.protected_ip} >/dev/null 2>&1 || true`);
    expect(tracked(C)).toBe(0);
    deleteRule('prerouting', 'vmap @flow_limits');
    hping(ns.attacker, `--udp --rand-source -c 5000 -i u10 -p 7000 ${C.protected_ip}`);
    expect(tracked(C)).toBeGreaterThan(1_000);
    // A reconcile finds the table's rules tampered with, and builds it again (its elements kept).
    expect(await dp.reconcile(ALL)).toMatchObject({ failed: [] });
    expect(ns.edge.run('nft', 'list', 'chain', 'ip', T, 'prerouting')).toContain('vmap @flow_limits');
  }, 180_000);

  it('D takes at most 1,000 new flows a second (its max_flows / 16, at least 1,000), one second\'s worth at once', async () => {
    const { newPerSecond } = flowCapShape(16_000);
    expect(newPerSecond).toBe(1_000);
    ns.oD.run('nft', 'flush', 'set', 'ip', OBS_TABLE, 'first');
    ns.oD.run('nft', 'flush', 'set', 'ip', OBS_TABLE, 'last');
    const udp = (): number => Number(ns.edge.run('bash', '-c', `conntrack -L -d ${D.protected_ip} -p udp 2>/dev/null | wc -l`).trim());
    const had = udp();
    hping(ns.attacker, `--udp --rand-source -c 5000 -i u10 -p 7000 ${D.protected_ip}`);
    const made = udp() - had;
    const seconds = firstLastSeconds(ns.oD.run('nft', 'list', 'table', 'ip', OBS_TABLE));
    expect(made).toBeGreaterThan(0);
    expect(made).toBeLessThanOrEqual(newPerSecond + newPerSecond * 1.1 * seconds + 1);
    // Without the rate's rule (the first of D's max_flows chain), the flood's every genuine source makes a flow.
    deleteRule(flowsChainName(16_000), 'limit rate over');
    const had2 = udp();
    ns.oD.run('nft', 'flush', 'set', 'ip', OBS_TABLE, 'first');
    ns.oD.run('nft', 'flush', 'set', 'ip', OBS_TABLE, 'last');
    hping(ns.attacker, `--udp --rand-source -c 5000 -i u10 -p 7000 ${D.protected_ip}`);
    const seconds2 = firstLastSeconds(ns.oD.run('nft', 'list', 'table', 'ip', OBS_TABLE));
    expect(udp() - had2).toBeGreaterThan(newPerSecond + newPerSecond * 1.1 * seconds2 + 1);
    expect(await dp.reconcile(ALL)).toMatchObject({ failed: [] });
  }, 120_000);

  it('status reports the sizes: the connection table as sized (not set in a test\'s namespace) and each meter\'s sources', () => {
    const c = dp.capacity();
    expect(c.meter_sources).toBe(METER_SOURCES);
    expect(c.conntrack_applied).toBe(false);
    // At least the kernel's own, and room for these four tunnels' max_flows when memory has it.
    expect(c.conntrack_max).toBeGreaterThanOrEqual(65_536 * 2 + 1_000 + 16_000 + 65_536);
    expect(c.conntrack_buckets).toBeGreaterThanOrEqual(c.conntrack_max);
  });
});
