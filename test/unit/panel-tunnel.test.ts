// The tunnel settings and lifecycle as the panel reads them (panel/src/pages/tunnel/protection.ts and
// lifecycle.ts): the presets and what they send (checked by the gateway's own validation), the steps of
// bringing a tunnel up by status, activate's refusals, and where a saved change is.
import { describe, expect, it } from 'vitest';
import { ALERT_PPS_MAX, ALERT_PPS_MIN, DEFAULT_MAX_FLOWS, DEFAULT_POLICY, MAX_FLOWS_MAX, MAX_FLOWS_MIN, PPS_MAX, PPS_MIN } from '../../common/tunnel-policy.ts';
import { activateRefusal, canActivate, canProvision, newer, saveOutcome, stepStates, updateRefusal, type Status } from '../../panel/src/pages/tunnel/lifecycle.ts';
import * as panel from '../../panel/src/pages/tunnel/protection.ts';
import {
  DEFAULT_LIMITS,
  GAME_PPS,
  PRESETS,
  choiceOf,
  choose,
  draftOf,
  parseAlertPps,
  parseMaxFlows,
  parsePps,
  settingsInput,
  settingsOfDraft,
  settingsRefusal,
  type Settings,
} from '../../panel/src/pages/tunnel/protection.ts';
import { ApiError } from '../../server/domain/errors.ts';
import { refuseIfOurs } from '../../server/domain/tunnels/input.ts';
import { DEFAULT_SETTINGS, validateSettings } from '../../server/domain/tunnels/settings.ts';

/** The GraphQL settings input in the REST spelling the gateway validates (server/graphql maps one onto the other). */
function asRest(s: Settings) {
  const i = settingsInput(s);
  const p = i.protection;
  return { ports: i.ports, protocol: i.protocol, protection: { syn_proxy: p.synProxy, source_pps_limit: p.sourcePpsLimit, drop_fragments: p.dropFragments, max_flows: p.maxFlows, alert_pps: p.alertPps } };
}

