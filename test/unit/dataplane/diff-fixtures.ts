// The diff's unit tests' world (diff.test.ts, diff-policy.test.ts): tunnels numbered 1, 2, ..., the link and
// the kernel view that have exactly them, and the records that own them. No kernel, no root.
import type { KernelView, ObservedLink } from '../../../agent/dataplane/plan.ts';
import type { OwnedTunnel } from '../../../agent/dataplane/records.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { sharedNeeds, tunnelCounterNames } from '../../../agent/dataplane/policy.ts';

export const t = (i: number, over: Partial<TunnelSpec> = {}): TunnelSpec => ({
  id: `id${i}`,
  tunnel_name: `tg-${i}`,
  protected_ip: `203.0.113.${i}`,
  origin_ip: `198.18.0.${i}`,
  edge_ip: '192.0.2.2',
  edge_inner: `100.64.0.${4 * i + 1}/30`,
  origin_inner: `100.64.0.${4 * i + 2}/30`,
  mtu: 1476,
  ...over,
});

export function linkOf(s: TunnelSpec, index: number, over: Partial<ObservedLink> = {}): ObservedLink {
  return { name: s.tunnel_name, index, up: true, mtu: s.mtu, params: { local: s.edge_ip, remote: s.origin_ip, ttl: 255, key: s.gre_key }, addresses: [s.edge_inner], ...over };
}

/** A kernel that has exactly these tunnels. */
export function viewOf(specs: TunnelSpec[]): KernelView {
  return {
    links: new Map(specs.map((s, i) => [s.tunnel_name, linkOf(s, 10 + i)])),
    dnat: new Map(specs.map((s) => [s.protected_ip, s.origin_inner.split('/')[0]!])),
    counterMap: new Map(specs.map((s) => [s.protected_ip, s.tunnel_name])),
    counters: new Set(specs.flatMap(tunnelCounterNames)),
    synproxies: new Set(),
    // Every tunnel's flow caps (and a meter with a per-source limit) are chains made by value the kernel has.
    chains: new Set(specs.flatMap((s) => sharedNeeds(s).chains)),
  };
}
export const ownedOf = (specs: TunnelSpec[]): Map<string, OwnedTunnel> => new Map(specs.map((s) => [s.id, { spec: s }]));
