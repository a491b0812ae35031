// A tunnel's settings as the API has them (docs/CONTRACTS.md "Tunnel settings"): `ports` (text,
// normalised), `protocol` and `protection` ({syn_proxy, source_pps_limit, drop_fragments, max_flows, alert_pps};
// the last two are docs/CONTRACTS.md "Attacks"). What a valid
// value is, how a port list is written and what the defaults are is common/tunnel-policy.ts's, the one
// definition the agent checks a job with too; this module only maps the API's spelling onto it: the
// fields a buyer may send (at purchase, all optional; in a PATCH, protection's keys merged into the
// stored ones), the stored columns, and the wire policy an edge job carries.
import { isPlainObject } from '../../../common/tunnel-spec.ts';
import { DEFAULT_MAX_FLOWS, DEFAULT_POLICY, PROTOCOLS, checkPolicy, formatPorts, isDefaultPolicy, normalisePolicy, parsePorts, samePolicy, type Protocol, type TunnelPolicy } from '../../../common/tunnel-policy.ts';
import { ApiError } from '../errors.ts';

export interface TunnelProtection {
  syn_proxy: boolean;
  /** Packets per second one client address may send to the protected IP; null: no limit. */
  source_pps_limit: number | null;
  drop_fragments: boolean;
  /**
   * Connections the tunnel may hold in the edge's connection table (DESIGN 3.11): stored and sent to the agent
   * in the tunnel's policy; the dataplane does not enforce it yet.
   */
  max_flows: number;
  /** The attack alert threshold in inbound packets (or drops) per second; null: automatic (docs/CONTRACTS.md "Attacks"). */
  alert_pps: number | null;
}

export interface TunnelSettings {
  /** "*" or the normalised list ("80-81,443"): formatPorts of parsePorts. */
  ports: string;
  protocol: Protocol;
  protection: TunnelProtection;
}

/** What a request sets; a key left out keeps its value (protection's keys one by one). */
export interface SettingsChange {
  ports?: string;
  protocol?: Protocol;
  protection?: Partial<TunnelProtection>;
}

export const SETTINGS_FIELDS = ['ports', 'protocol', 'protection'] as const;
const PROTECTION_KEYS = ['syn_proxy', 'source_pps_limit', 'drop_fragments', 'max_flows', 'alert_pps'] as const;

export const DEFAULT_SETTINGS: Readonly<TunnelSettings> = Object.freeze(settingsOfPolicy(DEFAULT_POLICY));

/** The stored columns of a tunnel's settings (rows.ts reads them, the PATCH and the purchase write them). */
export interface SettingsColumns {
  ports: string;
  protocol: Protocol;
  syn_proxy: boolean;
  source_pps_limit: number | null;
  drop_fragments: boolean;
  max_flows: number;
  alert_pps: number | null;
}

export function settingsOf(c: SettingsColumns): TunnelSettings {
  return {
    ports: c.ports,
    protocol: c.protocol,
    protection: { syn_proxy: c.syn_proxy, source_pps_limit: c.source_pps_limit, drop_fragments: c.drop_fragments, max_flows: c.max_flows, alert_pps: c.alert_pps },
  };
}

/** The values of the settings columns, in SETTINGS_COLUMNS order (ports, protocol, syn_proxy, source_pps_limit, drop_fragments, max_flows, alert_pps). */
export function settingsValues(s: TunnelSettings): [string, Protocol, boolean, number | null, boolean, number, number | null] {
  const p = s.protection;
  return [s.ports, s.protocol, p.syn_proxy, p.source_pps_limit, p.drop_fragments, p.max_flows, p.alert_pps];
}

function settingsOfPolicy(p: Readonly<TunnelPolicy>): TunnelSettings {
  return {
    ports: formatPorts(p.ports),
    protocol: p.protocol,
    protection: { syn_proxy: p.syn_proxy, source_pps_limit: p.source_pps_limit, drop_fragments: p.drop_fragments, max_flows: p.max_flows ?? DEFAULT_MAX_FLOWS, alert_pps: p.alert_pps ?? null },
  };
}

/**
 * The wire policy of stored settings (a v2 job's `tunnel.policy`), normalised: max_flows at its default and an
 * automatic alert_pps are left out, so a tunnel that sets neither has the spec it had before they existed. Stored
 * ports were written normalised by this module; text the parser refuses is stored data gone wrong, not a buyer's
 * input: an Error.
 */
export function policyOf(s: TunnelSettings): TunnelPolicy {
  const parsed = parsePorts(s.ports);
  if ('error' in parsed) throw new Error(`stored tunnel ports ${JSON.stringify(s.ports)} do not parse: ${parsed.error}`);
  return normalisePolicy({ ports: parsed.ports, protocol: s.protocol, ...s.protection });
}

export function isDefaultSettings(s: TunnelSettings): boolean {
  return isDefaultPolicy(policyOf(s));
}

/** Whether two settings ask the edge for the same thing (common/tunnel-policy.ts samePolicy). */
export function sameSettings(a: TunnelSettings, b: TunnelSettings): boolean {
  return samePolicy(policyOf(a), policyOf(b));
}

export function applyChange(base: TunnelSettings, change: SettingsChange): TunnelSettings {
  return {
    ports: change.ports ?? base.ports,
    protocol: change.protocol ?? base.protocol,
    protection: { ...base.protection, ...change.protection },
  };
}

/**
 * The settings fields of a request body (purchase or PATCH; camelCase GraphQL input is mapped to these
 * names first). Absent (undefined) keys are left out; a malformed one is invalid_request naming it.
 */
export function validateSettings(input: { ports?: unknown; protocol?: unknown; protection?: unknown }): SettingsChange {
  const out: SettingsChange = {};
  if (input.ports !== undefined) {
    const parsed = parsePorts(input.ports);
    if ('error' in parsed) throw new ApiError('invalid_request', `${parsed.error}.`);
    out.ports = formatPorts(parsed.ports);
  }
  if (input.protocol !== undefined) {
    if (!(PROTOCOLS as readonly unknown[]).includes(input.protocol)) throw new ApiError('invalid_request', 'protocol must be "both", "tcp" or "udp".');
    out.protocol = input.protocol as Protocol;
  }
  if (input.protection !== undefined) {
    const p = input.protection;
    if (!isPlainObject(p)) {
      throw new ApiError('invalid_request', 'protection must be an object: {"syn_proxy": bool, "source_pps_limit": integer or null, "drop_fragments": bool, "max_flows": integer, "alert_pps": integer or null}, each key optional.');
    }
    const unknown = Object.keys(p).filter((k) => p[k] !== undefined && !(PROTECTION_KEYS as readonly string[]).includes(k));
    if (unknown.length) throw new ApiError('invalid_request', `protection has an unknown field ${JSON.stringify(unknown[0]!.slice(0, 64))}; it takes syn_proxy, source_pps_limit, drop_fragments, max_flows and alert_pps.`);
    const given: Partial<TunnelProtection> = {};
    for (const k of PROTECTION_KEYS) if (p[k] !== undefined) (given as Record<string, unknown>)[k] = p[k];
    // Each key by the policy's own rules (common/tunnel-policy.ts), the others at their defaults.
    const why = checkPolicy({ ...DEFAULT_POLICY, ...given }, 'protection');
    if (why) throw new ApiError('invalid_request', `${why}.`);
    out.protection = given;
  }
  return out;
}
