// The edge-job wire contract (DESIGN.md 3.6 "Edge jobs"), as constants, types and pure shape checks.
// Both ends use this module: the agent's verifier (agent/jobs/verify.ts) and the gateway's signer
// (server/edge/job-signing.ts), so the gateway never signs a job the agent would call malformed.
// schema/job.schema.json describes the same claims as JSON Schema; test/unit/agent-jobs.test.ts checks
// that the two agree. No I/O here.
import type { ChangeCounts, ProbeResult, ReconcileResult, TunnelRef, TunnelSpec } from '../agent/dataplane/types.ts';

export type { ReconcileResult, TunnelFailure } from '../agent/dataplane/types.ts';

export const JOB_TYP = 'tunnel-job+jwt';
export const JOB_ALG = 'EdDSA';
export const JOB_ISS = 'tunnelgate';
export const JOB_VERSION = 1;
/** `exp` at most this many seconds after `iat`. */
export const MAX_LIFETIME_S = 60;
/** Clock skew allowed on `exp` (past) and `iat` (future). */
export const CLOCK_SKEW_S = 30;
/** Input over this many bytes on the channel is refused as `malformed`. */
export const MAX_INPUT_BYTES = 16 * 1024 * 1024;
export const JOB_COMMAND = 'tunnel-agent job';
export const SSH_USER = 'tunnelgate';

export const OPS = ['apply', 'remove', 'reconcile', 'probe'] as const;
export type Op = (typeof OPS)[number];

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
}

export interface StandardClaims {
  iss: typeof JOB_ISS;
  aud: string;
  jti: string;
  iat: number;
  exp: number;
  v: typeof JOB_VERSION;
}

export type JobClaims<O extends Op = Op> = O extends Op ? StandardClaims & { op: O } & JobBodies[O] : never;

/**
 * apply/remove: the four counts; reconcile: the four counts and `failed` (always present, possibly empty:
 * the tunnels the kernel refused, each `{id, error: "kernel_error", error_description}`, while the rest was
 * applied, so one broken tunnel does not block its node); probe: reachable (and rtt_ms).
 */
export type OkResult = ChangeCounts | ReconcileResult | ProbeResult;

/** What the agent writes on the channel's stdout, as one line. */
export type ResultLine =
  | { ok: true; jti: string; op: Op; result: OkResult }
  | { ok: false; jti?: string; error: JobErrorCode; error_description: string };

// ---------------------------------------------------------------------------------------------------
// Pure shape checks. Each returns undefined when the value is right, else a sentence saying what is wrong.

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Linux interface names: 1 to 15 bytes; kept to the character set the dataplane accepts. */
const IFNAME_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,14}$/;

export function isUuid(v: unknown): v is string {
  return typeof v === 'string' && UUID_RE.test(v);
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Strict dotted quad (no leading zeros, no spaces) to a uint32, or null. */
export function parseIPv4(s: unknown): number | null {
  if (typeof s !== 'string') return null;
  const parts = s.split('.');
  if (parts.length !== 4) return null;
  let n = 0;
  for (const p of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(p)) return null;
    const o = Number(p);
    if (o > 255) return null;
    n = n * 256 + o;
  }
  return n;
}

function parseInner(s: unknown): { addr: number; prefix: number } | null {
  if (typeof s !== 'string') return null;
  const m = /^([0-9.]+)\/(30|31)$/.exec(s);
  if (!m) return null;
  const addr = parseIPv4(m[1]);
  return addr === null ? null : { addr, prefix: Number(m[2]) };
}

const TUNNEL_KEYS = ['id', 'tunnel_name', 'protected_ip', 'origin_ip', 'edge_ip', 'edge_inner', 'origin_inner', 'mtu', 'gre_key'] as const;
const REQUIRED_FULL = ['id', 'tunnel_name', 'protected_ip', 'origin_ip', 'edge_ip', 'edge_inner', 'origin_inner', 'mtu'] as const;
const REQUIRED_REF = ['id', 'tunnel_name', 'protected_ip'] as const;
export const MTU_MIN = 576;
export const MTU_MAX = 9000;

