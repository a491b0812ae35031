// The agent's Node flags live in agent/bin/runtime.mjs; every way of starting the agent must use them,
// since the memory figures (bench/agent.ts measures a process started with them) depend on them.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { AGENT_NODE_FLAGS, hasAgentFlags } from '../../agent/bin/runtime.mjs';

const flags = AGENT_NODE_FLAGS.join(' ');

describe('agent runtime flags', () => {
  it('the systemd unit and `npm run agent` start agent/bin/tunnel-agent.mjs with exactly AGENT_NODE_FLAGS', () => {
    const unit = readFileSync('agent/deploy/tunnel-agent.service', 'utf8');
    const exec = /^ExecStart=\S+\/node (.*) agent\/bin\/tunnel-agent\.mjs /m.exec(unit);
    expect(exec?.[1]).toBe(flags);
    const script = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts.agent;
    expect(script).toBe(`node ${flags} agent/bin/tunnel-agent.mjs`);
  });

  it('includes --expose-gc, which the dataplane needs to hand memory back', () => {
    expect(AGENT_NODE_FLAGS).toContain('--expose-gc');
    expect(hasAgentFlags([...AGENT_NODE_FLAGS, '--inspect'])).toBe(true);
    expect(hasAgentFlags(AGENT_NODE_FLAGS.slice(1))).toBe(false);
  });

  it('started without the flags (plain `node agent/bin/tunnel-agent.mjs`), the entry still runs the agent', () => {
    // This process has none of the flags, so the entry takes its re-exec path to get them.
    expect(hasAgentFlags()).toBe(false);
    const r = spawnSync(process.execPath, ['agent/bin/tunnel-agent.mjs', '--help'], { encoding: 'utf8', timeout: 30_000 });
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('usage: tunnel-agent');
  });
});
