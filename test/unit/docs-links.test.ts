// The Markdown a reader meets first (README.md and docs/*.md) must hold together as GitHub renders it:
// every relative link names a file that exists, and a `#fragment` names a heading of that file (GitHub's
// slugs); fenced blocks are closed; table rows have the header's number of cells (an unescaped `|` in a
// cell splits it). The user-facing guides carry no issue numbers (the reason is written out instead), and
// the GraphQL examples of docs/API.md are valid against schema/schema.graphql, so none of this can go stale
// unseen.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { buildSchema, getVariableValues, parse, validate, type OperationDefinitionNode } from 'graphql';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const DOCS = join(ROOT, 'docs');
const PAGES = ['README.md', ...readdirSync(DOCS).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`)];
/** Pages written for operators, integrators and buyers (README and the guides it links by reader). */
const USER_FACING = ['README.md', 'docs/OPERATOR.md', 'docs/API.md', 'docs/BUYER.md', 'docs/CONFIGURATION.md', 'docs/BENCHMARKS.md', 'docs/TESTING.md'];

interface Page {
  /** Lines outside fenced blocks, with their 1-based numbers: as written, and with inline code spans blanked out. */
  prose: { n: number; raw: string; text: string }[];
  /** Each fenced block's body, with the line its fence opened on. */
  fences: { n: number; info: string; body: string }[];
  /** The line of a fence never closed, if any. */
  unclosed?: number;
}

function read(path: string): Page {
  const lines = readFileSync(join(ROOT, path), 'utf8').split('\n');
  const page: Page = { prose: [], fences: [] };
  let open: { n: number; marker: string; info: string; body: string[] } | undefined;
  lines.forEach((line, i) => {
    const fence = /^\s*(`{3,}|~{3,})(.*)$/.exec(line);
    if (open) {
      if (fence && fence[1]!.startsWith(open.marker) && fence[2]!.trim() === '') {
        page.fences.push({ n: open.n, info: open.info, body: open.body.join('\n') });
        open = undefined;
      } else open.body.push(line);
    } else if (fence) {
      open = { n: i + 1, marker: fence[1]!, info: fence[2]!.trim(), body: [] };
    } else {
      page.prose.push({ n: i + 1, raw: line, text: line.replace(/(`+)(?:(?!\1).)+\1/g, (m) => ' '.repeat(m.length)) });
    }
  });
  if (open) page.unclosed = open.n;
  return page;
}

/** GitHub's heading anchor (github-slugger): lower case, punctuation dropped, each space a hyphen, repeats numbered. */
function anchorsOf(page: Page): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const { raw } of page.prose) {
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(raw);
    if (!h) continue;
    const text = h[1]!.replace(/\[([^\]]*)\]\([^)]*\)/g, '$1').replace(/[`*]/g, '');
    const base = text.toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-');
    const k = seen.get(base) ?? 0;
    seen.set(base, k + 1);
    out.add(k === 0 ? base : `${base}-${k}`);
  }
  return out;
}

function linksOf(page: Page): { n: number; target: string }[] {
  const out: { n: number; target: string }[] = [];
  for (const { n, text } of page.prose) {
    for (const m of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push({ n, target: m[1]! });
  }
  return out;
}

describe('README and docs/ render and link as GitHub shows them', () => {
  it.each(PAGES)('%s: fenced blocks are closed and table rows have the header\'s cells', (path) => {
    const page = read(path);
    expect(page.unclosed, `${path}: the fence opened on line ${page.unclosed} is never closed`).toBeUndefined();
    const problems: string[] = [];
    let header: number | undefined;
    for (const { n, raw } of page.prose) {
      if (!raw.trimStart().startsWith('|')) {
        header = undefined;
        continue;
      }
      const cells = raw.trim().replace(/^\||\|$/g, '').split(/(?<!\\)\|/).length;
      if (header === undefined) header = cells;
      else if (cells !== header) problems.push(`${path}:${n}: ${cells} cells, the table's header has ${header}`);
    }
    expect(problems).toEqual([]);
  });

  it.each(PAGES)('%s: every relative link resolves, fragments included', (path) => {
    const problems: string[] = [];
    for (const { n, target } of linksOf(read(path))) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: ...
      const [file, fragment] = target.split('#', 2) as [string, string | undefined];
      const abs = file === '' ? join(ROOT, path) : resolve(dirname(join(ROOT, path)), file);
      if (!abs.startsWith(ROOT) || !existsSync(abs)) {
        problems.push(`${path}:${n}: ${target}: no such file`);
        continue;
      }
      if (fragment === undefined) continue;
      const rel = relative(ROOT, abs);
      if (statSync(abs).isDirectory() || !rel.endsWith('.md')) {
        problems.push(`${path}:${n}: ${target}: a fragment on something that is not a Markdown page`);
        continue;
      }
      if (!anchorsOf(read(rel)).has(fragment)) problems.push(`${path}:${n}: ${target}: ${rel} has no heading #${fragment}`);
    }
    expect(problems).toEqual([]);
  });

  it('every page in docs/ is linked from README or from a page README links to', () => {
    const reached = new Set<string>(['README.md']);
    const queue = ['README.md'];
    while (queue.length > 0) {
      const path = queue.shift()!;
      for (const { target } of linksOf(read(path))) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
        const file = target.split('#')[0]!;
        if (file === '') continue;
        const rel = relative(ROOT, resolve(dirname(join(ROOT, path)), file));
        if (rel.endsWith('.md') && !reached.has(rel) && existsSync(join(ROOT, rel))) {
          reached.add(rel);
          queue.push(rel);
        }
      }
    }
    expect(PAGES.filter((p) => !reached.has(p))).toEqual([]);
  });

  it.each(USER_FACING)('%s names no issue numbers', (path) => {
    const text = readFileSync(join(ROOT, path), 'utf8');
    expect(text.match(/.{0,30}\bissues?[ -]#?\d+.{0,30}/gi) ?? []).toEqual([]);
  });
});

describe('docs/API.md: the GraphQL examples are valid against schema/schema.graphql', () => {
  const schema = buildSchema(readFileSync(join(ROOT, 'schema/schema.graphql'), 'utf8'));
  const api = read('docs/API.md');

  it('the query with variables sent with curl', () => {
    const block = api.fences.find((f) => f.body.includes('/graphql') && f.body.includes("<<'END'"));
    expect(block, 'a curl example posting to /graphql with a heredoc body').toBeDefined();
    const json = /<<'END'\n([\s\S]*?)\nEND/.exec(block!.body)?.[1];
    const body = JSON.parse(json!) as { query: string; variables: Record<string, unknown> };
    const doc = parse(body.query);
    expect(validate(schema, doc).map((e) => e.message)).toEqual([]);
    const op = doc.definitions.find((d): d is OperationDefinitionNode => d.kind === 'OperationDefinition')!;
    expect(op.variableDefinitions?.length, 'the example shows variables').toBeGreaterThan(0);
    const coerced = getVariableValues(schema, op.variableDefinitions ?? [], body.variables);
    expect(coerced.errors?.map((e) => e.message) ?? []).toEqual([]);
  });

  it('the subscription', () => {
    const block = api.fences.find((f) => f.body.includes('graphql-ws'));
    const query = /query: '([^']*subscription[^']*)'/.exec(block?.body ?? '')?.[1];
    expect(query, 'a graphql-ws example with a subscription').toBeDefined();
    expect(validate(schema, parse(query!)).map((e) => e.message)).toEqual([]);
  });
});