function checkField(key: (typeof TUNNEL_KEYS)[number], v: unknown): string | undefined {
  switch (key) {
    case 'id':
      return isUuid(v) ? undefined : 'id must be a UUID';
    case 'tunnel_name':
      return typeof v === 'string' && IFNAME_RE.test(v) ? undefined : 'tunnel_name must be an interface name of 1 to 15 characters (a letter or digit, then letters, digits, _ and -)';
    case 'protected_ip':
    case 'origin_ip':
    case 'edge_ip':
      return parseIPv4(v) !== null ? undefined : `${key} must be a dotted-quad IPv4 address`;
    case 'edge_inner':
    case 'origin_inner':
      return parseInner(v) ? undefined : `${key} must be an IPv4 address with prefix /30 or /31, e.g. "100.64.0.1/30"`;
    case 'mtu':
      return Number.isInteger(v) && (v as number) >= MTU_MIN && (v as number) <= MTU_MAX ? undefined : `mtu must be an integer from ${MTU_MIN} to ${MTU_MAX}`;
    case 'gre_key':
      return Number.isInteger(v) && (v as number) >= 0 && (v as number) <= 0xffffffff ? undefined : 'gre_key must be an integer from 0 to 4294967295';
  }
}

/** Both inner ends in one /30 (or /31) subnet, distinct, and not a /30's network or broadcast address. */
function checkInner(edgeInner: string, originInner: string): string | undefined {
  const e = parseInner(edgeInner)!;
  const o = parseInner(originInner)!;
  if (e.prefix !== o.prefix) return 'edge_inner and origin_inner must have the same prefix length';
  const size = 2 ** (32 - e.prefix);
  if (Math.floor(e.addr / size) !== Math.floor(o.addr / size)) return 'edge_inner and origin_inner must be in the same subnet';
  if (e.addr === o.addr) return 'edge_inner and origin_inner must differ';
  if (e.prefix === 30) {
    for (const a of [e.addr, o.addr]) {
      if (a % 4 === 0 || a % 4 === 3) return 'a /30 inner address must not be the network or broadcast address';
    }
  }
  return undefined;
}

/** A `tunnel` object: every field when `full`, else at least id, tunnel_name and protected_ip. No other keys. */
export function checkTunnel(t: unknown, full: boolean, where = 'tunnel'): string | undefined {
  if (!isPlainObject(t)) return `${where} must be an object`;
  // A key whose value is `undefined` counts as absent (JSON.stringify drops it), so the gateway can pass
  // `gre_key: undefined`; `null` is a value, and not a valid one.
  const has = (k: string) => t[k] !== undefined;
  for (const k of Object.keys(t)) {
    if (has(k) && !(TUNNEL_KEYS as readonly string[]).includes(k)) return `${where} has an unknown field "${k}"`;
  }
  for (const k of full ? REQUIRED_FULL : REQUIRED_REF) {
    if (!has(k)) return `${where}.${k} is missing`;
  }
  for (const k of TUNNEL_KEYS) {
    if (has(k)) {
      const why = checkField(k, t[k]);
      if (why) return `${where}.${why}`;
    }
  }
  if (has('edge_inner') !== has('origin_inner')) return `${where} must carry edge_inner and origin_inner together`;
  if (has('edge_inner')) {
    const why = checkInner(t.edge_inner as string, t.origin_inner as string);
    if (why) return `${where}: ${why}`;
  }
  return undefined;
}

const STANDARD_KEYS = ['iss', 'aud', 'jti', 'iat', 'exp', 'v', 'op'];
const BODY_KEY: Record<Op, 'tunnel' | 'tunnels'> = { apply: 'tunnel', remove: 'tunnel', reconcile: 'tunnels', probe: 'tunnel' };

export function isOp(v: unknown): v is Op {
  return typeof v === 'string' && (OPS as readonly string[]).includes(v);
}

/** The op's body (and no claim beyond the standard ones and that body). */
export function checkBody(op: Op, claims: Record<string, unknown>): string | undefined {
  const bodyKey = BODY_KEY[op];
  for (const k of Object.keys(claims)) {
    if (claims[k] !== undefined && !STANDARD_KEYS.includes(k) && k !== bodyKey) return `op "${op}" carries an unexpected claim "${k}"`;
  }
  if (claims[bodyKey] === undefined) return `op "${op}" needs a "${bodyKey}" claim`;
  if (op !== 'reconcile') return checkTunnel(claims.tunnel, op !== 'remove');
  const list = claims.tunnels;
  if (!Array.isArray(list)) return 'tunnels must be an array';
  const seen = { id: new Set<string>(), tunnel_name: new Set<string>(), protected_ip: new Set<string>() };
  for (let i = 0; i < list.length; i++) {
    const why = checkTunnel(list[i], true, `tunnels[${i}]`);
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
  return [claims.tunnel.protected_ip];
}

/** The edge_ip values a job names (each must be this router's). */
export function edgeIpsOf(claims: JobClaims): string[] {
  if (claims.op === 'reconcile') return claims.tunnels.map((t) => t.edge_ip);
  return claims.tunnel.edge_ip === undefined ? [] : [claims.tunnel.edge_ip];
}
