// The upgrade test's way to the previous release (test/upgrade/previous-release.ts): its commit from git
// history, refused with what to do when the clone is shallow or the commit unknown, and its lockfile held
// to this checkout's dependencies.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { checkPreviousRelease, lockfileDifferences, materialisePreviousRelease, readPreviousRecord } from './previous-release.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const record = readPreviousRecord();
const made: string[] = [];
afterAll(() => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

describe('the previous release from git history', () => {
  it('every dependency its lockfile pins is installed here as pinned; a changed or missing one is named, an added one is none', () => {
    const previous = JSON.parse(execFileSync('git', ['-C', ROOT, 'show', `${record.commit}:package-lock.json`], { encoding: 'utf8' }));
    const current = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8'));
    expect(lockfileDifferences(previous, current)).toEqual([]);
    // A workspace's own version alone is no difference; a dependency's version is.
    const bumped = structuredClone(current);
    bumped.packages['agent'].version = '9.9.9';
    expect(lockfileDifferences(previous, bumped)).toEqual([]);
    // A package only this checkout installs (a new tool) is no difference either.
    bumped.packages['node_modules/a-new-tool'] = { version: '1.0.0' };
    expect(lockfileDifferences(previous, bumped)).toEqual([]);
    bumped.packages['node_modules/koa'].version = '0.0.1';
    delete bumped.packages['node_modules/ws'];
    expect(lockfileDifferences(previous, bumped)).toEqual(['packages["node_modules/koa"]', 'packages["node_modules/ws"]']);
  });

  it('a shallow clone without the commit is refused with `git fetch --unshallow`; an unknown commit names the record', () => {
    const clone = mkdtempSync(join(tmpdir(), 'tg-shallow-'));
    made.push(clone);
    execFileSync('git', ['clone', '-q', '--depth', '1', `file://${ROOT}`, clone], { stdio: 'ignore' });
    expect(() => checkPreviousRelease(record, clone)).toThrow(/clone is shallow\. Run `git fetch --unshallow`/);
    expect(() => checkPreviousRelease({ version: record.version, commit: '0'.repeat(40) }, ROOT)).toThrow(/not in this repository's history.*release\/previous\.json/);
  });

  it('materialised: the release\'s own tree at its version, this checkout\'s node_modules linked in, removed after', () => {
    const prev = materialisePreviousRelease();
    made.push(prev.root);
    expect(JSON.parse(readFileSync(join(prev.root, 'package.json'), 'utf8')).version).toBe(record.version);
    expect(realpathSync(join(prev.root, 'node_modules'))).toBe(realpathSync(join(ROOT, 'node_modules')));
    // Its files are the commit's, not this checkout's.
    expect(readFileSync(join(prev.root, 'agent/main.ts'), 'utf8')).toBe(execFileSync('git', ['-C', ROOT, 'show', `${record.commit}:agent/main.ts`], { encoding: 'utf8' }));
    prev.remove();
    expect(existsSync(prev.root)).toBe(false);
  });
});
