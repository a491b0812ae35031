// Attack detection's rule (agent/attacks/detector.ts; docs/CONTRACTS.md "Attacks"), fed by hand: every
// observation carries its own time (no clock), counters are cumulative as the dataplane's are.
import { describe, expect, it } from 'vitest';
import { AttackDetector, MAX_TRACKED_PORTS, type TunnelCounterSample } from '../../../agent/attacks/detector.ts';
import { BASELINE_SAMPLES } from '../../../agent/attacks/baseline.ts';
import { checkAttackRecord, type AttackRecord } from '../../../common/attacks.ts';
import { DROP_REASONS, type DropReason } from '../../../common/tunnel-status.ts';

const T0 = Date.parse('2026-12-01T10:00:00.000Z');
const iso = (ms: number) => new Date(ms).toISOString();

/** Sequential attack ids, so a test can name them. */
function ids(): () => string {
  let n = 0;
  return () => `00000000-0000-4000-8000-${String(++n).padStart(12, '0')}`;
}

const tunnelId = (n: number) => `7d3c4b0e-2f7a-4c8e-9a51-${String(n).padStart(12, '0')}`;

interface SecondOpts {
  /** Drops this second, per reason. */
  drops?: Partial<Record<DropReason, number>>;
  bytesPerPacket?: number;
  /** Length of this observation's interval (default 1,000 ms). */
  ms?: number;
  alertPps?: number | null;
  protocols?: Partial<Record<'tcp' | 'udp' | 'icmp' | 'other', number>>;
  ports?: [number, number][];
}

/**
 * One tunnel's counters over time: each second() adds that second's traffic to the cumulative counters and
 * feeds the detector one observation at the second's end. The first observation (at T0) only sets the reference.
 */
class Feed {
  at = T0;
  packets = 0;
  bytes = 0;
  readonly dropped = Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>;
  protocols: Record<string, number> | undefined;
  ports: Map<number, number> | undefined;
  readonly results: ({ type?: string; record: AttackRecord } | undefined)[] = [];

  constructor(
    readonly det: AttackDetector,
    readonly id = tunnelId(1),
    readonly alertPps: number | null = null,
  ) {
    this.observe(alertPps);
  }

  private sample(): TunnelCounterSample {
    return {
      packets_in: this.packets,
      bytes_in: this.bytes,
      dropped: { ...this.dropped },
      ...(this.protocols ? { protocols: { ...this.protocols } } : {}),
      ...(this.ports ? { ports: new Map(this.ports) } : {}),
    };
  }

  private observe(alertPps: number | null) {
    const r = this.det.observe(this.at, { id: this.id, alertPps, counters: this.sample() });
    const out = r ? { ...(r.event ? { type: r.event.type } : {}), record: r.record } : undefined;
    this.results.push(out);
    return out;
  }

  /** One interval of `pps` packets per second (and drops), then its observation. */
  second(pps: number, o: SecondOpts = {}) {
    const ms = o.ms ?? 1000;
    const n = Math.round((pps * ms) / 1000);
    this.at += ms;
    this.packets += n;
    this.bytes += n * (o.bytesPerPacket ?? 100);
    for (const [r, d] of Object.entries(o.drops ?? {})) this.dropped[r as DropReason] += Math.round(((d as number) * ms) / 1000);
    if (o.protocols) {
      this.protocols ??= {};
      for (const [p, v] of Object.entries(o.protocols)) this.protocols[p] = (this.protocols[p] ?? 0) + v;
    }
    if (o.ports) {
      this.ports ??= new Map();
      for (const [p, v] of o.ports) this.ports.set(p, (this.ports.get(p) ?? 0) + v);
    }
    return this.observe(o.alertPps === undefined ? this.alertPps : o.alertPps);
  }

  /** `seconds` observations at `pps`; the results of each. */
  for(seconds: number, pps: number, o: SecondOpts = {}) {
    return Array.from({ length: seconds }, () => this.second(pps, o));
  }

  /** The events so far, by type, with their records. */
  events() {
    return this.results.filter((r): r is { type: string; record: AttackRecord } => r?.type !== undefined);
  }
}

