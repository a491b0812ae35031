// Health checks on this kernel: the agent's health checks with the REAL probe (agent/dataplane/probe.ts) through a
// tunnel, and the status op's counters after exactly N packets and B bytes, drops by reason included. The
// tunnel link is the dataplane's veth stand-in (this kernel has no GRE), its far end moved into the origin.
// The scheduler runs on an injected clock: the test says when checks are due, nothing waits on wall time.
//
//  client 198.51.100.10 ── up0 ┐ edge (the agent's dataplane) ── tg-h1 100.64.0.1/30 ≈≈ 100.64.0.2 origin (P 203.0.113.1)
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataplane, standinPeerName, type DataplaneHandle, type TunnelSpec } from '../../agent/dataplane/index.ts';
import { startHealth, type RunningHealth } from '../../agent/main.ts';
import { checkStatusResult, type TunnelReport } from '../../common/tunnel-status.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { isRoot, TestNetns } from './netns.ts';

const EDGE = '192.0.2.2';
const CLIENT = '198.51.100.10';
const INTERVAL_S = 30;
const T1: TunnelSpec = {
  id: '00000000-0000-4000-8000-0000000011e1',
  tunnel_name: 'tg-h1',
  protected_ip: '203.0.113.1',
  origin_ip: '198.18.0.1',
  edge_ip: EDGE,
  edge_inner: '100.64.0.1/30',
  origin_inner: '100.64.0.2/30',
  mtu: 1476,
};

// The origin's UDP echo on port 7000: every datagram goes back to its sender as it came.
const ECHO = `
const s = require('node:dgram').createSocket('udp4');
s.on('message', (m, r) => s.send(m, r.port, r.address));
s.bind(7000, () => console.log('ready'));`;
// The client: sends N datagrams of L bytes to P:7000, one after the other's echo, then prints how many came back.
const SEND = `
const [host, n, len] = process.argv.slice(1).map((v, i) => (i ? Number(v) : v));
const s = require('node:dgram').createSocket('udp4');
let got = 0;
const next = () => (got < n ? s.send(Buffer.alloc(len, 120), 7000, host) : (console.log('echoed ' + got), process.exit(0)));
s.on('message', () => { got++; next(); });
s.bind(0, next);
setTimeout(() => { console.log('echoed ' + got); process.exit(1); }, 20000);`;

