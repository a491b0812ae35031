// The edges the soak drives, behind one interface: the seam where a fleet simulator's edges can join the
// real ones. An edge says what its kernel holds (or null when it has no kernel to read: a simulated edge,
// whose dataplane is a stand-in) and which faults it can take; the fault table (faults.ts) picks only among
// edges that offer the capability it needs, and the edge-state invariant (invariants.ts) reads only edges
// that answer observe().
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { standinPeerName } from '../agent/dataplane/index.ts';
import { DNAT_MAP } from '../agent/dataplane/kernel/context.ts';
import { TestEdge } from '../test/helpers/edge.ts';

/** The agent's nftables table (agent/netlink/ruleset.ts): family and name, as `nft` takes them. */
export const AGENT_TABLE = { family: 'ip', name: 'tunnelgate' } as const;
const COUNTER_MAP = 'tunnel_counters';

/** What one edge's kernel holds, as the edge-state invariant compares it with the database. */
export interface EdgeObservation {
  /** Tunnel links (the stand-in's peers left out). */
  links: string[];
  /** Protected IPs in the agent's per-tunnel counter map: one per tunnel on the edge. */
  counterKeys: string[];
  /** Protected IPs in the DNAT map: one per active tunnel. */
  dnatKeys: string[];
  /** Rules in the agent's table: 0 after someone flushed it. */
  rules: number;
}

/** The faults an edge can take; each is optional (a simulated edge may offer only some). */
export interface EdgeFaults {
  /** SIGKILL of the agent process. */
  killAgent?(): Promise<void>;
  startAgent?(): Promise<void>;
  /** Drops every packet to and from the agent's SSH port (the gateway's connections stall, new ones time out). */
  cutSsh?(): void;
  restoreSsh?(): void;
  /** `ip link del` of one of its tunnel links. */
  deleteLink?(name: string): void;
  /** `nft flush table` of the agent's table. */
  flushTable?(): void;
}

export interface SoakEdge extends EdgeFaults {
  readonly nodeId: string;
  /** For the report and log lines. */
  readonly label: string;
  /** The kernel's state; null when this edge has no kernel to read. */
  observe(): EdgeObservation | null;
  close(): Promise<void>;
}

/** nft's JSON listing of one map's keys. */
function mapKeys(run: (cmd: string, ...args: string[]) => string, map: string): string[] {
  const out = JSON.parse(run('nft', '-j', 'list', 'map', AGENT_TABLE.family, AGENT_TABLE.name, map)) as { nftables: { map?: { elem?: unknown[] } }[] };
  const keys: string[] = [];
  for (const o of out.nftables) {
    for (const e of o.map?.elem ?? []) {
      const k = Array.isArray(e) ? e[0] : (e as { elem?: { val?: unknown } }).elem?.val;
      keys.push(typeof k === 'string' ? k : JSON.stringify(k));
    }
  }
  return keys;
}

/**
 * A real agent process with its dataplane in a network namespace of its own (test/helpers/edge.ts TestEdge,
 * veth stand-in for GRE since this kernel has none). Its SSH port is on the host's loopback (where the
 * helper's agent listens), so "unreachable" is a table of the soak's own in the host's ruleset that drops
 * that one port both ways; its name is random and it is deleted on recovery and at close.
 */
export class RealEdge implements SoakEdge {
  private readonly cutTable = `tg_soak_cut_${randomBytes(4).toString('hex')}`;
  private cut = false;

  constructor(readonly edge: TestEdge) {}

  get nodeId(): string {
    return this.edge.nodeId;
  }

  get label(): string {
    return `edge ${this.edge.netns.name}`;
  }

  observe(): EdgeObservation {
    const run = (cmd: string, ...args: string[]) => this.edge.netns.run(cmd, ...args);
    const all = this.edge.links();
    const peers = new Set(all.map((n) => standinPeerName(n)));
    const links = all.filter((n) => !peers.has(n));
    let rules = 0;
    let counterKeys: string[] = [];
    let dnatKeys: string[] = [];
    try {
      const table = JSON.parse(run('nft', '-j', 'list', 'table', AGENT_TABLE.family, AGENT_TABLE.name)) as { nftables: Record<string, unknown>[] };
      rules = table.nftables.filter((o) => 'rule' in o).length;
      counterKeys = mapKeys(run, COUNTER_MAP);
      dnatKeys = mapKeys(run, DNAT_MAP);
    } catch {
      // No table at all (an agent that never started, or one deleted by hand): nothing of it holds.
    }
    return { links, counterKeys, dnatKeys, rules };
  }

  killAgent(): Promise<void> {
    return this.edge.kill('SIGKILL');
  }

  startAgent(): Promise<void> {
    return this.edge.start();
  }

  cutSsh(): void {
    const port = this.edge.port;
    const script = [
      `add table inet ${this.cutTable}`,
      // Before the usual filter priority, on the loopback path both ways: the gateway's packets to the agent and the answers.
      `add chain inet ${this.cutTable} input { type filter hook input priority -10; policy accept; }`,
      `add rule inet ${this.cutTable} input tcp dport ${port} drop`,
      `add rule inet ${this.cutTable} input tcp sport ${port} drop`,
    ].join('\n');
    execFileSync('nft', ['-f', '-'], { input: `${script}\n`, stdio: ['pipe', 'pipe', 'pipe'] });
    this.cut = true;
  }

  restoreSsh(): void {
    if (!this.cut) return;
    try {
      execFileSync('nft', ['delete', 'table', 'inet', this.cutTable], { stdio: ['ignore', 'pipe', 'pipe'] });
    } catch {
      // already gone
    }
    this.cut = false;
  }

  deleteLink(name: string): void {
    this.edge.netns.run('ip', 'link', 'del', name);
  }

  flushTable(): void {
    this.edge.netns.run('nft', 'flush', 'table', AGENT_TABLE.family, AGENT_TABLE.name);
  }

  async close(): Promise<void> {
    this.restoreSsh();
    await this.edge.close();
  }
}
