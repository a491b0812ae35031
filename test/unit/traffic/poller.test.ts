// The gateway's live traffic pollers (server/traffic-live/poller.ts) against a stand-in for the agent's `traffic`
// op (a function answering from a per-second table the test fills; the real agent is in
// test/integration/traffic-live-edge.test.ts): backfill first, then only new seconds, one job per tick for every
// watched tunnel of a node, and return() stopping the node's poller at once.
import { describe, expect, it } from 'vitest';
import { BACKFILL_IDS_PER_JOB, LiveTraffic, type LiveEvent } from '../../../server/traffic-live/poller.ts';
import type { LivePoint, TrafficBody, TrafficResult } from '../../../common/traffic-live.ts';
import type { EdgeNode } from '../../../server/edge/connections.ts';
import { until } from '../../helpers/wait.ts';

const NODE: EdgeNode = { id: '11111111-1111-4111-8111-111111111111', host: '127.0.0.1', port: 1, hostKeyFingerprint: 'SHA256:x' };
const idOf = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const S0 = 1_900_000_000;

/** The stand-in agent: points from S0 to `newest` for every tunnel, one packet per second; records each job. */
class StandinAgent {
  newest = S0 + 10;
  readonly jobs: TrafficBody[] = [];
  fetch = async (_node: EdgeNode, body: TrafficBody): Promise<TrafficResult> => {
    this.jobs.push(body);
    const since = body.since ? Date.parse(body.since) / 1000 : this.newest - 300;
    const points: LivePoint[] = [];
    for (let s = Math.max(since + 1, this.newest - 299, S0); s <= this.newest; s++) points.push({ t: new Date(s * 1000).toISOString(), pps_in: 1, bps_in: 8, pps_out: 0, bps_out: 0, dropped: {} });
    return { window_s: 300, tunnels: body.ids.map((id) => ({ id, points })) };
  };
}

async function take(it: AsyncIterator<LiveEvent>, n: number): Promise<LiveEvent[]> {
  const out: LiveEvent[] = [];
  while (out.length < n) {
    const r = await it.next();
    if (r.done) break;
    out.push(r.value);
  }
  return out;
}

describe('LiveTraffic', () => {
  it('sends the backfill first, then only the seconds after it, each second once', async () => {
    const agent = new StandinAgent();
    const live = new LiveTraffic({ fetch: agent.fetch, log: { warn: () => {}, info: () => {} }, intervalMs: 5 });
    const w = live.watch(NODE, idOf(1).toUpperCase());
    const [first] = await take(w, 1);
    expect(first).toMatchObject({ tunnelId: idOf(1), backfill: true });
    expect(first!.points).toHaveLength(11);
    agent.newest += 2;
    const [next] = await take(w, 1);
    expect(next).toMatchObject({ backfill: false });
    expect(next!.points.map((p) => Date.parse(p.t) / 1000)).toEqual([S0 + 11, S0 + 12]);
    // The steady jobs ask from the newest second delivered: first S0 + 10, then S0 + 12.
    expect(agent.jobs.filter((j) => j.since === undefined)).toHaveLength(1);
    expect(agent.jobs).toContainEqual({ ids: [idOf(1)], since: new Date((S0 + 10) * 1000).toISOString() });
    await until('a job from the newest second delivered', () => agent.jobs.some((j) => j.since === new Date((S0 + 12) * 1000).toISOString()) || null, 10_000);
    await w.return();
  });

  it('asks once per tick for every watched tunnel of a node, backfills new tunnels in small jobs, and stops as the last watcher leaves', async () => {
    const agent = new StandinAgent();
    const live = new LiveTraffic({ fetch: agent.fetch, log: { warn: () => {}, info: () => {} }, intervalMs: 5 });
    const watches = Array.from({ length: BACKFILL_IDS_PER_JOB + 2 }, (_, i) => live.watch(NODE, idOf(i)));
    const twice = live.watch(NODE, idOf(0));
    const firsts = await Promise.all([...watches, twice].map((w) => take(w, 1)));
    expect(firsts.every(([e]) => e!.backfill && e!.points.length === 11)).toBe(true);
    // The backfill of 12 tunnels took two jobs without since; the next tick one job for all of them.
    const backfills = agent.jobs.filter((j) => j.since === undefined);
    expect(backfills.map((j) => j.ids.length)).toEqual([BACKFILL_IDS_PER_JOB, 2]);
    await until('a steady job for all tunnels', () => agent.jobs.some((j) => j.since !== undefined && j.ids.length === watches.length) || null, 10_000);
    expect(live.polling().has(NODE.id)).toBe(true);
    for (const w of [...watches, twice]) await w.return();
    expect(live.polling().size).toBe(0);
    // Stopped at once: at most the one job that was in flight, and nothing after it.
    const sent = agent.jobs.length;
    const third = live.watch({ ...NODE, id: '22222222-2222-4222-8222-222222222222' }, idOf(99));
    await take(third, 1);
    await third.return();
    expect(agent.jobs.filter((j) => !j.ids.includes(idOf(99))).length).toBeLessThanOrEqual(sent + 1);
  });

  it('a watcher waiting for a point is ended by return() at once, and an agent without the feature ends its subscribers with the error', async () => {
    const live = new LiveTraffic({ fetch: () => new Promise(() => {}), log: { warn: () => {}, info: () => {} }, intervalMs: 5 });
    const w = live.watch(NODE, idOf(1));
    const pending = w.next();
    await w.return();
    expect(await pending).toEqual({ done: true, value: undefined });
    expect(live.polling().size).toBe(0);

    class Unsupported extends Error {}
    const refusing = new LiveTraffic({
      fetch: async () => {
        throw new Unsupported('no feature');
      },
      isFinal: (e) => e instanceof Unsupported,
      finalError: () => new Error('edge_unavailable'),
      log: { warn: () => {}, info: () => {} },
      intervalMs: 5,
    });
    const r = refusing.watch(NODE, idOf(1));
    await expect(r.next()).rejects.toThrow('edge_unavailable');
    expect(refusing.polling().size).toBe(0);

    // A subscriber that arrives after the final answer but before the old ones drained gets a feed of its own
    // (asked again, answered again), never the dead feed's silence.
    let asked = 0;
    const gate = new LiveTraffic({
      fetch: async () => {
        asked++;
        throw new Unsupported('no feature');
      },
      isFinal: (e) => e instanceof Unsupported,
      finalError: () => new Error('edge_unavailable'),
      log: { warn: () => {}, info: () => {} },
      intervalMs: 5,
    });
    const first = gate.watch(NODE, idOf(1));
    const second = gate.watch(NODE, idOf(1));
    await expect(first.next()).rejects.toThrow('edge_unavailable');
    expect(asked).toBe(1);
    // `second` has not read its error yet, so the dead feed still has a watcher when `late` comes.
    const late = gate.watch(NODE, idOf(2));
    await expect(late.next()).rejects.toThrow('edge_unavailable');
    expect(asked).toBe(2);
    await expect(second.next()).rejects.toThrow('edge_unavailable');
  });
});