describe('presets', () => {
  it('web: ports 80 and 443, TCP, SYN proxy on', () => {
    expect(PRESETS.web).toEqual({ ports: '80,443', protocol: 'tcp', synProxy: true, sourcePpsLimit: null, dropFragments: false });
  });

  it('game: UDP with a per-source packet limit of 1000 pps', () => {
    expect(GAME_PPS).toBe(1000);
    expect(PRESETS.game).toMatchObject({ protocol: 'udp', sourcePpsLimit: 1000, synProxy: false });
  });

  it("everything: the API's defaults (all ports, both protocols, no protection)", () => {
    const e = PRESETS.everything;
    expect({ ports: e.ports, protocol: e.protocol, syn_proxy: e.synProxy, source_pps_limit: e.sourcePpsLimit, drop_fragments: e.dropFragments }).toEqual({ ...DEFAULT_POLICY, ports: '*' });
  });

  it.each(['web', 'game', 'everything'] as const)('%s is accepted by the gateway as it is, in its normalised form', (name) => {
    const change = validateSettings(asRest({ ...PRESETS[name], ...DEFAULT_LIMITS }));
    expect(change.ports).toBe(PRESETS[name].ports);
    expect(change.protocol).toBe(PRESETS[name].protocol);
  });

  it('the per-source limit has the bounds the gateway checks', () => {
    expect([panel.PPS_MIN, panel.PPS_MAX]).toEqual([PPS_MIN, PPS_MAX]);
  });

  it('stored settings are recognised as their preset, or custom', () => {
    const stored = (s: typeof DEFAULT_SETTINGS): Settings => ({
      ports: s.ports,
      protocol: s.protocol,
      synProxy: s.protection.syn_proxy,
      sourcePpsLimit: s.protection.source_pps_limit,
      dropFragments: s.protection.drop_fragments,
      maxFlows: s.protection.max_flows,
      alertPps: s.protection.alert_pps,
    });
    expect(choiceOf(stored(DEFAULT_SETTINGS))).toBe('everything');
    expect(choiceOf({ ...PRESETS.web })).toBe('web');
    expect(choiceOf({ ...PRESETS.web, ports: '80, 443' })).toBe('web');
    expect(choiceOf({ ...PRESETS.game })).toBe('game');
    expect(choiceOf({ ...PRESETS.game, sourcePpsLimit: 500 })).toBe('custom');
    expect(choiceOf({ ...PRESETS.web, ports: '22,80,443' })).toBe('custom');
    // The attack settings are no part of a preset: a web server with its own threshold is still the web preset.
    const webWithLimits: Settings = { ...PRESETS.web, maxFlows: 2000, alertPps: 500 };
    expect(choiceOf(webWithLimits)).toBe('web');
  });

  it('choosing a preset fills the fields with it; custom keeps them to edit', () => {
    const start = draftOf(PRESETS.everything);
    const web = choose(start, 'web');
    expect(web).toEqual({ choice: 'web', ports: '80,443', protocol: 'tcp', synProxy: true, pps: '', dropFragments: false, maxFlows: '65536', alertPps: '' });
    const custom = choose(web, 'custom');
    expect(custom).toEqual({ ...web, choice: 'custom' });
    expect(settingsOfDraft({ ...custom, ports: '22, 80,443', pps: '300' })).toEqual({
      settings: { ports: '22,80,443', protocol: 'tcp', synProxy: true, sourcePpsLimit: 300, dropFragments: false, maxFlows: 65536, alertPps: null },
    });
    expect(settingsOfDraft(choose(custom, 'game'))).toEqual({ settings: { ...PRESETS.game, ...DEFAULT_LIMITS } });
  });

  it('the attack settings are kept when a preset is chosen, and sent with any choice', () => {
    const mine = { ...draftOf(PRESETS.everything), maxFlows: '2000', alertPps: ' 750 ' };
    const web = choose(mine, 'web');
    expect([web.maxFlows, web.alertPps]).toEqual(['2000', ' 750 ']);
    expect(settingsOfDraft(web)).toEqual({ settings: { ...PRESETS.web, maxFlows: 2000, alertPps: 750 } });
    // Stored values read back into the fields; an automatic threshold is an empty field.
    expect(draftOf({ ...PRESETS.game, maxFlows: 1000, alertPps: null })).toMatchObject({ choice: 'game', maxFlows: '1000', alertPps: '' });
    const i = settingsInput({ ...PRESETS.web, maxFlows: 2000, alertPps: null });
    expect(i.protection).toEqual({ synProxy: true, sourcePpsLimit: null, dropFragments: false, maxFlows: 2000, alertPps: null });
    expect(validateSettings(asRest({ ...PRESETS.web, maxFlows: 2000, alertPps: 750 })).protection).toMatchObject({ max_flows: 2000, alert_pps: 750 });
  });

  it('the attack settings have the bounds and default the gateway has; out of range is refused before the API is asked, with any choice', () => {
    expect([panel.MAX_FLOWS_MIN, panel.MAX_FLOWS_MAX, panel.DEFAULT_MAX_FLOWS]).toEqual([MAX_FLOWS_MIN, MAX_FLOWS_MAX, DEFAULT_MAX_FLOWS]);
    expect([panel.ALERT_PPS_MIN, panel.ALERT_PPS_MAX]).toEqual([ALERT_PPS_MIN, ALERT_PPS_MAX]);
    expect(DEFAULT_LIMITS).toEqual({ maxFlows: DEFAULT_SETTINGS.protection.max_flows, alertPps: DEFAULT_SETTINGS.protection.alert_pps });
    const web = draftOf(PRESETS.web);
    expect(settingsOfDraft({ ...web, maxFlows: '999' })).toEqual({ errors: { maxFlows: 'tunnel.settings.error.maxFlows' } });
    expect(settingsOfDraft({ ...web, maxFlows: '', alertPps: '99' })).toEqual({ errors: { maxFlows: 'tunnel.settings.error.maxFlows', alertPps: 'tunnel.settings.error.alertPps' } });
  });

  it.each([
    ['1000', { value: 1000 }],
    [' 1000000 ', { value: 1000000 }],
    ['999', { error: 'tunnel.settings.error.maxFlows' }],
    ['1000001', { error: 'tunnel.settings.error.maxFlows' }],
    ['', { error: 'tunnel.settings.error.maxFlows' }],
    ['65536.5', { error: 'tunnel.settings.error.maxFlows' }],
  ])('max_flows %j reads as %j', (text, want) => {
    expect(parseMaxFlows(text)).toEqual(want);
  });

  it.each([
    ['', { value: null }],
    ['100', { value: 100 }],
    ['100000000', { value: 100000000 }],
    ['99', { error: 'tunnel.settings.error.alertPps' }],
    ['100000001', { error: 'tunnel.settings.error.alertPps' }],
    ['-5', { error: 'tunnel.settings.error.alertPps' }],
  ])('alert_pps %j reads as %j', (text, want) => {
    expect(parseAlertPps(text)).toEqual(want);
  });

  it("the gateway's own refusals of the attack settings land at their fields", () => {
    const refusal = (protection: Record<string, unknown>) => {
      try {
        validateSettings({ protection });
      } catch (e) {
        if (e instanceof ApiError) return settingsRefusal(e.message);
      }
      throw new Error('not refused');
    };
    expect(refusal({ max_flows: 999 })).toEqual({ field: 'maxFlows', key: 'tunnel.settings.error.maxFlows' });
    expect(refusal({ alert_pps: 50 })).toEqual({ field: 'alertPps', key: 'tunnel.settings.error.alertPps' });
    // GraphQL's own coercion names the input path.
    expect(updateRefusal('invalid_request', 'Variable "$input" got invalid value 3000000000 at "input.protection.maxFlows"; Int cannot represent non 32-bit signed integer value: 3000000000')).toEqual({
      field: 'maxFlows',
      key: 'tunnel.settings.error.maxFlows',
    });
  });

  it('a custom draft with a bad limit or no ports is refused before the API is asked', () => {
    const custom = { ...draftOf(PRESETS.everything), choice: 'custom' as const };
    expect(settingsOfDraft({ ...custom, pps: '5' })).toEqual({ errors: { sourcePpsLimit: 'tunnel.settings.error.pps' } });
    expect(settingsOfDraft({ ...custom, ports: '  ' })).toEqual({ errors: { ports: 'tunnel.settings.error.ports' } });
  });

  it.each([
    ['', { value: null }],
    [' 1000 ', { value: 1000 }],
    ['10', { value: 10 }],
    ['1000000', { value: 1000000 }],
    ['9', { error: 'tunnel.settings.error.pps' }],
    ['1000001', { error: 'tunnel.settings.error.pps' }],
    ['1.5', { error: 'tunnel.settings.error.pps' }],
    ['-20', { error: 'tunnel.settings.error.pps' }],
    ['1e3', { error: 'tunnel.settings.error.pps' }],
  ])('the limit %j reads as %j', (text, want) => {
    expect(parsePps(text)).toEqual(want);
  });
});

