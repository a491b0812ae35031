// The `status` op's answer (docs/CONTRACTS.md "Edge jobs", version 2; common/tunnel-status.ts): per tunnel its
// health from the scheduler and its counters, all read in ONE dump of the table's named counters (not a GET per
// tunnel: 70,000 counters at 10,000 tunnels come back in one netlink dump).
//
// Monotonic for the life of the tunnel on this agent: the kernel's counters restart at 0 when a counter is
// recreated (a tunnel renamed, a counter deleted by hand and repaired by a reconcile). The reporter keeps, per
// tunnel, the last raw value and an offset, and adds the last value to the offset when the raw value goes down,
// so what it reports never decreases while the agent runs. An agent restart starts again from the kernel's
// values (the contract's "a decrease means a reset": the gateway handles it).
import { DROP_REASONS, type CapacityReport, type StatusResult, type StuckReport, type TunnelCounters, type TunnelReport } from '../../common/tunnel-status.ts';
import { dropCounterName, outCounterName } from '../dataplane/policy.ts';
import type { TunnelSpec } from '../dataplane/types.ts';
import type { TunnelHealth } from './scheduler.ts';
import type { TunnelLinks } from '../../common/tunnel-links.ts';
import type { AttackRecord } from '../../common/attacks.ts';

/** What the watchdog says of a stuck operation (a StuckReport with the request's name when it waits on one). */
type StuckOperation = StuckReport & { call?: string };

export interface CounterValue {
  packets: bigint;
  bytes: bigint;
}

export interface StatusSources {
  /** The tunnels to report: the desired state (the same set the health checks cover). */
  tunnels: () => readonly TunnelSpec[];
  /** Every named counter of the agent's table, in one dump. */
  counters: () => Promise<ReadonlyMap<string, CounterValue>>;
  health: (id: string) => TunnelHealth;
  version: string;
  /** Whether the agent can make its tunnels' links, asked anew for each status (dataplane/link-support.ts); absent: not said. */
  tunnelLinks?: () => Promise<TunnelLinks>;
  /** The operation the watchdog gave up as stuck and that has not settled (agent/housekeeping/activity.ts), if any. */
  stuck?: () => StuckOperation | undefined;
  /** The connection table's and the meters' sizes (dataplane/sizing.ts); absent: not said. */
  capacity?: () => CapacityReport;
  /** The attack records to report (agent/attacks/journal.ts); absent: the answer has no `attacks`. */
  attacks?: () => AttackRecord[];
  /** ms since the epoch at which the agent started, and now. */
  startedAt: number;
  now?: () => number;
}

/** The order of the raw values kept per tunnel. */
const FIELDS = ['packets_in', 'bytes_in', 'packets_out', 'bytes_out', ...DROP_REASONS] as const;

interface Kept {
  last: bigint[];
  offset: bigint[];
}

export class StatusReporter {
  private readonly kept = new Map<string, Kept>();

  constructor(private readonly s: StatusSources) {}

  async status(): Promise<StatusResult> {
    const tunnels = this.s.tunnels();
    const counters = await this.s.counters();
    const zero: CounterValue = { packets: 0n, bytes: 0n };
    const seen = new Set<string>();
    const reports: TunnelReport[] = [];
    for (const t of tunnels) {
      seen.add(t.id);
      const cin = counters.get(t.tunnel_name) ?? zero;
      const cout = counters.get(outCounterName(t)) ?? zero;
      const raw = [cin.packets, cin.bytes, cout.packets, cout.bytes, ...DROP_REASONS.map((r) => (counters.get(dropCounterName(t, r)) ?? zero).packets)];
      const v = this.monotonic(t.id, raw);
      const dropped = Object.fromEntries(DROP_REASONS.map((r, i) => [r, Number(v[4 + i])])) as TunnelCounters['dropped'];
      const c: TunnelCounters = { packets_in: Number(v[0]), bytes_in: Number(v[1]), packets_out: Number(v[2]), bytes_out: Number(v[3]), dropped };
      const h = this.s.health(t.id);
      const report: TunnelReport = { id: t.id, health: h.health, checked_at: h.checkedAt !== undefined ? new Date(h.checkedAt).toISOString() : null, counters: c };
      if (h.rttMs !== undefined) report.rtt_ms = h.rttMs;
      reports.push(report);
    }
    // A tunnel removed starts from nothing if it comes back: its life on this agent ended.
    for (const id of this.kept.keys()) if (!seen.has(id)) this.kept.delete(id);
    const now = (this.s.now ?? Date.now)();
    const agent: StatusResult['agent'] = { version: this.s.version, uptime_s: Math.max(0, Math.floor((now - this.s.startedAt) / 1000)), tunnels: reports.length };
    if (this.s.tunnelLinks) agent.tunnel_links = await this.s.tunnelLinks();
    if (this.s.capacity) agent.capacity = this.s.capacity();
    // Only while one is stuck: an agent that is fine answers exactly what it did before the field existed.
    const stuck = this.s.stuck?.();
    if (stuck) agent.stuck = { op: stuck.op, step: stuck.call ? `${stuck.step} (${stuck.call})` : stuck.step, since: stuck.since };
    return this.s.attacks ? { agent, tunnels: reports, attacks: this.s.attacks() } : { agent, tunnels: reports };
  }

  private monotonic(id: string, raw: bigint[]): bigint[] {
    let k = this.kept.get(id);
    if (!k) {
      k = { last: raw, offset: FIELDS.map(() => 0n) };
      this.kept.set(id, k);
      return raw;
    }
    const out: bigint[] = [];
    for (let i = 0; i < FIELDS.length; i++) {
      // The counter was recreated (it went down): what it had counted before is added back.
      if (raw[i]! < k.last[i]!) k.offset[i] = k.offset[i]! + k.last[i]!;
      out.push(raw[i]! + k.offset[i]!);
    }
    k.last = raw;
    return out;
  }
}
