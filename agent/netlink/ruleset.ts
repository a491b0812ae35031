// The edge table's names (docs/CONTRACTS.md "Dataplane"): its sets, maps and named objects and what each holds,
// the chains made by value and the synproxy objects, the drop reasons, and the sources no genuine packet carries.
// Shared by what builds the table (ruleset-table.ts, the table built once; ruleset-chains.ts, the chains made by
// value) and by the dataplane that fills it and reads it back. Pure.
/** NFT_TABLE_F_DORMANT: the table's base chains are not registered with their hooks. */
export const NFT_TABLE_F_DORMANT = 1;

export const RULESET_DEFAULTS = { dnatMap: 'protected', counterMap: 'tunnel_counters', preroutingChain: 'prerouting' } as const;

/** Why a packet was dropped; each tunnel has one named counter per reason (docs/CONTRACTS.md "Dataplane"). */
export const DROP_REASONS = ['not_allowed', 'rate_limited', 'spoofed', 'invalid', 'fragment'] as const;
export type DropReason = (typeof DROP_REASONS)[number];

/**
 * The sets and maps of the isolation and the policy, every one keyed by protected IP P, or by tunnel link
 * name N for traffic coming out of a tunnel. Tunnels add and remove elements; the rules never change.
 */
export const POLICY_SETS = {
  /** N . O . P: replies from origin O through link N of connections DNAT-ed to P may leave the tunnel. */
  replies: 'replies',
  /** N . O: the agent's probe replies (to the edge itself) from origin O through link N. */
  origins: 'origins',
  /** P: fragments to P are dropped. */
  fragments: 'fragments',
  /** P: SYNs to P skip conntrack and meet the SYN proxy in forward. */
  synproxied: 'synproxied',
  /** P → synproxy object (one per MSS value in use, synproxyName). */
  synproxy: 'syn_proxy',
  /** P → jump to the tunnel's own meter chain (meterChainName), for a tunnel with a source_pps_limit. */
  rateLimits: 'rate_limits',
  /** P → jump to the flow-cap chain of its max_flows (flowsChainName): every tunnel. */
  flowLimits: 'flow_limits',
} as const;

/**
 * P → the tunnel's `spoofed` counter, for packets to P from upstream whose source cannot be genuine (the `bogons`
 * set). drop_spoofed is keyed by link name (from a tunnel); this one by P, as a packet from upstream names P.
 */
export const SPOOFED_IN_MAP = 'drop_spoofed_in';

/** Sources that no genuine packet to a protected IP carries from upstream (an interval set, a few prefixes). */
export const BOGONS_SET = 'bogons';

/**
 * An attack's vector (docs/CONTRACTS.md "Attacks"), metered only while the agent watches P: `watch` holds the P
 * of every tunnel whose inbound rate is above its threshold (agent/attacks/monitor.ts adds and removes them), and
 * every packet to a P in it (dropped or not) is counted per `P . l4proto` in `protos` and, for TCP and UDP,
 * per `P . destination port` in `ports`, each element with its own counter. A tunnel nobody watches pays one
 * lookup in a set that is almost always empty; the sets' elements are the monitor's to delete.
 */
export const VECTOR_SETS = { watch: 'vector_watch', protos: 'vector_protos', ports: 'vector_ports' } as const;
/**
 * Elements each vector set holds at most, over every watched tunnel: a flood to random ports fills `ports`, after
 * which a new port is not counted (the update adds nothing and the rule ends: the packet goes on unharmed), so the
 * ports a record names are the busiest of those seen first. `protos` holds at most 256 per P.
 */
export const VECTOR_SET_SIZE = 65_536;

/**
 * Martian sources (RFC 6890's special-purpose blocks that never appear as a source on the Internet): "this network",
 * the shared address space (RFC 6598, also the tunnels' inner pool), loopback, link-local, multicast and the
 * reserved block up to the limited broadcast. The documentation and benchmarking blocks are left out: tests and
 * labs use them as clients. Private blocks too: a private network may sit in front of an edge.
 */
export const MARTIAN_SOURCES: readonly string[] = ['0.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/3'];

/** The `bogons` prefixes of an agent: the martians, its protected pools (AGENT_PROTECTED_POOLS) and its own edge address. */
export function bogonSources(opts: { protectedPools?: readonly string[]; edgeIp?: string }): string[] {
  return [...MARTIAN_SOURCES, ...(opts.protectedPools ?? []), ...(opts.edgeIp ? [`${opts.edgeIp}/32`] : [])];
}

/**
 * The port allowlist, as exact hash lookups (the policy must cost little forwarding rate: an interval set of concatenations is the pipapo
 * backend, whose lookup cost grows with its element count, so with the number of tunnels). Each allowed range
 * of P is split into aligned blocks of 16^k ports (k = 4 .. 0: every port, 4096, 256, 16, 1), and a block of
 * 16^k ports is the element `P . proto . first port` of the set for that size (`P . proto` for every port).
 * A packet's port, masked to each block size in turn, is looked up in each of the five sets: at most five
 * hash lookups, whatever the number of tunnels. A range costs at most 2 x 15 elements per block size (typically a
 * few: 5000-10000 is 36).
 */
export const PORT_BLOCK_BITS = [16, 12, 8, 4, 0] as const;
/**
 * The order the allowlist looks the sets up in, now that every packet holding its ports is judged (`inbound`), not
 * only a connection's first: "every port" (the default) first, then single ports (what most port lists are: 22,
 * 80, 443), then ever wider blocks. A default tunnel costs one lookup a packet, a port named alone two.
 */
export const ALLOWLIST_ORDER: readonly PortBlockBits[] = [16, 0, 4, 8, 12];
export type PortBlockBits = (typeof PORT_BLOCK_BITS)[number];
/** The set of blocks of 2^bits ports: `allowed_all`, `allowed_4096`, `allowed_256`, `allowed_16`, `allowed_1`. */
export const allowedSet = (bits: PortBlockBits): string => (bits === 16 ? 'allowed_all' : `allowed_${1 << bits}`);
export const ALLOWED_SETS: readonly string[] = PORT_BLOCK_BITS.map(allowedSet);

/** The object map reaching a tunnel's drop counter for a reason: keyed by N for `spoofed`, by P otherwise. */
export const dropMap = (reason: DropReason): string => `drop_${reason}`;

/**
 * N → the tunnel's `out` counter (`<N>.out`): replies accepted out of link N toward clients (the status op's
 * packets_out and bytes_out, docs/CONTRACTS.md "Edge jobs"). Keyed by link name like drop_spoofed, because a
 * reply's destination is a client, not P.
 */
export const OUT_MAP = 'tunnel_out';

/**
 * A tunnel's per-source meter: its chain and its meter set, named by link and packet rate (a change of either is
 * another chain, created with the change and the old one deleted in the same batch).
 */
export const meterChainName = (link: string, pps: number): string => `ratelimit_${link}_${pps}`;
/** The flow caps of one max_flows value: its chain and its connection-count set (and `newflows_<max>`, its rate). */
export const flowsChainName = (maxFlows: number): string => `flows_${maxFlows}`;
/** The synproxy object for one MSS value. */
export const synproxyName = (mss: number): string => `synproxy_${mss}`;

/** The MSS of a synproxy object's name; undefined for any other name. */
export function synproxyMssOf(name: string): number | undefined {
  const m = /^synproxy_(\d+)$/.exec(name);
  return m ? Number(m[1]) : undefined;
}
