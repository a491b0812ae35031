// The agent's `status` by change (agent/health/status.ts; docs/CONTRACTS.md "Status by change"): which tunnels an
// answer to `since` lists, and when it falls back to the full list. The counters and health are a stand-in edge
// (a map the test sets), since the point is the bookkeeping over answers, not the kernel.
import { describe, expect, it } from 'vitest';
import { GONE_KEPT, StatusReporter } from '../../../agent/health/status.ts';
import { checkStatusResult, type StatusResult } from '../../../common/tunnel-status.ts';
import type { TunnelHealth } from '../../../agent/health/scheduler.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { tunnelSpec } from '../../helpers/tunnel-spec.ts';

/** A STAND-IN edge: tunnels, their `in` counter and health, as the test sets them. */
class Edge {
  tunnels: TunnelSpec[] = [];
  packets = new Map<string, bigint>();
  health = new Map<string, TunnelHealth>();

  add(n: number): TunnelSpec[] {
    const made = Array.from({ length: n }, (_, i) => tunnelSpec({ tunnel_name: `tg-t${this.tunnels.length + i}` }));
    for (const t of made) {
      this.tunnels.push(t);
      this.packets.set(t.tunnel_name, 0n);
      this.health.set(t.id, { health: 'up', failures: 0, checkedAt: 1_000 });
    }
    return made;
  }

  carry(t: TunnelSpec, packets = 1n): void {
    this.packets.set(t.tunnel_name, this.packets.get(t.tunnel_name)! + packets);
  }

  reporter(epoch = 'run-1'): StatusReporter {
    return new StatusReporter({
      epoch,
      tunnels: () => this.tunnels,
      counters: async () => new Map([...this.packets].map(([name, p]) => [name, { packets: p, bytes: p * 100n }])),
      health: (id) => this.health.get(id) ?? { health: 'unknown', failures: 0 },
      version: '9.9.9',
      startedAt: 0,
      now: () => 60_000,
    });
  }
}

const ids = (r: StatusResult) => r.tunnels.map((t) => t.id).sort();
const sorted = (ts: TunnelSpec[]) => ts.map((t) => t.id).sort();

async function answer(r: StatusReporter, since?: { epoch: string; seq: number } | null): Promise<StatusResult> {
  const a = await r.status(since);
  expect(checkStatusResult(a)).toBeUndefined();
  return a;
}

