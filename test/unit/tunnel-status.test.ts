// The status op's result shape (common/tunnel-status.ts), which the agent writes and the gateway reads.
import { describe, expect, it } from 'vitest';
import { checkStatusResult, DROP_REASONS, type StatusResult } from '../../common/tunnel-status.ts';

const ok: StatusResult = {
  agent: { version: '0.1.0', uptime_s: 12.5, tunnels: 1 },
  tunnels: [
    {
      id: '7d3c4b0e-2f7a-4c8e-9a51-0b6f1f9b2c11',
      health: 'up',
      checked_at: '2026-11-25T12:00:00.000Z',
      rtt_ms: 1.2,
      counters: { packets_in: 10, bytes_in: 1000, packets_out: 9, bytes_out: 900, dropped: { not_allowed: 1, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 } },
    },
  ],
};

describe('checkStatusResult', () => {
  it('takes the contract shape, and extra keys a newer agent may add', () => {
    expect(checkStatusResult(ok)).toBeUndefined();
    expect(checkStatusResult({ ...ok, extra: 1, tunnels: [{ ...ok.tunnels[0], checked_at: null, rtt_ms: undefined, more: true }] })).toBeUndefined();
    // A stuck operation (the agent's watchdog): additive, absent when there is none.
    expect(checkStatusResult({ ...ok, agent: { ...ok.agent, stuck: { op: 'reconcile', step: 'nftables commit', since: '2026-11-25T12:00:00.000Z' } } })).toBeUndefined();
  });
  it('refuses what a gateway could not store', () => {
    const t = ok.tunnels[0]!;
    const c = t.counters;
    for (const [bad, why] of [
      [{ ...ok, agent: { ...ok.agent, uptime_s: -1 } }, /agent/],
      [{ ...ok, tunnels: {} }, /tunnels must be an array/],
      [{ ...ok, agent: { ...ok.agent, stuck: { op: 'apply', step: 'links' } } }, /agent\.stuck/],
      [{ ...ok, agent: { ...ok.agent, stuck: { op: 'apply', step: 'links', since: 'a while ago' } } }, /agent\.stuck/],
      [{ ...ok, agent: { ...ok.agent, stuck: 'yes' } }, /agent\.stuck/],
      [{ ...ok, tunnels: [{ ...t, health: 'sick' }] }, /health/],
      [{ ...ok, tunnels: [{ ...t, checked_at: 'yesterday' }] }, /checked_at/],
      [{ ...ok, tunnels: [{ ...t, counters: { ...c, bytes_in: -5 } }] }, /bytes_in/],
      [{ ...ok, tunnels: [{ ...t, counters: { ...c, packets_out: 1.5 } }] }, /packets_out/],
      [{ ...ok, tunnels: [{ ...t, counters: { ...c, dropped: { ...c.dropped, spoofed: undefined } } }] }, /dropped\.spoofed/],
    ] as const) {
      expect(checkStatusResult(bad), JSON.stringify(bad).slice(0, 120)).toMatch(why);
    }
    expect(DROP_REASONS).toHaveLength(5);
  });
  it('agent.tunnel_links (docs/CONTRACTS.md "Tunnel links"): optional, checked when present, unknown kinds allowed', () => {
    for (const links of [{ kind: 'gre', usable: false, reason: 'no GRE' }, { kind: 'veth-standin', usable: true }, { kind: 'ipip', usable: null, more: 1 }]) {
      expect(checkStatusResult({ ...ok, agent: { ...ok.agent, tunnel_links: links } }), JSON.stringify(links)).toBeUndefined();
    }
    for (const links of ['gre', { kind: '', usable: true }, { kind: 'gre', usable: 'no' }, { kind: 'gre' }, { kind: 'gre', usable: false, reason: 5 }]) {
      expect(checkStatusResult({ ...ok, agent: { ...ok.agent, tunnel_links: links } }), JSON.stringify(links)).toMatch(/agent\.tunnel_links/);
    }
  });
  it('agent.capacity (docs/CONTRACTS.md "Edge jobs", op status): optional, all four keys checked when present', () => {
    const capacity = { conntrack_max: 12_341_828, conntrack_buckets: 12_341_828, conntrack_applied: true, meter_sources: 4_063_232 };
    expect(checkStatusResult({ ...ok, agent: { ...ok.agent, capacity } })).toBeUndefined();
    expect(checkStatusResult({ ...ok, agent: { ...ok.agent, capacity: { ...capacity, more: 1 } } })).toBeUndefined();
    for (const bad of [{ ...capacity, conntrack_max: -1 }, { ...capacity, conntrack_applied: 'yes' }, { ...capacity, meter_sources: 1.5 }, { conntrack_max: 1 }, 'big']) {
      expect(checkStatusResult({ ...ok, agent: { ...ok.agent, capacity: bad } }), JSON.stringify(bad)).toMatch(/agent\.capacity/);
    }
  });

  it('attacks (docs/CONTRACTS.md "Attacks"): optional, every record checked when present', () => {
    const attack = {
      id: '00000000-0000-4000-8000-000000000001',
      tunnel_id: ok.tunnels[0]!.id,
      started_at: '2026-11-25T12:00:00.000Z',
      ended_at: null,
      peak_pps: 120_000,
      peak_bps: 96_000_000,
      vector: { protocol: null, ports: null, top_drop_reason: 'rate_limited' },
      packets_dropped: 100,
      packets_passed: 5,
    };
    expect(checkStatusResult({ ...ok, attacks: [] })).toBeUndefined();
    expect(checkStatusResult({ ...ok, attacks: [attack, { ...attack, id: '00000000-0000-4000-8000-000000000002', ended_at: '2026-11-25T12:05:00Z', vector: { protocol: 'udp', ports: [53, 123], top_drop_reason: null } }] })).toBeUndefined();
    for (const [bad, why] of [
      [{}, /attacks must be an array/],
      [[{ ...attack, id: 'x' }], /attacks\[0\]\.id/],
      [[{ ...attack, ended_at: '2026-11-25T11:00:00Z' }], /ended_at must not be before started_at/],
      [[{ ...attack, started_at: 'noon' }], /started_at/],
      [[{ ...attack, peak_pps: -1 }], /peak_pps/],
      [[{ ...attack, packets_passed: 1.5 }], /packets_passed/],
      [[{ ...attack, vector: { ...attack.vector, protocol: 'gre' } }], /vector\.protocol/],
      [[{ ...attack, vector: { ...attack.vector, ports: [1, 2, 3, 4, 5, 6] } }], /vector\.ports/],
      [[{ ...attack, vector: { ...attack.vector, ports: [70000] } }], /vector\.ports/],
      [[{ ...attack, vector: { ...attack.vector, top_drop_reason: 'boredom' } }], /top_drop_reason/],
      [[{ ...attack, vector: undefined }], /vector must be an object/],
    ] as const) {
      expect(checkStatusResult({ ...ok, attacks: bad }), JSON.stringify(bad).slice(0, 120)).toMatch(why);
    }
  });
});
