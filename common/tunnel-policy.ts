// A tunnel's protection policy (docs/CONTRACTS.md "Tunnel settings" and "Edge jobs", version 2): what
// the buyer sets over REST/GraphQL and what a v2 job carries to the edge. The ONE place that says what a
// valid policy is, how a port list is written and normalised, and what the default is. No I/O here.
//
// Two spellings of the same policy exist on purpose:
// - the API's: `ports` is text ("22,80,443,25565-25575" or "*"), and the protection switches sit in a
//   `protection` object (`{syn_proxy, source_pps_limit, drop_fragments}`), as the buyer writes them;
// - the wire's (`tunnel.policy` in a job): `ports` is `"*"` or a list of `[from, to]` ranges and every key
//   is flat, so the agent never parses text.
// Both normalise to sorted, merged ranges, so the same allowlist always has one form.

export type Protocol = 'both' | 'tcp' | 'udp';
export const PROTOCOLS: readonly Protocol[] = ['both', 'tcp', 'udp'];

/** An inclusive port range, from <= to, both 1..65535. */
export type PortRange = [number, number];
export type Ports = '*' | PortRange[];

/** The wire form (a v2 job's `tunnel.policy`). */
export interface TunnelPolicy {
  ports: Ports;
  protocol: Protocol;
  syn_proxy: boolean;
  /** Packets per second allowed from one client address to this tunnel; null: no limit. */
  source_pps_limit: number | null;
  drop_fragments: boolean;
  /**
   * Connections this tunnel may hold in the edge's connection table (DESIGN 3.11). Optional on the wire: absent
   * means DEFAULT_MAX_FLOWS, and a policy with the default leaves it out, so specs from before it compare equal.
   * Carried to the agent and kept in its desired state; the dataplane does not enforce it yet.
   */
  max_flows?: number;
  /**
   * The attack alert threshold in inbound packets (or drops) per second (docs/CONTRACTS.md "Attacks"). Optional on
   * the wire: absent (or null) means automatic (10 x the tunnel's 10-minute p95, at least 5,000).
   */
  alert_pps?: number | null;
}

/** What a tunnel without a policy gets: today's forwarding plus the always-on isolation. */
export const DEFAULT_POLICY: Readonly<TunnelPolicy> = Object.freeze({ ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false });

/** At most this many items (a port or a range) in a port list, as written by the buyer. */
export const MAX_PORT_ITEMS = 32;
const PORT_MIN = 1;
const PORT_MAX = 65535;
export const PPS_MIN = 10;
export const PPS_MAX = 1_000_000;
/** max_flows: its default and range (DESIGN 3.11). */
export const DEFAULT_MAX_FLOWS = 65_536;
export const MAX_FLOWS_MIN = 1_000;
export const MAX_FLOWS_MAX = 1_000_000;
/** alert_pps: its range (below 100 pps ordinary use would raise alerts; above 10^8 none would ever come). */
export const ALERT_PPS_MIN = 100;
export const ALERT_PPS_MAX = 100_000_000;

const POLICY_KEYS = ['ports', 'protocol', 'syn_proxy', 'source_pps_limit', 'drop_fragments'] as const;
/** Keys a policy may carry or leave out (added after the five: an agent from before them refuses them). */
const OPTIONAL_POLICY_KEYS = ['max_flows', 'alert_pps'] as const;

/** A max_flows value: an integer from MAX_FLOWS_MIN to MAX_FLOWS_MAX. */
export function isMaxFlows(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= MAX_FLOWS_MIN && (v as number) <= MAX_FLOWS_MAX;
}

/** An alert_pps value other than null: an integer from ALERT_PPS_MIN to ALERT_PPS_MAX. */
export function isAlertPps(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= ALERT_PPS_MIN && (v as number) <= ALERT_PPS_MAX;
}

function isPort(v: unknown): v is number {
  return Number.isInteger(v) && (v as number) >= PORT_MIN && (v as number) <= PORT_MAX;
}

/** Sorted by start, overlapping and adjacent ranges merged (80,81 -> 80-81). A new array. */
export function mergeRanges(ranges: readonly PortRange[]): PortRange[] {
  const sorted = ranges.map(([a, b]): PortRange => [a, b]).sort((x, y) => x[0] - y[0]);
  const out: PortRange[] = [];
  for (const r of sorted) {
    const last = out[out.length - 1];
    if (last && r[0] <= last[1] + 1) last[1] = Math.max(last[1], r[1]);
    else out.push(r);
  }
  return out;
}

/** Ranges covering every port are "*": one spelling for "everything". */
function normalisePorts(ports: Ports): Ports {
  if (ports === '*') return '*';
  const merged = mergeRanges(ports);
  return merged.length === 1 && merged[0][0] === PORT_MIN && merged[0][1] === PORT_MAX ? '*' : merged;
}

/**
 * The buyer's text form: "*" or comma-separated ports and ranges ("22,80,443,25565-25575"), at most
 * MAX_PORT_ITEMS items, spaces around items allowed. Returns the normalised ranges, or a sentence.
 */
export function parsePorts(text: unknown): { ports: Ports } | { error: string } {
  if (typeof text !== 'string') return { error: 'ports must be a string: "*" or a list such as "22,80,443,25565-25575"' };
  const s = text.trim();
  if (s === '*') return { ports: '*' };
  const items = s.split(',').map((x) => x.trim());
  if (items.length > MAX_PORT_ITEMS) return { error: `ports may hold at most ${MAX_PORT_ITEMS} ports or ranges` };
  const ranges: PortRange[] = [];
  for (const item of items) {
    const m = /^(\d{1,5})(?:-(\d{1,5}))?$/.exec(item);
    const from = m ? Number(m[1]) : NaN;
    const to = m ? Number(m[2] ?? m[1]) : NaN;
    if (!isPort(from) || !isPort(to) || from > to) {
      return { error: `ports: "${item.slice(0, 20)}" is not a port (${PORT_MIN}-${PORT_MAX}) or a range "from-to" with from <= to` };
    }
    ranges.push([from, to]);
  }
  return { ports: normalisePorts(ranges) };
}

