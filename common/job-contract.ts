// The edge-job wire contract (docs/CONTRACTS.md "Edge jobs"), as constants, types and pure shape checks.
// Both ends use this module: the agent's verifier (agent/jobs/verify.ts) and the gateway's signer
// (server/edge/job-signing.ts), so the gateway never signs a job the agent would call malformed.
// schema/job.schema.json describes the same claims as JSON Schema; test/unit/jobs/gateway-contract.test.ts checks
// that the two agree. No I/O here.
import { checkTunnel, type ChangeCounts, type ProbeResult, type ReconcileResult, type TunnelRef, type TunnelSpec } from './tunnel-spec.ts';
import { checkStatusSince, type StatusCursor, type StatusResult } from './tunnel-status.ts';
import { checkTunnelLinks, type TunnelLinks } from './tunnel-links.ts';
import { checkTrafficBody, type TrafficBody, type TrafficResult } from './traffic-live.ts';

export type { ReconcileResult, TunnelFailure } from './tunnel-spec.ts';

export const JOB_TYP = 'tunnel-job+jwt';
export const JOB_ALG = 'EdDSA';
export const JOB_ISS = 'tunnelgate';
/** The job versions this code speaks, oldest first (docs/CONTRACTS.md "Edge jobs", "Versions"). */
export const JOB_VERSIONS = [1, 2, 3] as const;
export type JobVersion = (typeof JOB_VERSIONS)[number];
/** Version 1: what every agent speaks; an agent that does not answer `hello` speaks only this. */
export const JOB_VERSION_1 = 1;
/** Version 3 adds `tunnel.forwarding` (docs/CONTRACTS.md "Versions"): the first that can hold a tunnel's DNAT back. */
export const JOB_VERSION_FORWARDING = 3;

export function isJobVersion(v: unknown): v is JobVersion {
  return (JOB_VERSIONS as readonly unknown[]).includes(v);
}
/** `exp` at most this many seconds after `iat`. */
export const MAX_LIFETIME_S = 60;
/** Clock skew allowed on `exp` (past) and `iat` (future). */
export const CLOCK_SKEW_S = 30;
/** Input over this many bytes on the channel is refused as `malformed`. */
export const MAX_INPUT_BYTES = 16 * 1024 * 1024;
export const JOB_COMMAND = 'tunnel-agent job';
/** Exec command (no stdin) that answers one HelloLine; an agent speaking only v1 answers it with status 127. */
export const HELLO_COMMAND = 'tunnel-agent hello';
/** The exit status of an exec command the agent does not know (so an agent from before version 2 answers hello with it). */
export const EXIT_UNSUPPORTED_COMMAND = 127;
export const SSH_USER = 'tunnelgate';

/** Every op of every version. */
const OPS = ['apply', 'remove', 'reconcile', 'probe', 'status', 'events', 'traffic'] as const;
export type Op = (typeof OPS)[number];

/**
 * The ops each version has (docs/CONTRACTS.md "Edge jobs", "Version 2"): `status` and `events` came with version 2,
 * so a signed v 1 job naming either is `unsupported_command`, as any op unknown to that version. (`events` is
 * sent only to agents whose hello lists the feature `events`: a version 2 agent from before it refuses it.)
 * `traffic` joined versions 2 and 3 later: the gateway sends it only to an agent whose hello lists
 * FEATURE_TRAFFIC_LIVE (an older agent of those versions answers it unsupported_command).
 */
export const OPS_BY_VERSION: Readonly<Record<JobVersion, readonly Op[]>> = {
  1: ['apply', 'remove', 'reconcile', 'probe'],
  2: OPS,
  3: OPS,
};

/** Whether `op` is an op of version `v`. */
export function isOpOf(op: unknown, v: JobVersion): op is Op {
  return typeof op === 'string' && (OPS_BY_VERSION[v] as readonly string[]).includes(op);
}

