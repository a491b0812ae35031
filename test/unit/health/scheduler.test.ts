// The health scheduler (agent/health/scheduler.ts) with an injected clock and a FAKE prober (FakeProber: no
// network; the real probe is test/netns/health.test.ts's): hysteresis (down after 3 failures in a row, up
// after one success), spreading over the interval, bounded concurrency, traffic as evidence of life.
import { describe, expect, it } from 'vitest';
import { HealthScheduler, nextHealth, type CheckRecord, type TunnelHealth } from '../../../agent/health/scheduler.ts';
import { StatusReporter } from '../../../agent/health/status.ts';
import { checkStatusResult } from '../../../common/tunnel-status.ts';
import type { ProbeResult, TunnelSpec } from '../../../agent/dataplane/types.ts';
import { tunnelSpec } from '../../helpers/tunnel-spec.ts';

const INTERVAL = 30_000;

/** A FAKE prober: answers what the test sets per tunnel, counts calls, and can hold answers to test concurrency. */
class FakeProber {
  answers = new Map<string, boolean>();
  calls: string[] = [];
  inFlight = 0;
  maxInFlight = 0;
  hold: Promise<void> | undefined;
  probe = async (t: TunnelSpec): Promise<ProbeResult> => {
    this.calls.push(t.id);
    this.inFlight++;
    this.maxInFlight = Math.max(this.maxInFlight, this.inFlight);
    try {
      if (this.hold) await this.hold;
      return this.answers.get(t.id) ?? true ? { reachable: true, rtt_ms: 2 } : { reachable: false };
    } finally {
      this.inFlight--;
    }
  };
}

/** The scheduler's outPackets over a map of tunnel id to `out` packets, recording the ids of each call. */
function outReader(out: Map<string, bigint>, calls: string[][] = []) {
  return async (ts: readonly TunnelSpec[]) => {
    calls.push(ts.map((t) => t.id));
    return ts.map((t) => out.get(t.id));
  };
}

function setup(n: number, opts: { concurrency?: number; out?: Map<string, bigint>; outCalls?: string[][] } = {}) {
  const clock = { t: 1_000_000 * INTERVAL, now() { return this.t; } };
  const tunnels = Array.from({ length: n }, (_, i) => tunnelSpec({ tunnel_name: `tg-${i}` }));
  const prober = new FakeProber();
  const s = new HealthScheduler({
    tunnels: () => tunnels,
    probe: prober.probe,
    intervalMs: INTERVAL,
    clock,
    ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
    ...(opts.out ? { outPackets: outReader(opts.out, opts.outCalls) } : {}),
  });
  // The scheduler meets the tunnels now: each is due at its slot within the coming interval.
  void s.runDue();
  /** Moves the clock on by `ms` in steps of `step`, running due checks at each (what the timer does). */
  const advance = async (ms: number, step = 1000) => {
    const end = clock.t + ms;
    while (clock.t < end) {
      clock.t = Math.min(end, clock.t + step);
      await s.runDue();
    }
  };
  return { clock, tunnels, prober, s, advance };
}

describe('health hysteresis (nextHealth)', () => {
  it('down after 3 failures in a row, up after one success; unknown stays unknown for 2 failures', () => {
    let h: TunnelHealth = { health: 'unknown', failures: 0 };
    h = nextHealth(h, false, 1);
    h = nextHealth(h, false, 2);
    expect(h.health).toBe('unknown');
    h = nextHealth(h, false, 3);
    expect(h).toMatchObject({ health: 'down', failures: 3, checkedAt: 3 });
    h = nextHealth(h, true, 4, 1.5);
    expect(h).toMatchObject({ health: 'up', failures: 0, rttMs: 1.5, checkedAt: 4 });
    h = nextHealth(h, false, 5);
    h = nextHealth(h, false, 6);
    expect(h.health).toBe('up');
    h = nextHealth(h, true, 7);
    h = nextHealth(h, false, 8);
    h = nextHealth(h, false, 9);
    expect(h.health).toBe('up'); // the success in between reset the count
    h = nextHealth(h, false, 10);
    expect(h.health).toBe('down');
  });
});

