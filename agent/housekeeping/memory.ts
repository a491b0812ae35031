// The agent's memory policy, in one place: the dataplane's orchestration says how big each operation is
// and where its phases end; this module decides whether to collect there and when to give memory back.
//
// Why: reading and changing 10,000 tunnels grows V8's heap to a peak several times the ~15 MB it holds
// afterwards, and V8 keeps the pages it freed pooled and resident; glibc keeps freed native memory (reply
// datagrams) in its arenas. A full collection between the phases of a large operation frees one phase's
// garbage (tens of thousands of request objects) before the next allocates, so the heap does not hold both;
// a last-resort collection (V8's CollectAllAvailableGarbage, then the page pool released) followed by
// malloc_trim(0) returns both to the OS. Measured at 10,000 tunnels: RSS 178 MB after a reconcile, 91 MB
// after the release. Each costs one full collection of a small heap (15-40 ms at 10,000 tunnels), so small
// operations never collect between phases, and release memory only once the agent goes idle.
// Collections need --expose-gc (agent/bin/runtime.mjs starts every agent with it); without it they are no-ops.
import { getHeapStatistics } from 'node:v8';
import koffi from 'koffi';

type GcFn = (opts: { type: 'major'; execution: 'sync'; flavor?: 'last-resort' }) => void;

/** What an operation is, for the thresholds below. */
export type OperationKind =
  /** reading the kernel back (links, map elements, counters): one dump at a time, collecting after each */
  | 'read'
  /** carrying out a plan's link and nftables steps */
  | 'apply'
  /** one dataplane operation as a whole (read-back, diff, apply) */
  | 'operation'
  /**
   * a first apply's nft phase, sized in batches (dataplane/kernel/apply.ts WHOLE_PER_BATCH), released before, between
   * and after its batches: each phase's garbage (link requests, a batch's element keys and buffers) stayed
   * resident (V8's page pool, glibc's arenas) under the next: +48 MB over nine batches at 10,000 tunnels with
   * port lists, against ~0.1 s per release
   */
  | 'batches';

/** Sizes (tunnels, or link and nftables steps) from which an operation of each kind counts as large. */
const LARGE: Record<OperationKind, number> = { read: 2048, apply: 2048, operation: 256, batches: 2 };
/** A large apply also collects after every this many kernel requests (apply peak ~130 MB at 10k; ~15% of the apply's time). */
export const COLLECT_EVERY_REQUESTS = 4096;
/** After a small operation, memory is released once no operation has run for this long, */
const IDLE_RELEASE_MS = 2_000;
/** or at once when the process's resident memory is above this (the agent idles at ~85-100 MB). */
const RELEASE_ABOVE_BYTES = 120 * 1024 * 1024;
/** and it has grown by at least this since the last release (one-tunnel jobs grow it by well under 1 MB). */
const REGROWTH_BYTES = 16 * 1024 * 1024;
/** A read's collection is skipped when the heap has grown less than this since the last one (an empty table read back). */
const SKIP_BELOW_BYTES = 1024 * 1024;

let usedAfterLast = 0;
let trim: ((pad: number) => number) | undefined;

/** The phases of one operation of `size`: `between()` collects at a phase boundary when the operation is large. */
export interface Phases {
  readonly large: boolean;
  between(): void;
}

export function phases(kind: OperationKind, size: number): Phases {
  const large = size >= LARGE[kind];
  // Reads skip a collection that would find little (reading back an empty table); the others always collect.
  const ifGrown = kind === 'read';
  // Between a large operation's read-back, diff and apply, the pages the phase before freed also go back to the OS
  // (releaseMemory): the diff of a full read-back is the agent's peak, and what the read-back's decoding freed
  // would otherwise still be resident under it (~5 MB at 10,000 tunnels; one last-resort collection more each).
  if (kind === 'operation' || kind === 'batches') return { large, between: large ? releaseMemory : () => undefined };
  return { large, between: large ? () => collect(ifGrown) : () => undefined };
}

function collect(ifGrown: boolean): void {
  const gc = (globalThis as { gc?: GcFn }).gc;
  if (typeof gc !== 'function') return;
  if (ifGrown && getHeapStatistics().used_heap_size - usedAfterLast < SKIP_BELOW_BYTES) return;
  gc({ type: 'major', execution: 'sync' });
  usedAfterLast = getHeapStatistics().used_heap_size;
}