export const ERROR_CODES = [
  'malformed',
  'invalid_signature',
  'wrong_audience',
  'expired',
  'replayed',
  'unsupported_version',
  'unsupported_command',
  'unknown_tunnel',
  'kernel_error',
] as const;
export type JobErrorCode = (typeof ERROR_CODES)[number];

/** The body each op carries next to the standard claims. */
export interface JobBodies {
  apply: { tunnel: TunnelSpec };
  /** At least id, tunnel_name and protected_ip; any other tunnel field given is checked too. */
  remove: { tunnel: TunnelRef & Partial<TunnelSpec> };
  reconcile: { tunnels: TunnelSpec[] };
  probe: { tunnel: TunnelSpec };
  /**
   * Version 2: no body, the result is the node's StatusResult (common/tunnel-status.ts). To an agent whose hello
   * lists FEATURE_STATUS_DELTA, `since` (null or the cursor the gateway last stored) asks for the changes only.
   */
  status: { since?: StatusCursor | null };
  /** Versions 2 and 3, feature `traffic_live`: the per-second points of `ids` (common/traffic-live.ts). */
  traffic: TrafficBody;
  /**
   * Version 2, agents whose hello lists FEATURE_EVENTS (common/edge-events.ts): no body; the answer is not one
   * result line but event lines for as long as the channel stays open (docs/CONTRACTS.md "Events stream").
   */
  events: Record<string, never>;
}

export interface StandardClaims {
  iss: typeof JOB_ISS;
  aud: string;
  jti: string;
  iat: number;
  exp: number;
  v: JobVersion;
}

export type JobClaims<O extends Op = Op> = O extends Op ? StandardClaims & { op: O } & JobBodies[O] : never;

/**
 * apply/remove: the four counts; reconcile: the four counts and `failed` (always present, possibly empty:
 * the tunnels the kernel refused, each `{id, error: "kernel_error", error_description}`, while the rest was
 * applied, so one broken tunnel does not block its node); probe: reachable (and rtt_ms); status (v 2):
 * StatusResult.
 */
export type OkResult = ChangeCounts | ReconcileResult | ProbeResult | StatusResult | TrafficResult;

/**
 * What `tunnel-agent hello` writes, as one line: the versions the agent accepts and its own version; and,
 * from agents that know it, whether it can make its tunnels' links (common/tunnel-links.ts).
 */
export interface HelloLine {
  ok: true;
  versions: JobVersion[];
  agent: string;
  tunnel_links?: TunnelLinks;
  /** What the agent takes beyond its versions (HELLO_FEATURES); absent from agents before it: none. */
  features?: string[];
}

/**
 * The features an agent may list in its hello, beyond the job versions. `attacks`: it detects attacks (its
 * `status` answer carries `attacks`) and takes `policy.max_flows` and `policy.alert_pps` (docs/CONTRACTS.md
 * "Attacks"), which an agent without it refuses as unknown fields, so the gateway leaves them out for it.
 */
export const FEATURE_ATTACKS = 'attacks';

/** A hello line's shape. Undefined when right, else a sentence. Unknown versions in the list are allowed (a newer agent). */
export function checkHello(v: unknown): string | undefined {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'hello must be a JSON object';
  const o = v as Record<string, unknown>;
  if (o.ok !== true) return 'hello.ok must be true';
  if (!Array.isArray(o.versions) || !o.versions.every((x) => Number.isInteger(x) && (x as number) > 0)) return 'hello.versions must be a list of positive integers';
  if (typeof o.agent !== 'string') return 'hello.agent must be a string';
  if (o.features !== undefined && !(Array.isArray(o.features) && o.features.every((f) => typeof f === 'string'))) return 'hello.features must be a list of strings';
  if (o.tunnel_links !== undefined) return checkTunnelLinks(o.tunnel_links, 'hello.tunnel_links');
  return undefined;
}

/** What the agent writes on the channel's stdout, as one line. */
export type ResultLine =
  | { ok: true; jti: string; op: Op; result: OkResult }
  | { ok: false; jti?: string; error: JobErrorCode; error_description: string };