describe('HealthScheduler (injected clock, FakeProber)', () => {
  it('checks every tunnel once per interval, spread over it, not all at once', async () => {
    const { s, prober, advance } = setup(300);
    expect(s.get('x').health).toBe('unknown');
    await advance(INTERVAL);
    expect(prober.calls.length).toBe(300);
    expect(new Set(prober.calls).size).toBe(300);
    await advance(INTERVAL);
    expect(prober.calls.length).toBe(600);
    // Spread: per 1 s step, at most a few times the mean of 10 checks (FNV slots of random ids).
    const { s: s2, prober: p2, clock } = setup(300);
    const perStep: number[] = [];
    for (let i = 0; i < 30; i++) {
      const before = p2.calls.length;
      clock.t += 1000;
      await s2.runDue();
      perStep.push(p2.calls.length - before);
    }
    expect(perStep.reduce((a, b) => a + b, 0)).toBe(300);
    expect(Math.max(...perStep)).toBeLessThan(40);
  });

  it('a tunnel whose probe fails is down after exactly 3 checks, up again after one success', async () => {
    const { s, prober, tunnels, advance } = setup(3);
    const [a, b] = tunnels as [TunnelSpec, TunnelSpec];
    await advance(INTERVAL);
    expect(s.get(a.id)).toMatchObject({ health: 'up', rttMs: 2 });
    expect(s.get(a.id).checkedAt).toBeTypeOf('number');
    prober.answers.set(a.id, false);
    await advance(INTERVAL);
    await advance(INTERVAL);
    expect(s.get(a.id).health).toBe('up');
    await advance(INTERVAL);
    expect(s.get(a.id)).toMatchObject({ health: 'down', failures: 3 });
    expect(s.get(b.id).health).toBe('up');
    prober.answers.set(a.id, true);
    await advance(INTERVAL);
    expect(s.get(a.id).health).toBe('up');
  });

  it('onCheck reports every check with its slot, one interval after the last, what decided it and the health after it', async () => {
    const clock = { t: 1_000_000 * INTERVAL, now() { return this.t; } };
    const t = tunnelSpec({ tunnel_name: 'tg-rec' });
    const prober = new FakeProber();
    const out = new Map<string, bigint>([[t.id, 0n]]);
    const seen: CheckRecord[] = [];
    const s = new HealthScheduler({ tunnels: () => [t], probe: prober.probe, outPackets: outReader(out), intervalMs: INTERVAL, clock, onCheck: (c) => seen.push(c) });
    const interval = async () => {
      for (let i = 0; i < INTERVAL / 1000; i++) {
        clock.t += 1000;
        await s.runDue();
      }
    };
    await s.runDue();
    await interval(); // probed: up
    out.set(t.id, 5n);
    await interval(); // the out counter grew: up by traffic
    prober.answers.set(t.id, false);
    for (let i = 0; i < 3; i++) await interval(); // probed, no answer: down at the third
    expect(seen.map(({ by, ok, health, failures }) => ({ by, ok, health, failures }))).toEqual([
      { by: 'probe', ok: true, health: 'up', failures: 0 },
      { by: 'traffic', ok: true, health: 'up', failures: 0 },
      { by: 'probe', ok: false, health: 'up', failures: 1 },
      { by: 'probe', ok: false, health: 'up', failures: 2 },
      { by: 'probe', ok: false, health: 'down', failures: 3 },
    ]);
    expect(seen.every((c) => c.tunnel_id === t.id)).toBe(true);
    for (let i = 1; i < seen.length; i++) expect(seen[i]!.slot - seen[i - 1]!.slot).toBe(INTERVAL);
  });

  it('at most `concurrency` checks at once', async () => {
    const { s, prober, clock } = setup(100, { concurrency: 4 });
    let release!: () => void;
    prober.hold = new Promise((r) => (release = r));
    clock.t += INTERVAL; // every tunnel due at once (a scheduler that fell behind)
    const done = s.runDue();
    await new Promise((r) => setImmediate(r));
    expect(prober.inFlight).toBe(4);
    release();
    await done;
    expect(prober.calls.length).toBe(100);
    expect(prober.maxInFlight).toBe(4);
  });

  it('reply traffic (the out counter grew) counts as a success without a probe; a still counter means a probe', async () => {
    const out = new Map<string, bigint>();
    const { s, prober, tunnels, advance } = setup(1, { out });
    const [a] = tunnels as [TunnelSpec];
    out.set(a.id, 10n);
    prober.answers.set(a.id, false);
    await advance(INTERVAL);
    await advance(INTERVAL);
    expect(prober.calls.length).toBe(2); // no growth yet: probed (and failed)
    out.set(a.id, 11n);
    await advance(INTERVAL);
    expect(prober.calls.length).toBe(2);
    expect(s.get(a.id)).toMatchObject({ health: 'up', failures: 0 });
    expect(s.stats.byTraffic).toBe(1);
    // The origin stops answering anyone: probes resume and fail, down after 3.
    for (let i = 0; i < 3; i++) await advance(INTERVAL);
    expect(prober.calls.length).toBe(5);
    expect(s.get(a.id).health).toBe('down');
  });

  it("a tick reads the `out` counters of all its due checks in ONE call, and each check uses its own tunnel's value", async () => {
    const out = new Map<string, bigint>();
    const outCalls: string[][] = [];
    const { s, prober, tunnels, clock } = setup(50, { out, outCalls });
    for (const [i, t] of tunnels.entries()) out.set(t.id, BigInt(i));
    clock.t += INTERVAL; // every tunnel due at once
    await s.runDue();
    expect(outCalls).toHaveLength(1); // the first runDue (in setup()) found none due and read nothing
    expect([...outCalls[0]!].sort()).toEqual(tunnels.map((t) => t.id).sort());
    expect(prober.calls).toHaveLength(50); // first look: nothing to compare with, so probed
    // Half of them carried replies since: those count by traffic, the rest are probed; still one read.
    for (const [i, t] of tunnels.entries()) if (i % 2 === 0) out.set(t.id, BigInt(i) + 1n);
    clock.t += INTERVAL;
    await s.runDue();
    expect(outCalls).toHaveLength(2);
    expect(outCalls[1]).toHaveLength(50);
    expect(prober.calls).toHaveLength(75);
    expect(new Set(prober.calls.slice(50))).toEqual(new Set(tunnels.filter((_, i) => i % 2 === 1).map((t) => t.id)));
    expect(s.stats.byTraffic).toBe(25);
  });

  it('a counter read that fails leaves the checks to their probes (no failed check for it)', async () => {
    const clock = { t: 1_000_000 * INTERVAL, now() { return this.t; } };
    const tunnels = [tunnelSpec({ tunnel_name: 'tg-a' }), tunnelSpec({ tunnel_name: 'tg-b' })];
    const prober = new FakeProber();
    const logged: string[] = [];
    const s = new HealthScheduler({
      tunnels: () => tunnels,
      probe: prober.probe,
      outPackets: async () => {
        throw new Error('netlink socket closed');
      },
      intervalMs: INTERVAL,
      clock,
      log: (e) => logged.push(e),
    });
    await s.runDue();
    clock.t += INTERVAL;
    await s.runDue();
    expect(prober.calls).toHaveLength(2);
    for (const t of tunnels) expect(s.get(t.id).health).toBe('up');
    expect(logged).toContain('health counters unreadable; the checks probe');
  });

  it('stop() while a tick reads its counters: the read answers after and no check starts', async () => {
    const clock = { t: 1_000_000 * INTERVAL, now() { return this.t; } };
    const t = tunnelSpec({ tunnel_name: 'tg-s' });
    const prober = new FakeProber();
    let answer!: (v: (bigint | undefined)[]) => void;
    const s = new HealthScheduler({ tunnels: () => [t], probe: prober.probe, outPackets: () => new Promise((r) => (answer = r)), intervalMs: INTERVAL, clock });
    await s.runDue();
    clock.t += INTERVAL;
    const done = s.runDue();
    const stopped = s.stop();
    answer([1n]);
    await Promise.all([done, stopped]);
    expect(prober.calls).toHaveLength(0);
  });

  it('a tunnel leaving the desired state is forgotten; a changed origin starts from unknown', async () => {
    const { s, tunnels, advance } = setup(2);
    await advance(INTERVAL);
    const [a, b] = tunnels as [TunnelSpec, TunnelSpec];
    expect(s.get(a.id).health).toBe('up');
    tunnels[1] = { ...b, origin_ip: '198.51.100.77' };
    tunnels.shift();
    await s.runDue();
    expect(s.get(a.id).health).toBe('unknown');
    expect(s.get(b.id).health).toBe('unknown');
  });
});

