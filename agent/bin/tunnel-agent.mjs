#!/usr/bin/env node
// `tunnel-agent [fingerprint] [--config FILE]`: the edge agent (agent/main.ts) run from its TypeScript
// sources through the repo's loader (loader/register.mjs: rolldown's oxc transform).
//
// The agent needs Node 24. Started by an older `node` (the shebang takes whatever is first on PATH), this
// script re-executes itself with the project's own Node 24 (node_modules/node/bin/node, installed by the
// `node` package) when it is there, forwarding signals and the exit status. Under Node 24 it registers
// the loader in this process and runs the agent here, so systemd's main PID is the agent itself.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { register } from 'node:module';
import { fileURLToPath } from 'node:url';

const major = Number(process.versions.node.split('.')[0]);
const localNode = fileURLToPath(new URL('../../node_modules/node/bin/node', import.meta.url));

if (major < 24) {
  if (!existsSync(localNode)) {
    process.stderr.write(`tunnel-agent: needs Node 24, this is ${process.version}; run npm install in the checkout (it installs Node 24 under node_modules)\n`);
    process.exit(1);
  }
  const child = spawn(localNode, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], { stdio: 'inherit' });
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP']) process.on(sig, () => child.kill(sig));
  child.on('exit', (code, signal) => {
    if (signal) {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    }
    else process.exit(code ?? 1);
  });
} else {
  process.setSourceMapsEnabled(true);
  register('../../loader/hooks.mjs', import.meta.url);
  const { runCli } = await import('../main.ts');
  await runCli();
}
