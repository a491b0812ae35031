// What a tunnel's link needs against the link the kernel has (linkStepsFor: created, or its MTU, addresses and
// state fixed), from the parameters a link of the tunnel must have (GRE: local, remote, ttl, key). Pure; the
// diff's link check, and the whole of the reconcile's short cut (edge-dataplane.ts unchangedSince).
import type { LinkParams, LinkStep, ObservedLink } from './plan.ts';
import type { TunnelSpec } from './types.ts';

export const GRE_TTL = 255;

export const ipOf = (cidr: string): string => cidr.split('/')[0]!;

function wantedParams(t: TunnelSpec): LinkParams {
  return { local: t.edge_ip, remote: t.origin_ip, ttl: GRE_TTL, key: t.gre_key };
}

function sameParams(a: LinkParams, b: LinkParams): boolean {
  return a.local === b.local && a.remote === b.remote && a.ttl === b.ttl && a.key === b.key;
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
