// When two tunnel specs are the same (as a link, as a mapping, as a policy), and what a tunnel's link needs
// against the link the kernel has (linkStepsFor). Pure; the diff, the records and the reconcile's short cut
// (index.ts unchangedSince) all compare through these.
import type { LinkParams, LinkStep, ObservedLink } from './plan.ts';
import type { TunnelSpec } from './types.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';

export const GRE_TTL = 255;

export const ipOf = (cidr: string): string => cidr.split('/')[0]!;

function wantedParams(t: TunnelSpec): LinkParams {
  return { local: t.edge_ip, remote: t.origin_ip, ttl: GRE_TTL, key: t.gre_key };
}

function sameParams(a: LinkParams, b: LinkParams): boolean {
  return a.local === b.local && a.remote === b.remote && a.ttl === b.ttl && a.key === b.key;
}

/** Same tunnel including its policy (specs are normalised: a default policy is no policy). */
export function sameSpec(a: TunnelSpec, b: TunnelSpec): boolean {
  return sameTunnel(a, b) && samePolicyAsSent(a.policy, b.policy);
}

/**
 * Two policies as jobs carry them (normalised by validation: common/tunnel-spec.ts normaliseSpec), field by
 * field, absent only equal to absent. No serialisation: a reconcile compares 10,000 of them, twice.
 */
export function samePolicyAsSent(a: TunnelPolicy | undefined, b: TunnelPolicy | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.protocol !== b.protocol || a.syn_proxy !== b.syn_proxy || a.source_pps_limit !== b.source_pps_limit || a.drop_fragments !== b.drop_fragments) return false;
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

/**
 * What tunnel `t`'s link needs, as observed (undefined: missing): created (after the delete of a link of the
 * wrong kind or parameters), or its MTU, addresses and state fixed. Empty when the link is right. The diff's
 * link check, and the whole of a reconcile's check when the generation id proves the table unchanged (index.ts).
 */
export function linkStepsFor(t: TunnelSpec, link: ObservedLink | undefined): LinkStep[] {
  const name = t.tunnel_name;
  const steps: LinkStep[] = [];
  if (!link || !link.params || !sameParams(link.params, wantedParams(t))) {
    if (link) steps.push({ op: 'delete', name });
    steps.push({ op: 'create', name, spec: t }, { op: 'addr-add', name, cidr: t.edge_inner }, { op: 'up', name });
    return steps;
  }
  if (link.mtu !== t.mtu) steps.push({ op: 'mtu', name, mtu: t.mtu });
  for (const a of link.addresses) if (a !== t.edge_inner) steps.push({ op: 'addr-del', name, cidr: a });
  if (!link.addresses.includes(t.edge_inner)) steps.push({ op: 'addr-add', name, cidr: t.edge_inner });
  if (!link.up) steps.push({ op: 'up', name });
  return steps;
}
