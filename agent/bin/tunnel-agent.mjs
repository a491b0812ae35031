#!/usr/bin/env node
// `tunnel-agent [fingerprint] [--config FILE]`: the edge agent (agent/main.ts), run from its prebuilt
// bundle (agent/dist/agent.mjs, built by `npm install` and rebuilt here when a source changed since:
// runtime.mjs's loadAgent), or from its TypeScript sources when the bundle cannot be built.
//
// The agent needs Node 24 and the V8 flags of runtime.mjs (they keep its memory under 150 MB with 10,000 default-policy
// tunnels). The systemd unit and `npm run agent` start Node with those flags, so systemd's main PID is
// the agent itself. Started any other way (an older `node` first on PATH, or Node 24 without the flags),
// this script re-executes itself with the project's own Node 24 (node_modules/node/bin/node, installed by
// the `node` package) when needed and the flags, forwarding signals and the exit status.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { AGENT_NODE_FLAGS, hasAgentFlags, loadAgent } from './runtime.mjs';

// libuv's threadpool (4 threads by default) is read once, at its first use, which is later than this line. The agent
// shares it between fs, crypto and koffi's async kernel calls (netlink polls, link deletions, the probes' epoll_wait):
// a few calls the kernel holds must not leave the others and the SSH server's work without a thread. Each netlink
// socket has at most one poll there at a time and a held call ends the agent after AGENT_WATCHDOG_S
// (agent/housekeeping/activity.ts), so 16 is ample; an operator's own setting wins.
process.env.UV_THREADPOOL_SIZE ??= '16';

const major = Number(process.versions.node.split('.')[0]);
const localNode = fileURLToPath(new URL('../../node_modules/node/bin/node', import.meta.url));

if (major < 24 || !hasAgentFlags()) {
  const node = major < 24 ? localNode : process.execPath;
  if (!existsSync(node)) {
    process.stderr.write(`tunnel-agent: needs Node 24, this is ${process.version}; run npm install in the checkout (it installs Node 24 under node_modules)\n`);
    process.exit(1);
  }
  const child = spawn(node, [...AGENT_NODE_FLAGS, fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' });
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('exit', (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    }
    else process.exit(code ?? 1);
  });
} else {
  // Source maps cost ~8 MB of resident memory here; TUNNEL_AGENT_SOURCE_MAPS=1 turns them on for debugging.
  if (process.env.TUNNEL_AGENT_SOURCE_MAPS === '1') process.setSourceMapsEnabled(true);
  const { runCli } = await loadAgent();
  await runCli();
}
