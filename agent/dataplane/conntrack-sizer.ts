// The host's connection table sized for the desired tunnels (docs/CONTRACTS.md "Dataplane", capacity): what
// sizing.ts computes from their max_flows and the memory, set where the kernel lets the agent, after each change,
// and reported as `agent.capacity` in status. EdgeDataplane owns one.
import { totalmem } from 'node:os';
import { applyConntrackLimits, sizing, type Sizing } from './sizing.ts';
import type { Capacity } from './handle.ts';

export interface ConntrackSizerOptions {
  /** The dataplane's network namespace: only the host's lets the agent set the kernel's sizes. */
  netns: string | undefined;
  /** The meters' sources, fixed at start (KernelContext.sizes). */
  meterSources: number;
  edgePps: number;
  /** nf_conntrack_max and its buckets as the kernel had them at start: the floor (undefined: unreadable, nothing set). */
  kernelLimits: { max: number; buckets: number } | undefined;
  /** The desired tunnels' max_flows (undefined: the default). */
  maxFlows: () => (number | undefined)[];
  log: (event: string, fields?: Record<string, unknown>) => void;
}

export class ConntrackSizer {
  private sized: { sizing: Sizing; applied: boolean };

  constructor(private readonly o: ConntrackSizerOptions) {
    this.sized = { sizing: this.wanted(), applied: false };
  }

  /** The sizes for the desired tunnels on this host (sizing.ts). */
  private wanted(): Sizing {
    const s = sizing({ memoryBytes: totalmem(), edgePps: this.o.edgePps, maxFlows: this.o.maxFlows(), kernel: this.o.kernelLimits ?? { max: 0, buckets: 0 } });
    return { ...s, meterSources: this.o.meterSources };
  }

  /**
   * Sizes the connection table for the desired tunnels (after each change: their max_flows add up), where the
   * kernel lets the agent (sizing.ts applyConntrackLimits). A failure is logged, never a failed job: the table's
   * per-tunnel caps hold whatever its size.
   */
  resize(): void {
    const s = this.wanted();
    const was = this.sized;
    if (was.applied && was.sizing.conntrackMax === s.conntrackMax && was.sizing.conntrackBuckets === s.conntrackBuckets) return;
    if (!this.o.kernelLimits) {
      this.sized = { sizing: s, applied: false };
      return;
    }
    try {
      const r = applyConntrackLimits(this.o.netns, s);
      this.sized = { sizing: s, applied: r.applied };
      if (r.applied) this.o.log('dataplane.conntrack_sized', { max: s.conntrackMax, buckets: s.conntrackBuckets });
    } catch (e) {
      this.sized = { sizing: s, applied: false };
      this.o.log('dataplane.conntrack_sizing_failed', { error: e instanceof Error ? e.message : String(e) });
    }
  }

  capacity(): Capacity {
    const s = this.sized.sizing;
    return { conntrack_max: s.conntrackMax, conntrack_buckets: s.conntrackBuckets, conntrack_applied: this.sized.applied, meter_sources: s.meterSources };
  }
}
