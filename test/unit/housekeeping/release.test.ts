// When the agent gives memory back (agent/housekeeping/memory.ts ReleaseAfterOperations), over a stand-in
// for the process's RSS and release (a real release is a full collection: its effect on RSS is the kernel's).
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ReleaseAfterOperations, phases, type ReleaseIo } from '../../../agent/housekeeping/memory.ts';

const MB = 1024 * 1024;

/** RSS the test sets; a release brings it down to `restsAt`. */
function io(rssMb: number, restsAtMb: number) {
  const s = { rss: rssMb * MB, restsAt: restsAtMb * MB, releases: 0 };
  const port: ReleaseIo = {
    rss: () => s.rss,
    release: () => {
      s.releases++;
      s.rss = s.restsAt;
    },
  };
  return { s, port };
}

describe('ReleaseAfterOperations', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('releases right after a large operation, outside its time, and once more when the agent goes idle', async () => {
    const { s, port } = io(200, 150);
    const r = new ReleaseAfterOperations(port);
    r.operationFinished(true);
    expect(s.releases).toBe(0);
    await vi.advanceTimersToNextTimerAsync();
    expect(s.releases).toBe(1);
    await vi.advanceTimersByTimeAsync(2_000);
    expect(s.releases).toBe(2);
    r.stop();
  });

  it('releases again 2 s after a large operation even while small jobs keep coming, and measures growth from there', async () => {
    const { s, port } = io(200, 184); // right after the large operation, its objects are still reachable
    const r = new ReleaseAfterOperations(port);
    r.operationFinished(true);
    await vi.advanceTimersToNextTimerAsync();
    expect([s.releases, s.rss]).toEqual([1, 184 * MB]);
    s.restsAt = 113 * MB; // by now they are garbage
    for (let i = 0; i < 30; i++) {
      r.operationFinished(false); // a job every 100 ms: never idle
      await vi.advanceTimersByTimeAsync(100);
    }
    expect([s.releases, s.rss]).toEqual([2, 113 * MB]);
    // the resting level is now 113 MB: 16 MB more than that is growth again
    s.rss = 130 * MB;
    r.operationFinished(false);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.releases).toBe(3);
    r.stop();
  });

  it('does not release after every small job while resting RSS is high and unchanged', async () => {
    // At 10,000 tunnels the agent rests above the threshold: releasing after each job freed nothing.
    const { s, port } = io(130, 125);
    const r = new ReleaseAfterOperations(port);
    r.operationFinished(false); // first high reading: nothing released yet, so it counts as grown
    await vi.advanceTimersToNextTimerAsync();
    expect(s.releases).toBe(1);
    for (let i = 0; i < 20; i++) {
      s.rss += 0.3 * MB; // what a one-tunnel job leaves
      r.operationFinished(false);
      await vi.advanceTimersByTimeAsync(100); // back to back: never idle for 2 s
    }
    expect(s.releases).toBe(1);
    // once idle, the small jobs' garbage goes back too
    await vi.advanceTimersByTimeAsync(2_000);
    expect(s.releases).toBe(2);
    r.stop();
  });

  it('releases at once after a small operation that grew resident memory well past its resting level', async () => {
    const { s, port } = io(130, 125);
    const r = new ReleaseAfterOperations(port);
    r.operationFinished(false);
    await vi.advanceTimersToNextTimerAsync();
    expect(s.releases).toBe(1);
    s.rss = 150 * MB;
    r.operationFinished(false);
    await vi.advanceTimersToNextTimerAsync();
    expect(s.releases).toBe(2);
    r.stop();
  });

  it('below the threshold, releases only when idle, and never after stop()', async () => {
    const { s, port } = io(90, 85);
    const r = new ReleaseAfterOperations(port);
    r.operationFinished(false);
    await vi.advanceTimersByTimeAsync(1_999);
    expect(s.releases).toBe(0);
    r.operationFinished(false); // a new operation restarts the idle wait
    await vi.advanceTimersByTimeAsync(1_999);
    expect(s.releases).toBe(0);
    await vi.advanceTimersByTimeAsync(1);
    expect(s.releases).toBe(1);
    r.operationFinished(true);
    r.stop();
    await vi.advanceTimersByTimeAsync(5_000);
    expect(s.releases).toBe(1);
  });
});

describe('phases of an operation', () => {
  it('a large operation gives memory back between its phases (a last-resort collection); a large apply collects; small ones do nothing', () => {
    const calls: unknown[] = [];
    const g = globalThis as { gc?: unknown };
    const saved = g.gc;
    g.gc = (opts: unknown) => void calls.push(opts);
    try {
      phases('operation', 10_000).between();
      expect(calls).toEqual([{ type: 'major', execution: 'sync', flavor: 'last-resort' }]);
      calls.length = 0;
      phases('apply', 10_000).between();
      expect(calls).toEqual([{ type: 'major', execution: 'sync' }]);
      calls.length = 0;
      // A first apply's batches: released between them when there are several.
      phases('batches', 10).between();
      expect(calls).toEqual([{ type: 'major', execution: 'sync', flavor: 'last-resort' }]);
      calls.length = 0;
      phases('operation', 10).between();
      phases('apply', 10).between();
      phases('batches', 1).between();
      expect(calls).toEqual([]);
    } finally {
      g.gc = saved;
    }
  });
});
