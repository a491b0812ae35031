// When two tunnel specs are the same: as a link and a mapping (sameTunnel), as a policy (samePolicyAsSent), or
// wholly (sameSpec). Pure; the diff, the records and the reconcile's short cut (edge-dataplane.ts unchangedSince)
// all compare through these.
import type { TunnelSpec } from './types.ts';
import { sameAttackSettings, type TunnelPolicy } from '../../common/tunnel-policy.ts';

/** Same tunnel including its policy and forwarding (specs are normalised: a default policy is no policy, forwarding on no field). */
export function sameSpec(a: TunnelSpec, b: TunnelSpec): boolean {
  return sameTunnel(a, b) && samePolicyAsSent(a.policy, b.policy) && (a.forwarding === false) === (b.forwarding === false);
}

/**
 * Two policies as jobs carry them (normalised by validation: common/tunnel-spec.ts normaliseSpec), field by
 * field, absent only equal to absent. No serialisation: a reconcile compares 10,000 of them, twice.
 */
export function samePolicyAsSent(a: TunnelPolicy | undefined, b: TunnelPolicy | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.protocol !== b.protocol || a.syn_proxy !== b.syn_proxy || a.source_pps_limit !== b.source_pps_limit || a.drop_fragments !== b.drop_fragments) return false;
  // max_flows is the tunnel's flow caps (another chain: docs/CONTRACTS.md "Dataplane"); alert_pps is only recorded.
  if (!sameAttackSettings(a, b)) return false;
  const [x, y] = [a.ports, b.ports];
  if (x === '*' || y === '*') return x === y;
  return x.length === y.length && x.every((r, i) => r[0] === y[i]![0] && r[1] === y[i]![1]);
}

/** Same link, addresses and mapping: a change of policy alone keeps the tunnel's connections (no conntrack flush). */
export function sameTunnel(a: TunnelSpec, b: TunnelSpec): boolean {
  return (
    a.id === b.id &&
    a.tunnel_name === b.tunnel_name &&
    a.protected_ip === b.protected_ip &&
    a.origin_ip === b.origin_ip &&
    a.edge_ip === b.edge_ip &&
    a.edge_inner === b.edge_inner &&
    a.origin_inner === b.origin_inner &&
    a.mtu === b.mtu &&
    a.gre_key === b.gre_key
  );
}
