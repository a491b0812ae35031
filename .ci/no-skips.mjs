// Fails the CI run when vitest skipped anything: README promises that CI runs every test, so a test that
// was skipped (a prerequisite missing, a leftover `.skip`/`.todo`) must fail the run rather than let it pass.
// Reads the JSON report `npm test` wrote (vitest's json reporter, path as the first argument).
import { readFileSync } from 'node:fs';

const report = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const skipped = [];
for (const file of report.testResults) {
  for (const t of file.assertionResults) {
    if (t.status !== 'passed' && t.status !== 'failed') skipped.push(`${t.status}: ${file.name}: ${t.fullName}`);
  }
}
if (skipped.length > 0) {
  console.error(`CI skips nothing, but vitest did not run ${skipped.length} test(s):\n${skipped.join('\n')}`);
  process.exit(1);
}
console.log(`no test skipped (${report.numTotalTests} tests)`);
