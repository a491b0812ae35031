// The agent benchmark's measured process. Started as the agent is (agent/bin/runtime.mjs: the same V8
// flags as the entry, the npm script and the systemd unit, and the same modules: loadAgent() imports the
// prebuilt bundle, so no transpiler is loaded), it runs the production dataplane in the benchmark's
// namespace with veth stand-ins (this kernel has no GRE). Plain JavaScript for the same reason: a
// TypeScript file here would need the loader the agent no longer carries.
//
// One JSON command per stdin line: {"op":"reconcile","tunnels":[...]}, {"op":"apply"|"remove","tunnel":{...}}
// or {"op":"stats"}; one JSON answer per stdout line with the result, the time it took, this process's
// resident memory right after and its peak during the command (VmHWM, reset before each command), and for a
// reconcile the longest stretch the event loop did not turn.
import { appendFileSync, readFileSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { loadAgent } from '../../agent/bin/runtime.mjs';

const { TG_BENCH_NETNS: netns, TG_BENCH_STATE: stateDir, TG_BENCH_EDGE: edgeIp, TG_BENCH_TABLE: nftTable, TG_BENCH_AGENT_LOG: logFile } = process.env;
if (!netns || !stateDir || !edgeIp || !nftTable) throw new Error('TG_BENCH_NETNS, TG_BENCH_STATE, TG_BENCH_EDGE and TG_BENCH_TABLE are required');

/** VmRSS and VmHWM (peak) of this process, in bytes. */
function memory() {
  const s = readFileSync('/proc/self/status', 'utf8');
  const kb = (k) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(s)?.[1] ?? 0) * 1024;
  return { rss: kb('VmRSS'), peak: kb('VmHWM') };
}

// A stale bundle would be rebuilt first; one that cannot be is reported, since the figures would then
// include the transpiler.
const { createDataplane } = await loadAgent({ warn: (m) => process.stderr.write(`bench: ${m}\n`) });
// TG_BENCH_AGENT_LOG=file: the dataplane's log lines (each change's time per step) appended there, one JSON
// object per line, for finding where a job's time goes; off by default, as writing them costs time.
const log = logFile ? (event, fields) => appendFileSync(logFile, `${JSON.stringify({ event, ...fields })}\n`) : undefined;
const dp = await createDataplane({ edgeIp, nftTable, stateDir, netns, linkKind: 'veth-standin', ...(log ? { log } : {}) });
const say = (o) => process.stdout.write(`${JSON.stringify(o)}\n`);
say({ ready: true, ...memory() });

for await (const line of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
  // "5" resets VmHWM to the current RSS (proc(5), clear_refs): the peak answered is this command's own.
  writeFileSync('/proc/self/clear_refs', '5');
  const cmd = JSON.parse(line);
  // What a reconcile's peak is made of: V8's heap (total reserved, and used) and memory outside it (Buffers),
  // sampled whenever the event loop is free during it (the highest of each, not necessarily at one moment). Not
  // during one-tunnel jobs, whose few milliseconds the sampling would add to.
  const parts = { heapTotal: 0, heapUsed: 0, external: 0, arrayBuffers: 0 };
  const sample = () => {
    const m = process.memoryUsage();
    for (const k of Object.keys(parts)) parts[k] = Math.max(parts[k], m[k]);
  };
  // The longest the event loop went without turning (timers, the SSH server's sockets wait that long): the
  // longest gap between two sampler ticks, or from the last tick to the end.
  let lastTick = performance.now();
  let stall = 0;
  const tick = () => {
    const now = performance.now();
    stall = Math.max(stall, now - lastTick);
    lastTick = now;
    sample();
  };
  const sampler = cmd.op === 'reconcile' ? setInterval(tick, 5) : undefined;
  const t = performance.now();
  try {
    const result =
      cmd.op === 'reconcile' ? await dp.reconcile(cmd.tunnels) : cmd.op === 'apply' ? await dp.apply(cmd.tunnel) : cmd.op === 'remove' ? await dp.remove(cmd.tunnel) : null;
    const ms = performance.now() - t;
    if (sampler) tick();
    say({ ok: true, result, ms, ...memory(), ...(sampler ? { parts, stallMs: stall } : {}) });
  } catch (e) {
    say({ ok: false, error: e instanceof Error ? e.message : String(e) });
  } finally {
    clearInterval(sampler);
  }
}
await dp.close();
