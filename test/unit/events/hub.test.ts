// The agent's side of the events stream (agent/events/hub.ts) with FAKE writers (arrays standing in for SSH
// channels; the real channel is test/integration/events-stream.test.ts's) and an injected clock: a keep-alive on
// opening and on its timer, each attack start written on the monitor tick that decides it, a health change on the
// check that decides it, and a writer that refuses a line dropped.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { EventHub } from '../../../agent/events/hub.ts';
import { AttackMonitor, type CounterValue } from '../../../agent/attacks/monitor.ts';
import { dropCounterName } from '../../../agent/dataplane/policy.ts';
import { decodeEventLine, type EdgeEvent } from '../../../common/edge-events.ts';
import { DROP_REASONS } from '../../../common/tunnel-status.ts';
import { DEFAULT_POLICY } from '../../../common/tunnel-policy.ts';
import { tunnelSpec } from '../../helpers/tunnel-spec.ts';

const T0 = Date.parse('2026-11-29T02:00:00.000Z');

/** What one FAKE channel got, decoded (every line must decode). */
function channel() {
  const got: EdgeEvent[] = [];
  const write = (line: string) => {
    const d = decodeEventLine(line.replace(/\n$/, ''));
    if (!d.ok) throw new Error(d.reason);
    got.push(d.event);
    return true;
  };
  return { got, write, types: () => got.map((e) => e.type) };
}

describe('EventHub', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('a keep-alive on opening and every interval; events to every open stream; none after it closes', () => {
    const hub = new EventHub({ keepaliveMs: 1000, now: () => T0 });
    const a = channel();
    const b = channel();
    const closeA = hub.subscribe(a.write);
    hub.subscribe(b.write);
    expect(a.got).toEqual([{ type: 'keepalive', at: '2026-11-29T02:00:00.000Z' }]);
    vi.advanceTimersByTime(2000);
    expect(a.types()).toEqual(['keepalive', 'keepalive', 'keepalive']);
    hub.health('6f1c2a4e-8b7d-4c3e-9a2f-1d5e7b9c0a11', 'down', T0 + 500);
    expect(a.got.at(-1)).toEqual({ type: 'health_changed', tunnel_id: '6f1c2a4e-8b7d-4c3e-9a2f-1d5e7b9c0a11', health: 'down', checked_at: '2026-11-29T02:00:00.500Z' });
    expect(b.got.at(-1)).toEqual(a.got.at(-1));
    closeA();
    vi.advanceTimersByTime(5000);
    hub.health('6f1c2a4e-8b7d-4c3e-9a2f-1d5e7b9c0a11', 'up', T0 + 6000);
    expect(a.got).toHaveLength(4);
    expect(b.types().filter((t) => t === 'health_changed')).toHaveLength(2);
    expect(hub.streams).toBe(1);
  });

  it('a writer that refuses a line (its channel gone or behind) gets no more', () => {
    const hub = new EventHub({ keepaliveMs: 1000, now: () => T0 });
    let calls = 0;
    hub.subscribe(() => (++calls, false));
    expect(hub.streams).toBe(0);
    vi.advanceTimersByTime(5000);
    expect(calls).toBe(1);
    expect(hub.stats.refused).toBe(1);
  });

  it('an event the codec refuses is counted and dropped, never thrown at the monitor or the health check that sent it', () => {
    const hub = new EventHub({ keepaliveMs: 60_000, now: () => T0 });
    const lines: string[] = [];
    hub.subscribe((l) => (lines.push(l), true));
    expect(() => hub.health('not-a-uuid', 'up', T0)).not.toThrow();
    expect(() => hub.health('00000000-0000-4000-8000-000000000001', 'up', Number.NaN)).not.toThrow();
    expect(hub.stats).toMatchObject({ invalid: 2, published: 0 });
    expect(lines).toHaveLength(1); // the opening keep-alive only
    hub.health('00000000-0000-4000-8000-000000000001', 'down', T0);
    expect(hub.stats).toMatchObject({ invalid: 2, published: 1 });
    expect(lines).toHaveLength(2);
  });
});

describe('the attack monitor through the hub', () => {
  it('attack_started is written during the tick that decides it (the second second over alert_pps), not later', async () => {
    let now = T0;
    const t = tunnelSpec({ tunnel_name: 'tg-aaaaaaaaaa', policy: { ...DEFAULT_POLICY, alert_pps: 100 } });
    const counters = new Map<string, CounterValue>();
    let packets = 0n;
    const set = () => {
      counters.set(t.tunnel_name, { packets, bytes: packets * 100n });
      for (const r of DROP_REASONS) counters.set(dropCounterName(t, r), { packets: 0n, bytes: 0n });
    };
    set();
    const hub = new EventHub({ keepaliveMs: 60_000, now: () => now });
    const monitor = new AttackMonitor({ tunnels: () => [t], counters: async () => new Map(counters), now: () => now, onEvent: (e) => hub.attack(e) });
    const ch = channel();
    hub.subscribe(ch.write);
    const second = async (n: bigint) => {
      packets += n;
      set();
      now += 1000;
      await monitor.tick();
    };
    await monitor.tick();
    await second(500n);
    expect(ch.types()).toEqual(['keepalive']);
    await second(500n);
    expect(ch.types()).toEqual(['keepalive', 'attack_started']);
    const started = ch.got[1] as Extract<EdgeEvent, { type: 'attack_started' }>;
    expect(started.attack).toMatchObject({ tunnel_id: t.id, ended_at: null, peak_pps: 500, started_at: '2026-11-29T02:00:00.000Z' });
    expect(monitor.report()).toEqual([started.attack]);
    await monitor.stop();
  });
});