/** Collects all garbage and returns freed memory to the OS (the V8 part needs --expose-gc). */
export function releaseMemory(): void {
  const gc = (globalThis as { gc?: GcFn }).gc;
  if (typeof gc === 'function') gc({ type: 'major', execution: 'sync', flavor: 'last-resort' });
  usedAfterLast = getHeapStatistics().used_heap_size;
  if (!trim) {
    try {
      const f = koffi.load('libc.so.6').func('int malloc_trim(size_t pad)');
      trim = (pad) => f(pad) as number;
    } catch {
      // Not glibc: nothing to trim, and a release runs inside large operations (phases), which must not fail on it.
      trim = () => 0;
    }
  }
  trim(0);
}

/** What ReleaseAfterOperations reads and does; tests pass their own. */
export interface ReleaseIo {
  /** The process's resident memory, in bytes. */
  rss(): number;
  release(): void;
}

const processIo: ReleaseIo = { rss: () => process.memoryUsage.rss(), release: releaseMemory };

/**
 * When memory goes back to the OS after operations: right after a large one, or when resident memory is
 * high and has grown since the last release; otherwise once the agent has been idle for a moment. Never
 * inside the operation's own time (a large operation's releases between its phases, phases() above, are the
 * exception: two in an operation of seconds, where they lower its peak): the release (a last-resort collection
 * and malloc_trim, 15-70 ms) runs from setImmediate, after the operation's caller has had its answer.
 * Profiled (a no-change reconcile must stay cheap at scale): run synchronously it was ~70 ms of a no-change reconcile at 2,000 tunnels. And at 10,000 tunnels the agent's
 * resting RSS sits near RELEASE_ABOVE_BYTES, so "above it" alone released after every one-tunnel job: the
 * next job, arriving back to back, waited out a 20-60 ms collection that freed nothing new (remove p50 21 ms,
 * 8 ms without). Hence the growth condition: a release frees what an operation left, not the resting set.
 */
export class ReleaseAfterOperations {
  private idle: NodeJS.Timeout | undefined;
  private soon: NodeJS.Immediate | undefined;
  /** The second release after a large operation: not put off by the small jobs that follow it. */
  private followUp: NodeJS.Timeout | undefined;
  private stopped = false;
  /** Resident memory right after the last release (0 before the first: any high RSS counts as growth). */
  private restingRss = 0;

  constructor(private readonly io: ReleaseIo = processIo) {}

  operationFinished(large: boolean): void {
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    if (this.stopped) return;
    const rss = this.io.rss();
    if (large) {
      // A large operation's own objects may still be reachable from its caller when the release right after
      // it runs (bench:agent: 184 MB then, 113 MB at rest): one more release a moment later returns them, and
      // resets the resting level a stream of small jobs is measured against.
      this.followUp = this.releaseLater(this.followUp, () => (this.followUp = undefined));
    }
    if (large || (rss > RELEASE_ABOVE_BYTES && rss - this.restingRss > REGROWTH_BYTES)) {
      this.soon ??= setImmediate(() => {
        this.soon = undefined;
        if (!this.stopped) this.releaseNow();
      });
      return;
    }
    this.armIdle();
  }

  stop(): void {
    this.stopped = true;
    if (this.idle) clearTimeout(this.idle);
    if (this.soon) clearImmediate(this.soon);
    if (this.followUp) clearTimeout(this.followUp);
  }

  private armIdle(): void {
    this.idle = this.releaseLater(this.idle, () => (this.idle = undefined));
  }

  /** A release IDLE_RELEASE_MS from now, replacing `pending`; `fired` clears its owner's field. Never keeps the process alive. */
  private releaseLater(pending: NodeJS.Timeout | undefined, fired: () => void): NodeJS.Timeout {
    if (pending) clearTimeout(pending);
    const t = setTimeout(() => {
      fired();
      if (!this.stopped) this.releaseNow();
    }, IDLE_RELEASE_MS);
    t.unref();
    return t;
  }

  private releaseNow(): void {
    this.io.release();
    this.restingRss = this.io.rss();
  }
}