describe('bringing a tunnel up', () => {
  it.each([
    ['PENDING', ['current', 'current', 'waiting']],
    ['PROVISIONING', ['current', 'current', 'waiting']],
    ['FAILED', ['current', 'current', 'waiting']],
    ['PROVISIONED', ['current', 'done', 'current']],
    ['ACTIVE', ['done', 'done', 'done']],
    ['DELETING', ['waiting', 'waiting', 'waiting']],
  ] as const)('%s: script, provision and activate are %j', (status, want) => {
    expect(stepStates(status)).toEqual(want);
  });

  it('offers provision to a pending or failed tunnel, activate to a provisioned one', () => {
    const all: Status[] = ['PENDING', 'PROVISIONING', 'PROVISIONED', 'ACTIVE', 'FAILED', 'DELETING', 'DELETED'];
    expect(all.filter(canProvision)).toEqual(['PENDING', 'FAILED']);
    expect(all.filter(canActivate)).toEqual(['PROVISIONED']);
  });

  it("reads activate's refusals: the probe's, a tunnel not provisioned, the edge unreachable", () => {
    // server/domain/tunnels/lifecycle.ts's messages.
    const probe = 'Tunnel 7d3c: the origin 93.184.216.34 did not answer through the tunnel. Run the origin script (GET /api/dedicated/7d3c/setup, scripts.origin) on the origin server as root, then activate again.';
    expect(activateRefusal('invalid_state', probe)).toEqual({ kind: 'probe', key: 'tunnel.activate.probeFailed' });
    expect(activateRefusal('invalid_state', 'Tunnel 7d3c is pending; only a provisioned tunnel can be activated.')).toEqual({ kind: 'state', key: 'tunnel.activate.notProvisioned' });
    expect(activateRefusal('edge_unavailable', 'The edge did not answer.')).toEqual({ kind: 'edge', key: 'tunnel.edgeUnavailable' });
    expect(activateRefusal('server_error', 'boom')).toEqual({ kind: 'other', key: 'tunnel.failed' });
  });
});

