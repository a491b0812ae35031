// What a version 2 agent reports of its tunnels (docs/CONTRACTS.md "Edge jobs", op `status`; DESIGN 3.6
// and 3.9): health from its own checks and monotonic counters, and the shape check both ends use. The
// gateway turns the counters into traffic deltas (a decrease means the counter restarted, never negative
// traffic). No I/O here.
import { checkTunnelLinks, type TunnelLinks } from './tunnel-links.ts';
import { checkAttackRecords, type AttackRecord } from './attacks.ts';

import { DROP_REASONS, type DropReason } from './drop-reasons.ts';

/** Why the edge dropped a packet of a tunnel: re-exported, as every reader of a status answer needs them. */
export { DROP_REASONS, type DropReason };

export const HEALTHS = ['up', 'down', 'unknown'] as const;
export type Health = (typeof HEALTHS)[number];

/** Monotonic for the life of the tunnel on that agent; `in` is toward the origin. */
export interface TunnelCounters {
  packets_in: number;
  bytes_in: number;
  packets_out: number;
  bytes_out: number;
  dropped: Record<DropReason, number>;
}

export interface TunnelReport {
  id: string;
  health: Health;
  /** When the agent last checked this tunnel (ISO 8601), null before its first check. */
  checked_at: string | null;
  rtt_ms?: number;
  counters: TunnelCounters;
}

/**
 * A dataplane operation the agent's watchdog gave up as stuck (no progress for AGENT_WATCHDOG_S) and that has not
 * settled yet: `op` (apply, remove, reconcile), `step` (what did not finish, with the kernel request it waits on),
 * `since` (its last progress, ISO 8601). Present only while it is so.
 */
export interface StuckReport {
  op: string;
  step: string;
  since: string;
}

/**
 * How the agent sized what one tunnel's flood could otherwise fill for every tenant (docs/CONTRACTS.md "Dataplane",
 * DESIGN 3.11): the connection table (nf_conntrack_max and its hash buckets, set by the agent when
 * `conntrack_applied`) and each tunnel's per-source meter (the sources it holds).
 */
export interface CapacityReport {
  conntrack_max: number;
  conntrack_buckets: number;
  conntrack_applied: boolean;
  meter_sources: number;
}

/** A capacity report's shape: undefined when right, else a sentence. */
export function checkCapacityReport(v: unknown): string | undefined {
  if (!isObject(v) || !isCount(v.conntrack_max) || !isCount(v.conntrack_buckets) || typeof v.conntrack_applied !== 'boolean' || !isCount(v.meter_sources)) {
    return 'agent.capacity must be {conntrack_max: integer >= 0, conntrack_buckets: integer >= 0, conntrack_applied: boolean, meter_sources: integer >= 0}';
  }
  return undefined;
}

/**
 * The hello feature of an agent that answers `status` by change (docs/CONTRACTS.md "Status by change"): it takes
 * the body `{"since": StatusCursor | null}` and answers with `delta`. An agent without it refuses any body as
 * `malformed`, so the gateway sends `since` only to agents that list it, and they get the full form otherwise.
 */
export const FEATURE_STATUS_DELTA = 'status_delta';

/**
 * Where a stream of `status` answers stands: `epoch` names one run of the agent (a new one at every start, when
 * its counters may have restarted), `seq` counts its answers within that run. The gateway stores the cursor of
 * the last answer it committed and sends it back as `since`.
 */
export interface StatusCursor {
  epoch: string;
  seq: number;
}

/** The `delta` of a status answer to a body with `since` (docs/CONTRACTS.md "Status by change"). */
export interface StatusDelta {
  epoch: string;
  /** This answer's number: the gateway's next `since.seq`. */
  seq: number;
  /**
   * true: `tunnels` lists every tunnel (the form without `since`), because `since` was null, of another epoch, or
   * older than the changes the agent still remembers. false: `tunnels` lists only the tunnels whose counters or
   * health changed in an answer after `since.seq`, and `gone` the tunnels it stopped having since then.
   */
  full: boolean;
  /** The seq the changes are counted from (false `full` only): the `since.seq` the gateway sent. */
  base?: number;
  gone: string[];
  /**
   * The oldest last-check time of all its tunnels (ISO 8601), null while one has not been checked yet (or there
   * are none): every tunnel left out was checked at that time or after, so the gateway shows its check time as
   * at least this (the check time alone moves every round, and is no change).
   */
  checked_floor: string | null;
}

/** The `status` op's result. */
export interface StatusResult {
  /**
   * tunnel_links: whether the agent can make its tunnels' links (common/tunnel-links.ts), from agents that know it.
   * stuck: the operation its watchdog gave up (StuckReport), only while there is one. capacity: CapacityReport.
   * All added later: an agent from before them never sends them, and a gateway from before them ignores them.
   */
  agent: { version: string; uptime_s: number; tunnels: number; tunnel_links?: TunnelLinks; stuck?: StuckReport; capacity?: CapacityReport };
  tunnels: TunnelReport[];
  /**
   * From agents that detect attacks (common/attacks.ts; docs/CONTRACTS.md "Attacks"): every attack going on and
   * every one that changed within the agent's report window, possibly none. Absent from older agents; a gateway
   * from before it ignores it. Present (even empty) tells the gateway that an attack it holds open and that is not
   * listed is over as far as this agent knows (it restarted, or forgot it).
   */
  attacks?: AttackRecord[];
  /** Present exactly when the job's body had `since` (FEATURE_STATUS_DELTA). */
  delta?: StatusDelta;
}

