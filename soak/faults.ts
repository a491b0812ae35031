// The faults the soak injects, one a minute (docs/SOAK.md "Faults"): a table of {name, inject, recover}.
// inject() does the damage and answers what it hit (for the report) and what recover() needs; `holdMs` is
// how long the fault lasts before recover() undoes what an operator or a supervisor would undo (restart the
// killed process, remove the drop rule). Faults the product must repair alone (a link deleted, the table
// flushed) have a recover() that does nothing: the time to recover is then the product's own.
// Adding a fault (a PostgreSQL failover, for one) is one more entry in FAULTS.
import type pg from 'pg';
import type { EdgeFaults, SoakEdge } from './edges.ts';
import type { SoakGateway } from './gateways.ts';
import type { Rng } from './random.ts';

export interface FaultContext {
  gateways: readonly SoakGateway[];
  edges: readonly SoakEdge[];
  /** The soak's own PostgreSQL cluster (null when the soak runs on a shared one it must not restart). */
  postgres: { restart(): Promise<void> } | null;
  db: pg.Pool;
  rng: Rng;
}

export interface Injected {
  /** What was hit, for the report. */
  target: string;
  /** recover()'s argument. */
  state?: unknown;
}

export interface Fault {
  name: string;
  /** Whether this soak's setup can take it (false: skipped in the rotation). */
  applies(ctx: FaultContext): boolean;
  inject(ctx: FaultContext): Promise<Injected>;
  /** How long the fault lasts before recover(). */
  holdMs: number;
  recover(ctx: FaultContext, injected: Injected): Promise<void>;
}

type Capable<K extends keyof EdgeFaults> = SoakEdge & Required<Pick<EdgeFaults, K>>;

function edgesWith<K extends keyof EdgeFaults>(ctx: FaultContext, ...caps: K[]): Capable<K>[] {
  return ctx.edges.filter((e): e is Capable<K> => caps.every((c) => typeof e[c] === 'function'));
}

function edgeById(ctx: FaultContext, nodeId: unknown): SoakEdge {
  const e = ctx.edges.find((x) => x.nodeId === nodeId);
  if (!e) throw new Error(`no edge ${String(nodeId)}`);
  return e;
}

export const FAULTS: readonly Fault[] = [
  {
    name: 'gateway-sigkill',
    applies: (ctx) => ctx.gateways.length > 1,
    async inject(ctx) {
      const gw = ctx.rng.pick(ctx.gateways);
      gw.kill();
      await gw.exited();
      return { target: gw.label, state: gw };
    },
    holdMs: 5_000,
    recover: async (_ctx, i) => (i.state as SoakGateway).restart(),
  },
  {
    name: 'agent-sigkill',
    applies: (ctx) => edgesWith(ctx, 'killAgent', 'startAgent').length > 0,
    async inject(ctx) {
      const e = ctx.rng.pick(edgesWith(ctx, 'killAgent', 'startAgent'));
      await e.killAgent();
      return { target: e.label, state: e.nodeId };
    },
    holdMs: 5_000,
    recover: async (ctx, i) => edgeById(ctx, i.state).startAgent!(),
  },
  {
    name: 'postgres-restart',
    applies: (ctx) => ctx.postgres !== null,
    async inject(ctx) {
      // pg_ctl restart -m fast: every connection of both gateways is cut; the server is back when it resolves.
      await ctx.postgres!.restart();
      return { target: 'the database cluster' };
    },
    holdMs: 0,
    recover: async () => {},
  },
  {
    name: 'edge-unreachable-40s',
    applies: (ctx) => edgesWith(ctx, 'cutSsh', 'restoreSsh').length > 0,
    async inject(ctx) {
      const e = ctx.rng.pick(edgesWith(ctx, 'cutSsh', 'restoreSsh'));
      e.cutSsh();
      return { target: e.label, state: e.nodeId };
    },
    holdMs: 40_000,
    recover: async (ctx, i) => edgeById(ctx, i.state).restoreSsh!(),
  },
  {
    name: 'tunnel-link-deleted',
    applies: (ctx) => edgesWith(ctx, 'deleteLink').length > 0,
    async inject(ctx) {
      const nodes = edgesWith(ctx, 'deleteLink');
      const ids = nodes.map((e) => e.nodeId);
      // A tunnel the database says is on its edge; any link of ours on some edge if none is settled now.
      const { rows } = await ctx.db.query<{ node_id: string; tunnel_name: string }>(
        `select node_id::text as node_id, tunnel_name from tunnel where status in ('provisioned', 'active') and node_id = any($1::uuid[])`,
        [ids],
      );
      const candidates = rows.length ? rows : nodes.flatMap((e) => (e.observe()?.links ?? []).map((l) => ({ node_id: e.nodeId, tunnel_name: l })));
      if (!candidates.length) return { target: 'none (no tunnel link on any edge)' };
      const pick = ctx.rng.pick(candidates);
      const edge = edgeById(ctx, pick.node_id);
      try {
        edge.deleteLink!(pick.tunnel_name);
      } catch (e) {
        // Deleted by the load meanwhile: the fault hit nothing.
        return { target: `none (${pick.tunnel_name} went away first: ${(e as Error).message.split('\n')[0]})` };
      }
      return { target: `${pick.tunnel_name} on ${edge.label}` };
    },
    holdMs: 0,
    recover: async () => {},
  },
  {
    name: 'agent-table-flushed',
    applies: (ctx) => edgesWith(ctx, 'flushTable').length > 0,
    async inject(ctx) {
      const e = ctx.rng.pick(edgesWith(ctx, 'flushTable'));
      e.flushTable();
      return { target: e.label };
    },
    holdMs: 0,
    recover: async () => {},
  },
];

/** The order the soak injects them in: the applicable faults shuffled by the seed, then round-robin. */
export function faultOrder(ctx: FaultContext, count: number): Fault[] {
  const list = ctx.rng.shuffle(FAULTS.filter((f) => f.applies(ctx)));
  if (!list.length) return [];
  return Array.from({ length: count }, (_, i) => list[i % list.length]!);
}
