// Attack detection over the agent's counters (agent/attacks/monitor.ts) with an injected clock and a FAKE
// counter source (a map the test fills as the dataplane's one dump would: no kernel here; the real dump's cost is
// bench/attack-monitor.ts's), and its place in the `status` answer (agent/health/status.ts).
import { describe, expect, it } from 'vitest';
import { AttackMonitor, PACE_FACTOR, type CounterValue } from '../../../agent/attacks/monitor.ts';
import { StatusReporter } from '../../../agent/health/status.ts';
import { dropCounterName, outCounterName } from '../../../agent/dataplane/policy.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { checkStatusResult, DROP_REASONS, type DropReason } from '../../../common/tunnel-status.ts';
import { DEFAULT_POLICY } from '../../../common/tunnel-policy.ts';
import type { AttackRecord } from '../../../common/attacks.ts';
import { tunnelSpec } from '../../helpers/tunnel-spec.ts';

const T0 = Date.parse('2026-12-01T10:00:00.000Z');

/** A FAKE counter dump: per tunnel its traffic and drop counters, as DataplaneHandle.counters() names them. */
class FakeCounters {
  readonly values = new Map<string, CounterValue>();
  reads = 0;
  fail: Error | undefined;
  hold: Promise<void> | undefined;

  set(t: TunnelSpec, packets: number, drops: Partial<Record<DropReason, number>> = {}): void {
    this.values.set(t.tunnel_name, { packets: BigInt(packets), bytes: BigInt(packets * 100) });
    for (const r of DROP_REASONS) this.values.set(dropCounterName(t, r), { packets: BigInt(drops[r] ?? 0), bytes: 0n });
    this.values.set(outCounterName(t), { packets: 0n, bytes: 0n });
  }

  add(t: TunnelSpec, packets: number): void {
    const c = this.values.get(t.tunnel_name)!;
    this.values.set(t.tunnel_name, { packets: c.packets + BigInt(packets), bytes: c.bytes + BigInt(packets * 100) });
  }

  read = async (): Promise<ReadonlyMap<string, CounterValue>> => {
    this.reads++;
    if (this.hold) await this.hold;
    if (this.fail) throw this.fail;
    return new Map(this.values);
  };
}

function rig(tunnels: TunnelSpec[]) {
  let now = T0;
  const counters = new FakeCounters();
  const warnings: { msg: string; fields?: Record<string, unknown> }[] = [];
  const events: string[] = [];
  const monitor = new AttackMonitor({
    tunnels: () => tunnels,
    counters: counters.read,
    now: () => now,
    log: { warn: (msg, fields) => warnings.push({ msg, ...(fields ? { fields } : {}) }), info: () => {} },
    onEvent: (e) => events.push(`${e.type} ${e.attack.tunnel_id}`),
  });
  return {
    monitor,
    counters,
    warnings,
    events,
    /** One second passes (the tunnel's traffic added first), then a tick. */
    async second(add: [TunnelSpec, number][] = []) {
      for (const [t, n] of add) counters.add(t, n);
      now += 1000;
      await monitor.tick();
    },
  };
}

