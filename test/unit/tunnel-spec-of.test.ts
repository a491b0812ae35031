// tunnelSpecOf (server/domain/tunnels/spec.ts): the one derivation of a tunnel's spec, which the edge
// job and the origin script both carry. Pure; the common validator must accept what it makes.
import { expect, it } from 'vitest';
import { tunnelSpecOf, type SpecSource } from '../../server/domain/tunnels/spec.ts';
import { checkTunnel, normaliseSpec } from '../../common/tunnel-spec.ts';
import { IpError } from '../../server/domain/ip.ts';

const row: SpecSource = {
  id: '0b4e7f3a-9c21-4d5e-8f60-1a2b3c4d5e6f',
  tunnel_name: 'tg-bnhp6ojq',
  protected_ip: '198.18.0.5',
  origin_ip: '8.8.8.8',
  inner_index: 2,
  gre_key: '16909060',
  edge_ip: '192.0.2.1',
  inner_pool: '100.64.0.0/24',
  ports: '*',
  protocol: 'both',
  syn_proxy: false,
  source_pps_limit: null,
  drop_fragments: false,
  max_flows: 65_536,
  alert_pps: null,
};

it('a keyed tunnel: its inner /30 by index, the key as a number, the MTU the key header leaves', () => {
  const spec = tunnelSpecOf(row);
  expect(spec).toEqual({
    id: row.id,
    tunnel_name: row.tunnel_name,
    protected_ip: row.protected_ip,
    origin_ip: row.origin_ip,
    edge_ip: row.edge_ip,
    edge_inner: '100.64.0.9/30',
    origin_inner: '100.64.0.10/30',
    mtu: 1472,
    gre_key: 0x01020304,
  });
  expect(checkTunnel(spec, true)).toBeUndefined();
});

it('a tunnel from before per-tunnel keys has no gre_key at all (the job contract has it optional, never null)', () => {
  const spec = tunnelSpecOf({ ...row, gre_key: null });
  expect('gre_key' in spec).toBe(false);
  expect(spec.mtu).toBe(1476);
});

it('stored values that give no inner subnet are an IpError, which setup() answers as invalid_state', () => {
  expect(() => tunnelSpecOf({ ...row, inner_index: 64 })).toThrow(IpError);
});

it('default settings add no policy: the spec is what it was before settings existed (a v1 job can carry it)', () => {
  const spec = tunnelSpecOf(row);
  expect('policy' in spec).toBe(false);
  expect(checkTunnel(spec, true, 'tunnel', { policy: false })).toBeUndefined();
});

it('other settings add the wire policy (docs/CONTRACTS.md "Tunnel settings"): ports as ranges, every key flat', () => {
  const spec = tunnelSpecOf({ ...row, ports: '22,80-81,443', protocol: 'tcp', syn_proxy: true, source_pps_limit: 500, drop_fragments: true });
  expect(spec.policy).toEqual({ ports: [[22, 22], [80, 81], [443, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 500, drop_fragments: true });
  expect(checkTunnel(spec, true)).toBeUndefined();
  // Already in its one normalised form: what the agent stores and compares.
  expect(normaliseSpec(spec)).toEqual(spec);
  // Any one setting away from the default is enough.
  expect(tunnelSpecOf({ ...row, drop_fragments: true }).policy).toEqual({ ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: true });
});

it('max_flows and alert_pps (docs/CONTRACTS.md "Attacks") ride in the policy only when not their defaults', () => {
  expect(tunnelSpecOf({ ...row, alert_pps: 20_000 }).policy).toEqual({ ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false, alert_pps: 20_000 });
  expect(tunnelSpecOf({ ...row, max_flows: 4_000 }).policy).toEqual({ ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false, max_flows: 4_000 });
  // Another setting away from its default carries neither of them at theirs.
  expect(tunnelSpecOf({ ...row, syn_proxy: true }).policy).toEqual({ ports: '*', protocol: 'both', syn_proxy: true, source_pps_limit: null, drop_fragments: false });
  const both = tunnelSpecOf({ ...row, max_flows: 1_000, alert_pps: 100 });
  expect(checkTunnel(both, true)).toBeUndefined();
  expect(normaliseSpec(both)).toEqual(both);
});

it('stored ports the parser refuses are a stored-data error, never a policy that lets everything through', () => {
  expect(() => tunnelSpecOf({ ...row, ports: '0-70000' })).toThrow(/stored tunnel ports/);
});