function nodeIn(ns: TestNetns, script: string, args: string[] = []): ChildProcess {
  return spawn('ip', ['netns', 'exec', ns.name, process.execPath, '-e', script, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
}
function lineOf(p: ChildProcess, pred: (l: string) => boolean): Promise<string> {
  let buf = '';
  const lines: string[] = [];
  p.stdout!.on('data', (d: Buffer) => {
    buf += String(d);
    let i;
    while ((i = buf.indexOf('\n')) >= 0) (lines.push(buf.slice(0, i)), (buf = buf.slice(i + 1)));
  });
  return until('a line from a namespace process', () => lines.find(pred), 30_000);
}

describe.skipIf(skipUnless(isRoot, 'health tests: root (network namespaces)'))('health checks and status counters (veth stand-in for GRE, real probe)', () => {
  const ns: Record<'client' | 'edge' | 'origin', TestNetns> = {} as never;
  let stateDir: string;
  let dp: DataplaneHandle;
  let health: RunningHealth;
  let echo: ChildProcess | undefined;
  const clock = { t: 2_000_000_000_000, now() { return this.t; } };
  /** One interval passes: every tunnel's check is due, and runs (through the real probe). */
  const interval = async (): Promise<void> => {
    clock.t += INTERVAL_S * 1000;
    await health.scheduler.runDue();
  };
  const report = async (): Promise<TunnelReport> => {
    const r = await health.status();
    expect(checkStatusResult(r)).toBeUndefined();
    expect(r.agent.tunnels).toBe(1);
    // How the agent sized the connection table and the meters (not set in a test's namespace: the host's own).
    expect(r.agent.capacity).toMatchObject({ conntrack_applied: false });
    expect(r.agent.capacity!.meter_sources % 65_536).toBe(0);
    return r.tunnels.find((t) => t.id === T1.id)!;
  };

  beforeAll(async () => {
    for (const k of ['client', 'edge', 'origin'] as const) {
      ns[k] = new TestNetns();
      ns[k].run('ip', 'link', 'set', 'lo', 'up');
    }
    const e = ns.edge;
    e.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', ns.client.name);
    e.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    e.run('ip', 'addr', 'add', `${EDGE}/32`, 'dev', 'lo');
    e.run('ip', 'link', 'set', 'up0', 'up');
    ns.client.run('ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
    ns.client.run('ip', 'link', 'set', 'c0', 'up');
    ns.client.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
    stateDir = mkdtempSync(join(tmpdir(), 'tg-health-'));
    dp = await createDataplane({ edgeIp: EDGE, nftTable: 'tunnelgate', stateDir, netns: e.name, linkKind: 'veth-standin' });
    expect(await dp.reconcile([T1])).toMatchObject({ added: 1, failed: [] });
    const peer = standinPeerName(T1.tunnel_name);
    const mac = e.ipJson<{ address: string }[]>('link', 'show', 'dev', T1.tunnel_name)[0]!.address;
    e.run('ip', 'link', 'set', 'dev', T1.tunnel_name, 'arp', 'off');
    e.run('ip', 'link', 'set', 'dev', peer, 'address', mac, 'arp', 'off', 'netns', ns.origin.name);
    const o = ns.origin;
    o.run('ip', 'link', 'set', 'dev', peer, 'name', T1.tunnel_name);
    o.run('ip', 'link', 'set', 'dev', T1.tunnel_name, 'up');
    o.run('ip', 'addr', 'add', T1.origin_inner, 'dev', T1.tunnel_name);
    o.run('ip', 'route', 'add', 'default', 'dev', T1.tunnel_name);
    await e.waitForPing('100.64.0.2');
    echo = nodeIn(o, ECHO);
    await lineOf(echo, (l) => l === 'ready');
    // The job probe's 3 s rather than the checks' 1 s: on a loaded CI host an echo over a local veth has taken
    // longer than a short timeout, and a check that should pass must not fail for it (the three checks that
    // must fail cost 9 s).
    health = startHealth(dp, { intervalS: INTERVAL_S, clock, timer: false, startedAt: clock.t, probeTimeoutMs: 3000 });
    // The scheduler meets the tunnel now; its first check falls within the coming interval.
    await health.scheduler.runDue();
  }, 120_000);

  afterAll(async () => {
    echo?.kill('SIGTERM');
    await health?.stop();
    await dp?.close();
    for (const n of Object.values(ns)) n?.delete();
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  });

  it('unknown before the first check; up once the origin answers the probe through the tunnel', async () => {
    expect((await report()).health).toBe('unknown');
    expect((await report()).checked_at).toBeNull();
    await interval();
    const r = await report();
    expect(r.health).toBe('up');
    expect(Date.parse(r.checked_at!)).toBe(clock.t);
    expect(r.rtt_ms).toBeGreaterThanOrEqual(0);
    expect(health.scheduler.stats.probes).toBe(1);
  });

  it('status counters after exactly N datagrams of L bytes and K pings: in, out and not_allowed exact', async () => {
    const before = (await report()).counters;
    const N = 25;
    const L = 100;
    const K = 4;
    const sender = nodeIn(ns.client, SEND, [T1.protected_ip, String(N), String(L)]);
    expect(await lineOf(sender, (l) => l.startsWith('echoed '))).toBe(`echoed ${N}`);
    // ICMP to P is not in the allowlist (tcp and udp only): dropped, counted not_allowed, and counted in.
    ns.client.run('bash', '-c', `ping -n -q -c ${K} -i 0.2 -W 1 ${T1.protected_ip} >/dev/null 2>&1 || true`);
    const after = (await report()).counters;
    const ip = 20 + 8 + L; // IPv4 and UDP headers
    expect(after.packets_in - before.packets_in).toBe(N + K);
    expect(after.bytes_in - before.bytes_in).toBe(N * ip + K * 84); // ping: 56 data + 8 ICMP + 20 IP
    expect(after.packets_out - before.packets_out).toBe(N);
    expect(after.bytes_out - before.bytes_out).toBe(N * ip);
    expect(after.dropped.not_allowed - before.dropped.not_allowed).toBe(K);
    expect(after.dropped.spoofed - before.dropped.spoofed).toBe(0);
  });

  it('reply traffic since the last check counts as life: no probe sent', async () => {
    const probes = health.scheduler.stats.probes;
    const sender = nodeIn(ns.client, SEND, [T1.protected_ip, '3', '10']);
    expect(await lineOf(sender, (l) => l.startsWith('echoed '))).toBe('echoed 3');
    await interval();
    expect(health.scheduler.stats.probes).toBe(probes);
    expect(health.scheduler.stats.byTraffic).toBeGreaterThanOrEqual(1);
    expect((await report()).health).toBe('up');
  });

  it('the origin link goes down: still up after 2 failed checks, down at the 3rd; up again after one success', async () => {
    ns.origin.run('ip', 'link', 'set', 'dev', T1.tunnel_name, 'down');
    await interval();
    await interval();
    expect((await report()).health).toBe('up');
    await interval();
    expect((await report()).health).toBe('down');
    ns.origin.run('ip', 'link', 'set', 'dev', T1.tunnel_name, 'up');
    ns.origin.run('ip', 'route', 'replace', 'default', 'dev', T1.tunnel_name);
    // The link's carrier comes back asynchronously: wait until a ping passes (a condition, not a time).
    await ns.edge.waitForPing('100.64.0.2');
    await interval();
    expect((await report()).health).toBe('up');
  });

  it('replies that come back by another link (the underlay) are failed checks: down at the 3rd', async () => {
    // An underlay between edge and origin, and the origin's route back to edge_ip through it (more specific
    // than its default into the tunnel): the origin still answers every probe, but not through the tunnel.
    ns.edge.run('ip', 'link', 'add', 'ul0', 'type', 'veth', 'peer', 'name', 'ul1', 'netns', ns.origin.name);
    ns.edge.run('ip', 'addr', 'add', '10.255.0.1/30', 'dev', 'ul0');
    ns.edge.run('ip', 'link', 'set', 'ul0', 'up');
    ns.origin.run('ip', 'addr', 'add', '10.255.0.2/30', 'dev', 'ul1');
    ns.origin.run('ip', 'link', 'set', 'ul1', 'up');
    try {
      await ns.origin.waitForPing('10.255.0.1');
      ns.origin.run('ip', 'route', 'add', `${EDGE}/32`, 'via', '10.255.0.1', 'dev', 'ul1');
      const rx = (): number => ns.edge.ipJson<{ stats64: { rx: { packets: number } } }[]>('-s', 'link', 'show', 'dev', 'ul0')[0]!.stats64.rx.packets;
      const before = rx();
      await interval();
      await interval();
      expect((await report()).health).toBe('up');
      await interval();
      expect((await report()).health).toBe('down');
      expect(rx()).toBeGreaterThanOrEqual(before + 3); // the replies did arrive, on the wrong link
    } finally {
      ns.edge.run('ip', 'link', 'del', 'ul0');
    }
    await interval();
    expect((await report()).health).toBe('up');
  });

  it('counters are monotonic across a counter recreated by hand (and repaired by reconcile)', async () => {
    const before = (await report()).counters;
    ns.edge.run('nft', 'delete', 'element', 'ip', 'tunnelgate', 'tunnel_counters', `{ ${T1.protected_ip} }`);
    ns.edge.run('nft', 'delete', 'counter', 'ip', 'tunnelgate', T1.tunnel_name);
    expect((await dp.reconcile([T1])).failed).toEqual([]);
    const sender = nodeIn(ns.client, SEND, [T1.protected_ip, '2', '10']);
    expect(await lineOf(sender, (l) => l.startsWith('echoed '))).toBe('echoed 2');
    const after = (await report()).counters;
    expect(after.packets_in).toBe(before.packets_in + 2);
    expect(after.bytes_in).toBe(before.bytes_in + 2 * 38);
  });
});
