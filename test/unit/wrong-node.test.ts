// The gateway and the admin CLI started by hand with an older Node (the machine's own /usr/bin/node,
// Node 20 on Debian 12 here and in CI): the loader stops them at once with one line saying Node 24 is
// needed and to go through npm, instead of a missing-export error from deep inside the code.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { skipUnless } from '../helpers/requirements.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const OLD_NODE = '/usr/bin/node';

/** The major version of /usr/bin/node, or null when there is none. */
function oldNodeMajor(): number | null {
  if (!existsSync(OLD_NODE)) return null;
  const r = spawnSync(OLD_NODE, ['-p', 'process.versions.node'], { encoding: 'utf8' });
  return r.status === 0 ? Number(r.stdout.trim().split('.')[0]) : null;
}
const major = oldNodeMajor();

describe.skipIf(skipUnless(major !== null && major < 24, `wrong-Node test: ${OLD_NODE} older than Node 24 (found ${major === null ? 'none' : `Node ${major}`})`))('an older Node', () => {
  const run = (loader: string, args: string[]) => {
    const r = spawnSync(OLD_NODE, ['--enable-source-maps', '--import', loader, ...args], {
      cwd: ROOT,
      encoding: 'utf8',
      env: { PATH: '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp' },
      timeout: 60_000,
    });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr, version: spawnSync(OLD_NODE, ['--version'], { encoding: 'utf8' }).stdout.trim() };
  };

  for (const loader of ['./loader/register.mjs', './loader/register-inline.mjs']) {
    it(`stops the gateway (server/main.ts through ${loader}) with the Node 24 line`, () => {
      const r = run(loader, ['server/main.ts']);
      expect(r.stderr).toBe(
        `Tunnelgate needs Node 24 (this is ${r.version}); run it through npm (\`npm start\`), which uses the Node 24 that \`npm install\` put in node_modules\n`,
      );
      expect(r.stdout).toBe('');
      expect(r.status).toBe(1);
    });

    it(`stops the admin CLI (server/cli/admin.ts through ${loader}) with the Node 24 line naming npm run admin`, () => {
      const r = run(loader, ['server/cli/admin.ts', 'node', 'list']);
      expect(r.stderr).toBe(
        `Tunnelgate needs Node 24 (this is ${r.version}); run it through npm (\`npm run admin -- <command>\`), which uses the Node 24 that \`npm install\` put in node_modules\n`,
      );
      expect(r.status).toBe(1);
    });
  }
});
