// The collector (docs/CONTRACTS.md "Health and traffic"): every EDGE_STATUS_SECONDS it
// asks each node the gateway may contact for op `status` and stores the answer (ingest.ts). It runs on
// the replicas that run the edge worker; each node is polled by one replica per round: under the node's
// tryLock (provisioning/locks.ts; a replica that finds it held skips the node) and only when no replica
// polled it within half an interval (traffic.node_poll). Nodes are polled a few at a time, so one that
// hangs until its timeout holds one slot, not the round.
//
// A node that does not answer (connection, timeout, refusal): its tunnels become 'unknown' and it is
// recorded unreachable (the /metrics gauge reads traffic.node_poll, so every replica shows the fleet). An
// agent that speaks job version 1 only (or refuses the op as unsupported_command: version 2 from before
// `status`) has no `status`: it is reachable, its tunnels stay 'unknown', and that is logged once per node
// for the life of this process.
import type { Database } from '../db/database.ts';
import type { Logger } from '../../common/log.ts';
import type { EdgeNode } from '../edge/connections.ts';
import { checkStuckReport, type StatusCursor, type StatusResult, type StuckReport } from '../../common/tunnel-status.ts';
import type { KeyedLocks } from '../provisioning/locks.ts';
import { AgentRefused, StatusUnsupported } from '../provisioning/worker.ts';
import type { StatusIngest } from './ingest.ts';
import type { TrafficStore } from './storage.ts';

export interface CollectorOptions {
  db: Database;
  ingest: StatusIngest;
  store: TrafficStore;
  locks: KeyedLocks;
  log: Logger;
  /** The nodes to poll this round (provisioning/edge-state.ts: contactable, with a pinned host key). */
  nodes: () => Promise<EdgeNode[]>;
  /**
   * Op `status` of one node (ProvisioningService.nodeStatus); `since` gives the stored cursor, asked only when the
   * agent answers by change (docs/CONTRACTS.md "Status by change").
   */
  status: (node: EdgeNode, since: () => Promise<StatusCursor | null>) => Promise<StatusResult>;
  intervalSeconds: number;
  /** Nodes polled at once by this replica. */
  concurrency: number;
}

export type NodePoll = 'answered' | 'v1_only' | 'unreachable' | 'skipped';

export interface RoundOutcome {
  nodes: Record<string, NodePoll>;
}

export class Collector {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<RoundOutcome> | null = null;
  private stopped = false;
  private readonly v1Logged = new Set<string>();

  constructor(private readonly o: CollectorOptions) {}

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      // A round still under way when the next is due is not doubled.
      this.running ??= this.round()
        .catch((e: unknown) => {
          this.o.log.warn('status round failed', { err: (e as Error).message });
          return { nodes: {} };
        })
        .finally(() => {
          this.running = null;
        });
    };
    tick();
    this.timer = setInterval(tick, this.o.intervalSeconds * 1000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running?.catch(() => {});
  }

  /** One round over every node (and the storage's upkeep); `force` polls even nodes polled recently. */
  async round(opts: { force?: boolean } = {}): Promise<RoundOutcome> {
    await this.o.locks.tryLock('traffic-maintenance', () => this.o.store.maintain());
    const nodes = await this.o.nodes();
    const outcome: RoundOutcome = { nodes: {} };
    let next = 0;
    const lane = async () => {
      while (next < nodes.length && !this.stopped) {
        const node = nodes[next++]!;
        const r = await this.o.locks.tryLock(`status:${node.id}`, () => this.pollNode(node, opts.force === true));
        outcome.nodes[node.id] = r.acquired ? r.value : 'skipped';
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, Math.min(this.o.concurrency, nodes.length)) }, lane));
    return outcome;
  }

  private async pollNode(node: EdgeNode, force: boolean): Promise<NodePoll> {
    if (!force) {
      const recent = await this.o.db.query('select 1 from traffic.node_poll where node_id = ? and polled_at > now() - make_interval(secs => ?)', [node.id, this.o.intervalSeconds / 2]);
      if (recent.length > 0) return 'skipped';
    }
    const at = new Date();
    let poll: NodePoll;
    let tunnels = 0;
    let stuck: StuckReport | null = null;
    try {
      const result = await this.o.status(node, () => this.o.ingest.cursorOf(node.id, at));
      await this.o.ingest.ingestStatus(node.id, result, at);
      // All it has: an answer by change lists only some.
      tunnels = result.agent.tunnels;
      poll = 'answered';
      // An operation the agent's watchdog gave up (docs/CONTRACTS.md "Agent configuration"): the node view shows it.
      if (result.agent.stuck && !checkStuckReport(result.agent.stuck)) {
        stuck = { op: result.agent.stuck.op, step: result.agent.stuck.step, since: result.agent.stuck.since };
        this.o.log.warn('edge agent reports a stuck operation', { node_id: node.id, ...stuck });
      }
    } catch (e) {
      // An agent that lists version 2 from before `status` existed refuses the op: reachable, no status.
      if (e instanceof StatusUnsupported || (e instanceof AgentRefused && e.code === 'unsupported_command')) {
        if (!this.v1Logged.has(node.id)) {
          this.v1Logged.add(node.id);
          this.o.log.warn('edge agent has no status op: its tunnels stay unknown until it is upgraded', { node_id: node.id, err: e.message });
        }
        poll = 'v1_only';
      } else {
        this.o.log.warn('edge status failed: its tunnels are unknown', { node_id: node.id, err: (e as Error).message });
        poll = 'unreachable';
      }
      // We do not know how its tunnels are: unknown, not down.
      await this.o.ingest.markUnknown(node.id, at);
    }
    await this.o.db.query(
      `insert into traffic.node_poll (node_id, polled_at, reachable, tunnels, stuck) values (?, ?, ?, ?, ?::jsonb)
       on conflict (node_id) do update set polled_at = excluded.polled_at, reachable = excluded.reachable, tunnels = excluded.tunnels, stuck = excluded.stuck`,
      [node.id, at.toISOString(), poll !== 'unreachable', tunnels, stuck === null ? null : JSON.stringify(stuck)],
    );
    return poll;
  }
}
