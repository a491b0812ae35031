// Status by change end to end on the data (docs/CONTRACTS.md "Status by change"): the agent's real reporter
// (agent/health/status.ts) over a STAND-IN edge (counters and health in maps: no kernel, that is not what is under
// test) answers the gateway's real ingest (server/health/ingest.ts) against real PostgreSQL, with the cursor the
// gateway stored (cursorOf). After each fault the gateway must converge: every tunnel's traffic in the database
// equals what the edge counted since it was first seen, and its health equals the agent's. Faults: a lost answer,
// a gateway restart (a new ingest over the same database), an agent restart (a new run: counters read anew), two
// replicas storing answers out of order, a node that did not answer (health set unknown without the agent), and an
// agent from before (no `delta`: the full form as before). On both databases the gateway runs on: PostgreSQL and
// the embedded PGlite of `npm start` (their drivers differ under the SQL: row locks, upserts, how values come back).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { BOTH_DATABASES, type Backend } from '../helpers/both-databases.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { StatusReporter } from '../../agent/health/status.ts';
import type { TunnelHealth } from '../../agent/health/scheduler.ts';
import type { TunnelSpec } from '../../agent/dataplane/types.ts';
import { StatusIngest } from '../../server/health/ingest.ts';
import { TrafficStore } from '../../server/health/storage.ts';
import { tunnelSpec } from '../helpers/tunnel-spec.ts';

let gw: Backend;
let nodes = 0;
let user: SeededUser;

/** A query through the gateway's own database layer (`?` placeholders), so it runs on either database. */
const q = <T extends object = Record<string, unknown>>(text: string, params: unknown[] = []) => gw.db.query<T>(text, params);

/** A STAND-IN edge holding `n` of a fresh node's tunnels, and the real reporter over it. */
class Edge {
  specs: TunnelSpec[] = [];
  packets = new Map<string, bigint>();
  health = new Map<string, TunnelHealth>();
  /** Packets carried since the gateway first saw each tunnel (what its stored traffic must sum to). */
  carried = new Map<string, number>();
  reporter!: StatusReporter;
  private runs = 0;

  constructor(readonly nodeId: string) {}

  static async create(n: number): Promise<Edge> {
    const node = await seedNode(gw.db, `198.18.${10 + ++nodes}.0/27`);
    const edge = new Edge(node.node_id);
    for (let i = 0; i < n; i++) {
      const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
      expect(r.status).toBe(201);
      const id = r.body.tunnel.id as string;
      await q(`update tunnel set status = 'active', node_id = ? where id = ?`, [edge.nodeId, id]);
      const spec = tunnelSpec({ id, tunnel_name: `tg-d${i}` });
      edge.specs.push(spec);
      edge.packets.set(spec.tunnel_name, 1000n);
      edge.health.set(id, { health: 'up', failures: 0, checkedAt: Date.now() });
      edge.carried.set(id, 0);
    }
    edge.restartAgent();
    return edge;
  }

  /** A new run of the agent: a new epoch, counters read anew from the kernel's (here: kept) values. */
  restartAgent(): void {
    this.reporter = new StatusReporter({
      epoch: `run-${++this.runs}`,
      tunnels: () => this.specs,
      counters: async () => new Map([...this.packets].map(([name, p]) => [name, { packets: p, bytes: p * 10n }])),
      health: (id) => this.health.get(id) ?? { health: 'unknown', failures: 0 },
      version: '9.9.9',
      startedAt: 0,
    });
  }

  carry(i: number, packets: number): void {
    const s = this.specs[i]!;
    this.packets.set(s.tunnel_name, this.packets.get(s.tunnel_name)! + BigInt(packets));
    this.carried.set(s.id, this.carried.get(s.id)! + packets);
  }
}

let clock = Date.now() - 40 * 60_000;
const nextAt = () => new Date((clock += 30_000));

/** One round as the collector runs it: the stored cursor, the agent's answer to it, the ingest. */
async function round(edge: Edge, ingest: StatusIngest = gw.services.health.ingest) {
  const at = nextAt();
  const answer = await edge.reporter.status(await ingest.cursorOf(edge.nodeId, at));
  return { answer, outcome: await ingest.ingestStatus(edge.nodeId, answer, at) };
}

async function storedPackets(id: string): Promise<number> {
  const r = await q<{ n: number }>(
    `select coalesce(sum(p), 0)::int as n from (select packets_in as p from traffic.minute where tunnel_id = ?
       union all select pend_pi from traffic.seen where tunnel_id = ? and pend_t is not null) x`,
    [id, id],
  );
  return Number(r[0]!.n);
}

