// Running a few synchronous system calls inside the agent's network namespace: opening a raw socket,
// writing /proc/sys/net/... (sysctl files resolve against the netns of the thread that opens them).
// Production runs the agent in the host namespace and never switches; tests pass a namespace.
import { closeSync, existsSync, openSync, writeSync } from 'node:fs';
import koffi from 'koffi';
import { activity } from '../housekeeping/activity.ts';

const CLONE_NEWNET = 0x40000000;

let setnsFn: ((fd: number, nstype: number) => number) | undefined;
function setns(fd: number): void {
  if (!setnsFn) {
    const f = koffi.load('libc.so.6').func('int setns(int fd, int nstype)');
    setnsFn = (a, b) => f(a, b) as number;
  }
  if (setnsFn(fd, CLONE_NEWNET) < 0) throw new Error(`setns(CLONE_NEWNET) failed: errno ${koffi.errno()}`);
}

/** "/run/netns/NAME" for a bare name, the path itself otherwise. */
export function netnsPath(netns: string): string {
  return netns.includes('/') ? netns : `/run/netns/${netns}`;
}

/**
 * Runs `fn` with this thread in `netns` (synchronously: no JS runs in between, so nothing else sees the
 * switch), then switches back. Without a namespace it simply runs `fn`.
 */
export function inNetns<T>(netns: string | undefined, fn: () => T): T {
  if (!netns) return fn();
  const self = openSync('/proc/thread-self/ns/net', 'r');
  const target = openSync(netnsPath(netns), 'r');
  try {
    setns(target);
    try {
      return fn();
    } finally {
      try {
        setns(self);
      } catch (e) {
        // This thread would stay in the other namespace: nothing sane is left to do.
        process.stderr.write(`fatal: cannot return to the original network namespace: ${String(e)}\n`);
        process.abort();
      }
    }
  } finally {
    closeSync(target);
    closeSync(self);
  }
}

/**
 * Writes /proc/sys/<path> (e.g. ['net','ipv4','ip_forward']) for each entry, in the namespace. `skipMissing`:
 * a setting this kernel does not have (IPv6 disabled at boot: no net/ipv6) is left alone instead of failing.
 */
export function writeSysctls(netns: string | undefined, entries: readonly (readonly [readonly string[], string])[], opts: { skipMissing?: boolean } = {}): void {
  inNetns(netns, () => {
    for (const [path, value] of entries) {
      const file = `/proc/sys/${path.join('/')}`;
      if (opts.skipMissing && !existsSync(file)) continue;
      // Named for the watchdog's thread: some of these writes wait for RTNL (disable_ipv6 retries the syscall
      // until it gets it), holding the event loop as long as someone else holds the lock.
      activity.syscall(`write ${file}`, () => {
        const fd = openSync(file, 'w');
        try {
          writeSync(fd, `${value}\n`);
        } finally {
          closeSync(fd);
        }
      });
    }
  });
}
