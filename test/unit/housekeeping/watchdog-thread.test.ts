// The watchdog's own thread (agent/housekeeping/watchdog-thread.ts) in a real Node process whose event loop is then
// held by a synchronous call that never returns (Atomics.wait, as a kernel call the kernel never returns from would
// hold it): the thread logs one line naming the call and where the kernel holds the thread, and kills the process.
// No root needed; the agent-process version is test/integration/agent-watchdog.test.ts.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../../..');
const dir = mkdtempSync(join(tmpdir(), 'tg-watchdog-thread-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `body` (a module's code, with `activity` and `startWatchdogThread` imported) to its end; its stdout lines and how it ended. */
function run(body: string): Promise<{ lines: Record<string, unknown>[]; code: number | null; signal: NodeJS.Signals | null }> {
  const file = join(dir, `case-${Math.random().toString(36).slice(2)}.ts`);
  writeFileSync(
    file,
    `import { activity } from ${JSON.stringify(join(ROOT, 'agent/housekeeping/activity.ts'))};\n` +
      `import { startWatchdogThread } from ${JSON.stringify(join(ROOT, 'agent/housekeeping/watchdog-thread.ts'))};\n${body}\n`,
  );
  return new Promise((done) => {
    const child = spawn(join(ROOT, 'node_modules/.bin/node'), ['--import', join(ROOT, 'loader/register.mjs'), file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('exit', (code, signal) => {
      const lines = out
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      if (lines.length === 0 && err) lines.push({ stderr: err });
      done({ lines, code, signal });
    });
  });
}

describe('watchdog thread', () => {
  it('an event loop held for good: one line naming the call, the operation and the kernel side, then SIGKILL', async () => {
    const r = await run(`
      startWatchdogThread({ shared: activity.shared, limitMs: 2000, base: { service: 'test' } }, () => activity.beat(), (e) => console.log(JSON.stringify({ failed: String(e) })));
      void activity.run('reconcile', async () => {
        activity.step('nftables commit');
        await new Promise((r) => setTimeout(r, 200));
        activity.syscall('sendto for nftables commit (9 messages)', () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0));
      });
    `);
    expect(r.signal).toBe('SIGKILL');
    expect(r.lines).toHaveLength(1);
    expect(r.lines[0]).toMatchObject({
      level: 'error',
      msg: 'watchdog: the event loop has not turned; killing the agent so it restarts',
      service: 'test',
      component: 'watchdog',
      operation: 'reconcile: nftables commit',
      kernel_call: 'sendto for nftables commit (9 messages)',
      main_thread_state: 'S',
    });
  });

  it('a stop that does not finish within its bound ends the process, even with the event loop held', async () => {
    const r = await run(`
      startWatchdogThread({ shared: activity.shared, limitMs: 600_000, base: {} }, () => activity.beat());
      activity.stopping(1);
      setTimeout(() => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0), 100);
    `);
    expect(r.signal).toBe('SIGKILL');
    expect(r.lines[0]).toMatchObject({ msg: 'watchdog: the stop did not finish within its bound; killing the agent', stop_s: 1 });
  });

  it('a process that turns its event loop is left alone, and the thread keeps nothing alive', async () => {
    const r = await run(`
      // Far from its limit (a loaded machine's pauses must not count), over several of its looks.
      startWatchdogThread({ shared: activity.shared, limitMs: 60_000, base: {} }, () => activity.beat());
      await new Promise((r) => setTimeout(r, 2500));
    `);
    expect(r).toEqual({ lines: [], code: 0, signal: null });
  });
});