describe('AttackMonitor', () => {
  it('one tick observes every tunnel of the desired state; a flood starts an attack, logged and handed on', async () => {
    const a = tunnelSpec({ tunnel_name: 'tg-aaaaaaaaaa' });
    const b = tunnelSpec({ tunnel_name: 'tg-bbbbbbbbbb', protected_ip: '203.0.113.11' });
    const r = rig([a, b]);
    r.counters.set(a, 0);
    r.counters.set(b, 0);
    await r.monitor.tick();
    await r.second([[a, 100], [b, 100]]);
    await r.second([[a, 20_000], [b, 100]]);
    expect(r.events).toEqual([]);
    await r.second([[a, 20_000], [b, 100]]);
    expect(r.events).toEqual([`attack_started ${a.id}`]);
    expect(r.warnings.map((w) => [w.msg, w.fields?.tunnel_id, w.fields?.peak_pps])).toEqual([['attack started', a.id, 20_000]]);
    expect(r.monitor.report()).toEqual([expect.objectContaining({ tunnel_id: a.id, ended_at: null, peak_pps: 20_000 })]);
    expect(r.monitor.stats.ticks).toBe(4);
  });

  it("a tunnel's policy.alert_pps is its threshold", async () => {
    const t = tunnelSpec({ policy: { ...DEFAULT_POLICY, alert_pps: 500 } });
    const r = rig([t]);
    r.counters.set(t, 0);
    await r.monitor.tick();
    await r.second([[t, 600]]);
    await r.second([[t, 600]]);
    expect(r.events).toEqual([`attack_started ${t.id}`]);
  });

  it('a tunnel with a counter missing from a read is not observed that second (a recreated counter is no burst)', async () => {
    const t = tunnelSpec();
    const r = rig([t]);
    r.counters.set(t, 5_000_000);
    await r.monitor.tick();
    await r.second([[t, 100]]);
    // Gone from two reads (being recreated), then back at its old count plus a little: no observation saw 0.
    const kept = r.counters.values.get(t.tunnel_name)!;
    r.counters.values.delete(t.tunnel_name);
    await r.second();
    await r.second();
    r.counters.values.set(t.tunnel_name, { packets: kept.packets + 300n, bytes: kept.bytes });
    await r.second();
    await r.second([[t, 100]]);
    expect(r.events).toEqual([]);
    expect(r.monitor.detector.baselineSamples(t.id)).toBe(3);
  });

  it('a tunnel that leaves the desired state during an attack ends it', async () => {
    const t = tunnelSpec();
    const tunnels = [t];
    const r = rig(tunnels);
    r.counters.set(t, 0);
    await r.monitor.tick();
    await r.second([[t, 50_000]]);
    await r.second([[t, 50_000]]);
    tunnels.pop();
    await r.second();
    expect(r.events).toEqual([`attack_started ${t.id}`, `attack_ended ${t.id}`]);
    expect(r.monitor.report()).toEqual([expect.objectContaining({ ended_at: expect.any(String) })]);
    expect(r.monitor.detector.size).toBe(0);
  });

  it('ticks never overlap: one while a read is under way is skipped and counted', async () => {
    const t = tunnelSpec();
    const r = rig([t]);
    r.counters.set(t, 0);
    let release!: () => void;
    r.counters.hold = new Promise((res) => (release = res));
    const first = r.monitor.tick();
    const second = r.monitor.tick();
    expect(r.monitor.stats.skipped).toBe(1);
    release();
    await Promise.all([first, second]);
    expect(r.counters.reads).toBe(1);
    expect(r.monitor.stats.ticks).toBe(1);
  });

  it('a failing read is logged once until one succeeds again, and never throws', async () => {
    const t = tunnelSpec();
    const r = rig([t]);
    r.counters.set(t, 0);
    r.counters.fail = new Error('ENOBUFS');
    await r.monitor.tick();
    await r.monitor.tick();
    expect(r.monitor.stats.readFailures).toBe(2);
    expect(r.warnings.map((w) => w.msg)).toEqual(['attack detection could not read the counters; it resumes at the next read that succeeds']);
    r.counters.fail = undefined;
    await r.monitor.tick();
    r.counters.fail = new Error('again');
    await r.monitor.tick();
    expect(r.warnings).toHaveLength(2);
  });
});

describe('pacing', () => {
  it('one interval between ticks while reads are quick; PACE_FACTOR times the read once it is slow, said once in the log', () => {
    const r = rig([tunnelSpec()]);
    const infos: { msg: string; fields?: Record<string, unknown> }[] = [];
    const monitor = new AttackMonitor({ tunnels: () => [], counters: r.counters.read, log: { warn: () => {}, info: (msg, fields) => infos.push({ msg, ...(fields ? { fields } : {}) }) } });
    monitor.stats.lastReadMs = 120;
    expect(monitor.pace()).toBe(1000);
    expect(infos).toEqual([]);
    // A read of 1.4 s (10,000 tunnels' counters on a busy host): reads take at most a quarter of the time.
    monitor.stats.lastReadMs = 1400;
    expect(monitor.pace()).toBe(1400 * PACE_FACTOR);
    expect(monitor.stats.pacedMs).toBe(5600);
    monitor.stats.lastReadMs = 1500;
    expect(monitor.pace()).toBe(6000);
    expect(infos).toEqual([{ msg: expect.stringMatching(/observes less often/), fields: { read_ms: 1400, every_ms: 5600, interval_ms: 1000 } }]);
  });
});

