// The agent's Node flags and its prebuilt bundle live in agent/bin/runtime.mjs; every way of starting the
// agent must use them, since the memory figures (bench/agent.ts measures a process started with them) depend
// on them.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { AGENT_NODE_FLAGS, bundleStaleness, digestOf, hasAgentFlags } from '../../agent/bin/runtime.mjs';

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

describe('agent bundle', () => {
  const dir = mkdtempSync(join(tmpdir(), 'tg-bundle-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('is used only while it and every input it was built from are as its manifest says', () => {
    mkdirSync(join(dir, 'agent/dist'), { recursive: true });
    const paths = { manifestPath: join(dir, 'agent/dist/agent.json'), bundlePath: join(dir, 'agent/dist/agent.mjs'), root: dir };
    expect(bundleStaleness(paths)).toBe('not built');
    writeFileSync(join(dir, 'agent/main.ts'), 'export const a = 1;\n');
    writeFileSync(join(dir, 'agent/dist/agent.mjs'), 'export const a = 1;\n');
    const manifest = { output: digestOf(paths.bundlePath), inputs: { 'agent/main.ts': digestOf(join(dir, 'agent/main.ts')) } };
    writeFileSync(paths.manifestPath, JSON.stringify(manifest));
    expect(bundleStaleness(paths)).toBeNull();
    // A source edited since the build.
    writeFileSync(join(dir, 'agent/main.ts'), 'export const a = 2;\n');
    expect(bundleStaleness(paths)).toBe('agent/main.ts changed since it was built');
    writeFileSync(join(dir, 'agent/main.ts'), 'export const a = 1;\n');
    expect(bundleStaleness(paths)).toBeNull();
    // A source gone, the bundle itself changed, a manifest that vouches for nothing.
    rmSync(join(dir, 'agent/main.ts'));
    expect(bundleStaleness(paths)).toBe('agent/main.ts changed since it was built');
    writeFileSync(join(dir, 'agent/main.ts'), 'export const a = 1;\n');
    writeFileSync(paths.bundlePath, 'export const a = 3;\n');
    expect(bundleStaleness(paths)).toBe('agent/dist/agent.mjs differs from its manifest');
    writeFileSync(paths.manifestPath, JSON.stringify({ ...manifest, inputs: {} }));
    expect(bundleStaleness(paths)).toBe('its manifest lists no inputs');
  });

  it('the agent loads from it with no TypeScript transform in the process, and exports what its users import', () => {
    // loadAgent() builds the bundle first if the checkout's is missing or stale (npm install's prepare builds it).
    const script = [
      "const { loadAgent } = await import('./agent/bin/runtime.mjs');",
      "const m = await loadAgent({ warn: (w) => { process.stderr.write(w); process.exit(3); } });",
      "const maps = (await import('node:fs')).readFileSync('/proc/self/maps', 'utf8');",
      'console.log(JSON.stringify({ exports: Object.keys(m), transform: /rolldown/.test(maps) }));',
    ].join('\n');
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 120_000 });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout) as { exports: string[]; transform: boolean };
    expect(out.transform).toBe(false);
    expect(out.exports).toEqual(expect.arrayContaining(['runCli', 'startAgent', 'startHealth', 'restoreAtStart', 'createDataplane']));
    // Its manifest names our modules, the builder and the tsconfig it was built with, and nothing of npm's.
    const inputs = Object.keys((JSON.parse(readFileSync('agent/dist/agent.json', 'utf8')) as { inputs: Record<string, string> }).inputs);
    expect(inputs).toEqual(expect.arrayContaining(['agent/main.ts', 'agent/dataplane/index.ts', 'common/tunnel-spec.ts', 'agent/bin/bundle.mjs', 'tsconfig.json']));
    expect(inputs.filter((p) => p.includes('node_modules'))).toEqual([]);
  });

  it('the Docker image copies every input of the bundle before it builds it', () => {
    const lines = readFileSync('Dockerfile', 'utf8').split('\n');
    const build = lines.findIndex((l) => /^RUN node agent\/bin\/bundle\.mjs\b/.test(l));
    expect(build).toBeGreaterThan(0);
    // `COPY a b ./dest` before the build, in the bundle's own stage (the runtime image, the last): the
    // sources it brings, as paths in the repository.
    const stage = lines.findLastIndex((l) => /^FROM\s/.test(l));
    expect(stage).toBeLessThan(build);
    const copied = lines.slice(stage, build).flatMap((l) => (/^COPY\s/.test(l) ? l.trim().split(/\s+/).slice(1, -1) : []));
    const inputs = Object.keys((JSON.parse(readFileSync('agent/dist/agent.json', 'utf8')) as { inputs: Record<string, string> }).inputs);
    const missing = inputs.filter((p) => !copied.some((c) => p === c || p.startsWith(`${c.replace(/\/$/, '')}/`)));
    expect(missing).toEqual([]);
  });
});
