// One release number (docs/RELEASES.md), shown everywhere an operator looks for it: the gateway's /healthz
// and /metrics, the admin CLI, the agent's command line (its `hello` answer is checked in agent-ssh.test.ts).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliOk, runAdminCli } from '../helpers/admin-cli.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';

const read = (path: string) => JSON.parse(readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8')) as { version: string };
const VERSION = read('package.json').version;

describe('the release number', () => {
  it('is semver, 0.x while the contracts move, and the same in the gateway, agent and panel packages', () => {
    expect(VERSION).toMatch(/^0\.(0|[1-9]\d*)\.(0|[1-9]\d*)$/);
    expect(read('agent/package.json').version).toBe(VERSION);
    expect(read('panel/package.json').version).toBe(VERSION);
  });

  it('has its section in CHANGELOG.md, newest first', () => {
    const changelog = readFileSync(new URL('../../CHANGELOG.md', import.meta.url), 'utf8');
    const releases = [...changelog.matchAll(/^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$/gm)].map((m) => m[1]);
    expect(releases[0]).toBe(VERSION);
  });

  it('tunnel-agent --version prints it', () => {
    const r = spawnSync(process.execPath, ['agent/bin/tunnel-agent.mjs', '--version'], { encoding: 'utf8', timeout: 30_000 });
    expect(r.stdout).toBe(`tunnel-agent ${VERSION}\n`);
    expect(r.status).toBe(0);
  });

  it('the admin CLI prints it as its one JSON object', async () => {
    expect(cliOk(await runAdminCli({}, ['--version']))).toEqual({ version: VERSION });
  });

  describe('a running gateway', () => {
    let gw: RunningGateway;
    beforeAll(async () => {
      gw = await startGateway();
    }, 60_000);
    afterAll(async () => gw?.close());

    it('/healthz names it', async () => {
      const r = await call(gw.url, 'GET', '/healthz');
      expect(r.status).toBe(200);
      expect(r.body).toEqual({ status: 'ok', version: VERSION });
    });

    it('/metrics has tunnelgate_build_info with it', async () => {
      const m = await call(gw.url, 'GET', '/metrics');
      expect(m.status).toBe(200);
      expect(m.text).toContain(`tunnelgate_build_info{version="${VERSION}"} 1`);
    });
  });
});