/** The text form the API answers: "*" or "22,80,443,25565-25575" (normalised). */
export function formatPorts(ports: Ports): string {
  if (ports === '*') return '*';
  return ports.map(([a, b]) => (a === b ? String(a) : `${a}-${b}`)).join(',');
}

/**
 * A wire policy: all five keys, max_flows and alert_pps if it likes, nothing else. Undefined when right, else a
 * sentence prefixed with `where`.
 */
export function checkPolicy(p: unknown, where = 'policy'): string | undefined {
  if (typeof p !== 'object' || p === null || Array.isArray(p)) return `${where} must be an object`;
  const o = p as Record<string, unknown>;
  for (const k of Object.keys(o)) {
    if (o[k] === undefined && (OPTIONAL_POLICY_KEYS as readonly string[]).includes(k)) continue;
    if (!(POLICY_KEYS as readonly string[]).includes(k) && !(OPTIONAL_POLICY_KEYS as readonly string[]).includes(k)) return `${where} has an unknown field "${k}"`;
  }
  for (const k of POLICY_KEYS) if (o[k] === undefined) return `${where}.${k} is missing`;
  if (o.ports !== '*') {
    if (!Array.isArray(o.ports) || o.ports.length === 0 || o.ports.length > MAX_PORT_ITEMS) {
      return `${where}.ports must be "*" or a list of 1 to ${MAX_PORT_ITEMS} [from, to] ranges`;
    }
    for (const r of o.ports as unknown[]) {
      if (!Array.isArray(r) || r.length !== 2 || !isPort(r[0]) || !isPort(r[1]) || r[0] > r[1]) {
        return `${where}.ports items must be [from, to] with ${PORT_MIN} <= from <= to <= ${PORT_MAX}`;
      }
    }
  }
  if (!(PROTOCOLS as readonly unknown[]).includes(o.protocol)) return `${where}.protocol must be "both", "tcp" or "udp"`;
  for (const k of ['syn_proxy', 'drop_fragments'] as const) if (typeof o[k] !== 'boolean') return `${where}.${k} must be a boolean`;
  const pps = o.source_pps_limit;
  if (pps !== null && !(Number.isInteger(pps) && (pps as number) >= PPS_MIN && (pps as number) <= PPS_MAX)) {
    return `${where}.source_pps_limit must be null or an integer from ${PPS_MIN} to ${PPS_MAX}`;
  }
  if (o.max_flows !== undefined && !isMaxFlows(o.max_flows)) return `${where}.max_flows must be an integer from ${MAX_FLOWS_MIN} to ${MAX_FLOWS_MAX}`;
  if (o.alert_pps !== undefined && o.alert_pps !== null && !isAlertPps(o.alert_pps)) return `${where}.alert_pps must be null or an integer from ${ALERT_PPS_MIN} to ${ALERT_PPS_MAX}`;
  return undefined;
}

/**
 * A checked policy in its one normalised form (ranges sorted and merged; all-ports ranges become "*"; max_flows
 * at its default and an automatic alert_pps left out).
 */
export function normalisePolicy(p: TunnelPolicy): TunnelPolicy {
  const out: TunnelPolicy = { ports: normalisePorts(p.ports), protocol: p.protocol, syn_proxy: p.syn_proxy, source_pps_limit: p.source_pps_limit, drop_fragments: p.drop_fragments };
  if (p.max_flows !== undefined && p.max_flows !== DEFAULT_MAX_FLOWS) out.max_flows = p.max_flows;
  if (p.alert_pps !== undefined && p.alert_pps !== null) out.alert_pps = p.alert_pps;
  return out;
}

/** max_flows and alert_pps as a policy means them (absent: the default, automatic). */
export function sameAttackSettings(a: Pick<TunnelPolicy, 'max_flows' | 'alert_pps'>, b: Pick<TunnelPolicy, 'max_flows' | 'alert_pps'>): boolean {
  return (a.max_flows ?? DEFAULT_MAX_FLOWS) === (b.max_flows ?? DEFAULT_MAX_FLOWS) && (a.alert_pps ?? null) === (b.alert_pps ?? null);
}

export function samePolicy(a: TunnelPolicy, b: TunnelPolicy): boolean {
  const x = normalisePolicy(a);
  const y = normalisePolicy(b);
  return (
    formatPorts(x.ports) === formatPorts(y.ports) &&
    x.protocol === y.protocol &&
    x.syn_proxy === y.syn_proxy &&
    x.source_pps_limit === y.source_pps_limit &&
    x.drop_fragments === y.drop_fragments &&
    sameAttackSettings(x, y)
  );
}

export function isDefaultPolicy(p: TunnelPolicy | undefined): boolean {
  if (p === undefined) return true;
  // The fields normalisation leaves as they are, first: most policies that are not the default differ there, and
  // are told apart without normalising their ports (an agent's reconcile asks this of 10,000 specs, twice).
  const d = DEFAULT_POLICY;
  if (p.protocol !== d.protocol || p.syn_proxy !== d.syn_proxy || p.source_pps_limit !== d.source_pps_limit || p.drop_fragments !== d.drop_fragments) return false;
  if (!sameAttackSettings(p, d)) return false;
  return samePolicy(p, d);
}