/** The gateway's view equals the edge's: traffic sums and health. */
async function expectConverged(edge: Edge): Promise<void> {
  for (const s of edge.specs) {
    expect(await storedPackets(s.id), `traffic of ${s.tunnel_name}`).toBe(edge.carried.get(s.id));
    const h = await q<{ health: string }>('select health from tunnel where id = ?', [s.id]);
    expect(h[0]!.health, `health of ${s.tunnel_name}`).toBe(edge.health.get(s.id)!.health);
  }
}

describe.each(BOTH_DATABASES)('status by change on %s', (_name, boot) => {
  beforeAll(async () => {
    gw = await boot();
    user = await seedUser(gw.db, { balanceUsd: '1000.00' });
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
  });

  it('reads and writes only the tunnels that changed; idle ones cost no row', async () => {
    const edge = await Edge.create(5);
    const first = await round(edge);
    expect(first.answer.delta).toMatchObject({ full: true, seq: 1 });
    expect(first.outcome).toMatchObject({ form: 'full', reported: 5 });
    const seenAt = async () =>
      (await q<{ id: string; ms: string }>(`select tunnel_id::text as id, (extract(epoch from seen_at) * 1000)::bigint::text as ms from traffic.seen where tunnel_id in (${edge.specs.map(() => '?').join(', ')})`, edge.specs.map((s) => s.id))).map((r) => ({ id: r.id, ms: Number(r.ms) }));
    const before = new Map((await seenAt()).map((r) => [r.id, r.ms]));
    edge.carry(1, 70);
    const second = await round(edge);
    expect(second.answer.tunnels.map((t) => t.id)).toEqual([edge.specs[1]!.id]);
    expect(second.outcome).toMatchObject({ form: 'delta', reported: 1, carried: 1 });
    for (const r of await seenAt()) {
      // Only the busy tunnel's row was written.
      if (r.id === edge.specs[1]!.id) expect(r.ms).toBeGreaterThan(before.get(r.id)!);
      else expect(r.ms).toBe(before.get(r.id));
    }
    edge.health.set(edge.specs[3]!.id, { health: 'down', failures: 3, checkedAt: Date.now() });
    expect((await round(edge)).outcome.healthChanged).toEqual([edge.specs[3]!.id]);
    await expectConverged(edge);
  });

  it('converges after a lost answer and after a gateway restart', async () => {
    const edge = await Edge.create(4);
    await round(edge);
    edge.carry(0, 11);
    edge.health.set(edge.specs[2]!.id, { health: 'down', failures: 3, checkedAt: Date.now() });
    // Lost: the agent answered, the gateway stored nothing (a timeout, a crash before the commit).
    const lost = await edge.reporter.status(await gw.services.health.ingest.cursorOf(edge.nodeId));
    expect(lost.tunnels).toHaveLength(2);
    edge.carry(1, 5);
    // A restarted gateway: a new ingest, nothing in memory, the cursor from the database.
    const restarted = new StatusIngest(gw.db, new TrafficStore(gw.db), gw.services.provisioning.events, gw.services.provisioning.bus);
    const again = await round(edge, restarted);
    expect(again.outcome.form).toBe('delta');
    expect(again.answer.tunnels.map((t) => t.id).sort()).toEqual([edge.specs[0]!.id, edge.specs[1]!.id, edge.specs[2]!.id].sort());
    await expectConverged(edge);
  });

  it('converges after an agent restart: a new run answers in full', async () => {
    const edge = await Edge.create(3);
    await round(edge);
    edge.carry(0, 9);
    await round(edge);
    edge.restartAgent();
    edge.carry(2, 4);
    const r = await round(edge);
    expect(r.answer.delta).toMatchObject({ full: true, epoch: 'run-2' });
    expect(r.outcome.form).toBe('full');
    edge.carry(2, 6);
    expect((await round(edge)).outcome.form).toBe('delta');
    await expectConverged(edge);
  });

  it('two replicas asking from the same cursor: the later answer stored first wins, the older one is dropped whole', async () => {
    const edge = await Edge.create(3);
    await round(edge);
    const ingest = gw.services.health.ingest;
    const cursor = await ingest.cursorOf(edge.nodeId);
    edge.carry(0, 3);
    const a = await edge.reporter.status(cursor); // replica A's answer
    edge.carry(0, 4);
    edge.carry(1, 2);
    const b = await edge.reporter.status(cursor); // replica B's, later
    const other = new StatusIngest(gw.db, new TrafficStore(gw.db), gw.services.provisioning.events, gw.services.provisioning.bus);
    expect((await other.ingestStatus(edge.nodeId, b, nextAt())).form).toBe('delta');
    // A's answer arrives late: storing it would take counters back (a false restart, traffic counted twice).
    expect((await ingest.ingestStatus(edge.nodeId, a, nextAt())).form).toBe('stale');
    await expectConverged(edge);
    expect((await round(edge)).outcome.form).toBe('delta');
    await expectConverged(edge);
  });

  it('a node that did not answer: its tunnels become unknown, and the next answer is full and gives their health back', async () => {
    const edge = await Edge.create(3);
    await round(edge);
    expect(await gw.services.health.ingest.markUnknown(edge.nodeId, nextAt())).toHaveLength(3);
    expect(await gw.services.health.ingest.cursorOf(edge.nodeId)).toBeNull();
    const r = await round(edge);
    expect(r.outcome.form).toBe('full');
    expect(r.outcome.healthChanged).toHaveLength(3);
    await expectConverged(edge);
  });

  it('a change list whose cursor the database no longer holds is dropped and the next round is full', async () => {
    const edge = await Edge.create(2);
    await round(edge);
    const cursor = await gw.services.health.ingest.cursorOf(edge.nodeId);
    await gw.services.health.ingest.markUnknown(edge.nodeId, nextAt()); // resets the cursor
    edge.carry(1, 8);
    const answer = await edge.reporter.status(cursor);
    expect((await gw.services.health.ingest.ingestStatus(edge.nodeId, answer, nextAt())).form).toBe('stale');
    expect((await round(edge)).outcome.form).toBe('full');
    edge.carry(1, 1);
    await round(edge);
    // The 8 packets carried while the change list was dropped are in: the full answer's counters hold them.
    await expectConverged(edge);
  });

  it('asks the full list again once the last full answer is older than the bound', async () => {
    const edge = await Edge.create(2);
    const ingest = new StatusIngest(gw.db, new TrafficStore(gw.db), gw.services.provisioning.events, gw.services.provisioning.bus, undefined, 60_000);
    const at = nextAt();
    await ingest.ingestStatus(edge.nodeId, await edge.reporter.status(null), at);
    expect(await ingest.cursorOf(edge.nodeId, new Date(at.getTime() + 59_000))).not.toBeNull();
    expect(await ingest.cursorOf(edge.nodeId, new Date(at.getTime() + 60_000))).toBeNull();
  });

  it('an agent from before answers in full without delta, and every round reads every tunnel as before', async () => {
    const edge = await Edge.create(3);
    const at = nextAt();
    const out = await gw.services.health.ingest.ingestStatus(edge.nodeId, await edge.reporter.status(), at);
    expect(out).toMatchObject({ form: 'full', reported: 3 });
    edge.specs = edge.specs.slice(1); // it no longer has one: unknown in the full form
    const gone = (await q<{ id: string }>('select id::text as id from tunnel where node_id = ?', [edge.nodeId])).map((r) => r.id).find((id) => !edge.specs.some((s) => s.id === id));
    const next = await gw.services.health.ingest.ingestStatus(edge.nodeId, await edge.reporter.status(), nextAt());
    expect(next.healthChanged).toEqual([gone]);
    expect(await gw.services.health.ingest.cursorOf(edge.nodeId)).toBeNull();
  });

  it('shows the check time of a tunnel left out as at least the answer\'s checked_floor', async () => {
    const edge = await Edge.create(2);
    const old = Date.now() - 120_000;
    for (const s of edge.specs) edge.health.set(s.id, { health: 'up', failures: 0, checkedAt: old });
    await round(edge);
    // Checked again, same health: left out of the answer, yet its check time moves with the floor.
    const later = Date.now() - 10_000;
    for (const s of edge.specs) edge.health.set(s.id, { health: 'up', failures: 0, checkedAt: later });
    const r = await round(edge);
    expect(r.answer.tunnels).toEqual([]);
    const shown = await call(gw.url, 'GET', `/api/dedicated/${edge.specs[0]!.id}`, { token: user.readKey });
    expect(shown.status).toBe(200);
    expect(Date.parse(shown.body.tunnel.health_checked_at as string)).toBe(later);
  });

  it('a gone tunnel becomes unknown', async () => {
    const edge = await Edge.create(3);
    await round(edge);
    const [removed] = edge.specs.splice(1, 1);
    const r = await round(edge);
    expect(r.answer.delta!.gone).toEqual([removed!.id]);
    expect(r.outcome.healthChanged).toEqual([removed!.id]);
    const h = await q<{ health: string }>('select health from tunnel where id = ?', [removed!.id]);
    expect(h[0]!.health).toBe('unknown');
  });
});
