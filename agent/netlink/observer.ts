// Who watches the process's netlink calls (the agent's watchdog, housekeeping/activity.ts) and which calls made
// on a worker thread the kernel still holds past their deadline. Process-wide state, as the calls are; the
// request machinery (socket.ts) reports to it, and the watchdog reads it without importing the machinery.
/**
 * Who watches the kernel calls (the agent's activity tracker, housekeeping/activity.ts); none by default (tests,
 * benchmarks). Process-wide, as the calls are.
 */
export interface NetlinkObserver {
  /**
   * A request is queued, named `what`: returns what to tell as it goes, or an Error to refuse it with (the
   * operation that asked was abandoned by the watchdog: nothing of it may reach the kernel any more).
   */
  request(what: string): RequestWatch | Error | undefined;
  /** The event loop is about to make a synchronous kernel call for `what` (leave() follows when it returns). */
  enter(what: string): void;
  leave(): void;
}
/** What the observer is told of one request. */
export interface RequestWatch {
  /** A datagram of its answer arrived (a long dump streams for a while before it settles). */
  progress(): void;
  settled(err?: Error): void;
}
/** Read by socket.ts (a live binding); set only through observeNetlink(). */
export let observer: NetlinkObserver | undefined;

/** Installs (or, with undefined, removes) the process's netlink observer. */
export function observeNetlink(o: NetlinkObserver | undefined): void {
  observer = o;
}

/** A kernel call on a worker thread that outlived its deadline (the kernel still holds it). */
export interface OverdueCall {
  what: string;
  /** Milliseconds since the epoch at which its deadline passed. */
  since: number;
}
/** Filled and emptied by socket.ts as worker-thread calls pass their deadline and come back. */
export const overdue = new Set<OverdueCall>();

/** Worker-thread kernel calls still held by the kernel past their deadline: each is a thread of libuv's pool lost meanwhile. */
export function offThreadOverdue(): readonly OverdueCall[] {
  return [...overdue];
}