describe('threshold', () => {
  it('automatic with no baseline: 5,000 pps is the floor; exceeding it (strictly) counts', () => {
    const at = new Feed(new AttackDetector({ newId: ids() }));
    at.for(3, 5_000);
    expect(at.events()).toEqual([]);
    const over = new Feed(new AttackDetector({ newId: ids() }));
    over.for(2, 5_001);
    expect(over.events().map((e) => e.type)).toEqual(['attack_started']);
  });

  it('automatic: 10 x the p95 of the last ten minutes of calm traffic', () => {
    const det = new AttackDetector({ newId: ids() });
    const f = new Feed(det);
    f.for(600, 2_000);
    // 10 x 2,000 within the baseline's 4.5% coding step.
    expect(det.threshold(f.id)).toBeGreaterThan(20_000 * 0.955);
    expect(det.threshold(f.id)).toBeLessThan(20_000 * 1.045);
    f.for(30, 18_000);
    expect(f.events()).toEqual([]);
    f.for(2, 25_000);
    expect(f.events().map((e) => e.type)).toEqual(['attack_started']);
  });

  it('the p95 (nearest rank), not the mean or the peak: spikes in 5% of the ten minutes do not raise it, in 31 seconds they do', () => {
    const det = new AttackDetector();
    const f = new Feed(det);
    // 570 seconds at 300 and 30 (exactly 5%) at 4,000: the p95 is the 31st highest, 300, and 10 x 300 is below the floor.
    f.for(570, 300);
    f.for(30, 4_000);
    expect(det.threshold(f.id)).toBe(5_000);
    // One more: the oldest 300 leaves the window, 31 of 600 are 4,000 and so is the p95.
    f.second(4_000);
    expect(det.threshold(f.id)).toBeGreaterThan(40_000 * 0.955);
    expect(det.threshold(f.id)).toBeLessThan(40_000 * 1.045);
  });

  it('alert_pps, when set, replaces the automatic threshold, above and below the floor', () => {
    const low = new Feed(new AttackDetector({ newId: ids() }), tunnelId(1), 200);
    low.for(5, 200);
    expect(low.events()).toEqual([]);
    low.for(2, 300);
    expect(low.events().map((e) => e.type)).toEqual(['attack_started']);

    const high = new Feed(new AttackDetector({ newId: ids() }), tunnelId(2), 1_000_000);
    high.for(10, 100);
    high.for(10, 500_000);
    expect(high.events()).toEqual([]);
    // The tunnel's alert_pps is read each observation: lifted (null), the automatic threshold is back. The seconds
    // below alert_pps were calm and taught the baseline (the p95 of 20 samples is the second highest: 500,000), so
    // 900,000 is calm too (and learned), and a flood must exceed ten times the new p95.
    high.for(2, 900_000, { alertPps: null });
    expect(high.events()).toEqual([]);
    high.for(2, 20_000_000, { alertPps: null });
    expect(high.events().map((e) => e.type)).toEqual(['attack_started']);
  });

  it('drops per second count like inbound packets: a flood of spoofed packets from the origin side starts an attack', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.for(3, 100, { drops: { spoofed: 6_000 } });
    const [started] = f.events();
    expect(started?.type).toBe('attack_started');
    expect(started?.record.vector.top_drop_reason).toBe('spoofed');
    // Spoofed packets were not toward the origin: the 100 pps in all passed.
    expect(started?.record.packets_passed).toBe(200);
    expect(started?.record.packets_dropped).toBe(12_000);
  });
});

describe('the 2-second rule', () => {
  it('one second above alone starts nothing, nor do seconds above that are not consecutive', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.second(50_000);
    f.second(100);
    f.second(50_000);
    f.second(100);
    f.second(50_000);
    f.for(5, 100);
    expect(f.events()).toEqual([]);
  });

  it('two in a row start it; started_at is the start of the first second above', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.for(10, 100);
    const firstAboveStarts = f.at;
    const [a, b] = f.for(2, 50_000);
    expect(a).toBeUndefined();
    expect(b?.type).toBe('attack_started');
    const r = b!.record;
    expect(checkAttackRecord(r)).toBeUndefined();
    expect(r).toMatchObject({ id: '00000000-0000-4000-8000-000000000001', tunnel_id: f.id, started_at: iso(firstAboveStarts), ended_at: null, peak_pps: 50_000, peak_bps: 40_000_000 });
    // The two seconds are the attack's so far: 100,000 packets, none dropped, all passed.
    expect(r.packets_passed).toBe(100_000);
    expect(r.packets_dropped).toBe(0);
  });

  it('observations closer than a second still need two in a row', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.second(50_000, { ms: 500 });
    expect(f.events()).toEqual([]);
    f.second(50_000, { ms: 500 });
    expect(f.events().map((e) => e.type)).toEqual(['attack_started']);
  });
});

