// The policy rules both programs share (common/tunnel-policy.ts, docs/CONTRACTS.md "Tunnel settings").
import { describe, expect, it } from 'vitest';
import { checkBody } from '../../common/job-contract.ts';
import { checkPolicy, DEFAULT_MAX_FLOWS, DEFAULT_POLICY, formatPorts, isDefaultPolicy, MAX_PORT_ITEMS, parsePorts, samePolicy, type TunnelPolicy } from '../../common/tunnel-policy.ts';
import { checkTunnel, normaliseSpec, type TunnelSpec } from '../../common/tunnel-spec.ts';

const spec: TunnelSpec = {
  id: '7d3c4b0e-2f7a-4c8e-9a51-0b6f1f9b2c11',
  tunnel_name: 'tg-7d3c4b0e',
  protected_ip: '203.0.113.10',
  origin_ip: '198.51.100.7',
  edge_ip: '192.0.2.1',
  edge_inner: '100.64.0.1/30',
  origin_inner: '100.64.0.2/30',
  mtu: 1476,
};

describe('port lists', () => {
  it('are answered sorted and merged, adjacent ranges included', () => {
    const r = parsePorts(' 443, 80,81,22, 25565-25575,25570-25580 ');
    expect(r).toEqual({ ports: [[22, 22], [80, 81], [443, 443], [25565, 25580]] });
    expect(formatPorts((r as { ports: [number, number][] }).ports)).toBe('22,80-81,443,25565-25580');
  });
  it('that cover every port are "*"', () => {
    expect(parsePorts('1-100,101-65535')).toEqual({ ports: '*' });
    expect(parsePorts('*')).toEqual({ ports: '*' });
  });
  it.each([['0'], ['65536'], ['80-22'], [''], ['22,,80'], ['http'], ['1-2-3'], ['-5'], ['022222']])('refuse %j', (text) => {
    expect(parsePorts(text)).toHaveProperty('error');
  });
  it(`hold at most ${MAX_PORT_ITEMS} items`, () => {
    const items = Array.from({ length: MAX_PORT_ITEMS }, (_, i) => String(1000 + 2 * i));
    expect(parsePorts(items.join(','))).toHaveProperty('ports');
    expect(parsePorts([...items, '9999'].join(','))).toHaveProperty('error');
  });
});

describe('the wire policy', () => {
  it('takes exactly its five keys, each in range', () => {
    expect(checkPolicy(DEFAULT_POLICY)).toBeUndefined();
    const ok: TunnelPolicy = { ports: [[80, 80], [443, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 1000, drop_fragments: true };
    expect(checkPolicy(ok)).toBeUndefined();
    expect(checkPolicy({ ...ok, extra: 1 })).toMatch(/unknown field "extra"/);
    expect(checkPolicy({ ...ok, syn_proxy: undefined })).toMatch(/syn_proxy is missing/);
    expect(checkPolicy({ ...ok, source_pps_limit: 9 })).toMatch(/source_pps_limit/);
    expect(checkPolicy({ ...ok, source_pps_limit: 1.5 })).toMatch(/source_pps_limit/);
    expect(checkPolicy({ ...ok, protocol: 'icmp' })).toMatch(/protocol/);
    expect(checkPolicy({ ...ok, ports: [] })).toMatch(/ports/);
    expect(checkPolicy({ ...ok, ports: [[443, 80]] })).toMatch(/ports/);
    expect(checkPolicy({ ...ok, ports: '22' })).toMatch(/ports/);
  });
  it('rides only in a version 2 job', () => {
    const tunnel = { ...spec, policy: { ...DEFAULT_POLICY, syn_proxy: true } };
    expect(checkBody('apply', { tunnel }, 2)).toBeUndefined();
    expect(checkBody('apply', { tunnel }, 1)).toMatch(/"policy".*version 2/);
    expect(checkBody('reconcile', { tunnels: [tunnel] }, 1)).toMatch(/policy/);
    expect(checkTunnel({ ...spec, policy: { ...DEFAULT_POLICY, protocol: 'x' } }, true)).toMatch(/tunnel\.policy\.protocol/);
  });
  it('is stored as no policy when it is the default, so v1 and v2 forms of one tunnel compare equal', () => {
    expect(normaliseSpec({ ...spec, policy: { ...DEFAULT_POLICY } })).toEqual(spec);
    expect(normaliseSpec({ ...spec, policy: { ...DEFAULT_POLICY, ports: [[1, 65535]] } })).toEqual(spec);
    expect(isDefaultPolicy(undefined)).toBe(true);
    const p: TunnelPolicy = { ...DEFAULT_POLICY, ports: [[443, 443], [80, 80], [81, 81]] };
    expect(normaliseSpec({ ...spec, policy: p }).policy).toEqual({ ...DEFAULT_POLICY, ports: [[80, 81], [443, 443]] });
  });
  it('may carry max_flows and alert_pps (docs/CONTRACTS.md "Attacks"), each in range; their defaults are no key', () => {
    expect(checkPolicy({ ...DEFAULT_POLICY, max_flows: 1_000, alert_pps: 100 })).toBeUndefined();
    expect(checkPolicy({ ...DEFAULT_POLICY, max_flows: 1_000_000, alert_pps: 100_000_000 })).toBeUndefined();
    expect(checkPolicy({ ...DEFAULT_POLICY, alert_pps: null })).toBeUndefined();
    expect(checkPolicy({ ...DEFAULT_POLICY, max_flows: 999 })).toMatch(/policy\.max_flows must be an integer from 1000 to 1000000/);
    expect(checkPolicy({ ...DEFAULT_POLICY, max_flows: 1_000_001 })).toMatch(/max_flows/);
    expect(checkPolicy({ ...DEFAULT_POLICY, max_flows: null })).toMatch(/max_flows/);
    expect(checkPolicy({ ...DEFAULT_POLICY, alert_pps: 99 })).toMatch(/policy\.alert_pps must be null or an integer from 100 to 100000000/);
    expect(checkPolicy({ ...DEFAULT_POLICY, alert_pps: 150.5 })).toMatch(/alert_pps/);
    expect(checkPolicy({ ...DEFAULT_POLICY, alert_pps: '500' })).toMatch(/alert_pps/);
    // The defaults are the default policy, which a spec stores as none: specs from before these keys compare equal.
    expect(isDefaultPolicy({ ...DEFAULT_POLICY, max_flows: DEFAULT_MAX_FLOWS, alert_pps: null })).toBe(true);
    expect(normaliseSpec({ ...spec, policy: { ...DEFAULT_POLICY, max_flows: DEFAULT_MAX_FLOWS, alert_pps: null } })).toEqual(spec);
    // Either one set is a policy of its own, kept by normalisation and told apart by samePolicy.
    expect(isDefaultPolicy({ ...DEFAULT_POLICY, alert_pps: 2_000 })).toBe(false);
    expect(normaliseSpec({ ...spec, policy: { ...DEFAULT_POLICY, max_flows: 5_000, alert_pps: null } }).policy).toEqual({ ...DEFAULT_POLICY, max_flows: 5_000 });
    expect(samePolicy({ ...DEFAULT_POLICY, alert_pps: 2_000 }, { ...DEFAULT_POLICY, alert_pps: 3_000 })).toBe(false);
    expect(samePolicy({ ...DEFAULT_POLICY, max_flows: DEFAULT_MAX_FLOWS }, DEFAULT_POLICY)).toBe(true);
  });
});
