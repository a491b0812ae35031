// How the edge agent's Node process is started, in one place: the entry (tunnel-agent.mjs), the npm
// script, the systemd unit and the agent benchmark all use these flags and this loader (a test checks
// that the unit and the script carry exactly AGENT_NODE_FLAGS).
//
// Why these V8 flags: with 10,000 tunnels the agent's live heap is ~15 MB, but reading and changing them
// all makes V8 grow its heap to several times that between full collections, and the pages it grew to
// stay resident. A 1 MB semi-space (in-flight netlink requests are promoted less far, young garbage goes
// sooner) and a 10% heap-growing step (a full collection comes before the heap has grown far) lower that
// peak; --expose-gc lets the dataplane give the pooled pages back after a large operation
// (agent/housekeeping/memory.ts). Figures: bench/agent.ts, and docs/ARCHITECTURE.md.
export const AGENT_NODE_FLAGS = ['--max-semi-space-size=1', '--heap-growing-percent=10', '--expose-gc'];

/** The loader that runs the agent's TypeScript in its own thread (no separate loader isolate). */
export const AGENT_LOADER = new URL('../../loader/register-inline.mjs', import.meta.url);

/** Whether this process was started with every one of AGENT_NODE_FLAGS. */
export function hasAgentFlags(execArgv = process.execArgv) {
  return AGENT_NODE_FLAGS.every((f) => execArgv.includes(f));
}
