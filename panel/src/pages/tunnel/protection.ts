// A tunnel's settings as the panel's forms hold them (ports, protocol, protection; docs/BUYER.md "Tunnel
// settings"; the attack settings max_flows and alert_pps, docs/CONTRACTS.md "Attacks"), the presets the buy page and the tunnel page offer, and the API's refusals of a setting
// mapped to the field they concern. Pure: no DOM, no preact, no i18n runtime (test/unit/panel-*.test.ts
// import it directly); words are message keys the components translate.
import type { MessageKey } from '../../i18n/en.ts';

export type Protocol = 'both' | 'tcp' | 'udp';
export const PROTOCOLS: readonly Protocol[] = ['both', 'tcp', 'udp'];

/** The per-source limit's bounds (common/tunnel-policy.ts PPS_MIN, PPS_MAX: the API refuses others). */
export const PPS_MIN = 10;
export const PPS_MAX = 1_000_000;
/** max_flows' default and bounds (common/tunnel-policy.ts DEFAULT_MAX_FLOWS, MAX_FLOWS_MIN, MAX_FLOWS_MAX). */
export const DEFAULT_MAX_FLOWS = 65_536;
export const MAX_FLOWS_MIN = 1_000;
export const MAX_FLOWS_MAX = 1_000_000;
/** alert_pps' bounds (common/tunnel-policy.ts ALERT_PPS_MIN, ALERT_PPS_MAX); null is automatic. */
export const ALERT_PPS_MIN = 100;
export const ALERT_PPS_MAX = 100_000_000;

/**
 * The attack settings (docs/CONTRACTS.md "Attacks"): how many connections the edge's table may hold for the
 * tunnel, and the alert threshold. They are not part of a preset (a preset says what traffic the origin takes;
 * these say how much and when to call it an attack), so choosing a preset keeps them.
 */
export interface Limits {
  maxFlows: number;
  /** Inbound packets (or drops) per second that start an attack; null: automatic. */
  alertPps: number | null;
}

export const DEFAULT_LIMITS: Readonly<Limits> = { maxFlows: DEFAULT_MAX_FLOWS, alertPps: null };

/** What a preset sets: everything but the limits. */
export type PresetSettings = Omit<Settings, keyof Limits>;

export interface Settings extends Limits {
  /** "*" or a list such as "22,80,443,25565-25575". */
  ports: string;
  protocol: Protocol;
  synProxy: boolean;
  /** Packets per second one client address may send; null: no limit. */
  sourcePpsLimit: number | null;
  dropFragments: boolean;
}

export type PresetName = 'web' | 'game' | 'everything';
export type Choice = PresetName | 'custom';
export const CHOICES: readonly Choice[] = ['web', 'game', 'everything', 'custom'];

/**
 * The game preset's per-source limit. docs/BUYER.md: a game client sends a few tens of packets per second;
 * 1000 leaves that room several times over, also for players behind one shared address (a carrier's NAT).
 */
export const GAME_PPS = 1000;

export const PRESETS: Readonly<Record<PresetName, Readonly<PresetSettings>>> = {
  // A web server: HTTP and HTTPS only, TCP only, handshakes completed by the edge before the origin sees them.
  web: { ports: '80,443', protocol: 'tcp', synProxy: true, sourcePpsLimit: null, dropFragments: false },
  // A game server: UDP on every port, each client address held to GAME_PPS.
  game: { ports: '*', protocol: 'udp', synProxy: false, sourcePpsLimit: GAME_PPS, dropFragments: false },
  // Everything forwarded, nothing filtered: the API's defaults.
  everything: { ports: '*', protocol: 'both', synProxy: false, sourcePpsLimit: null, dropFragments: false },
};

/** The API's spelling of a port list has no spaces ("80,443"); the user's may. */
function canonicalPorts(ports: string): string {
  return ports.replace(/\s+/g, '');
}

/** The same preset fields (the limits aside). */
function samePreset(a: PresetSettings, b: PresetSettings): boolean {
  return (
    canonicalPorts(a.ports) === canonicalPorts(b.ports) &&
    a.protocol === b.protocol &&
    a.synProxy === b.synProxy &&
    a.sourcePpsLimit === b.sourcePpsLimit &&
    a.dropFragments === b.dropFragments
  );
}

export function sameSettings(a: Settings, b: Settings): boolean {
  return samePreset(a, b) && a.maxFlows === b.maxFlows && a.alertPps === b.alertPps;
}