describe('the end: 60 s after the last second above', () => {
  it('stays open through 59 quiet seconds and ends at the 60th; ended_at is the end of the last second above', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.for(5, 100);
    f.for(10, 40_000, { drops: { rate_limited: 30_000 } });
    const lastAbove = f.at;
    f.for(59, 100);
    expect(f.events().map((e) => e.type)).toEqual(['attack_started']);
    f.second(100);
    const ended = f.events()[1]!;
    expect(ended.type).toBe('attack_ended');
    expect(ended.record.ended_at).toBe(iso(lastAbove));
    // Totals of the ten seconds above only: the quiet tail is not the attack's.
    expect(ended.record).toMatchObject({ peak_pps: 40_000, packets_dropped: 300_000, packets_passed: 100_000, vector: { top_drop_reason: 'rate_limited', protocol: null, ports: null } });
    // Same id from start to end.
    expect(ended.record.id).toBe(f.events()[0]!.record.id);
  });

  it('a burst within the quiet minute keeps it open and moves its end; the calm seconds between count then', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.for(3, 30_000);
    f.for(30, 1_000);
    // One second above is enough to extend an attack that is going on.
    f.second(30_000);
    const lastAbove = f.at;
    f.for(59, 1_000);
    expect(f.events().map((e) => e.type)).toEqual(['attack_started']);
    f.second(1_000);
    const ended = f.events()[1]!;
    expect(ended.record.ended_at).toBe(iso(lastAbove));
    expect(ended.record.packets_passed).toBe(3 * 30_000 + 30 * 1_000 + 30_000);
  });

  it('a new flood after the end is a new attack with a new id', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.for(2, 30_000);
    f.for(60, 10);
    f.for(2, 30_000);
    expect(f.events().map((e) => [e.type, e.record.id.slice(-1)])).toEqual([
      ['attack_started', '1'],
      ['attack_ended', '1'],
      ['attack_started', '2'],
    ]);
  });

  it('the baseline learns nothing during an attack: a flood twenty minutes long stays one attack', () => {
    const det = new AttackDetector({ newId: ids() });
    const f = new Feed(det);
    f.for(600, 500);
    const before = det.threshold(f.id)!;
    f.for(20 * 60, 80_000);
    expect(f.events().map((e) => e.type)).toEqual(['attack_started']);
    expect(det.threshold(f.id)).toBe(before);
    expect(det.open()).toHaveLength(1);
  });
});

describe('legitimate traffic', () => {
  it('a burst below the threshold raises nothing, however long, and the baseline takes it in', () => {
    const det = new AttackDetector();
    const f = new Feed(det);
    f.for(600, 1_500);
    // 9 x the p95: busy, not an attack.
    f.for(300, 13_000);
    expect(f.events()).toEqual([]);
    expect(det.open()).toEqual([]);
    // After five minutes of it the p95 is the new level.
    expect(det.threshold(f.id)).toBeGreaterThan(100_000);
  });

  it('growth of less than ten times at each step is learned: 1,000 -> 8,000 -> 60,000 pps raises nothing', () => {
    const det = new AttackDetector();
    const f = new Feed(det);
    for (const pps of [1_000, 8_000, 60_000]) f.for(600, pps);
    expect(f.events()).toEqual([]);
  });

  it('the first observation of a tunnel only sets its reference, however large its counters', () => {
    const det = new AttackDetector();
    const r = det.observe(T0, { id: tunnelId(9), counters: { packets_in: 9e12, bytes_in: 9e14, dropped: { not_allowed: 1e9, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 } } });
    expect(r).toBeUndefined();
    expect(det.baselineSamples(tunnelId(9))).toBe(0);
  });
});

describe('counter resets and wraps', () => {
  it('a counter that goes down (recreated, or wrapped) counts its new value, never a negative or a huge rate', () => {
    const det = new AttackDetector();
    const f = new Feed(det);
    f.for(20, 1_000);
    const before = det.threshold(f.id);
    // The tunnel's counter restarted at 0 a moment ago: it reads 500 where it read 20,000.
    f.packets = 500;
    f.bytes = 50_000;
    f.second(0);
    // The same for a 32-bit source wrapping: 2^32 - 10 then 700.
    f.packets = 2 ** 32 - 10;
    f.for(1, 0);
    f.packets = 700;
    f.second(0);
    f.for(5, 1_000);
    expect(f.events()).toEqual([]);
    // No spike was learned: the threshold is what it was.
    expect(det.threshold(f.id)).toBe(before);
  });

  it('a reset in the middle of an attack neither ends it nor counts backwards', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.for(5, 30_000, { drops: { not_allowed: 10_000 } });
    f.packets = 0;
    f.dropped.not_allowed = 0;
    f.for(5, 30_000, { drops: { not_allowed: 10_000 } });
    f.for(60, 0);
    const [started, ended] = f.events();
    expect(started?.type).toBe('attack_started');
    expect(ended?.type).toBe('attack_ended');
    // The observation right after the reset counted what the counters said since it: one second's worth.
    expect(ended?.record.packets_dropped).toBe(10 * 10_000);
    expect(ended?.record.packets_passed).toBe(10 * 20_000);
  });

  it('an observation not later than the previous one is ignored', () => {
    const det = new AttackDetector({ newId: ids() });
    const f = new Feed(det);
    f.for(3, 100);
    const zeros = { not_allowed: 0, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 };
    expect(det.observe(f.at, { id: f.id, counters: { packets_in: f.packets + 1e9, bytes_in: 0, dropped: zeros } })).toBeUndefined();
    expect(det.observe(f.at - 500, { id: f.id, counters: { packets_in: f.packets + 1e9, bytes_in: 0, dropped: zeros } })).toBeUndefined();
    expect(det.baselineSamples(f.id)).toBe(3);
    f.for(3, 100);
    expect(f.events()).toEqual([]);
  });
});

