// The watchdog's own thread (activity.ts): what must work while the event loop does not turn. The main thread
// beats once a second into shared memory; this thread looks every second and, when the beat has stopped for the
// watchdog's time, writes one JSON log line naming what the main thread was doing (the synchronous kernel call it
// made, if it was in one, the operation's step, and where the kernel holds it: its state, wait channel and kernel
// stack from /proc) and kills the process (SIGKILL: the main thread cannot run an
// exit handler), so systemd restarts it (Restart=on-failure) and the restore at start brings the dataplane back.
// The same thread bounds a stop: once the main thread has said it is stopping (SIGTERM), the process is gone
// within that many seconds, even if the main thread then blocks.
//
// Why a worker given its code as a string: the agent also runs from its single-file bundle (agent/dist), where
// no module of its own lies beside it to be loaded by path; the code needs nothing but Node itself.
import { Worker } from 'node:worker_threads';
import { CALL_TEXT, OP_TEXT, SLOT } from './activity.ts';

const THREAD_CODE = `
const { workerData } = require('node:worker_threads');
const { readFileSync, writeSync } = require('node:fs');
const { shared, limitMs, tickMs, base, slot, callText, opText, fd } = workerData;
const slots = new Int32Array(shared, 0, 8);
const text = (where, len) => Buffer.from(new Uint8Array(shared, where.offset, Math.min(len, where.size))).toString('utf8');
let beat = Atomics.load(slots, slot.beat);
let beatAt = Date.now();
let stopAt;
// Where the kernel holds the main thread (its tid is the pid): its state (D: uninterruptible), the function it
// waits in, and its kernel stack (root only); what is unreadable is left out.
const kernelSide = () => {
  const f = {};
  const read = (name) => {
    try {
      return readFileSync('/proc/self/task/' + process.pid + '/' + name, 'utf8').trim();
    } catch {
      return undefined;
    }
  };
  const stat = read('stat');
  if (stat) f.main_thread_state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  const wchan = read('wchan');
  if (wchan && wchan !== '0') f.main_thread_wchan = wchan;
  // The system call it is in: its number and arguments (x86_64: 44 sendto, 45 recvfrom, 75 fdatasync, 202 futex).
  const syscall = read('syscall');
  if (syscall) f.main_thread_syscall = syscall;
  const stack = read('stack');
  if (stack) f.main_thread_kernel_stack = stack.split('\\n').slice(0, 16);
  return f;
};
const die = (msg, fields) => {
  try {
    writeSync(fd, JSON.stringify({ time: new Date().toISOString(), level: 'error', msg, ...base, ...fields }) + '\\n');
  } finally {
    process.kill(process.pid, 'SIGKILL');
  }
};
setInterval(() => {
  const now = Date.now();
  const b = Atomics.load(slots, slot.beat);
  if (b !== beat) {
    beat = b;
    beatAt = now;
  }
  const stopS = Atomics.load(slots, slot.stopS);
  if (stopS > 0 && stopAt === undefined) stopAt = now + stopS * 1000;
  const doing = () => {
    const f = { operation: text(opText, Atomics.load(slots, slot.opLen)) };
    if (Atomics.load(slots, slot.inCall) === 1) f.kernel_call = text(callText, Atomics.load(slots, slot.callLen));
    return f;
  };
  if (now - beatAt >= limitMs) die('watchdog: the event loop has not turned; killing the agent so it restarts', { blocked_s: Math.round((now - beatAt) / 1000), ...doing(), ...kernelSide() });
  else if (stopAt !== undefined && now >= stopAt) die('watchdog: the stop did not finish within its bound; killing the agent', { stop_s: stopS, ...doing(), ...kernelSide() });
}, tickMs);
`;

export interface WatchdogThreadOptions {
  shared: SharedArrayBuffer;
  /** No heartbeat for this long: the process is killed. */
  limitMs: number;
  /** Fields of every line it logs (service, node_id). */
  base: Record<string, unknown>;
  /** Where its log line goes (default 1: stdout, as the agent's logger writes). */
  fd?: number;
}

export interface WatchdogThread {
  /** Ends the thread (the process is exiting on its own). */
  stop(): Promise<void>;
}

/** Starts the watchdog thread and the main thread's heartbeat into `beat`. */
export function startWatchdogThread(opts: WatchdogThreadOptions, beat: () => void, onError: (e: Error) => void = () => undefined): WatchdogThread {
  const tickMs = Math.max(10, Math.min(1000, opts.limitMs / 4));
  const worker = new Worker(THREAD_CODE, {
    eval: true,
    workerData: { shared: opts.shared, limitMs: opts.limitMs, tickMs, base: { ...opts.base, component: 'watchdog' }, slot: SLOT, callText: CALL_TEXT, opText: OP_TEXT, fd: opts.fd ?? 1 },
    // It holds next to nothing; the bound keeps a fault of its own from growing into the agent's memory budget
    // (docs/ARCHITECTURE.md). Node's own start-up of a thread needs more than 4 MB of old generation.
    resourceLimits: { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 1 },
    // Not the agent's own flags (--expose-gc and the heap settings are the main thread's).
    execArgv: [],
    stdout: false,
    stderr: false,
  });
  // A watchdog that failed must not take the agent with it: said once, and the agent goes on without it.
  worker.on('error', (e) => onError(e));
  // Neither it nor the heartbeat keeps the process alive.
  worker.unref();
  const heart = setInterval(beat, tickMs);
  heart.unref();
  beat();
  return {
    async stop() {
      clearInterval(heart);
      await worker.terminate();
    },
  };
}
