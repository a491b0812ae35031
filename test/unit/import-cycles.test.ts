// No import cycles among our own modules (docs/ARCHITECTURE.md "Conventions"). A cycle means neither module can
// be read, tested or moved without the other, and with ES modules one of them runs against the other's
// half-initialised bindings. Every import counts, `import type` and `import()` included: a type-only cycle tangles
// the modules just the same, only without the runtime symptom. The test walks the relative imports of every
// tracked .ts/.tsx file under the programs' folders and names each cycle as a path, `a.ts -> b.ts -> a.ts`.
// The usual way out is to move what both sides need (types, mostly) into a module below both.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, relativeImports, trackedFiles } from '../helpers/source-tree.ts';

/** The folders whose modules must not import each other in a circle. */
const FOLDERS = ['agent/', 'server/', 'common/', 'panel/src/', 'bench/'];

type Graph = ReadonlyMap<string, readonly string[]>;

/** Each file's relative imports of other files of the graph. */
function importGraph(): Graph {
  const files = trackedFiles().filter((f) => /\.tsx?$/.test(f) && FOLDERS.some((d) => f.startsWith(d)));
  const known = new Set(files);
  return new Map(files.map((f) => [f, relativeImports(f, readFileSync(join(ROOT, f), 'utf8'), known)]));
}

/** The strongly connected components of more than one file, or of one that imports itself (Tarjan). */
function tangles(graph: Graph): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next);
    next++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(component.sort());
  };
  for (const v of [...graph.keys()].sort()) if (!index.has(v)) visit(v);
  return out;
}

/**
 * The cycles of a graph as paths: through each file of a tangle, the shortest way back to itself (breadth
 * first, inside the tangle), each cycle once whichever file it was found from.
 */
function importCycles(graph: Graph): string[] {
  const cycles = new Set<string>();
  for (const component of tangles(graph)) {
    const inside = new Set(component);
    for (const start of component) {
      const from = new Map<string, string>();
      const queue = [start];
      let closedBy: string | undefined;
      for (let i = 0; i < queue.length && closedBy === undefined; i++) {
        const v = queue[i]!;
        for (const w of graph.get(v) ?? []) {
          if (!inside.has(w)) continue;
          if (w === start) {
            closedBy = v;
            break;
          }
          if (!from.has(w)) {
            from.set(w, v);
            queue.push(w);
          }
        }
      }
      if (closedBy === undefined) continue;
      const path = [closedBy];
      while (path[0] !== start) path.unshift(from.get(path[0]!)!);
      // One spelling per cycle: rotated to start at its first file in sort order.
      const first = path.indexOf([...path].sort()[0]!);
      const rotated = [...path.slice(first), ...path.slice(0, first)];
      cycles.add([...rotated, rotated[0]].join(' -> '));
    }
  }
  return [...cycles].sort();
}

describe('import cycles', () => {
  it('no module of agent/, server/, common/, panel/src/ or bench/ imports itself through others', () => {
    const graph = importGraph();
    // The walk really read the trees and their imports (a walker that found none would pass vacuously).
    expect(graph.size).toBeGreaterThan(200);
    expect(graph.get('agent/dataplane/index.ts')).toContain('agent/dataplane/edge-dataplane.ts');
    expect(graph.get('panel/src/app/App.tsx')).toContain('panel/src/app/routes.tsx');
    const cycles = importCycles(graph);
    expect(cycles, `import cycles (move what both sides need below them):\n${cycles.join('\n')}`).toEqual([]);
  });

  it('names every cycle as a path, each once, and nothing that is not one', () => {
    const graph = new Map<string, string[]>([
      ['a.ts', ['b.ts', 'x.ts']],
      ['b.ts', ['c.ts']],
      ['c.ts', ['a.ts', 'b.ts']],
      ['self.ts', ['self.ts']],
      ['x.ts', ['y.ts']],
      ['y.ts', []],
    ]);
    expect(importCycles(graph)).toEqual(['a.ts -> b.ts -> c.ts -> a.ts', 'b.ts -> c.ts -> b.ts', 'self.ts -> self.ts']);
    expect(importCycles(new Map([['x.ts', ['y.ts']], ['y.ts', []]]))).toEqual([]);
  });

  it('reads every import form, resolves it against the tracked files, and skips packages', () => {
    const known = new Set(['server/a.ts', 'server/b.ts', 'server/c/index.ts', 'server/d.tsx', 'common/e.ts']);
    const text = [
      "import { x } from './b.ts';",
      "import type { Y } from './c';",
      "export { z } from './d';",
      "const e = await import('../common/e.ts');",
      "import koa from 'koa';",
      "import { gone } from './not-tracked.ts';",
      "// import { f } from './a.ts';",
    ].join('\n');
    expect(relativeImports('server/a.ts', text, known)).toEqual(['server/b.ts', 'server/c/index.ts', 'server/d.tsx', 'common/e.ts']);
  });
});
