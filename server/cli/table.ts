// `--format table` of the admin CLI's read commands (docs/CONTRACTS.md "Admin CLI"): the same result the
// JSON prints, laid out for a person at a terminal. JSON stays the default, and the only form scripts
// should read: a table drops nothing, but its layout (column order, widths, how nested values are shown)
// may change.
//
//   a list  {items: [...], next_cursor}  one row per item under a header of its keys; "(none)" when
//                                         empty; a last line `next_cursor: …` when there is a next page
//   one object (a show)                   one `key  value` line per key
// Cells: null is "-", an array its items joined by ", ", an object its `key=value` pairs (a 0 count is
// left out, so a node's tunnels-by-status cell shows what is there), anything else as JSON prints it
// without quotes. A newline or tab inside a value is escaped, so one row stays one line.
import type { OptionSpec } from './args.ts';

const FORMATS = ['json', 'table'] as const;

/** The option every read command takes (server/cli/commands.ts adds it to the commands marked `read`). */
export const FORMAT_OPTION: OptionSpec = {
  name: 'format',
  value: FORMATS.join('|'),
  help: 'json (default, one line, for scripts) or table (aligned columns, for people)',
  choices: FORMATS,
};

function cell(v: unknown): string {
  if (v === null || v === undefined) return '-';
  if (Array.isArray(v)) return v.length === 0 ? '-' : v.map(cell).join(', ');
  if (typeof v === 'object') {
    const parts = Object.entries(v as Record<string, unknown>)
      .filter(([, x]) => x !== 0)
      .map(([k, x]) => `${k}=${cell(x)}`);
    return parts.length === 0 ? '-' : parts.join(' ');
  }
  const text = typeof v === 'string' ? v : JSON.stringify(v);
  return text.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/\r/g, '\\r').replace(/\t/g, '\\t');
}

function isPage(result: Record<string, unknown>): result is { items: Record<string, unknown>[]; next_cursor?: string | null } {
  return Array.isArray(result.items) && Object.keys(result).every((k) => k === 'items' || k === 'next_cursor');
}

/** The printed text (ending in a newline) of one command's result as a table. */
export function renderTable(result: Record<string, unknown>): string {
  if (isPage(result)) {
    const columns: string[] = [];
    for (const item of result.items) for (const k of Object.keys(item)) if (!columns.includes(k)) columns.push(k);
    const lines: string[] = [];
    if (result.items.length === 0) lines.push('(none)');
    else {
      const rows = [columns, ...result.items.map((item) => columns.map((c) => cell(item[c])))];
      const widths = columns.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
      for (const r of rows) lines.push(r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  '));
    }
    if (result.next_cursor) lines.push(`next_cursor: ${result.next_cursor}`);
    return lines.join('\n') + '\n';
  }
  const keys = Object.keys(result);
  const width = Math.max(0, ...keys.map((k) => k.length));
  return keys.map((k) => `${k.padEnd(width)}  ${cell(result[k])}`).join('\n') + '\n';
}
