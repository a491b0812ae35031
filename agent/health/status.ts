// The `status` op's answer (docs/CONTRACTS.md "Edge jobs", version 2; common/tunnel-status.ts): per tunnel its
// health from the scheduler and its counters, all read in ONE dump of the table's named counters (not a GET per
// tunnel: 70,000 counters at 10,000 tunnels come back in one netlink dump).
//
// Monotonic for the life of the tunnel on this agent: the kernel's counters restart at 0 when a counter is
// recreated (a tunnel renamed, a counter deleted by hand and repaired by a reconcile). The reporter keeps, per
// tunnel, the last raw value and an offset, and adds the last value to the offset when the raw value goes down,
// so what it reports never decreases while the agent runs. An agent restart starts again from the kernel's
// values (the contract's "a decrease means a reset": the gateway handles it).
//
// By change (docs/CONTRACTS.md "Status by change"): every answer has a number (`seq`, within this run's `epoch`, a
// random id made at start), and each tunnel remembers the number of the last answer in which its counters or its
// health differed from the answer before (`changed`). Asked for the changes since answer B, it lists the tunnels
// whose `changed` is after B: a superset of those that differ from B, whatever happened between (a lost answer, a
// health that went down and back up). Tunnels it stopped having are remembered as gone, with the answer that
// found them gone, for GONE_KEPT answers; a `since` older than the oldest gone it forgot, of another epoch, or
// null gets the full list. So the gateway's stored cursor may lag any number of answers (a lost round, a
// restarted gateway, two replicas asking in turn) and the answer still carries everything it has not stored.
import { randomUUID } from 'node:crypto';
import { DROP_REASONS, type CapacityReport, type StatusCursor, type StatusDelta, type StatusResult, type StuckReport, type TunnelCounters, type TunnelReport } from '../../common/tunnel-status.ts';
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

/** What a tunnel's last answer said, to tell whether the next one differs, and the answer in which it last did. */
interface Reported {
  key: string;
  changed: number;
}

/**
 * How many answers a gone tunnel is remembered for. The gateway's cursor normally lags one answer (one more per lost
 * round or per replica asking in turn); one further back gets the full list, which is always right.
 */
export const GONE_KEPT = 200;

export class StatusReporter {
  private readonly kept = new Map<string, Kept>();
  private readonly reported = new Map<string, Reported>();
  /** Tunnels no longer had, by the answer that found them gone (ascending). */
  private readonly gone = new Map<string, number>();
  /** A `since` below this may miss a gone tunnel that was forgotten: it gets the full list. */
  private horizon = 0;
  private seq = 0;
  readonly epoch: string;

  constructor(private readonly s: StatusSources & { epoch?: string }) {
    this.epoch = s.epoch ?? randomUUID();
  }

  /**
   * One answer. `since` undefined: the full form of an agent from before answers by change (no `delta`), for a
   * gateway that sends no `since`. null or a cursor: with `delta`, by change when the cursor allows it.
   */
  async status(since?: StatusCursor | null): Promise<StatusResult> {
    const all = await this.fullStatus();
    const seq = ++this.seq;
    // Every answer updates what changed when, whichever form it is sent in: the next `since` may be any of them.
    const ids = new Set<string>();
    let floor: number | null = all.tunnels.length > 0 ? Infinity : null;
    const changedNow: TunnelReport[] = [];
    for (const t of all.tunnels) {
      ids.add(t.id);
      const key = `${t.health}|${counterKey(t.counters)}`;
      const r = this.reported.get(t.id);
      if (!r) this.reported.set(t.id, { key, changed: seq });
      else if (r.key !== key) {
        r.key = key;
        r.changed = seq;
      }
      this.gone.delete(t.id);
      if (floor !== null) floor = t.checked_at === null ? null : Math.min(floor, Date.parse(t.checked_at));
    }
    for (const id of this.reported.keys()) {
      if (!ids.has(id)) {
        this.reported.delete(id);
        this.gone.set(id, seq);
      }
    }
    for (const [id, at] of this.gone) {
      // Map order is insertion order, so the oldest come first.
      if (at > seq - GONE_KEPT) break;
      this.gone.delete(id);
      this.horizon = Math.max(this.horizon, at);
    }
    if (since === undefined) return all;
    const checked_floor = floor === null || floor === Infinity ? null : new Date(floor).toISOString();
    const usable = since !== null && since.epoch === this.epoch && since.seq < seq && since.seq >= this.horizon;
    if (!usable) return { ...all, delta: { epoch: this.epoch, seq, full: true, gone: [], checked_floor } };
    for (const t of all.tunnels) if (this.reported.get(t.id)!.changed > since.seq) changedNow.push(t);
    const gone = [...this.gone].filter(([, at]) => at > since.seq).map(([id]) => id);
    const delta: StatusDelta = { epoch: this.epoch, seq, full: false, base: since.seq, gone, checked_floor };
    return { ...all, tunnels: changedNow, delta };
  }

  private async fullStatus(): Promise<StatusResult> {
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

/** A tunnel's counters as one comparable string (a change in any of them is a change). */
function counterKey(c: TunnelCounters): string {
  return `${c.packets_in},${c.bytes_in},${c.packets_out},${c.bytes_out},${DROP_REASONS.map((r) => c.dropped[r]).join(',')}`;
}
