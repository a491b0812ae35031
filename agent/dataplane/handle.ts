// What the dataplane is told at its start (DataplaneOptions) and what the agent holds once it runs
// (DataplaneHandle: the Dataplane seam of types.ts plus restore, the counters and the records). The shapes
// only, apart from their one implementation (edge-dataplane.ts), for the callers that need just these.
import type { TunnelLinks } from '../../common/tunnel-links.ts';
import type { DropReason } from '../netlink/ruleset.ts';
import type { TestOnlyHang } from './kernel/context.ts';
import type { LinkKind } from './links.ts';
import type { VectorRead } from './kernel/vector.ts';
import type { Dataplane, ReconcileResult, TunnelSpec } from './types.ts';

export interface DataplaneOptions {
  /** This router's GRE underlay address (AGENT_EDGE_IP): every tunnel's edge_ip must be this. */
  edgeIp: string;
  /** The agent's nftables table (ip family), AGENT_NFT_TABLE. */
  nftTable: string;
  /** AGENT_STATE_DIR: the journal of links and tunnels the agent created lives here. */
  stateDir: string;
  /** Run in this network namespace (name under /run/netns, or a path); default: the agent's own. */
  netns?: string;
  /** Tunnel link names start with this (the MSS clamp matches it); default "tg-". */
  linkPrefix?: string;
  /**
   * 'gre' in production. 'veth-standin' creates a veth pair per tunnel instead, for kernels without GRE
   * (this development machine): tests and benchmarks only, never a real edge.
   */
  linkKind?: LinkKind;
  /** Probe timeout. */
  probeTimeoutMs?: number;
  /** AGENT_EDGE_PPS: the packet rate the edge is rated for, which sizes each tunnel's meter (dataplane/sizing.ts). */
  edgePps?: number;
  /**
   * The sources each tunnel's meter holds, instead of what sizing.ts makes of the memory and edgePps: for tests that
   * must overflow a meter with a bounded flood. Never set by the agent itself.
   */
  meterSources?: number;
  /** AGENT_PROTECTED_POOLS: sources from upstream in them cannot be genuine (the `bogons` set, with the martians). */
  protectedPools?: readonly string[];
  /**
   * Whether a commit of another program that touched the table (heard by commit-watch.ts) starts a reconcile of the
   * desired state at once, debounced (default true). Off for tests of what the watch itself decides.
   */
  healOnTouch?: boolean;
  /** Diagnostics (one line per event). */
  log?: (event: string, fields?: Record<string, unknown>) => void;
  /**
   * TEST SEAM ONLY: the first operation that reaches the step so named (kernel/context.ts step(): "links", "nftables commit",
   * "read back the kernel"...) hangs there, as if the kernel never answered. For the watchdog's tests
   * (test/integration/agent-watchdog.test.ts); the agent never sets it.
   */
  testOnlyHang?: TestOnlyHang;
}

export interface DataplaneHandle extends Dataplane {
  /** What start did to the table. */
  readonly table: 'created' | 'present' | 'rebuilt';
  /** The tunnels the agent has on record. */
  tunnels(): TunnelSpec[];
  /**
   * Packets of this tunnel dropped so far, per reason (docs/CONTRACTS.md "Dataplane"): one GET per reason of
   * the tunnel's own named counters, never a read of the whole table. A missing counter reads 0.
   */
  dropped(tunnel: Pick<TunnelSpec, 'tunnel_name'>): Promise<Record<DropReason, number>>;
  /** The last desired state the gateway gave this node (what restore() brings back). */
  desiredTunnels(): TunnelSpec[];
  /**
   * Every named counter of the table, in one netlink dump (the status op, asked for every node each round), by name. Not serialised
   * with changes: it reads, and a counter being replaced reads as missing or restarted.
   */
  counters(): Promise<Map<string, { packets: bigint; bytes: bigint }>>;
  /**
   * Named counters' packets, by name (missing ones absent), in one request of GETs rather than a dump of the
   * table: the health checks' look at the `out` counters of the tunnels due in a tick.
   */
  counterPackets(names: readonly string[]): Promise<Map<string, bigint>>;
  /**
   * Reconciles the kernel to the last desired state recorded in stateDir: after a restart nothing changes,
   * after a reboot (links and table gone) everything is rebuilt. The agent calls it at start, before it
   * accepts jobs (docs/CONTRACTS.md "Restart and reboot", "Dataplane").
   */
  restore(): Promise<ReconcileResult>;
  /**
   * Whether this kernel can make the tunnels' links (link-support.ts): asked anew each call, creating
   * nothing. Not serialised with changes: one netlink request that touches no link of the agent's.
   */
  tunnelLinks(): Promise<TunnelLinks>;
  /**
   * An attack's vector (kernel/vector.ts): the per-protocol and per-port counters of the watched protected IPs, and
   * the choice of which are watched (the attack monitor's). Not serialised with changes.
   */
  readonly vector: { read(): Promise<VectorRead>; watch(ips: ReadonlySet<string>, clean: boolean): Promise<void> };
  /** The connection table's and the meters' sizes, and whether the kernel's were set to them (the status op's `agent.capacity`). */
  capacity(): Capacity;
}

/** docs/CONTRACTS.md "Edge jobs", op status: `agent.capacity`. */
export interface Capacity {
  /** nf_conntrack_max as the agent sized it (and set it, when conntrack_applied). */
  conntrack_max: number;
  /** nf_conntrack_buckets as the agent sized it. */
  conntrack_buckets: number;
  /** Whether the agent set the kernel's two (only in the host's network namespace). */
  conntrack_applied: boolean;
  /** The sources each tunnel's per-source meter holds. */
  meter_sources: number;
}
