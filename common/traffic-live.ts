// Per-second traffic of watched tunnels (docs/CONTRACTS.md "Edge jobs", op `traffic`; DESIGN 3.11's
// `tunnelTraffic` subscription): the job's body and answer as both ends see them, and their shape checks. The
// agent keeps the last LIVE_WINDOW_S seconds of every tunnel (agent/traffic/ring.ts); the gateway asks for the
// tunnels someone watches, once a second (server/traffic-live/). No I/O here.
import { DROP_REASONS, type DropReason } from './drop-reasons.ts';
import { isUuid } from './names.ts';

/** Seconds of per-second points the agent keeps per tunnel, and the backfill a new subscriber gets. */
export const LIVE_WINDOW_S = 300;
/** Tunnels one `traffic` job may name: one job a second covers a node's watched tunnels in chunks of this. */
export const TRAFFIC_MAX_IDS = 100;
/**
 * Points one answer carries at most, all tunnels together: each id gets at most min(LIVE_WINDOW_S,
 * floor(TRAFFIC_MAX_POINTS / ids)) points, its newest. A point is at most about 240 bytes of JSON, so an answer
 * stays under 720 KB, inside the 1 MiB the gateway reads of a job's answer (server/edge/result-line.ts MAX_OUTPUT).
 */
export const TRAFFIC_MAX_POINTS = 3000;
/** The hello feature of an agent that takes op `traffic` (common/job-contract.ts HelloLine.features). */
export const FEATURE_TRAFFIC_LIVE = 'traffic_live';

/** The body of op `traffic`: which tunnels, and only the points after `since` (absent: the whole window). */
export interface TrafficBody {
  ids: string[];
  since?: string;
}

/**
 * One second of one tunnel: `t` the second of the counter read that counted it (ISO 8601, whole seconds), the
 * packets and bits of the second before it, `in` toward the origin; `dropped` lists only the reasons with drops.
 */
export interface LivePoint {
  t: string;
  pps_in: number;
  bps_in: number;
  pps_out: number;
  bps_out: number;
  dropped: Partial<Record<DropReason, number>>;
}

export interface TrafficResult {
  /** LIVE_WINDOW_S of the agent: how far back it can answer. */
  window_s: number;
  /** One entry per id asked, in the order asked; a tunnel the agent does not have (yet) has no points. */
  tunnels: { id: string; points: LivePoint[] }[];
}

/** Whole-second or millisecond ISO 8601 in UTC, as Date.toISOString() writes it (and without the fraction). */
const ISO_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?Z$/;

export function isIsoInstant(v: unknown): v is string {
  return typeof v === 'string' && ISO_RE.test(v) && Number.isFinite(Date.parse(v));
}

/** The `traffic` body's shape (ids and since; the caller checks that no other claim is there). Undefined when right. */
export function checkTrafficBody(claims: Record<string, unknown>): string | undefined {
  const ids = claims.ids;
  if (!Array.isArray(ids)) return 'ids must be an array';
  if (ids.length < 1 || ids.length > TRAFFIC_MAX_IDS) return `ids must hold 1 to ${TRAFFIC_MAX_IDS} tunnel ids`;
  const seen = new Set<string>();
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (!isUuid(id)) return `ids[${i}] must be a UUID`;
    if (seen.has(id.toLowerCase())) return `ids[${i}] "${id}" appears twice`;
    seen.add(id.toLowerCase());
  }
  if (claims.since !== undefined && !isIsoInstant(claims.since)) return 'since must be an ISO 8601 time in UTC (2026-01-01T00:00:00Z)';
  return undefined;
}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

/** A `traffic` answer's shape. Undefined when right, else a sentence. Unknown extra keys are allowed (a newer agent). */
export function checkTrafficResult(v: unknown): string | undefined {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'the result must be an object';
  const r = v as Record<string, unknown>;
  if (!isCount(r.window_s)) return 'window_s must be a non-negative integer';
  if (!Array.isArray(r.tunnels)) return 'tunnels must be an array';
  for (let i = 0; i < r.tunnels.length; i++) {
    const t = r.tunnels[i] as Record<string, unknown> | null;
    if (typeof t !== 'object' || t === null || !isUuid(t.id)) return `tunnels[${i}].id must be a UUID`;
    if (!Array.isArray(t.points)) return `tunnels[${i}].points must be an array`;
    for (let j = 0; j < t.points.length; j++) {
      const p = t.points[j] as Record<string, unknown> | null;
      const where = `tunnels[${i}].points[${j}]`;
      if (typeof p !== 'object' || p === null) return `${where} must be an object`;
      if (!isIsoInstant(p.t)) return `${where}.t must be an ISO 8601 time`;
      for (const k of ['pps_in', 'bps_in', 'pps_out', 'bps_out'] as const) if (!isCount(p[k])) return `${where}.${k} must be a non-negative integer`;
      const d = p.dropped as Record<string, unknown> | null;
      if (typeof d !== 'object' || d === null || Array.isArray(d)) return `${where}.dropped must be an object`;
      for (const [k, n] of Object.entries(d)) {
        if (!(DROP_REASONS as readonly string[]).includes(k)) return `${where}.dropped.${k} is not a drop reason`;
        if (!isCount(n)) return `${where}.dropped.${k} must be a non-negative integer`;
      }
    }
  }
  return undefined;
}
