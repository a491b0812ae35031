// The small Markdown the API description is written in (schema/openapi.yaml): paragraphs, `- ` lists
// (a list item continues on indented lines), `code`, **strong** and *emphasis*. Parsed into plain data that
// the page renders as elements, never as HTML, so nothing in the document can become markup.

export type Inline = { kind: 'text' | 'code' | 'strong' | 'em'; text: string };
export type Block = { kind: 'paragraph'; text: string } | { kind: 'list'; items: string[] };

/** Splits text into paragraphs and lists; lines of one paragraph are joined with a space. */
export function blocks(text: string): Block[] {
  const out: Block[] = [];
  let paragraph: string[] = [];
  let list: string[] | undefined;
  const flush = () => {
    if (paragraph.length) out.push({ kind: 'paragraph', text: paragraph.join(' ') });
    paragraph = [];
    if (list) out.push({ kind: 'list', items: list });
    list = undefined;
  };
  for (const raw of text.split('\n')) {
    const line = raw.trimEnd();
    const item = /^\s*[-*] (.*)$/.exec(line);
    if (line.trim() === '') flush();
    else if (item) {
      if (paragraph.length) {
        out.push({ kind: 'paragraph', text: paragraph.join(' ') });
        paragraph = [];
      }
      (list ??= []).push(item[1]!.trim());
    } else if (list && /^\s+/.test(line)) list[list.length - 1] += ` ${line.trim()}`;
    else {
      if (list) flush();
      paragraph.push(line.trim());
    }
  }
  flush();
  return out;
}

/** Splits a line into text, `code`, **strong** and *emphasis* runs; an unclosed marker stays as text. */
export function inline(text: string): Inline[] {
  const out: Inline[] = [];
  const pattern = /`([^`]+)`|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*/g;
  let last = 0;
  for (const m of text.matchAll(pattern)) {
    if (m.index > last) out.push({ kind: 'text', text: text.slice(last, m.index) });
    if (m[1] !== undefined) out.push({ kind: 'code', text: m[1] });
    else if (m[2] !== undefined) out.push({ kind: 'strong', text: m[2] });
    else out.push({ kind: 'em', text: m[3]! });
    last = m.index + m[0].length;
  }
  if (last < text.length) out.push({ kind: 'text', text: text.slice(last) });
  return out;
}