describe('many tunnels', () => {
  it('each tunnel has its own baseline and attack; one under attack among 1,000 is the only record', () => {
    const det = new AttackDetector({ newId: ids() });
    const feeds = Array.from({ length: 1_000 }, (_, i) => new Feed(det, tunnelId(i + 1)));
    for (let s = 0; s < 30; s++) for (const [i, f] of feeds.entries()) f.second(i === 500 ? (s >= 20 ? 90_000 : 100) : 1_000 + i);
    expect(det.size).toBe(1_000);
    const records = det.open();
    expect(records).toHaveLength(1);
    expect(records[0]!.tunnel_id).toBe(tunnelId(501));
    expect(feeds.flatMap((f) => f.events().map((e) => [e.type, e.record.tunnel_id]))).toEqual([['attack_started', tunnelId(501)]]);
  });

  it('a tunnel that leaves (retain) is forgotten; its attack ends at its last second above', () => {
    const det = new AttackDetector({ newId: ids() });
    const a = new Feed(det, tunnelId(1));
    const b = new Feed(det, tunnelId(2));
    a.for(3, 30_000);
    const lastAbove = a.at;
    b.for(3, 100);
    const ends = det.retain(new Set([tunnelId(2)]));
    expect(ends).toEqual([{ type: 'attack_ended', attack: expect.objectContaining({ tunnel_id: tunnelId(1), ended_at: iso(lastAbove) }) }]);
    expect(det.size).toBe(1);
    expect(det.threshold(tunnelId(1))).toBeUndefined();
    expect(det.retain(new Set([tunnelId(2)]))).toEqual([]);
  });
});

describe('memory bound', () => {
  it('the baseline holds at most 600 samples however long it runs', () => {
    const det = new AttackDetector();
    const f = new Feed(det);
    f.for(BASELINE_SAMPLES + 250, 100);
    expect(det.baselineSamples(f.id)).toBe(BASELINE_SAMPLES);
  });

  it('an attack keeps at most MAX_TRACKED_PORTS ports whatever a meter supplies, and reports the busiest five', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.second(0, { ports: [] });
    const many: [number, number][] = Array.from({ length: 1_000 }, (_, i) => [i + 1, i < 3 ? 50_000 - i : 10]);
    f.for(3, 60_000, { ports: many });
    const record = f.events()[0]!.record;
    expect(record.vector.ports).toEqual([1, 2, 3, 4, 5]);
    // The detector's own tally of ports: internal, but it is the bound under test.
    const open = (f.det as unknown as { tunnels: Map<string, { attack: { counted: { ports: Map<number, number> } } }> }).tunnels.get(f.id)!.attack;
    expect(open.counted.ports.size).toBeLessThanOrEqual(MAX_TRACKED_PORTS);
  });
});

describe('vector', () => {
  it('protocol and ports from per-protocol and per-port meters, when the dataplane supplies them', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.second(10, { protocols: { tcp: 10 }, ports: [[443, 10]] });
    f.for(3, 40_000, { protocols: { udp: 39_000, tcp: 1_000 }, ports: [[53, 30_000], [123, 9_000], [443, 1_000]], drops: { not_allowed: 9_000, fragment: 500 } });
    const r = f.events()[0]!.record;
    expect(r.vector).toEqual({ protocol: 'udp', ports: [53, 123, 443], top_drop_reason: 'not_allowed' });
  });

  it('no protocol with 80% of the packets is mixed; no drops is no top reason', () => {
    const f = new Feed(new AttackDetector({ newId: ids() }));
    f.for(3, 40_000, { protocols: { udp: 20_000, tcp: 15_000, icmp: 5_000 } });
    expect(f.events()[0]!.record.vector).toEqual({ protocol: 'mixed', ports: null, top_drop_reason: null });
  });
});
