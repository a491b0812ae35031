// Every tracked source file stays small enough to read whole (docs/ARCHITECTURE.md "Conventions": one module,
// one job). The aim is under 500 lines, split by what the code does (as agent/netlink/nftables/ keeps one module
// per kernel object); this test fails at more than MAX_LINES, so a file cannot drift far past the aim unnoticed,
// and names every file over it. Source means code, tests and scripts included: TypeScript, JavaScript modules
// and shell. Generated and built files are not tracked (agent/dist, panel/dist, panel/src/graphql/generated.ts),
// and documents, schemas and data are not code.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, trackedFiles } from '../helpers/source-tree.ts';

const MAX_LINES = 600;
const SOURCE = /\.(ts|tsx|mts|cts|js|mjs|cjs|sh)$/;

/** Lines as an editor numbers them: a last line without its newline counts too. */
function lineCount(text: string): number {
  if (text === '') return 0;
  let n = 0;
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) n++;
  return text.endsWith('\n') ? n : n + 1;
}

/** The files over `max` lines, longest first, as `path: N lines`. */
function oversized(files: readonly { path: string; lines: number }[], max: number): string[] {
  return files
    .filter((f) => f.lines > max)
    .sort((a, b) => b.lines - a.lines || a.path.localeCompare(b.path))
    .map((f) => `${f.path}: ${f.lines} lines`);
}

describe('file size', () => {
  it(`no tracked source file has more than ${MAX_LINES} lines`, () => {
    const files = trackedFiles()
      .filter((f) => SOURCE.test(f))
      .map((path) => ({ path, lines: lineCount(readFileSync(join(ROOT, path), 'utf8')) }));
    // The list really holds the sources, each counted (a listing that found none would pass vacuously).
    expect(files.length).toBeGreaterThan(400);
    expect(files.find((f) => f.path === 'agent/main.ts')?.lines).toBeGreaterThan(100);
    const over = oversized(files, MAX_LINES);
    expect(over, `source files over ${MAX_LINES} lines (split them by what they do):\n${over.join('\n')}`).toEqual([]);
  });

  it('counts lines as an editor does and names the files over the limit, longest first', () => {
    expect(lineCount('')).toBe(0);
    expect(lineCount('a')).toBe(1);
    expect(lineCount('a\n')).toBe(1);
    expect(lineCount('a\nb')).toBe(2);
    expect(lineCount('a\n\nb\n')).toBe(3);
    const files = [
      { path: 'x.ts', lines: 600 },
      { path: 'y.ts', lines: 601 },
      { path: 'z.sh', lines: 900 },
    ];
    expect(oversized(files, 600)).toEqual(['z.sh: 900 lines', 'y.ts: 601 lines']);
  });
});
