// Feeds the live traffic ring (ring.ts) from one counter read of the attack monitor (agent/attacks/monitor.ts
// onRead): per tunnel of the desired state its in, out and drop counters, the same names `status` reads
// (agent/health/status.ts). A tunnel with any of them missing from the read is left out of it, as the
// detector does: its next read spans both seconds.
import { DROP_REASONS } from '../../common/drop-reasons.ts';
import { dropCounterName, outCounterName } from '../dataplane/policy.ts';
import type { TunnelSpec } from '../dataplane/types.ts';
import { RING_FIELDS, type TrafficRing } from './ring.ts';

export interface CounterValue {
  packets: bigint;
  bytes: bigint;
}

/** Hands `ring` one read of every tunnel and forgets the tunnels no longer desired. */
export function feedRing(ring: TrafficRing, at: number, tunnels: readonly TunnelSpec[], counters: ReadonlyMap<string, CounterValue>): void {
  const raw = new Float64Array(RING_FIELDS);
  const ids = new Set<string>();
  next: for (const t of tunnels) {
    ids.add(t.id);
    const cin = counters.get(t.tunnel_name);
    const cout = counters.get(outCounterName(t));
    if (!cin || !cout) continue;
    raw[0] = Number(cin.packets);
    raw[1] = Number(cin.bytes);
    raw[2] = Number(cout.packets);
    raw[3] = Number(cout.bytes);
    for (let i = 0; i < DROP_REASONS.length; i++) {
      const c = counters.get(dropCounterName(t, DROP_REASONS[i]!));
      if (!c) continue next;
      raw[4 + i] = Number(c.packets);
    }
    ring.observe(at, t.id, raw);
  }
  ring.retain(ids);
}
