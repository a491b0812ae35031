import { describe, expect, it } from 'vitest';
import { SerialQueue } from '../../../agent/housekeeping/serial-queue.ts';

/** A task the test finishes by hand, so overlap is observed, not timed. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  return { open, opened };
}

describe('SerialQueue', () => {
  it('runs one task at a time, in arrival order, and a failure does not stop the queue', async () => {
    const q = new SerialQueue();
    const events: string[] = [];
    const gates = [gate(), gate(), gate()];
    const task = (i: number) => async () => {
      events.push(`start ${i}`);
      await gates[i]!.opened;
      events.push(`end ${i}`);
      if (i === 1) throw new Error('task 1 failed');
      return i;
    };
    const runs = [q.run(task(0)), q.run(task(1)), q.run(task(2))];
    await Promise.resolve();
    expect(events).toEqual(['start 0']);
    gates[2]!.open(); // finishing a later task early changes nothing: it has not started
    gates[1]!.open();
    gates[0]!.open();
    const results = await Promise.allSettled(runs);
    expect(events).toEqual(['start 0', 'end 0', 'start 1', 'end 1', 'start 2', 'end 2']);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
  });

  it('drained() waits for everything queued so far', async () => {
    const q = new SerialQueue();
    const g = gate();
    let done = false;
    void q.run(async () => {
      await g.opened;
      done = true;
    });
    const drained = q.drained().then(() => done);
    g.open();
    expect(await drained).toBe(true);
  });
});