describe('StatusReporter', () => {
  it('reports every desired tunnel with its health and counters, monotonic across a counter recreated', async () => {
    const t = tunnelSpec({ tunnel_name: 'tg-a' });
    const counters = new Map<string, { packets: bigint; bytes: bigint }>([
      ['tg-a', { packets: 10n, bytes: 1000n }],
      ['tg-a.out', { packets: 5n, bytes: 500n }],
      ['tg-a.spoofed', { packets: 2n, bytes: 80n }],
    ]);
    const r = new StatusReporter({ tunnels: () => [t], counters: async () => counters, health: () => ({ health: 'up', failures: 0, checkedAt: 0, rttMs: 1 }), version: '9.9.9', startedAt: 0, now: () => 61_000 });
    const first = await r.status();
    expect(checkStatusResult(first)).toBeUndefined();
    expect(first).toEqual({
      agent: { version: '9.9.9', uptime_s: 61, tunnels: 1 },
      tunnels: [{ id: t.id, health: 'up', checked_at: '1970-01-01T00:00:00.000Z', rtt_ms: 1, counters: { packets_in: 10, bytes_in: 1000, packets_out: 5, bytes_out: 500, dropped: { not_allowed: 0, rate_limited: 0, spoofed: 2, invalid: 0, fragment: 0 } } }],
    });
    // The in counter recreated (reads 3 again from 0): reported 10 + 3, never less than before.
    counters.set('tg-a', { packets: 3n, bytes: 300n });
    const second = await r.status();
    expect(second.tunnels[0]!.counters).toMatchObject({ packets_in: 13, bytes_in: 1300, packets_out: 5 });
  });

  it('reports the operation the watchdog gave up as agent.stuck while there is one, and nothing otherwise', async () => {
    let stuck: { op: string; step: string; since: string; call?: string } | undefined;
    const r = new StatusReporter({ tunnels: () => [], counters: async () => new Map(), health: () => ({ health: 'unknown', failures: 0 }), version: '9.9.9', startedAt: 0, now: () => 1000, stuck: () => stuck });
    expect((await r.status()).agent).toEqual({ version: '9.9.9', uptime_s: 1, tunnels: 0 });
    stuck = { op: 'reconcile', step: 'nftables commit', since: '2026-11-28T16:06:21.000Z', call: 'nftables commit (812 messages)' };
    const s = await r.status();
    expect(checkStatusResult(s)).toBeUndefined();
    expect(s.agent.stuck).toEqual({ op: 'reconcile', step: 'nftables commit (nftables commit (812 messages))', since: '2026-11-28T16:06:21.000Z' });
    stuck = undefined;
    expect((await r.status()).agent.stuck).toBeUndefined();
  });
});
