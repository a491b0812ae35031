// DATA_DIR is one absolute place whatever the working directory, and private to the gateway's user
// (docs/SECURITY.md row 22): the gateway and an admin CLI started elsewhere find the same admin socket.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { loadConfig } from '../../server/config.ts';
import { prepareDataDir } from '../../server/data-dir.ts';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-data-dir-'));
const cwd = process.cwd();
afterAll(() => {
  process.chdir(cwd);
  fs.rmSync(tmp, { recursive: true, force: true });
});

it('a relative DATA_DIR (and the default) resolves to the same absolute path from any working directory', () => {
  const seen = (env: NodeJS.ProcessEnv) =>
    [cwd, tmp, '/'].map((dir) => {
      process.chdir(dir);
      return loadConfig(env).dataDir;
    });
  for (const env of [{ DATA_DIR: 'var/tg-data' }, { DATA_DIR: './var/../tg' }, {}]) {
    const dirs = seen(env);
    expect(path.isAbsolute(dirs[0]!)).toBe(true);
    expect(new Set(dirs).size, JSON.stringify(env)).toBe(1);
  }
  // Relative to the installation (the repository here), like `npm run admin` from its root.
  process.chdir('/');
  expect(loadConfig({ DATA_DIR: 'var/tg-data' }).dataDir).toBe(path.join(cwd, 'var/tg-data'));
  expect(loadConfig({ DATA_DIR: tmp }).dataDir).toBe(tmp);
  process.chdir(cwd);
});

it('prepareDataDir creates the directory 0700, and narrows an existing one of ours to 0700', () => {
  const made = path.join(tmp, 'a/b/data');
  const old = process.umask(0o022);
  try {
    prepareDataDir(made);
  } finally {
    process.umask(old);
  }
  expect(fs.statSync(made).mode & 0o777).toBe(0o700);
  const open = path.join(tmp, 'open');
  fs.mkdirSync(open, { mode: 0o777 });
  fs.chmodSync(open, 0o755);
  prepareDataDir(open);
  expect(fs.statSync(open).mode & 0o777).toBe(0o700);
});
