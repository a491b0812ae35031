// One place that decides what a test does when this machine lacks something it needs (root for network
// namespaces, chromium, a tool): skip it, saying why, on a developer's machine; fail it in CI, so a CI
// run that "passed" never hides a part that did not run. The GRE VM test has its own switch with the
// same rule (test/vm/vm.ts: TUNNELGATE_VM=require).
//
//   TUNNELGATE_TESTS=require   (.ci/run sets it) a missing prerequisite fails the file
//   CI set                     the same, unless TUNNELGATE_TESTS=allow-skip
//   otherwise                  the test is skipped, with a line on stderr naming what is missing
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const prerequisitesRequired =
  process.env.TUNNELGATE_TESTS === 'require' || (Boolean(process.env.CI) && process.env.TUNNELGATE_TESTS !== 'allow-skip');

/** A test file's prerequisite was required (CI) but is missing here. */
export class MissingPrerequisite extends Error {
  override name = 'MissingPrerequisite';
}

/**
 * For `describe.skipIf(...)` / `it.skipIf(...)`: false when `have` holds (run the tests); when it does not,
 * true (skip) on a developer's machine, or a thrown MissingPrerequisite when prerequisites are required,
 * which fails the whole file at collection with `what` in the report.
 *
 * @param what  the test, and what it needs, in words: 'netns tests: root (network namespaces)'
 */
export function skipUnless(have: boolean, what: string): boolean {
  if (have) return false;
  if (prerequisitesRequired) {
    throw new MissingPrerequisite(`${what} is missing, and prerequisites are required here (TUNNELGATE_TESTS=require or CI set): install it, or set TUNNELGATE_TESTS=allow-skip`);
  }
  process.stderr.write(`skipping: ${what} is missing (in CI this is a failure)\n`);
  return true;
}

/** Whether an executable is on PATH (or in the sbin directories a root shell has). */
export function onPath(cmd: string): boolean {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin'];
  return dirs.some((d) => d !== '' && existsSync(join(d, cmd)));
}
