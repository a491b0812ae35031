// The two text files an origin script is made of, read once when the gateway starts, from this
// module's own directory (so the working directory does not matter, and a missing file stops the start
// rather than a buyer's request). They ship with the sources: the Dockerfile copies server/, and
// `npm start` runs from them.
//
// - origin.sh: the script as a real shell script, checked by shellcheck as it is. A stand-in header of
//   empty values sits above the marker line; the gateway serves only what follows the marker, after a
//   header it renders itself (origin-scripts.ts).
// - tunnelgate-origin.service: the systemd unit, with @NAME@ where a tunnel's value goes.
import { readFileSync } from 'node:fs';

export const ORIGIN_SCRIPT_FILE = new URL('./origin.sh', import.meta.url);
export const ORIGIN_UNIT_FILE = new URL('./tunnelgate-origin.service', import.meta.url);

/** The line in origin.sh after which every byte is served as it is. */
export const BODY_MARKER = '# ---- end of the stand-in header: the gateway serves every line below as it is ----';

/** The names a rendered unit fills in; the template must use each, and no other. */
export const UNIT_PLACEHOLDERS = ['TUNNEL_NAME', 'TUNNEL_ID', 'SCRIPT_PATH', 'UNIT_NAME', 'EDGE_IP'] as const;
export type UnitPlaceholder = (typeof UNIT_PLACEHOLDERS)[number];

const PLACEHOLDER = /@([A-Z_]+)@/g;

/** What follows the marker line: the part of origin.sh every tunnel's script shares. */
export function scriptBody(text: string, file = 'origin.sh'): string {
  const lines = text.split('\n');
  const at = lines.indexOf(BODY_MARKER);
  if (at === -1 || lines.indexOf(BODY_MARKER, at + 1) !== -1) {
    throw new Error(`${file}: the line ${JSON.stringify(BODY_MARKER)} must appear exactly once`);
  }
  return lines.slice(at + 1).join('\n');
}

/** The unit template, refused unless its placeholders are exactly UNIT_PLACEHOLDERS. */
export function unitTemplate(text: string, file = 'tunnelgate-origin.service'): string {
  const used = new Set([...text.matchAll(PLACEHOLDER)].map((m) => m[1]!));
  const known = new Set<string>(UNIT_PLACEHOLDERS);
  const unknown = [...used].filter((n) => !known.has(n));
  const unused = [...known].filter((n) => !used.has(n));
  if (unknown.length || unused.length) {
    throw new Error(`${file}: placeholders must be exactly @${UNIT_PLACEHOLDERS.join('@, @')}@ (unknown: ${unknown.join(', ') || 'none'}; unused: ${unused.join(', ') || 'none'})`);
  }
  return text;
}

/**
 * The unit with every @NAME@ replaced by its value. The values are checked ones (validate.ts): none holds
 * a newline or an '@', so a value can neither add a unit line nor form a placeholder.
 */
export function fillUnit(template: string, values: Record<UnitPlaceholder, string>): string {
  // A replacer function, so a '$' in a value is never read as a replacement pattern.
  return template.replace(PLACEHOLDER, (_m, name: string) => values[name as UnitPlaceholder]);
}

export const ORIGIN_BODY = scriptBody(readFileSync(ORIGIN_SCRIPT_FILE, 'utf8'));
export const UNIT_TEMPLATE = unitTemplate(readFileSync(ORIGIN_UNIT_FILE, 'utf8'));
