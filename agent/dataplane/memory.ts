// Giving memory back after a large operation. Reading and changing 10,000 tunnels grows V8's heap to a
// peak several times the ~15 MB it holds afterwards, and V8 keeps the pages it freed pooled and resident;
// glibc keeps freed native memory (reply datagrams) in its arenas. A last-resort collection (V8's
// CollectAllAvailableGarbage: full collections until nothing more is freed, then the page pool is
// released) followed by malloc_trim(0) returns both to the OS. Measured at 10,000 tunnels: RSS 178 MB
// after a reconcile, 91 MB after this. It costs one full collection of a small heap (tens of ms), so it
// runs after large operations only, and once when the agent goes idle after smaller ones.
import { getHeapStatistics } from 'node:v8';
import koffi from 'koffi';

type GcFn = (opts: { type: 'major'; execution: 'sync'; flavor?: 'last-resort' }) => void;

let trim: ((pad: number) => number) | undefined;

/** True when the process was started with --expose-gc (the agent's runtime flags include it). */
export function canCollect(): boolean {
  return typeof (globalThis as { gc?: unknown }).gc === 'function';
}

/** Collects all garbage and returns freed memory to the OS; a no-op for the V8 part without --expose-gc. */
export function releaseMemory(): void {
  const gc = (globalThis as { gc?: GcFn }).gc;
  if (typeof gc === 'function') gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  usedAfterLast = getHeapStatistics().used_heap_size;
  if (!trim) {
    const f = koffi.load('libc.so.6').func('int malloc_trim(size_t pad)');
    trim = (pad) => f(pad) as number;
  }
  trim(0);
}

/**
 * One full collection, between the phases of a large operation: the garbage of one phase (tens of
 * thousands of request objects) is gone before the next allocates, so the heap does not grow to hold
 * both. No-op without --expose-gc.
 */
export function collectBetweenPhases(opts: { ifGrown?: boolean } = {}): void {
  const gc = (globalThis as { gc?: GcFn }).gc;
  if (typeof gc !== 'function') return;
  // ifGrown: skipped when the heap has hardly grown since the last one (reading back an empty table): a
  // full collection costs 15-40 ms at 10,000 tunnels whether or not it finds garbage.
  if (opts.ifGrown && getHeapStatistics().used_heap_size - usedAfterLast < SKIP_BELOW_BYTES) return;
  gc({ type: 'major', execution: 'sync' });
  usedAfterLast = getHeapStatistics().used_heap_size;
}

/** collectBetweenPhases({ ifGrown }) does nothing until the heap has grown this much since the last collection. */
const SKIP_BELOW_BYTES = 1024 * 1024;
let usedAfterLast = 0;
