// The connection table's and the meters' sizes (agent/dataplane/sizing.ts; docs/CONTRACTS.md "Dataplane", capacity).
import { describe, expect, it } from 'vitest';
import { CONNTRACK_ENTRY_BYTES, EDGE_OWN_FLOWS, METER_ENTRY_BYTES, sizing } from '../../../agent/dataplane/sizing.ts';

const GIB = 2 ** 30;
const kernel = { max: 262_144, buckets: 262_144 };

describe('sizing', () => {
  it('the connection table holds every tunnel\'s max_flows and the edge\'s own while a quarter of the memory has room', () => {
    const s = sizing({ memoryBytes: 24 * GIB, edgePps: 2_000_000, maxFlows: [1_000, undefined, 200_000], kernel });
    expect(s.conntrackMax).toBe(EDGE_OWN_FLOWS + 1_000 + 65_536 + 200_000);
    expect(s.conntrackBuckets).toBe(s.conntrackMax);
  });

  it('beyond that (10,000 tunnels of 65,536 on 24 GiB) a quarter of the memory at CONNTRACK_ENTRY_BYTES an entry, each tunnel still held to its own', () => {
    const s = sizing({ memoryBytes: 24 * GIB, edgePps: 2_000_000, maxFlows: Array(10_000).fill(undefined), kernel });
    expect(s.conntrackMax).toBe((24 * GIB) / 4 / CONNTRACK_ENTRY_BYTES);
    expect(s.conntrackMax).toBe(12_582_912);
    // A flows set's elements are at most the table's entries: sized alike, a multiple of 65,536 (a small first table).
    expect(s.flowEntries).toBe(12_582_912);
    expect(s.flowEntries % 65_536).toBe(0);
  });

  it('never below what the kernel had at start (an operator\'s larger setting stays)', () => {
    const s = sizing({ memoryBytes: 24 * GIB, edgePps: 2_000_000, maxFlows: [], kernel: { max: 1_000_000, buckets: 2_000_000 } });
    expect(s.conntrackMax).toBe(1_000_000);
    expect(s.conntrackBuckets).toBe(2_000_000);
  });

  it('a meter holds what the edge\'s rate brings in an element\'s life (2 s), rounded up to 65,536, within an eighth of the memory', () => {
    expect(sizing({ memoryBytes: 24 * GIB, edgePps: 2_000_000, maxFlows: [], kernel }).meterSources).toBe(4_063_232);
    expect(sizing({ memoryBytes: 24 * GIB, edgePps: 10_000, maxFlows: [], kernel }).meterSources).toBe(65_536);
    // A small host: memory, not the rate, bounds it.
    const small = sizing({ memoryBytes: 1 * GIB, edgePps: 100_000_000, maxFlows: [], kernel });
    expect(small.meterSources).toBeLessThanOrEqual(Math.ceil(GIB / 8 / METER_ENTRY_BYTES / 65_536) * 65_536);
    expect(small.meterSources % 65_536).toBe(0);
  });
});
