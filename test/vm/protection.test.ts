// The GRE half of the policy's proof: the edge's isolation and per-tunnel policy proven on REAL GRE, in the QEMU
// guest running Debian's 6.1 kernel (test/vm/vm.ts; lab wired by guest/start.sh). The edge runs the agent's
// own dataplane (agent/dataplane, GRE links) through the guest's control server; the origin is set up by the
// real origin script the gateway hands buyers. The host half, on veth stand-ins, is
// test/netns/edge-protection.test.ts; both read what reached a namespace from nftables counters in that
// namespace (test/helpers/nft-observe.ts) and prove each rule the same way: show the drop (and its
// per-tunnel, per-reason counter, docs/CONTRACTS.md "Dataplane"), delete the ONE rule of the agent's table
// that makes it (by handle), show the same traffic now passes, and let the agent repair its table.
//
// One VM boot for the file. Floods are hping3 runs with a fixed packet count (bounded); nothing waits on
// wall-clock time: counts are read once the sender has exited, and a count that must grow is waited for.
//
//  client 198.51.100.10 (+ .11) ── router ── edge 192.0.2.2 ═ tg-vmp1 (GRE)     ═ origin 192.0.2.6: 100.127.1.2
//                                                          ═ tg-vmp2 (GRE key) ═          100.127.1.6
//                                                          ═ tg-vmp3 (GRE key) ═  (another tenant: its far
//                                                                                  end never set up)
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelSpec } from '../../agent/dataplane/types.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';
import { counterArgv, counterPackets, firstLastSeconds, OBS_TABLE, observeRuleset, ruleHandle } from '../helpers/nft-observe.ts';
import { meterChainName } from '../../agent/netlink/ruleset.ts';
import { until } from '../helpers/wait.ts';
import { labClient, labServe, originScript } from './lab.ts';
import { LAB, type Netns } from './protocol.ts';
import { TestVm, buildAssets, vmRequired, vmUnavailable } from './vm.ts';

const unavailable = vmUnavailable();
if (unavailable) process.stderr.write(`test/vm: ${vmRequired ? 'REQUIRED (TUNNELGATE_VM=require or CI) but cannot run' : 'skipping the GRE protection test'}: ${unavailable}\n`);

const T = 'tg_vmp';
/** A second client address on the client's link: the rate limit meters it apart from the first. */
const CLIENT2 = '198.51.100.11';
// Lower than the host test's 100/s: the emulated guest's hping3 must still offer more than the limit.
const LIMIT = 50;

const T1_POLICY: TunnelPolicy = { ports: [[8080, 8080]], protocol: 'tcp', syn_proxy: true, source_pps_limit: null, drop_fragments: false };
const T2_POLICY: TunnelPolicy = { ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: LIMIT, drop_fragments: false };
// Inner subnets apart from gre.test.ts's (100.127.0.x); two keyed tunnels beside a plain one between the same endpoints.
const tunnel = (i: 1 | 2 | 3, policy?: TunnelPolicy): TunnelSpec => ({
  id: `0a1b2c3d-0000-4000-8000-0000000000a${i}`,
  tunnel_name: `tg-vmp${i}`,
  protected_ip: `203.0.113.${20 + i}`,
  origin_ip: LAB.origin,
  edge_ip: LAB.edge,
  edge_inner: `100.127.1.${4 * i - 3}/30`,
  origin_inner: `100.127.1.${4 * i - 2}/30`,
  mtu: i === 1 ? 1476 : 1472,
  ...(i === 1 ? {} : { gre_key: 5000 + i }),
  ...(policy ? { policy } : {}),
});
const T1 = tunnel(1, T1_POLICY);
const T2 = tunnel(2, T2_POLICY);
/** Another tenant's tunnel: only on the edge, so its inner address is not local in the origin namespace. */
const T3 = tunnel(3);
const inner = (cidr: string) => cidr.split('/')[0]!;

