// The tunnel spec: the `tunnel` object a job carries (docs/CONTRACTS.md "The tunnel object"), the
// result shapes the dataplane reports, and the ONE validator of a spec. The gateway's signer, the agent's
// job verifier and the agent's dataplane all check a tunnel with checkTunnel(), so none of them can
// accept what another refuses. No I/O here.
//
// The inner subnet is /30 or /31 only: the gateway numbers every tunnel a /30 of the inner pool and /31 is
// the point-to-point alternative. (The dataplane once accepted /8 to /31 on its own; the wire contract's
// narrower rule is the one that holds now.)
import { parseIPv4, parseIPv4Prefix } from './ipv4.ts';
import { INTERFACE_NAME_RULE, isInterfaceName, isUuid } from './names.ts';
import { checkPolicy, isDefaultPolicy, normalisePolicy, type TunnelPolicy } from './tunnel-policy.ts';

export interface TunnelSpec {
  id: string;
  tunnel_name: string;
  protected_ip: string;
  origin_ip: string;
  edge_ip: string;
  /** Edge end of the inner subnet with its prefix, e.g. "100.64.0.1/30". */
  edge_inner: string;
  /** Origin end of the inner subnet with its prefix, e.g. "100.64.0.2/30". */
  origin_inner: string;
  mtu: number;
  gre_key?: number;
  /** Job version 2 only (common/tunnel-policy.ts); absent means DEFAULT_POLICY. */
  policy?: TunnelPolicy;
  /**
   * Job version 3 only: whether the edge forwards buyer traffic to the origin (the protected IP's DNAT).
   * false until the origin answered the activate probe through the tunnel (docs/CONTRACTS.md "Dataplane");
   * absent means true, which is what every tunnel of a version 1 or 2 job gets (what the edge did before).
   */
  forwarding?: boolean;
}

/** What a `remove` job needs at least. */
export type TunnelRef = Pick<TunnelSpec, 'id' | 'tunnel_name' | 'protected_ip'>;

/** Every result carries all four keys (docs/CONTRACTS.md "Results"). */
export interface ChangeCounts {
  added: number;
  changed: number;
  removed: number;
  unchanged: number;
}

/**
 * One tunnel a reconcile could not apply (one broken tunnel must not block its node): the rest of the node's set was applied anyway.
 * The shape is the job contract's (common/job-contract.ts, schema/job.schema.json): the gateway marks that
 * tunnel alone.
 */
export interface TunnelFailure {
  id: string;
  error: 'kernel_error';
  error_description: string;
}

/** A reconcile's result: the counts of what it applied, and every tunnel it could not (possibly none). */
export interface ReconcileResult extends ChangeCounts {
  failed: TunnelFailure[];
}

export interface ProbeResult {
  reachable: boolean;
  rtt_ms?: number;
}

/** A GRE link's MTU: 576 (the least every IPv4 host must take) to 9000 (jumbo frames). */
export const MTU_MIN = 576;
export const MTU_MAX = 9000;

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function parseInner(s: unknown): { addr: number; prefix: number } | null {
  const p = parseIPv4Prefix(s);
  return p && (p.prefix === 30 || p.prefix === 31) ? p : null;
}

const TUNNEL_KEYS = ['id', 'tunnel_name', 'protected_ip', 'origin_ip', 'edge_ip', 'edge_inner', 'origin_inner', 'mtu', 'gre_key', 'policy', 'forwarding'] as const;
const REQUIRED_FULL = ['id', 'tunnel_name', 'protected_ip', 'origin_ip', 'edge_ip', 'edge_inner', 'origin_inner', 'mtu'] as const;
const REQUIRED_REF = ['id', 'tunnel_name', 'protected_ip'] as const;

function checkField(key: (typeof TUNNEL_KEYS)[number], v: unknown): string | undefined {
  switch (key) {
    case 'id':
      return isUuid(v) ? undefined : 'id must be a UUID';
    case 'tunnel_name':
      return isInterfaceName(v) ? undefined : `tunnel_name must be ${INTERFACE_NAME_RULE}`;
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
    case 'policy':
      return checkPolicy(v);
    case 'forwarding':
      return typeof v === 'boolean' ? undefined : 'forwarding must be true or false';
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

export interface CheckTunnelOptions {
  /** Whether `policy` may appear: only in a version 2 job (docs/CONTRACTS.md "Edge jobs"). Default true. */
  policy?: boolean;
  /** Whether `forwarding` may appear: only in a version 3 job (docs/CONTRACTS.md "Versions"). Default true. */
  forwarding?: boolean;
}

/**
 * A `tunnel` object: every field when `full`, else at least id, tunnel_name and protected_ip. No other keys.
 * Undefined when it is right, else a sentence saying what is wrong, prefixed with `where`.
 */
export function checkTunnel(t: unknown, full: boolean, where = 'tunnel', opts: CheckTunnelOptions = {}): string | undefined {
  if (!isPlainObject(t)) return `${where} must be an object`;
  if (opts.policy === false && t.policy !== undefined) return `${where} has an unknown field "policy" (a policy needs job version 2)`;
  if (opts.forwarding === false && t.forwarding !== undefined) return `${where} has an unknown field "forwarding" (it needs job version 3)`;
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

/**
 * The spec as stored and compared: only the spec's own fields, a null gre_key (JSON) is no key, a default
 * policy is no policy (so a v1 spec and the same tunnel sent with the default policy compare equal), and
 * forwarding on is no `forwarding` (absent means on: a record from before version 3 is a forwarding one).
 */
export function normaliseSpec(t: TunnelSpec): TunnelSpec {
  const out: TunnelSpec = { id: t.id, tunnel_name: t.tunnel_name, protected_ip: t.protected_ip, origin_ip: t.origin_ip, edge_ip: t.edge_ip, edge_inner: t.edge_inner, origin_inner: t.origin_inner, mtu: t.mtu };
  if (t.gre_key !== undefined && t.gre_key !== null) out.gre_key = t.gre_key;
  if (t.policy !== undefined && t.policy !== null && !isDefaultPolicy(t.policy)) out.policy = normalisePolicy(t.policy);
  if (t.forwarding === false) out.forwarding = false;
  return out;
}
