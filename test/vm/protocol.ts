// What the host's test and the guest's control server (test/vm/guest/control.ts) say to each other,
// as JSON over HTTP through a port QEMU forwards from the host's loopback into the guest.
import type { TunnelRef, TunnelSpec } from '../../agent/dataplane/types.ts';

/** The lab's fixed addresses (test/vm/guest/start.sh wires them). */
export const LAB = {
  client: '198.51.100.10',
  /** The edge's underlay address: every tunnel's edge_ip, the agent's AGENT_EDGE_IP. */
  edge: '192.0.2.2',
  /** The origin's own (hidden) address: every tunnel's origin_ip. */
  origin: '192.0.2.6',
  /** Routed to the edge by the router: protected IPs come from here. */
  protectedRange: '203.0.113.0/24',
  /** The edge's address on QEMU's user network; the host's forwarded ports arrive here. */
  edgeMgmt: '10.0.2.15',
  controlPort: 7070,
  agentPort: 52222,
  /** A second edge router (tunnels to one origin across edges), with its own agent. */
  edge2: '192.0.2.10',
  /** Routed to edge2 by the router (more specific than protectedRange). */
  protectedRange2: '203.0.113.64/26',
  /**
   * edge2 has no QEMU network of its own: the host's third forwarded port arrives in the edge namespace
   * here, and a relay (socat, started by the test) carries it to edge2's agent on 52222.
   */
  agent2RelayPort: 52223,
} as const;

export type Netns = 'client' | 'router' | 'edge' | 'edge2' | 'origin';

export interface ExecRequest {
  argv: string[];
  /** Run inside this namespace (`ip netns exec`). */
  ns?: Netns;
  input?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
}
export interface ExecResult {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  ms: number;
}

export interface SpawnRequest {
  /** The handle later requests use. */
  name: string;
  argv: string[];
  ns?: Netns;
  env?: Record<string, string>;
  /** Resolve once the output contains this text (otherwise at once). */
  readyText?: string;
  readyTimeoutMs?: number;
}
export interface ProcessOutput {
  running: boolean;
  code: number | null;
  output: string;
}

export type DataplaneRequest =
  /** healOnTouch: DataplaneOptions.healOnTouch (off for tests that delete a rule and show what it stopped now passes). */
  | { op: 'open'; edgeIp: string; nftTable: string; stateDir: string; healOnTouch?: boolean }
  | { op: 'apply'; tunnel: TunnelSpec }
  | { op: 'remove'; tunnel: TunnelRef }
  | { op: 'reconcile'; tunnels: TunnelSpec[] }
  | { op: 'probe'; tunnel: TunnelSpec }
  /** The tunnel's drop counters per reason (DataplaneHandle.dropped; docs/CONTRACTS.md "Dataplane"). */
  | { op: 'dropped'; tunnel: Pick<TunnelSpec, 'tunnel_name'> }
  /** What open did to the table ('created', 'present' or 'rebuilt'): a reopen after tampering rebuilds it. */
  | { op: 'table' }
  | { op: 'close' };