describe('status with attacks', () => {
  it('the status answer carries the journal as `attacks`, in the shape both ends check', async () => {
    const t = tunnelSpec();
    const r = rig([t]);
    r.counters.set(t, 0, {});
    await r.monitor.tick();
    for (let i = 0; i < 3; i++) await r.second([[t, 30_000]]);
    const reporter = new StatusReporter({
      tunnels: () => [t],
      counters: r.counters.read,
      health: () => ({ health: 'unknown', failures: 0 }),
      version: '0.1.0',
      startedAt: T0,
      now: () => T0 + 10_000,
      attacks: () => r.monitor.report(),
    });
    const status = await reporter.status();
    expect(checkStatusResult(status)).toBeUndefined();
    expect(status.attacks).toEqual([expect.objectContaining({ tunnel_id: t.id, started_at: new Date(T0).toISOString(), ended_at: null })]);
    // Without a source (an agent built without detection) the key is absent, as before it existed.
    const plain = await new StatusReporter({ tunnels: () => [t], counters: r.counters.read, health: () => ({ health: 'unknown', failures: 0 }), version: '0.1.0', startedAt: T0 }).status();
    expect('attacks' in plain).toBe(false);
  });
});

/**
 * A FAKE vector meter behaving as the table's (agent/netlink/ruleset.ts VECTOR_SETS, kernel/vector.ts): packets to
 * a watched IP are counted by protocol and port, nothing else is; `clean` deletes the counts of IPs not watched.
 */
class FakeVector {
  watched = new Set<string>();
  readonly counts = new Map<string, { protocols: Map<number, number>; ports: Map<number, number> }>();
  readonly calls: [string[], boolean][] = [];
  reads = 0;
  failRead: Error | undefined;
  /** Holds the next watch changes until resolved (the dataplane's queue busy with a reconcile). */
  hold: Promise<void> | undefined;

  packets(ip: string, proto: number, port: number | null, n: number): void {
    if (!this.watched.has(ip)) return;
    let c = this.counts.get(ip);
    if (!c) this.counts.set(ip, (c = { protocols: new Map(), ports: new Map() }));
    c.protocols.set(proto, (c.protocols.get(proto) ?? 0) + n);
    if (port !== null) c.ports.set(port, (c.ports.get(port) ?? 0) + n);
  }

  readonly meter = {
    read: async () => {
      this.reads++;
      if (this.failRead) throw this.failRead;
      return { counts: new Map([...this.counts].map(([ip, c]) => [ip, { protocols: new Map(c.protocols), ports: new Map(c.ports) }])), watched: new Set(this.watched) };
    },
    watch: async (ips: ReadonlySet<string>, clean: boolean) => {
      this.calls.push([[...ips].sort(), clean]);
      if (this.hold) await this.hold;
      this.watched = new Set(ips);
      if (clean) for (const ip of [...this.counts.keys()]) if (!ips.has(ip)) this.counts.delete(ip);
    },
  };
}