describe('a saved change', () => {
  it('to a name only, or to a tunnel not on an edge, needs nothing from the edge', () => {
    expect(saveOutcome({ statusBefore: 'ACTIVE', specChanged: false, originMoved: false }, { status: 'ACTIVE', settingsApplied: true })).toBe('saved');
    expect(saveOutcome({ statusBefore: 'PENDING', specChanged: true, originMoved: false }, { status: 'PENDING', settingsApplied: true })).toBe('stored');
    expect(saveOutcome({ statusBefore: 'FAILED', specChanged: true, originMoved: true }, { status: 'FAILED', settingsApplied: true })).toBe('stored');
  });

  it("settings of a tunnel on its edge: applied when the answer says so (REST's 200), else pending until a live event says applied", () => {
    const change = { statusBefore: 'PROVISIONED', specChanged: true, originMoved: false } as const;
    expect(saveOutcome(change, { status: 'PROVISIONED', settingsApplied: true })).toBe('applied');
    expect(saveOutcome(change, { status: 'PROVISIONED', settingsApplied: false })).toBe('pending');
    expect(saveOutcome({ ...change, statusBefore: 'ACTIVE' }, { status: 'ACTIVE', settingsApplied: false })).toBe('pending');
    expect(saveOutcome({ ...change, statusBefore: 'ACTIVE' }, { status: 'ACTIVE', settingsApplied: true })).toBe('applied');
  });

  it('a new origin on an active tunnel is pending while ACTIVE, applied once PROVISIONED with the settings applied', () => {
    const change = { statusBefore: 'ACTIVE', specChanged: true, originMoved: true } as const;
    expect(saveOutcome(change, { status: 'ACTIVE', settingsApplied: false })).toBe('pending');
    expect(saveOutcome(change, { status: 'PROVISIONED', settingsApplied: true })).toBe('applied');
  });

  it('a change to a provisioning tunnel rides its job: pending, then applied or failed', () => {
    const change = { statusBefore: 'PROVISIONING', specChanged: true, originMoved: false } as const;
    expect(saveOutcome(change, { status: 'PROVISIONING', settingsApplied: false })).toBe('pending');
    // Provisioned a moment before the job records the revision it applied: still pending, then applied.
    expect(saveOutcome(change, { status: 'PROVISIONED', settingsApplied: false })).toBe('pending');
    expect(saveOutcome(change, { status: 'PROVISIONED', settingsApplied: true })).toBe('applied');
    expect(saveOutcome(change, { status: 'FAILED', settingsApplied: true })).toBe('failed');
  });

  it("refusals of updateTunnel land at the origin, the settings, or the whole form", () => {
    let ours: ApiError | undefined;
    try {
      refuseIfOurs('203.0.113.9', 'a protected IP of ours');
    } catch (e) {
      ours = e as ApiError;
    }
    expect(updateRefusal(ours!.code, ours!.message)).toEqual({ field: 'originIp', key: 'tunnel.origin.error.ours' });
    expect(updateRefusal('invalid_request', 'protocol must be "both", "tcp" or "udp".')).toEqual({ field: 'protocol', key: 'tunnel.settings.error.protocol' });
    expect(updateRefusal('invalid_state', 'Tunnel 7d3c is deleting; its settings can no longer change.')).toEqual({ field: 'form', key: 'tunnel.failed', params: { message: 'Tunnel 7d3c is deleting; its settings can no longer change.' } });
    expect(updateRefusal('edge_unavailable', 'x')).toEqual({ field: 'form', key: 'tunnel.edgeUnavailable' });
  });
});

describe('the freshest view of a tunnel', () => {
  it('of two with the same updatedAt, keeps the one that says the settings are applied (applying touches no updatedAt)', () => {
    const answer = { settingsApplied: false, updatedAt: '2026-11-28T19:00:01.000Z' };
    const live = { settingsApplied: true, updatedAt: '2026-11-28T19:00:01.000Z' };
    // The live event came first, the mutation's answer (read before the edge applied it) after it.
    expect(newer(live, answer)).toBe(live);
    expect(newer(answer, live)).toBe(live);
    // A later change (a newer updatedAt) is not applied yet, whatever the held view said.
    const later = { settingsApplied: false, updatedAt: '2026-11-28T19:00:09.000Z' };
    expect(newer(live, later)).toBe(later);
  });

  it('keeps a live event over an older mutation answer, and takes an equal or newer one', () => {
    const live = { status: 'PROVISIONED', updatedAt: '2026-11-28T19:00:05.000Z' };
    const answer = { status: 'PROVISIONING', updatedAt: '2026-11-28T19:00:01.000Z' };
    expect(newer(live, answer)).toBe(live);
    expect(newer(answer, live)).toBe(live);
    const health = { status: 'PROVISIONED', updatedAt: live.updatedAt };
    expect(newer(live, health)).toBe(health);
    expect(newer(undefined, answer)).toBe(answer);
  });
});