/** The preset these settings are, or custom. */
export function choiceOf(s: PresetSettings): Choice {
  for (const name of ['web', 'game', 'everything'] as const) if (samePreset(s, PRESETS[name])) return name;
  return 'custom';
}

/** The per-source limit as typed: empty is no limit; otherwise a whole number in the API's range. */
export function parsePps(text: string): { value: number | null } | { error: MessageKey } {
  const s = text.trim();
  if (s === '') return { value: null };
  if (!/^\d+$/.test(s)) return { error: 'tunnel.settings.error.pps' };
  const n = Number(s);
  if (n < PPS_MIN || n > PPS_MAX) return { error: 'tunnel.settings.error.pps' };
  return { value: n };
}

/** A whole number as typed, within [min, max]; empty is `empty` (undefined: a value is required). */
function parseWhole(text: string, min: number, max: number, error: MessageKey, empty?: null): { value: number | null } | { error: MessageKey } {
  const s = text.trim();
  if (s === '') return empty === null ? { value: null } : { error };
  if (!/^\d+$/.test(s)) return { error };
  const n = Number(s);
  if (n < min || n > max) return { error };
  return { value: n };
}

/** max_flows as typed: a whole number from MAX_FLOWS_MIN to MAX_FLOWS_MAX (the API refuses others). */
export function parseMaxFlows(text: string): { value: number } | { error: MessageKey } {
  const r = parseWhole(text, MAX_FLOWS_MIN, MAX_FLOWS_MAX, 'tunnel.settings.error.maxFlows');
  return 'error' in r ? r : { value: r.value! };
}

/** alert_pps as typed: empty is automatic (null), else a whole number from ALERT_PPS_MIN to ALERT_PPS_MAX. */
export function parseAlertPps(text: string): { value: number | null } | { error: MessageKey } {
  return parseWhole(text, ALERT_PPS_MIN, ALERT_PPS_MAX, 'tunnel.settings.error.alertPps', null);
}

/** The GraphQL input of settings (purchaseTunnel and updateTunnel take the same shape). */
export function settingsInput(s: Settings): {
  ports: string;
  protocol: Protocol;
  protection: { synProxy: boolean; sourcePpsLimit: number | null; dropFragments: boolean; maxFlows: number; alertPps: number | null };
} {
  return {
    ports: canonicalPorts(s.ports),
    protocol: s.protocol,
    protection: { synProxy: s.synProxy, sourcePpsLimit: s.sourcePpsLimit, dropFragments: s.dropFragments, maxFlows: s.maxFlows, alertPps: s.alertPps },
  };
}

/** A field of the settings form an API refusal concerns. */
export type SettingsField = 'ports' | 'protocol' | 'synProxy' | 'sourcePpsLimit' | 'dropFragments' | 'maxFlows' | 'alertPps';

/** Every settings field: what a form clears when the settings are edited. */
export const SETTINGS_FIELDS: readonly SettingsField[] = ['ports', 'protocol', 'synProxy', 'sourcePpsLimit', 'dropFragments', 'maxFlows', 'alertPps'];

export interface FieldRefusal<F extends string> {
  field: F;
  key: MessageKey;
  params?: Record<string, string | number>;
}

/**
 * A refusal of the origin (server/domain/tunnels/input.ts): invalid_origin_ip for one of our own addresses,
 * an address that is not public unicast or not a dotted quad; invalid_request when it is missing (GraphQL
 * names the input path, originIp). Null for a refusal about something else.
 */
export function originRefusal(code: string, message: string): FieldRefusal<'originIp'> | null {
  if (code !== 'invalid_origin_ip' && !(code === 'invalid_request' && /origin_ip|originIp/.test(message))) return null;
  if (/not an origin server/.test(message)) return { field: 'originIp', key: 'tunnel.origin.error.ours' };
  if (/not a public unicast/.test(message)) return { field: 'originIp', key: 'tunnel.origin.error.private' };
  if (/is required/.test(message)) return { field: 'originIp', key: 'tunnel.origin.error.missing' };
  return { field: 'originIp', key: 'tunnel.origin.error.invalid' };
}

/** A refused name (server/domain/tunnels/input.ts validateName: too long, or control characters). */
export function nameRefusal(message: string): FieldRefusal<'name'> | null {
  return /^name\b|input\.name\b/.test(message) ? { field: 'name', key: 'tunnel.name.error' } : null;
}

/**
 * An invalid_request about a setting, by the field its message names (server/domain/tunnels/settings.ts,
 * common/tunnel-policy.ts parsePorts and checkPolicy; GraphQL's own coercion errors name the input path,
 * e.g. "input.protection.sourcePpsLimit"). Null when the message names none of them.
 */
