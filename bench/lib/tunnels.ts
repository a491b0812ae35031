// The benchmarks' synthetic tunnels: tunnel i (1-based) has a unique name, protected IP (10.0.0.0/8),
// origin and /30 inner subnet (100.64.0.0/10), all on one edge. Shared by bench:agent and bench:edge.
import type { TunnelSpec } from '../../agent/dataplane/index.ts';
import type { TunnelPolicy } from '../../common/tunnel-policy.ts';

export const BENCH_EDGE_IP = '192.0.2.2';

/**
 * The benchmarks' policy (every tunnel carries one in production): each check on the per-packet path in use,
 * none of them refusing a flood. The 5000-10000 range is 36 port blocks per protocol (docs/CONTRACTS.md
 * "Dataplane"), ~81 elements per tunnel with the isolation's: a heavy policy, for the apply and memory figures.
 */
export const BENCH_POLICY: TunnelPolicy = {
  ports: [[22, 22], [80, 80], [443, 443], [5000, 10000]],
  protocol: 'both',
  syn_proxy: true,
  // Above what one generator core sends, so the meter is updated on every packet but never drops.
  source_pps_limit: 1_000_000,
  drop_fragments: true,
};

export function benchTunnel(i: number): TunnelSpec {
  const base = 4 * i;
  const inner = (off: number): string => `100.${64 + (base >> 16)}.${(base >> 8) & 255}.${(base & 255) + off}/30`;
  return {
    id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    tunnel_name: `tg-b${i}`,
    protected_ip: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`,
    origin_ip: `198.18.${(i >> 8) & 255}.${i & 255}`,
    edge_ip: BENCH_EDGE_IP,
    edge_inner: inner(1),
    origin_inner: inner(2),
    mtu: 1476,
  };
}
