// The gateway (server/) and the edge agent (agent/) are two programs deployed apart and upgraded at
// different times: neither imports the other, and common/ (what both need) imports neither. This test
// reads the import specifiers of every source file under the three folders with TypeScript's own
// pre-processor (static imports, `export … from`, `import type`, dynamic `import('…')` with a literal,
// `require('…')`) and fails on any that resolves into a folder the file's program may not reach. It also
// checks that the agent's workspace (agent/package.json, what an edge router installs alone) declares
// every package the agent's code, common/ and the agent's loader import.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, specifiersOf } from '../helpers/source-tree.ts';

/** For each program folder, the top-level folders its files must never import from. */
const FORBIDDEN: Record<string, readonly string[]> = {
  server: ['agent'],
  agent: ['server'],
  common: ['server', 'agent'],
};

const SOURCE = /\.(ts|mts|cts|mjs|cjs|js)$/;

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.name === 'node_modules') continue;
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(p));
    else if (SOURCE.test(e.name)) out.push(p);
  }
  return out;
}

interface CrossImport {
  file: string;
  specifier: string;
  reaches: string;
}

/** The imports in `text` (a file at `file`, relative to ROOT) that reach a folder its program may not. */
function crossImports(file: string, text: string): CrossImport[] {
  const top = file.split(/[\\/]/)[0]!;
  const forbidden = FORBIDDEN[top] ?? [];
  const out: CrossImport[] = [];
  for (const specifier of specifiersOf(text)) {
    // Only paths can reach another folder of this repository; package names resolve in node_modules.
    if (!specifier.startsWith('.') && !specifier.startsWith('/')) continue;
    const target = relative(ROOT, resolve(ROOT, dirname(file), specifier));
    const reaches = target.split(sep)[0]!;
    if (forbidden.includes(reaches)) out.push({ file, specifier, reaches });
  }
  return out;
}

/** The npm package a bare specifier names (`rolldown/utils` -> rolldown, `@a/b/c` -> @a/b); null for builtins. */
function packageOf(specifier: string): string | null {
  if (specifier.startsWith('node:')) return null;
  const parts = specifier.split('/');
  return specifier.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
}

const readJson = (path: string) => JSON.parse(readFileSync(join(ROOT, path), 'utf8')) as { dependencies?: Record<string, string> };

describe('import boundaries between the two programs', () => {
  it('no file under server/ imports agent/, none under agent/ imports server/, and common/ imports neither', () => {
    const found: CrossImport[] = [];
    let files = 0;
    for (const top of Object.keys(FORBIDDEN)) {
      for (const path of sourceFiles(join(ROOT, top))) {
        files++;
        found.push(...crossImports(relative(ROOT, path), readFileSync(path, 'utf8')));
      }
    }
    expect(files).toBeGreaterThan(100); // the walk really read the trees
    expect(found, found.map((f) => `${f.file} imports ${f.specifier} (${f.reaches}/)`).join('\n')).toEqual([]);
  });

  it('catches every import form, and only across the boundary', () => {
    const src = [
      "import { a } from '../../agent/jobs/verify.ts';",
      "import type { B } from '../../agent/dataplane/types.ts';",
      "export { c } from '../../agent/ssh/keys.ts';",
      "const d = await import('../../agent/main.ts');",
      "const e = require('../../agent/cidr.ts');",
      "import '../../agent/netlink/socket.ts';",
      "import { f } from '../../common/log.ts';",
      "import { g } from '../db/database.ts';",
      "import ssh2 from 'ssh2';",
      "// import { h } from '../../agent/in-a-comment.ts';",
    ].join('\n');
    expect(crossImports('server/edge/x.ts', src).map((f) => f.specifier)).toEqual([
      '../../agent/jobs/verify.ts',
      '../../agent/dataplane/types.ts',
      '../../agent/ssh/keys.ts',
      '../../agent/main.ts',
      '../../agent/cidr.ts',
      '../../agent/netlink/socket.ts',
    ]);
    expect(crossImports('agent/jobs/x.ts', "import { l } from '../../server/log.ts';\nimport { m } from '../../common/log.ts';")).toHaveLength(1);
    expect(crossImports('common/x.ts', "import { n } from '../server/a.ts';\nimport { o } from '../agent/b.ts';\nimport { p } from './ipv4.ts';")).toHaveLength(2);
    // A path that only looks like the other program's folder from inside its own is fine.
    expect(crossImports('agent/x.ts', "import { q } from './server/thing.ts';")).toEqual([]);
  });

  it('the agent installed alone has every package it imports: agent/package.json declares them, at the gateway\'s versions', () => {
    const agentDeps = readJson('agent/package.json').dependencies ?? {};
    const rootDeps = readJson('package.json').dependencies ?? {};
    const files = [...sourceFiles(join(ROOT, 'agent')), ...sourceFiles(join(ROOT, 'common')), join(ROOT, 'loader/register-inline.mjs'), join(ROOT, 'loader/hooks.mjs')];
    const missing = new Set<string>();
    for (const path of files) {
      for (const specifier of specifiersOf(readFileSync(path, 'utf8'))) {
        if (specifier.startsWith('.') || specifier.startsWith('/')) continue;
        const pkg = packageOf(specifier);
        if (pkg !== null && !(pkg in agentDeps)) missing.add(`${pkg} (${relative(ROOT, path)})`);
      }
    }
    expect([...missing]).toEqual([]);
    // Node 24 itself: the entry re-executes under node_modules/node when the system Node is older.
    expect(agentDeps.node).toBeDefined();
    // One version of each in the one lockfile, whether a host installs the agent alone or everything.
    for (const [pkg, version] of Object.entries(agentDeps)) expect(rootDeps[pkg], pkg).toBe(version);
  });
});
