// .ci/no-skips.mjs: the CI run fails when vitest skipped a test, and passes when every test ran.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

function check(statuses: string[]) {
  const file = join(mkdtempSync(join(tmpdir(), 'tg-noskips-')), 'report.json');
  const assertionResults = statuses.map((status, i) => ({ status, fullName: `test ${i}` }));
  writeFileSync(file, JSON.stringify({ numTotalTests: statuses.length, testResults: [{ name: 'a.test.ts', assertionResults }] }));
  return spawnSync(process.execPath, ['.ci/no-skips.mjs', file], { encoding: 'utf8' });
}

describe('.ci/no-skips.mjs', () => {
  it('passes a report where every test passed or failed (vitest itself fails the run on a failure)', () => {
    const r = check(['passed', 'passed', 'failed']);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('no test skipped (3 tests)');
  });

  it('fails on a skipped, pending or todo test and names it', () => {
    for (const status of ['skipped', 'pending', 'todo']) {
      const r = check(['passed', status]);
      expect(r.status).toBe(1);
      expect(r.stderr).toContain(`${status}: a.test.ts: test 1`);
    }
  });
});