describe('status by change', () => {
  it('without since answers the full form with no delta, as an agent from before it', async () => {
    const edge = new Edge();
    edge.add(3);
    const a = await answer(edge.reporter());
    expect(a.delta).toBeUndefined();
    expect(a.tunnels).toHaveLength(3);
  });

  it('answers since null in full with a cursor, then only the tunnels whose counters or health moved', async () => {
    const edge = new Edge();
    const ts = edge.add(10);
    const r = edge.reporter();
    const first = await answer(r, null);
    expect(first.delta).toMatchObject({ epoch: 'run-1', seq: 1, full: true, gone: [] });
    expect(first.tunnels).toHaveLength(10);
    // Nothing moved: nothing listed, yet the agent still counts all of them.
    const idle = await answer(r, { epoch: 'run-1', seq: 1 });
    expect(idle.delta).toMatchObject({ seq: 2, full: false, base: 1, gone: [] });
    expect(idle.tunnels).toEqual([]);
    expect(idle.agent.tunnels).toBe(10);
    edge.carry(ts[2]!);
    edge.health.set(ts[7]!.id, { health: 'down', failures: 3, checkedAt: 2_000 });
    const moved = await answer(r, { epoch: 'run-1', seq: 2 });
    expect(ids(moved)).toEqual(sorted([ts[2]!, ts[7]!]));
    // Only a newer check time (the check found the same health): no change.
    edge.health.set(ts[4]!.id, { health: 'up', failures: 0, checkedAt: 9_000 });
    expect((await answer(r, { epoch: 'run-1', seq: 3 })).tunnels).toEqual([]);
  });

  it('after a lost answer, changes since the older cursor include what the lost one carried', async () => {
    const edge = new Edge();
    const ts = edge.add(5);
    const r = edge.reporter();
    await answer(r, null); // seq 1, stored
    edge.carry(ts[0]!);
    const lost = await answer(r, { epoch: 'run-1', seq: 1 }); // seq 2, never stored by the gateway
    expect(ids(lost)).toEqual([ts[0]!.id]);
    edge.carry(ts[1]!);
    const again = await answer(r, { epoch: 'run-1', seq: 1 }); // seq 3 from the stored cursor
    expect(ids(again)).toEqual(sorted([ts[0]!, ts[1]!]));
    expect(again.delta).toMatchObject({ seq: 3, base: 1, full: false });
  });

  it('lists a health that went down and back up between the cursor and now', async () => {
    const edge = new Edge();
    const [t] = edge.add(1);
    const r = edge.reporter();
    await answer(r, null); // 1
    edge.health.set(t!.id, { health: 'down', failures: 3, checkedAt: 2_000 });
    await answer(r, { epoch: 'run-1', seq: 1 }); // 2, lost
    edge.health.set(t!.id, { health: 'up', failures: 0, checkedAt: 3_000 });
    const a = await answer(r, { epoch: 'run-1', seq: 1 });
    expect(ids(a)).toEqual([t!.id]);
    expect(a.tunnels[0]!.health).toBe('up');
  });

  it('names removed tunnels as gone, and a tunnel that comes back as a change', async () => {
    const edge = new Edge();
    const ts = edge.add(3);
    const r = edge.reporter();
    await answer(r, null);
    edge.tunnels = edge.tunnels.filter((t) => t !== ts[1]);
    const a = await answer(r, { epoch: 'run-1', seq: 1 });
    expect(a.delta!.gone).toEqual([ts[1]!.id]);
    expect(a.tunnels).toEqual([]);
    // The same since again (the answer was lost): still gone.
    expect((await answer(r, { epoch: 'run-1', seq: 1 })).delta!.gone).toEqual([ts[1]!.id]);
    // Since an answer that already said it: not again.
    expect((await answer(r, { epoch: 'run-1', seq: 3 })).delta!.gone).toEqual([]);
    edge.tunnels.push(ts[1]!);
    const back = await answer(r, { epoch: 'run-1', seq: 4 });
    expect(ids(back)).toEqual([ts[1]!.id]);
    expect(back.delta!.gone).toEqual([]);
  });

  it('answers in full for a cursor of another run (an agent restart), from the future, or older than what it remembers', async () => {
    const edge = new Edge();
    const ts = edge.add(4);
    const before = edge.reporter('run-1');
    await answer(before, null);
    const restarted = edge.reporter('run-2');
    const a = await answer(restarted, { epoch: 'run-1', seq: 1 });
    expect(a.delta).toMatchObject({ epoch: 'run-2', seq: 1, full: true });
    expect(a.tunnels).toHaveLength(4);
    expect((await answer(restarted, { epoch: 'run-2', seq: 7 })).delta!.full).toBe(true);
    // A gone tunnel forgotten after GONE_KEPT answers: a cursor from before that gets the full list.
    edge.tunnels = edge.tunnels.filter((t) => t !== ts[0]);
    await answer(restarted); // the answer (seq 3) that finds it gone
    for (let i = 0; i < GONE_KEPT; i++) await answer(restarted);
    const old = await answer(restarted, { epoch: 'run-2', seq: 2 });
    expect(old.delta!.full).toBe(true);
    expect(old.tunnels).toHaveLength(3);
    // A recent cursor still gets changes only.
    const seq = old.delta!.seq;
    expect((await answer(restarted, { epoch: 'run-2', seq })).delta!.full).toBe(false);
  });

  it('gives the oldest check time of all its tunnels as checked_floor, null while one is unchecked', async () => {
    const edge = new Edge();
    const ts = edge.add(3);
    edge.health.set(ts[0]!.id, { health: 'up', failures: 0, checkedAt: 5_000 });
    edge.health.set(ts[1]!.id, { health: 'down', failures: 3, checkedAt: 4_000 });
    edge.health.set(ts[2]!.id, { health: 'up', failures: 0, checkedAt: 6_000 });
    const r = edge.reporter();
    expect((await answer(r, null)).delta!.checked_floor).toBe(new Date(4_000).toISOString());
    edge.health.set(ts[2]!.id, { health: 'unknown', failures: 0 });
    expect((await answer(r, { epoch: 'run-1', seq: 1 })).delta!.checked_floor).toBeNull();
  });
});
