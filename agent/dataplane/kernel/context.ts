// What every kernel step of the dataplane shares: the context (the sockets, the agent's table and its two maps,
// the link driver), the watchdog's step() with its test seam, the pacing of long runs of requests (inChunks,
// turn) and the errno filter. Kept apart so the reads (read.ts), the table (table.ts), the links (links.ts) and
// the apply (apply.ts) each import only this, not each other.
import { NetlinkError, type Nft, type Rtnl } from '../../netlink/client.ts';
import { RULESET_DEFAULTS } from '../../netlink/ruleset.ts';
import { type DynamicChainSizes } from '../../netlink/ruleset-chains.ts';
import type { Conntrack } from '../conntrack.ts';
import type { LinkDriver } from '../links.ts';
import { COLLECT_EVERY_REQUESTS } from '../../housekeeping/memory.ts';
import { activity } from '../../housekeeping/activity.ts';

export const DNAT_MAP = RULESET_DEFAULTS.dnatMap;
export const COUNTER_MAP = RULESET_DEFAULTS.counterMap;

export interface KernelContext {
  rtnl: Rtnl;
  nft: Nft;
  conntrack: () => Conntrack;
  /**
   * A new route socket whose sends run off the event loop (socket.ts sendOffThread), for the deletion of one
   * link (deleteLinkUnlisted), closed by the caller. One per deletion: a socket sends its next request only
   * once the last returned, and the next remove must not wait out the previous one's barrier. Absent: those
   * deletions go through `rtnl`.
   */
  reaper?: () => Rtnl;
  /** Deletions still finishing on the reaper's thread after their links left the kernel's lists. */
  reaping?: Set<Promise<void>>;
  table: string;
  linkPrefix: string;
  /** How the chains made by value are sized (dataplane/sizing.ts): a tunnel's meter, a flows set. */
  sizes: DynamicChainSizes;
  /** The `bogons` set's prefixes (agent/netlink/ruleset.ts bogonSources). */
  bogons: readonly string[];
  driver: LinkDriver;
  netns?: string;
  /** TEST SEAM ONLY (DataplaneOptions.testOnlyHang). Never set by the agent itself. */
  testOnlyHang?: TestOnlyHang;
}

/**
 * TEST SEAM ONLY: the first operation that reaches step `step` hangs there, as one the kernel never answers would
 * (test/integration/agent-watchdog.test.ts). Only the first: the next operation is the one that repairs.
 */
export interface TestOnlyHang {
  step: string;
  /** Only in this operation (apply, remove, reconcile); any, without it. */
  op?: string;
  /** Ends the hang (the operation goes on); without it the hang never ends. */
  release?: Promise<void>;
  /** Holds the event loop itself, as a synchronous kernel call that never returns would (release is then ignored). */
  blockEventLoop?: boolean;
  /** Set once an operation has hung. */
  used?: boolean;
}

/**
 * The operation begins step `name`: progress for the watchdog (housekeeping/activity.ts), and the name a job that
 * does not finish gives in its kernel_error ("nftables commit did not finish within 60 s").
 */
export async function step(k: Pick<KernelContext, 'testOnlyHang'>, name: string): Promise<void> {
  activity.step(name);
  const hang = k.testOnlyHang;
  if (hang?.step !== name || hang.used || (hang.op !== undefined && activity.currentOp() !== hang.op)) return;
  hang.used = true;
  if (hang.blockEventLoop) {
    // Nothing wakes this wait: the thread is held as by a kernel call that never returns.
    activity.syscall(`TEST SEAM: ${name} held on the event loop`, () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0));
    return;
  }
  await (hang.release ?? new Promise<never>(() => undefined));
}

/**
 * Runs `fn` over `items` with at most CHUNK requests alive at a time. The socket coalesces up to 256
 * requests per sendto() anyway; keeping tens of thousands of promises (and their reply buffers) alive at
 * once only grows the heap (measured: ~150 MB of transient garbage at 10,000 tunnels) for no speed.
 */
const CHUNK = 256;
export async function inChunks<T>(items: readonly T[], fn: (x: T) => Promise<unknown>, collect: () => void = () => undefined): Promise<void> {
  for (let i = 0; i < items.length; i += CHUNK) {
    await Promise.all(items.slice(i, i + CHUNK).map(fn));
    if ((i + CHUNK) % COLLECT_EVERY_REQUESTS === 0 && i + CHUNK < items.length) collect();
    if (i + CHUNK < items.length) await turn();
  }
}

/**
 * Lets the event loop run once (timers, the SSH server's sockets). The socket answers most requests within
 * the promise chain (socket.ts: the kernel has replied by the time sendto() returns), so without this a
 * 10,000-tunnel apply would hold the loop for its whole ~12 s: SSH handshakes and keepalives, probes and
 * timers would all wait for it.
 */
export function turn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

export const ignoreCode =
  (...codes: string[]) =>
  (e: unknown): void => {
    if (e instanceof NetlinkError && codes.includes(e.code)) return;
    throw e;
  };

/** The sockets opened at their first use, closed with the dataplane, and the deletions close() waits for. */
export interface LazySockets {
  sock?: Conntrack;
  /** Link deletions still finishing off the event loop (links.ts deleteLinkUnlisted). */
  reaping: Set<Promise<void>>;
}
