// No tracked file points at an issue by its number (the brief's style rule: "never mention an issue number").
// A reader of the code has the repository, not the tracker: a comment, document or test name that says
// "see issue N" tells them nothing, so each one says the reason itself (what the rule protects, why it is there).
// The scan covers every tracked text file a person reads: code, tests, scripts, documents, schemas and
// configuration. Recorded binary fixtures (test/fixtures/netlink/*.hex: kernel messages as captured) and
// images are not text a person writes, so their extensions are not listed.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, trackedFiles } from '../helpers/source-tree.ts';

const TEXT = /\.(ts|tsx|mts|cts|js|mjs|cjs|md|yaml|yml|json|graphql|sh|css|html|txt|service|nft|c|example)$/;

/** The word "issue" (or "issues", any case), then a number, with a space, a `#` or nothing between. */
const MENTION = /\bissues?\s?#?\d+/i;

/** Every line of `text` that mentions an issue number, as `path:line: text`. */
function mentions(path: string, text: string): string[] {
  const out: string[] = [];
  text.split('\n').forEach((line, i) => {
    if (MENTION.test(line)) out.push(`${path}:${i + 1}: ${line.trim().slice(0, 160)}`);
  });
  return out;
}

describe('no issue numbers', () => {
  it('no tracked text file mentions an issue by its number', () => {
    const files = trackedFiles().filter((f) => TEXT.test(f));
    // The list really holds the sources and documents (a listing that found none would pass vacuously).
    expect(files.length).toBeGreaterThan(500);
    expect(files).toContain('docs/CONTRACTS.md');
    expect(files).toContain('schema/openapi.yaml');
    const found = files.flatMap((path) => mentions(path, readFileSync(join(ROOT, path), 'utf8')));
    expect(found, `say the reason itself, not the issue's number:\n${found.join('\n')}`).toEqual([]);
  });

  it('finds a mention in any spelling and names its file and line; other numbers and the word alone pass', () => {
    // Built from parts, so this file holds no mention of its own.
    const word = 'iss' + 'ue';
    const text = [
      '// fine: an issue of the tracker is not named here',
      `// (${word} 8 item 3) one broken tunnel`,
      `# ${word.toUpperCase()}S 10 and 11`,
      `x = 1; // see ${word} #12`,
      `it('works (${word}16)', () => {})`,
      '// 10,000 tunnels, item 4 of a list, issued 3 keys',
    ].join('\n');
    expect(mentions('a/b.ts', text)).toEqual([
      `a/b.ts:2: // (${word} 8 item 3) one broken tunnel`,
      `a/b.ts:3: # ${word.toUpperCase()}S 10 and 11`,
      `a/b.ts:4: x = 1; // see ${word} #12`,
      `a/b.ts:5: it('works (${word}16)', () => {})`,
    ]);
  });
});
