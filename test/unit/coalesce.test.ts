// server/db/coalesce.ts: calls made while a batch is in flight leave together as the next batch, each
// gets its own result, and a failed batch fails each of its calls.
import { describe, expect, it } from 'vitest';
import { Coalescer } from '../../server/db/coalesce.ts';

/** A run function whose batches finish only when the test says so. */
function gated() {
  const batches: number[][] = [];
  const gates: Array<() => void> = [];
  const run = (items: number[]) => {
    batches.push(items);
    return new Promise<number[]>((resolve) => gates.push(() => resolve(items.map((i) => i * 10))));
  };
  return { batches, run, open: (i: number) => gates[i]!() };
}

describe('Coalescer', () => {
  it('sends a lone call at once and batches the calls made while it is in flight', async () => {
    const g = gated();
    const c = new Coalescer(g.run, 1);
    const first = c.call(1);
    expect(g.batches).toEqual([[1]]);
    const rest = [c.call(2), c.call(3), c.call(4)];
    expect(g.batches).toHaveLength(1);
    g.open(0);
    expect(await first).toBe(10);
    await new Promise((r) => setTimeout(r, 0));
    expect(g.batches).toEqual([[1], [2, 3, 4]]);
    g.open(1);
    expect(await Promise.all(rest)).toEqual([20, 30, 40]);
  });

  it('keeps up to maxInFlight batches in flight and caps a batch at maxBatch', async () => {
    const g = gated();
    const c = new Coalescer(g.run, 2, 2);
    const all = [1, 2, 3, 4, 5].map((i) => c.call(i));
    expect(g.batches).toEqual([[1], [2]]);
    g.open(0);
    g.open(1);
    await new Promise((r) => setTimeout(r, 0));
    expect(g.batches).toEqual([[1], [2], [3, 4], [5]]);
    g.open(2);
    g.open(3);
    expect(await Promise.all(all)).toEqual([10, 20, 30, 40, 50]);
  });

  it('fails every call of a failed batch, and of a batch answered with the wrong number of results', async () => {
    const boom = new Coalescer<number, number>(async () => {
      throw new Error('boom');
    });
    await expect(Promise.all([boom.call(1), boom.call(2), boom.call(3)])).rejects.toThrow('boom');
    // One in flight: 1 leaves alone (and is answered right), 2 and 3 together get one result.
    const short = new Coalescer<number, number>(async () => [1], 1);
    const r = await Promise.allSettled([short.call(1), short.call(2), short.call(3)]);
    expect(r.map((x) => x.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
  });
});