describe.skipIf(unavailable !== undefined && !vmRequired)('edge isolation and per-tunnel policy on real GRE (QEMU guest)', { timeout: 240_000 }, () => {
  let vm: TestVm;
  const timings: Record<string, number> = {};
  const timed = async <R>(name: string, fn: () => Promise<R>): Promise<R> => {
    const t0 = performance.now();
    try {
      return await fn();
    } finally {
      timings[name] = Math.round(performance.now() - t0);
    }
  };

  // Each rule is proven by deleting it: the repair the agent starts by itself when it hears its table touched would
  // race that (the host's test/netns/edge-heal.test.ts proves the repair), so it is off here.
  const open = () => vm.dataplane({ op: 'open', edgeIp: LAB.edge, nftTable: T, stateDir: '/run/tg-vmp', healOnTouch: false });
  const counted = async (ns: Netns, name: string): Promise<number> => counterPackets(await vm.run(ns, counterArgv(name)));
  /** Waits until a counter reached `n` (packets cross GRE in softirq, after the sender may have exited), then gives it. */
  const reaches = async (ns: Netns, name: string, n: number): Promise<number> => {
    await until(`${ns}'s counter ${name} at ${n}`, async () => (await counted(ns, name)) >= n, 60_000).catch(() => undefined);
    return counted(ns, name);
  };
  /** A bounded hping3 run (fixed count, stops by itself); its exit status says nothing about drops. */
  const hping = async (ns: Netns, args: string): Promise<void> => void (await vm.exec({ ns, argv: ['hping3', '-q', ...args.split(' ')], timeoutMs: 180_000 }));
  const drops = (t: TunnelSpec) => vm.dataplane({ op: 'dropped', tunnel: t });
  /** Deletes the one rule of `chain` whose text contains `text` (or is `text`, `exact`) by its handle, as an operator would by hand. */
  const deleteRule = async (chain: string, text: string, exact = false): Promise<void> => {
    const handle = ruleHandle(await vm.run('edge', ['nft', '-a', 'list', 'chain', 'ip', T, chain]), text, exact);
    await vm.run('edge', ['nft', 'delete', 'rule', 'ip', T, chain, 'handle', handle]);
  };
  /** The agent restarts: a table whose rules were tampered with is rebuilt, its elements and objects kept. */
  const restart = async (): Promise<void> => {
    await vm.dataplane({ op: 'close' });
    await open();
    expect(await vm.dataplane({ op: 'table' })).toEqual({ table: 'rebuilt' });
  };
  const txPackets = async (ns: Netns, dev: string): Promise<number> =>
    (JSON.parse(await vm.run(ns, ['ip', '-s', '-j', 'link', 'show', 'dev', dev])) as { stats64: { tx: { packets: number } } }[])[0]!.stats64.tx.packets;

  beforeAll(async () => {
    if (unavailable) throw new Error(`the VM test is required here (TUNNELGATE_VM=require or CI) but cannot run: ${unavailable}`);
    const assets = await timed('assets', async () => buildAssets());
    vm = await TestVm.boot(assets, { echoConsole: process.env.TUNNELGATE_VM_CONSOLE === '1' });
    timings.boot = vm.bootMs;
    await timed('setup', async () => {
      await open();
      expect(await vm.dataplane({ op: 'reconcile', tunnels: [T1, T2, T3] })).toMatchObject({ added: 3, failed: [] });
      for (const t of [T1, T2]) expect(await vm.run('origin', ['bash', '-s'], originScript(t))).toContain(`GRE tunnel ${t.tunnel_name} is up`);
      // The probe's answer is the path being up, both ways, for each tunnel whose origin is set up.
      for (const t of [T1, T2]) expect((await vm.dataplane({ op: 'probe', tunnel: t })).reachable).toBe(true);
      await vm.run('client', ['ip', 'addr', 'add', `${CLIENT2}/24`, 'dev', 'c0']);
      // The origin counts at raw prerouting (-300): what arrived through each GRE link, before anything else there.
      await vm.run(
        'origin',
        ['nft', '-f', '-'],
        observeRuleset(
          'prerouting',
          {
            syn8080: `iifname "${T1.tunnel_name}" tcp dport 8080 tcp flags & (fin|syn|rst|ack) == syn`,
            syn9090: `iifname "${T1.tunnel_name}" tcp dport 9090 tcp flags & (fin|syn|rst|ack) == syn`,
            udp8080: `iifname "${T1.tunnel_name}" udp dport 8080`,
            flood: `iifname "${T2.tunnel_name}" udp dport 7000 ip saddr ${LAB.client} add @first { ip saddr } update @last { ip saddr }`,
            calm: `iifname "${T2.tunnel_name}" udp dport 7000 ip saddr ${CLIENT2}`,
          },
          -300,
        ),
      );
      await vm.run('client', ['nft', '-f', '-'], observeRuleset('input', { spoofed: 'udp dport 7000', newconn: 'tcp dport 7001' }));
      // After the agent's filter chains (priority 0): what the edge's own stack would take from a tunnel.
      await vm.run('edge', ['nft', '-f', '-'], observeRuleset('input', { ssh: 'iifname "tg-*" tcp dport 52222' }));
      await labServe(vm, 'tcp-8080', 'tcp', { port: 8080 });
      await labServe(vm, 'tcp-9090', 'tcp', { port: 9090 });
    });
  }, 400_000);

  afterAll(async () => {
    const code = await vm?.shutdown();
    process.stderr.write(`test/vm protection timings (ms): ${JSON.stringify({ ...timings, kernelBootS: vm?.kernelBootSeconds, guestExit: code })}\n`);
  }, 60_000);

  it('allowlist: the allowed port passes; a denied port and a denied protocol are dropped, counted not_allowed', async () => {
    await timed('allowlist', async () => {
      const before = await drops(T1);
      expect(await labClient(vm, 'tcp', T1.protected_ip, { port: 8080 })).toMatch(new RegExp(`^peer=${LAB.client} local=${inner(T1.origin_inner)} got=`));
      await hping('client', `-S -c 5 -i u20000 -p 9090 ${T1.protected_ip}`);
      await hping('client', `--udp -c 5 -i u20000 -p 8080 ${T1.protected_ip}`);
      await hping('client', `--icmp -c 5 -i u20000 ${T1.protected_ip}`);
      expect(await until('15 drops counted', async () => ((await drops(T1)).not_allowed - before.not_allowed >= 15 ? true : undefined), 60_000)).toBe(true);
      expect((await drops(T1)).not_allowed - before.not_allowed).toBe(15);
      expect([await counted('origin', 'syn9090'), await counted('origin', 'udp8080')]).toEqual([0, 0]);
      // Without the allowlist rule the same traffic reaches the origin: UDP 8080 arrives, and a TCP
      // connection to 9090 completes (through the SYN proxy: the origin sees a SYN only after the handshake).
      await deleteRule('allowlist', '@drop_not_allowed');
      // From fixed source ports, as after the restart: what was let in now must not outlive the rebuild.
      await hping('client', `--udp -c 5 -i u20000 -s 40000 -p 8080 ${T1.protected_ip}`);
      expect(await reaches('origin', 'udp8080', 5)).toBe(5);
      expect(await labClient(vm, 'tcp', T1.protected_ip, { port: 9090 })).toMatch(new RegExp(`^peer=${LAB.client} `));
      await restart();
      await hping('client', `--udp -c 5 -i u20000 -s 40000 -p 8080 ${T1.protected_ip}`);
      await until('the rebuilt table counting the drops', async () => ((await drops(T1)).not_allowed - before.not_allowed >= 20 ? true : undefined), 60_000);
      expect(await counted('origin', 'udp8080')).toBe(5);
    });
  });

  it('SYN proxy: a spoofed SYN flood sends the origin no SYN; a real client connects and the origin sees its address', async () => {
    await timed('synProxy', async () => {
      const before = await counted('origin', 'syn8080');
      await hping('client', `-S --rand-source -c 200 -i u2000 -p 8080 ${T1.protected_ip}`);
      expect(await labClient(vm, 'tcp', T1.protected_ip, { port: 8080 })).toMatch(new RegExp(`^peer=${LAB.client} local=${inner(T1.origin_inner)} got=`));
      // The client's answer came from the origin, so the flood before it was long processed: exactly one SYN
      // reached the origin, the proxy's for the client that finished its handshake (a retried attempt adds one).
      const after = await counted('origin', 'syn8080');
      expect(after - before).toBeGreaterThanOrEqual(1);
      expect(after - before).toBeLessThanOrEqual(3);
      // Without the notrack of SYNs the proxy never sees them, and without the nat chain's drop of tracked SYNs to a
      // syn-proxied IP, which stands behind it (test/netns/edge-protection.test.ts proves each apart), the flood
      // reaches the origin.
      await deleteRule('inbound', 'notrack');
      await deleteRule('prerouting', '@synproxied');
      await hping('client', `-S --rand-source -c 50 -i u2000 -p 8080 ${T1.protected_ip}`);
      // A client's answer after the flood: the flood, sent before it on the same path, has been processed.
      expect(await labClient(vm, 'tcp', T1.protected_ip, { port: 8080 })).toContain(`peer=${LAB.client}`);
      // Most of the 50 now reach the origin (a random source in a range the router drops as martian does not).
      expect((await counted('origin', 'syn8080')) - after).toBeGreaterThanOrEqual(40);
      await restart();
    });
  });

  it('rate limit: a bounded flood from one client reaches the origin at no more than the limit (+10%), a second client is untouched and metered apart', async () => {
    await timed('rateLimit', async () => {
      const before = await drops(T2);
      // 1,000 packets at a nominal 1,000/s from one address, and alongside 10 at 20/s from another (under the limit).
      await vm.spawn({ name: 'calm', ns: 'client', argv: ['hping3', '-q', '--udp', '-a', CLIENT2, '-c', '10', '-i', 'u50000', '-p', '7000', T2.protected_ip] });
      await vm.spawn({ name: 'flood', ns: 'client', argv: ['hping3', '-q', '--udp', '-c', '1000', '-i', 'u1000', '-p', '7000', T2.protected_ip] });
      // Each client address has its own element in T2's own meter (a set of T2's alone, keyed by the source), while
      // it sends: an element goes 1 s after its source's last packet (its bucket is full again by then).
      const chain = meterChainName(T2.tunnel_name, LIMIT);
      await until('both sources in T2\'s meter', async () => {
        const meter = await vm.run('edge', ['nft', 'list', 'set', 'ip', T, chain]);
        return meter.includes(LAB.client) && meter.includes(CLIENT2) ? true : undefined;
      }, 120_000);
      await until('the calm client and the flood done', async () => ((await vm.output('calm')).running || (await vm.output('flood')).running ? undefined : true), 120_000);
      expect(await reaches('origin', 'calm', 10)).toBe(10);
      const dropped = (await drops(T2)).rate_limited - before.rate_limited;
      await until('every flood packet passed or counted', async () => ((await counted('origin', 'flood')) + dropped >= 1000 ? true : undefined), 60_000).catch(() => undefined);
      const passed = await counted('origin', 'flood');
      expect(passed + dropped).toBe(1000);
      expect(dropped).toBeGreaterThan(0);
      // The flood's duration from the kernel's own timestamps (test/helpers/nft-observe.ts firstLastSeconds).
      // `limit rate over N/second` lets its burst (5) through at once, then N a second: no more than the
      // limit +10%. A sender starved of CPU offers less, which only lowers the rate: no lower bound.
      const seconds = firstLastSeconds(await vm.run('origin', ['nft', 'list', 'table', 'ip', OBS_TABLE]));
      expect(seconds).toBeGreaterThan(0.5);
      const rate = (passed - 5) / seconds;
      timings.ratePerSecond = Math.round(rate * 10) / 10;
      expect(rate).toBeLessThanOrEqual(LIMIT * 1.1);
      // Without the meter's last rule (the drop of a metered source over its limit) the same kind of flood passes whole.
      await deleteRule(chain, 'counter name ip daddr map @drop_rate_limited drop', true);
      await hping('client', `--udp -c 300 -i u1000 -p 7000 ${T2.protected_ip}`);
      expect((await reaches('origin', 'flood', passed + 300)) - passed).toBe(300);
      // A reconcile builds the damaged chain again, whole (drift).
      expect(await vm.dataplane({ op: 'reconcile', tunnels: [T1, T2, T3] })).toMatchObject({ failed: [] });
      expect((await vm.run('edge', ['nft', 'list', 'chain', 'ip', T, chain])).match(/drop_rate_limited drop/g)).toHaveLength(2);
    });
  });

  it('from inside a tunnel: a spoofed source, a new connection out, another tunnel, the edge port 52222: dropped, counted spoofed', async () => {
    await timed('isolation', async () => {
      // The origin sends through its GRE link: routes in its main table for the client's network and for the
      // other tenant's inner address (not local here: that tunnel's far end was never set up).
      await vm.run('origin', ['ip', 'route', 'add', '198.51.100.0/24', 'dev', T1.tunnel_name]);
      await vm.run('origin', ['ip', 'route', 'add', `${inner(T3.origin_inner)}/32`, 'dev', T1.tunnel_name]);
      try {
        const before = (await drops(T1)).spoofed;
        const t3 = await txPackets('edge', T3.tunnel_name);
        const send = async (): Promise<void> => {
          await hping('origin', `--udp -a 192.0.2.99 -c 5 -i u20000 -p 7000 ${LAB.client}`);
          await hping('origin', `-S -c 5 -i u20000 -p 7001 ${LAB.client}`);
          await hping('origin', `--udp -c 5 -i u20000 -p 7002 ${inner(T3.origin_inner)}`);
          await hping('origin', `-S -c 5 -i u20000 -p 52222 ${inner(T1.edge_inner)}`);
        };
        await send();
        // Every one of the 20 was counted (a late packet of an earlier test's connection may add to it, never less).
        await until('20 spoofed drops counted', async () => ((await drops(T1)).spoofed - before >= 20 ? true : undefined), 60_000).catch(() => undefined);
        expect((await drops(T1)).spoofed - before).toBeGreaterThanOrEqual(20);
        expect([await counted('client', 'spoofed'), await counted('client', 'newconn'), await txPackets('edge', T3.tunnel_name) - t3, await counted('edge', 'ssh')]).toEqual([0, 0, 0, 0]);
        // The agent's probe still gets its answer from the origin's inner address.
        expect(await vm.dataplane({ op: 'probe', tunnel: T1 })).toMatchObject({ reachable: true });
        // Without the two jumps into the isolation chains, the same packets get through.
        await deleteRule('guard', 'jump from_tunnel');
        await deleteRule('local_in', 'jump tunnel_in');
        await send();
        expect([await reaches('client', 'spoofed', 5), await reaches('client', 'newconn', 5), await reaches('edge', 'ssh', 5)]).toEqual([5, 5, 5]);
        // Another tunnel is guarded twice: only a DNAT-ed connection may enter a tunnel link at all.
        expect(await txPackets('edge', T3.tunnel_name)).toBe(t3);
        await deleteRule('guard_nodnat', 'oifname "tg-*" drop');
        await hping('origin', `--udp -c 5 -i u20000 -p 7002 ${inner(T3.origin_inner)}`);
        await until('the other tunnel carrying them', async () => ((await txPackets('edge', T3.tunnel_name)) - t3 >= 5 ? true : undefined), 60_000).catch(() => undefined);
        expect((await txPackets('edge', T3.tunnel_name)) - t3).toBe(5);
        await restart();
      } finally {
        for (const dst of ['198.51.100.0/24', `${inner(T3.origin_inner)}/32`]) await vm.run('origin', ['ip', 'route', 'del', dst, 'dev', T1.tunnel_name]).catch(() => undefined);
      }
    });
  });
});