export function settingsRefusal(message: string): FieldRefusal<SettingsField> | null {
  if (/source_pps_limit|sourcePpsLimit/.test(message)) return { field: 'sourcePpsLimit', key: 'tunnel.settings.error.pps' };
  // checkPolicy's "protection.max_flows must be an integer from 1000 to 1000000" and its alert_pps sentence.
  if (/max_flows|maxFlows/.test(message)) return { field: 'maxFlows', key: 'tunnel.settings.error.maxFlows' };
  if (/alert_pps|alertPps/.test(message)) return { field: 'alertPps', key: 'tunnel.settings.error.alertPps' };
  if (/syn_proxy|synProxy/.test(message)) return { field: 'synProxy', key: 'tunnel.settings.error.other' };
  if (/drop_fragments|dropFragments/.test(message)) return { field: 'dropFragments', key: 'tunnel.settings.error.other' };
  if (/^ports\b|\bports\b/.test(message)) {
    if (/at most/.test(message)) return { field: 'ports', key: 'tunnel.settings.error.portsTooMany' };
    // parsePorts quotes the item it refused: ports: "70000" is not a port ...
    const item = /"([^"]*)"/.exec(message)?.[1];
    return item !== undefined && !/^ports must/.test(message)
      ? { field: 'ports', key: 'tunnel.settings.error.portsItem', params: { item } }
      : { field: 'ports', key: 'tunnel.settings.error.ports' };
  }
  if (/\bprotocol\b/.test(message)) return { field: 'protocol', key: 'tunnel.settings.error.protocol' };
  return null;
}

/** The settings as a form holds them while they are edited: the limit as typed, the choice of preset. */
export interface SettingsDraft {
  choice: Choice;
  ports: string;
  protocol: Protocol;
  synProxy: boolean;
  /** Empty: no limit. */
  pps: string;
  dropFragments: boolean;
  maxFlows: string;
  /** Empty: automatic. */
  alertPps: string;
}

/** The draft of stored settings, or of a preset with the limits at their defaults (a new tunnel's). */
export function draftOf(s: PresetSettings & Partial<Limits>): SettingsDraft {
  const maxFlows = s.maxFlows ?? DEFAULT_LIMITS.maxFlows;
  const alertPps = s.alertPps === undefined ? DEFAULT_LIMITS.alertPps : s.alertPps;
  return {
    choice: choiceOf(s),
    ports: s.ports,
    protocol: s.protocol,
    synProxy: s.synProxy,
    pps: s.sourcePpsLimit === null ? '' : String(s.sourcePpsLimit),
    dropFragments: s.dropFragments,
    maxFlows: String(maxFlows),
    alertPps: alertPps === null ? '' : String(alertPps),
  };
}

/** A new choice: a preset fills its fields with its values; custom keeps what the fields hold, to edit. The limits stay as typed. */
export function choose(draft: SettingsDraft, choice: Choice): SettingsDraft {
  return choice === 'custom' ? { ...draft, choice } : { ...draftOf(PRESETS[choice]), choice, maxFlows: draft.maxFlows, alertPps: draft.alertPps };
}

/** The settings a draft asks for, or the fields the panel refuses before asking the API. */
export function settingsOfDraft(d: SettingsDraft): { settings: Settings } | { errors: Partial<Record<SettingsField, MessageKey>> } {
  const errors: Partial<Record<SettingsField, MessageKey>> = {};
  const maxFlows = parseMaxFlows(d.maxFlows);
  if ('error' in maxFlows) errors.maxFlows = maxFlows.error;
  const alertPps = parseAlertPps(d.alertPps);
  if ('error' in alertPps) errors.alertPps = alertPps.error;
  const pps = d.choice === 'custom' ? parsePps(d.pps) : { value: null };
  if ('error' in pps) errors.sourcePpsLimit = pps.error;
  if (d.choice === 'custom' && canonicalPorts(d.ports) === '') errors.ports = 'tunnel.settings.error.ports';
  if (Object.keys(errors).length || 'error' in pps || 'error' in maxFlows || 'error' in alertPps) return { errors };
  const limits: Limits = { maxFlows: maxFlows.value, alertPps: alertPps.value };
  if (d.choice !== 'custom') return { settings: { ...PRESETS[d.choice], ...limits } };
  return { settings: { ports: canonicalPorts(d.ports), protocol: d.protocol, synProxy: d.synProxy, sourcePpsLimit: pps.value, dropFragments: d.dropFragments, ...limits } };
}
