// The repository's own source as the structure tests read it: the files git tracks (so nothing generated or
// built, which is ignored: agent/dist, panel/dist, panel/src/graphql/generated.ts), and the module specifiers a
// file names, read with TypeScript's own pre-processor (static imports, `export … from`, `import type`,
// `import('…')` with a literal, `require('…')`; comments and strings that merely look like imports are not).
// Used by test/unit/import-boundaries.test.ts, import-cycles.test.ts and file-size.test.ts.
import { execFileSync } from 'node:child_process';
import { posix, resolve } from 'node:path';
import ts from 'typescript';

export const ROOT = resolve(import.meta.dirname, '../..');

/** Every file git tracks, as a path relative to the repository's root with `/` separators. */
export function trackedFiles(): string[] {
  const out = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  return out.split('\0').filter((f) => f !== '');
}

/** Every module specifier the file's text names (import, export from, import type, import(), require). */
export function specifiersOf(text: string): string[] {
  const info = ts.preProcessFile(text, true, true);
  return info.importedFiles.map((f) => f.fileName);
}

/**
 * The files among `known` (root-relative paths) that `file` imports by a relative specifier. A specifier names
 * its file with the extension (the repository's rule: `./x.ts`); one without is tried as `.ts`, `.tsx` and a
 * folder's `index.ts`, as a bundler would.
 */
export function relativeImports(file: string, text: string, known: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const specifier of specifiersOf(text)) {
    if (!specifier.startsWith('./') && !specifier.startsWith('../')) continue;
    const base = posix.normalize(posix.join(posix.dirname(file), specifier));
    const target = [base, `${base}.ts`, `${base}.tsx`, `${base}/index.ts`].find((c) => known.has(c));
    if (target !== undefined && !out.includes(target)) out.push(target);
  }
  return out;
}