// ---------------------------------------------------------------------------------------------------
// Pure shape checks. Each returns undefined when the value is right, else a sentence saying what is wrong.
// A tunnel object is checked by the tunnel spec's one validator (common/tunnel-spec.ts).

const STANDARD_KEYS = ['iss', 'aud', 'jti', 'iat', 'exp', 'v', 'op'];
const BODY_KEY: Record<Exclude<Op, 'traffic'>, 'tunnel' | 'tunnels' | undefined> = { apply: 'tunnel', remove: 'tunnel', reconcile: 'tunnels', probe: 'tunnel', status: undefined, events: undefined };
const TRAFFIC_KEYS = ['ids', 'since'];

export function isOp(v: unknown): v is Op {
  return typeof v === 'string' && (OPS as readonly string[]).includes(v);
}

/** The op's body (and no claim beyond the standard ones and that body), as version `v` of the contract has it. */
export function checkBody(op: Op, claims: Record<string, unknown>, v: JobVersion): string | undefined {
  const opts = { policy: v >= 2, forwarding: v >= JOB_VERSION_FORWARDING };
  if (op === 'status' && claims.since !== undefined) {
    for (const k of Object.keys(claims)) {
      if (claims[k] !== undefined && !STANDARD_KEYS.includes(k) && k !== 'since') return `op "status" carries an unexpected claim "${k}"`;
    }
    return checkStatusSince(claims.since);
  }
  if (op === 'traffic') {
    for (const k of Object.keys(claims)) {
      if (claims[k] !== undefined && !STANDARD_KEYS.includes(k) && !TRAFFIC_KEYS.includes(k)) return `op "traffic" carries an unexpected claim "${k}"`;
    }
    return checkTrafficBody(claims);
  }
  const bodyKey = BODY_KEY[op];
  for (const k of Object.keys(claims)) {
    if (claims[k] !== undefined && !STANDARD_KEYS.includes(k) && k !== bodyKey) return `op "${op}" carries an unexpected claim "${k}"`;
  }
  if (bodyKey === undefined) return undefined;
  if (claims[bodyKey] === undefined) return `op "${op}" needs a "${bodyKey}" claim`;
  if (op !== 'reconcile') return checkTunnel(claims.tunnel, op !== 'remove', 'tunnel', opts);
  const list = claims.tunnels;
  if (!Array.isArray(list)) return 'tunnels must be an array';
  const seen = { id: new Set<string>(), tunnel_name: new Set<string>(), protected_ip: new Set<string>() };
  for (let i = 0; i < list.length; i++) {
    const why = checkTunnel(list[i], true, `tunnels[${i}]`, opts);
    if (why) return why;
    const t = list[i] as TunnelSpec;
    for (const k of ['id', 'tunnel_name', 'protected_ip'] as const) {
      const v = k === 'id' ? t.id.toLowerCase() : t[k];
      if (seen[k].has(v)) return `tunnels[${i}].${k} "${t[k]}" appears twice`;
      seen[k].add(v);
    }
  }
  return undefined;
}

/** The protected_ip values a job names (each must lie in AGENT_PROTECTED_POOLS when that is set). */
export function protectedIpsOf(claims: JobClaims): string[] {
  if (claims.op === 'reconcile') return claims.tunnels.map((t) => t.protected_ip);
  if (claims.op === 'status' || claims.op === 'events' || claims.op === 'traffic') return [];
  return [claims.tunnel.protected_ip];
}

/** The edge_ip values a job names (each must be this router's). */
export function edgeIpsOf(claims: JobClaims): string[] {
  if (claims.op === 'reconcile') return claims.tunnels.map((t) => t.edge_ip);
  if (claims.op === 'status' || claims.op === 'events' || claims.op === 'traffic') return [];
  return claims.tunnel.edge_ip === undefined ? [] : [claims.tunnel.edge_ip];
}
