// The small Markdown of the API description (panel/src/pages/developers/api/prose.ts): parsed into data,
// never HTML.
import { describe, expect, it } from 'vitest';
import { blocks, inline } from '../../panel/src/pages/developers/api/prose.ts';

describe('blocks', () => {
  it('joins the lines of a paragraph, splits paragraphs on blank lines, and keeps lists with continued items', () => {
    const text = 'First line\nsecond line.\n\nA list:\n- one\n  continued\n- two\nAfter.\n';
    expect(blocks(text)).toEqual([
      { kind: 'paragraph', text: 'First line second line.' },
      { kind: 'paragraph', text: 'A list:' },
      { kind: 'list', items: ['one continued', 'two'] },
      { kind: 'paragraph', text: 'After.' },
    ]);
  });

  it('answers nothing for empty text', () => {
    expect(blocks('\n\n')).toEqual([]);
  });
});

describe('inline', () => {
  it('finds code, strong and emphasis runs, leaving an unclosed marker as text', () => {
    expect(inline('Send `Idempotency-Key` with **care**, *once*; a * star and `open')).toEqual([
      { kind: 'text', text: 'Send ' },
      { kind: 'code', text: 'Idempotency-Key' },
      { kind: 'text', text: ' with ' },
      { kind: 'strong', text: 'care' },
      { kind: 'text', text: ', ' },
      { kind: 'em', text: 'once' },
      { kind: 'text', text: '; a * star and `open' },
    ]);
  });

  it('leaves markup-looking text as text (the page renders runs as text nodes)', () => {
    expect(inline('<script>alert(1)</script>')).toEqual([{ kind: 'text', text: '<script>alert(1)</script>' }]);
  });
});