describe('the vector of an attack', () => {
  const UDP = 17;
  const TCP = 6;
  function vectorRig() {
    const a = tunnelSpec({ tunnel_name: 'tg-aaaaaaaaaa', protected_ip: '203.0.113.10', policy: { ...DEFAULT_POLICY, alert_pps: 1000 } });
    const b = tunnelSpec({ tunnel_name: 'tg-bbbbbbbbbb', protected_ip: '203.0.113.11' });
    let now = T0;
    const counters = new FakeCounters();
    const vector = new FakeVector();
    const records: AttackRecord[] = [];
    const monitor = new AttackMonitor({
      tunnels: () => [a, b],
      counters: counters.read,
      now: () => now,
      vector: vector.meter,
      detector: { endAfterMs: 5_000 },
      onEvent: (e) => records.push(e.attack),
    });
    counters.set(a, 0);
    counters.set(b, 0);
    /** One second: `udp7000` packets to a's port 7000, `tcp443` to its 443, 10 TCP to b's 80; then a tick. */
    const second = async (udp7000: number, tcp443 = 0, settle = true) => {
      counters.add(a, udp7000 + tcp443);
      vector.packets(a.protected_ip, UDP, 7000, udp7000);
      vector.packets(a.protected_ip, TCP, 443, tcp443);
      counters.add(b, 10);
      vector.packets(b.protected_ip, TCP, 80, 10);
      now += 1000;
      await monitor.tick();
      if (settle) await monitor.settled();
    };
    return { a, b, monitor, vector, records, second };
  }

  it("watches only a tunnel above its threshold, and names the flood's protocol and ports; nothing is read while none is hot", async () => {
    const r = vectorRig();
    await r.monitor.tick();
    await r.monitor.settled();
    // The first tick cleans what an earlier process may have left, watching nothing.
    expect(r.vector.calls).toEqual([[[], true]]);
    await r.second(100);
    await r.second(100);
    expect(r.vector.calls).toHaveLength(1);
    expect(r.vector.reads).toBe(0);
    // Above 1,000 pps: watched from then on; the second second above starts the attack, with what was metered.
    await r.second(3000, 100);
    expect(r.vector.calls.at(-1)).toEqual([[r.a.protected_ip], false]);
    await r.second(3000, 100);
    expect(r.records).toHaveLength(1);
    expect(r.records[0]!.vector).toMatchObject({ protocol: 'udp', ports: [7000, 443] });
    // Quiet: the attack ends after endAfterMs, then its IP leaves the watch and its counts are deleted.
    for (let i = 0; i < 7; i++) await r.second(0);
    expect(r.records.map((x) => x.ended_at !== null)).toEqual([false, true]);
    expect(r.records[1]!.vector).toMatchObject({ protocol: 'udp', ports: [7000, 443] });
    expect(r.vector.calls.at(-1)).toEqual([[], true]);
    expect(r.vector.counts.size).toBe(0);
    // b was never watched.
    expect(r.vector.calls.some(([ips]) => ips.includes(r.b.protected_ip))).toBe(false);
  });

  it('a tunnel watched again counts from zero: a second attack is named by its own packets only', async () => {
    const r = vectorRig();
    await r.monitor.tick();
    await r.monitor.settled();
    await r.second(3000);
    await r.second(3000);
    for (let i = 0; i < 7; i++) await r.second(0);
    expect(r.records.at(-1)!.vector.protocol).toBe('udp');
    // Now a TCP flood to 443: UDP's earlier counts must not make it `udp` or `mixed`.
    await r.second(0, 3000);
    await r.second(0, 3000);
    await r.second(0, 3000);
    expect(r.records.at(-1)).toMatchObject({ ended_at: null, vector: { protocol: 'tcp', ports: [443] } });
  });

  it('a failed vector read skips the watched tunnels for that tick (their next observation spans both), never counting a count twice', async () => {
    const r = vectorRig();
    await r.monitor.tick();
    await r.monitor.settled();
    await r.second(3000);
    await r.second(3000);
    expect(r.records).toHaveLength(1);
    // 3,000 to port 7000 metered so far; then 4,000 TCP to 443 over two seconds, the first one's read failing.
    r.vector.failRead = new Error('EBUSY');
    await r.second(0, 2000);
    r.vector.failRead = undefined;
    await r.second(0, 2000);
    const last = r.monitor.report().find((x) => x.id === r.records[0]!.id)!;
    // Had the failed second been observed without the meter, the next would take every count since the watch
    // began as new (7000 counted twice: 6,000 against 443's 4,000).
    expect(last.vector).toMatchObject({ protocol: 'mixed', ports: [443, 7000] });
    expect(last.peak_pps).toBe(3000);
  });

  it('a watch change waiting in the dataplane (behind a reconcile) holds no tick: detection goes on, and one change at a time', async () => {
    const r = vectorRig();
    await r.monitor.tick();
    await r.monitor.settled();
    let free!: () => void;
    r.vector.hold = new Promise((res) => (free = res));
    await r.second(3000, 0, false);
    // The tick returned while its watch change waits; the next ticks start none of their own meanwhile.
    await r.second(3000, 0, false);
    expect(r.records).toHaveLength(1);
    expect(r.vector.calls).toEqual([
      [[], true],
      [[r.a.protected_ip], false],
    ]);
    r.vector.hold = undefined;
    free();
    await r.monitor.settled();
    // Started before the meter watched it: its start said null; once watched, its record names the flood.
    expect(r.records[0]!.vector.protocol).toBeNull();
    await r.second(3000);
    await r.second(3000);
    expect(r.monitor.report().at(-1)!.vector).toMatchObject({ protocol: 'udp', ports: [7000] });
  });

  it('a table that lost its watched IPs (rebuilt) has them put back at the next tick', async () => {
    const r = vectorRig();
    await r.monitor.tick();
    await r.monitor.settled();
    await r.second(3000);
    await r.second(3000);
    expect(r.vector.watched).toEqual(new Set([r.a.protected_ip]));
    const calls = r.vector.calls.length;
    // `nft flush ruleset` and the repair: the sets are empty again.
    r.vector.watched = new Set();
    r.vector.counts.clear();
    await r.second(3000);
    await r.second(3000);
    expect(r.vector.calls.slice(calls)).toEqual([[[r.a.protected_ip], false]]);
    expect(r.vector.watched).toEqual(new Set([r.a.protected_ip]));
    // Metered again: 7000 counted 6,000 (the second the table lost is not), 443 then 4,000.
    await r.second(0, 2000);
    await r.second(0, 2000);
    expect(r.monitor.report().at(-1)!.vector.ports).toEqual([7000, 443]);
  });
});
