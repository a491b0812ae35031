// THE derivation of a tunnel's spec from its stored row and its node: the edge job's `tunnel` object
// (server/provisioning/edge-state.ts) and the origin script's values (queries.ts setup()) both come from
// here, so the two ends of one GRE link cannot be computed apart (docs/CONTRACTS.md "Edge jobs").
import { isDefaultPolicy } from '../../../common/tunnel-policy.ts';
import type { TunnelSpec } from '../../../common/tunnel-spec.ts';
import type { TunnelStatus } from '../../db/entities.ts';
import { innerSubnet, parseCidr } from '../ip.ts';
import { greMtu } from '../gre-keys.ts';
import { policyOf, settingsOf, type SettingsColumns } from './settings.ts';

/**
 * Statuses whose tunnel must exist on its edge: a node's desired set (provisioning/edge-state.ts) and where a
 * settings change is sent (update.ts). `failed` is left out: a reconcile clears its leftovers.
 */
export const ON_EDGE: readonly TunnelStatus[] = ['provisioning', 'provisioned', 'active'];

/**
 * Whether the edge forwards buyer traffic to the tunnel `t`'s origin (the job's `tunnel.forwarding`,
 * docs/CONTRACTS.md "Dataplane"): only once the tunnel is active, and only while the edge holds the origin that
 * activation probed. A new origin_ip bumps origin_revision past applied_revision, so the very spec that carries
 * it holds the DNAT back, before the edge re-points the link (and applying it then moves the tunnel back to
 * provisioned, provisioning/transitions.ts applied()); activation requires applied_revision >= origin_revision
 * (lifecycle.ts activate). Until then the edge carries only the agent's probe to the origin: nobody can aim a
 * protected IP at an address that never ran the origin script.
 */
export const FORWARDING_SQL = `(t.status = 'active' and t.origin_revision <= t.applied_revision)`;

/** The settings columns of `tunnel t` as SettingsColumns reads them: every query that feeds tunnelSpecOf selects these. */
export const SETTINGS_COLUMNS = 't.ports, t.protocol, t.syn_proxy, t.source_pps_limit, t.drop_fragments, t.max_flows, t.alert_pps';

/** The stored values a spec is made of: the tunnel's columns and its node's public_ip and inner_pool. */
export interface SpecSource extends SettingsColumns {
  id: string;
  tunnel_name: string;
  protected_ip: string;
  origin_ip: string;
  inner_index: number;
  /** bigint column read as text; null for tunnels from before per-tunnel keys. */
  gre_key: string | null;
  /** The node's public_ip. */
  edge_ip: string;
  inner_pool: string;
}

/** Throws IpError when the stored inner pool or index cannot give an inner subnet. */
export function tunnelSpecOf(r: SpecSource): TunnelSpec {
  const inner = innerSubnet(parseCidr(r.inner_pool), r.inner_index);
  const greKey = r.gre_key === null ? null : Number(r.gre_key);
  const spec: TunnelSpec = {
    id: r.id,
    tunnel_name: r.tunnel_name,
    protected_ip: r.protected_ip,
    origin_ip: r.origin_ip,
    edge_ip: r.edge_ip,
    edge_inner: inner.edgeInner,
    origin_inner: inner.originInner,
    // The key's 4 header bytes come out of the MTU, on the edge and on the origin alike.
    mtu: greMtu(greKey),
  };
  // The job contract has gre_key optional, never null.
  if (greKey !== null) spec.gre_key = greKey;
  // The wire policy (docs/CONTRACTS.md "Tunnel settings"), left out when it is the default: a tunnel
  // without one gets the default on the edge, and such a spec is the same as before settings existed.
  const policy = policyOf(settingsOf(r));
  if (!isDefaultPolicy(policy)) spec.policy = policy;
  return spec;
}