/** A status body's `since`: undefined when right, else a sentence. */
export function checkStatusSince(v: unknown): string | undefined {
  if (v === null) return undefined;
  if (!isObject(v) || typeof v.epoch !== 'string' || v.epoch === '' || v.epoch.length > 64 || !isCount(v.seq) || Object.keys(v).some((k) => k !== 'epoch' && k !== 'seq')) {
    return 'since must be null or {epoch: string of 1 to 64 characters, seq: integer >= 0}';
  }
  return undefined;
}

function checkDelta(v: unknown): string | undefined {
  if (!isObject(v) || typeof v.epoch !== 'string' || v.epoch === '' || !isCount(v.seq) || typeof v.full !== 'boolean') return 'delta must be {epoch: string, seq: integer >= 0, full: boolean, ...}';
  if (!v.full && !(isCount(v.base) && v.base < v.seq)) return 'delta.base must be an integer below delta.seq when full is false';
  if (!Array.isArray(v.gone) || !v.gone.every((g) => typeof g === 'string')) return 'delta.gone must be a list of tunnel ids';
  if (v.full && v.gone.length > 0) return 'delta.gone must be empty when full is true';
  if (v.checked_floor !== null && (typeof v.checked_floor !== 'string' || Number.isNaN(Date.parse(v.checked_floor)))) return 'delta.checked_floor must be an ISO time or null';
  return undefined;
}

/** A stuck report's shape: undefined when right, else a sentence. */
export function checkStuckReport(v: unknown): string | undefined {
  if (!isObject(v) || typeof v.op !== 'string' || typeof v.step !== 'string' || typeof v.since !== 'string' || Number.isNaN(Date.parse(v.since))) {
    return 'agent.stuck must be {op: string, step: string, since: ISO time}';
  }
  return undefined;
}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function checkCounters(c: unknown, where: string): string | undefined {
  if (!isObject(c)) return `${where} must be an object`;
  for (const k of ['packets_in', 'bytes_in', 'packets_out', 'bytes_out'] as const) if (!isCount(c[k])) return `${where}.${k} must be a non-negative integer`;
  if (!isObject(c.dropped)) return `${where}.dropped must be an object`;
  for (const r of DROP_REASONS) if (!isCount(c.dropped[r])) return `${where}.dropped.${r} must be a non-negative integer`;
  return undefined;
}

/**
 * A status result's shape. Undefined when right, else a sentence. Unknown extra keys are allowed (a newer
 * agent may report more), so a gateway keeps reading an agent upgraded before it.
 */
export function checkStatusResult(v: unknown): string | undefined {
  if (!isObject(v)) return 'status result must be an object';
  const a = v.agent;
  if (!isObject(a) || typeof a.version !== 'string' || typeof a.uptime_s !== 'number' || !(a.uptime_s >= 0) || !isCount(a.tunnels)) {
    return 'agent must be {version: string, uptime_s: number >= 0, tunnels: integer >= 0}';
  }
  if (a.tunnel_links !== undefined) {
    const why = checkTunnelLinks(a.tunnel_links, 'agent.tunnel_links');
    if (why) return why;
  }
  if (a.stuck !== undefined) {
    const why = checkStuckReport(a.stuck);
    if (why) return why;
  }
  if (a.capacity !== undefined) {
    const why = checkCapacityReport(a.capacity);
    if (why) return why;
  }
  if (v.attacks !== undefined) {
    const why = checkAttackRecords(v.attacks);
    if (why) return why;
  }
  if (v.delta !== undefined) {
    const why = checkDelta(v.delta);
    if (why) return why;
  }
  if (!Array.isArray(v.tunnels)) return 'tunnels must be an array';
  for (let i = 0; i < v.tunnels.length; i++) {
    const t: unknown = v.tunnels[i];
    const where = `tunnels[${i}]`;
    if (!isObject(t)) return `${where} must be an object`;
    if (typeof t.id !== 'string') return `${where}.id must be a string`;
    if (!(HEALTHS as readonly unknown[]).includes(t.health)) return `${where}.health must be up, down or unknown`;
    if (t.checked_at !== null && (typeof t.checked_at !== 'string' || Number.isNaN(Date.parse(t.checked_at)))) return `${where}.checked_at must be an ISO time or null`;
    if (t.rtt_ms !== undefined && !(typeof t.rtt_ms === 'number' && t.rtt_ms >= 0)) return `${where}.rtt_ms must be a number >= 0`;
    const why = checkCounters(t.counters, `${where}.counters`);
    if (why) return why;
  }
  return undefined;
}
