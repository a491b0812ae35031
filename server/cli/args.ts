// Command-line parsing for the admin CLI: node:util parseArgs in strict mode, plus the checks it does
// not make (required options, duplicates of single-valued options, choices, integers, ISO times).
// Every problem becomes a UsageError (exit status 2) with a message that names the option.
import { parseArgs } from 'node:util';

export class UsageError extends Error {
  override name = 'UsageError';
}

export interface OptionSpec {
  /** Long name without the dashes, e.g. `redirect-uri`. */
  name: string;
  /** Placeholder in the help text, e.g. `EMAIL`. */
  value: string;
  help: string;
  required?: boolean;
  /** May be given more than once (collected in order). */
  multiple?: boolean;
  choices?: readonly string[];
  /** `-` means: the first line of standard input (docs/CONTRACTS.md "Admin CLI"; keeps secrets out of ps and shell history). */
  stdin?: boolean;
  /** A switch without a value (`--public`): parsed as the string `true` when given, absent otherwise. */
  flag?: boolean;
}

export type ParsedOptions = Record<string, string | string[] | undefined>;

/** Parses `args` (everything after the command words) against `specs`. Returns null when help was asked for. */
export function parseOptions(command: string, specs: readonly OptionSpec[], args: readonly string[]): ParsedOptions | null {
  // Help wins over any other problem on the line, so `... --bogus --help` still shows the usage.
  const terminator = args.indexOf('--');
  const head = terminator === -1 ? args : args.slice(0, terminator);
  if (head.includes('--help') || head.includes('-h')) return null;

  const options: Record<string, { type: 'string' | 'boolean'; multiple: true }> = {};
  for (const s of specs) options[s.name] = { type: s.flag ? 'boolean' : 'string', multiple: true };
  let values: Record<string, Array<string | boolean> | undefined>;
  try {
    ({ values } = parseArgs({ args: [...args], options, strict: true, allowPositionals: false }) as { values: Record<string, Array<string | boolean> | undefined> });
  } catch (e) {
    throw translate(command, specs, e as Error & { code?: string });
  }

  const out: ParsedOptions = {};
  for (const s of specs) {
    const given = (values[s.name] ?? []).map(String);
    if (given.length === 0) {
      if (s.required) throw new UsageError(`${command}: --${s.name} is required.`);
      continue;
    }
    if (!s.multiple && given.length > 1) throw new UsageError(`${command}: --${s.name} was given ${given.length} times; give it once.`);
    for (const v of given) {
      if (v === '') throw new UsageError(`${command}: --${s.name} must not be empty.`);
      if (s.choices && !s.choices.includes(v)) {
        throw new UsageError(`${command}: --${s.name} must be one of ${s.choices.join(', ')}; got ${JSON.stringify(v)}.`);
      }
    }
    out[s.name] = s.multiple ? given : given[0];
  }
  return out;
}

function translate(command: string, specs: readonly OptionSpec[], e: Error & { code?: string }): Error {
  const quoted = /'([^']*)'/.exec(e.message)?.[1] ?? '';
  const known = specs.map((s) => `--${s.name}`).join(', ');
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return new UsageError(`${command}: unknown option ${quoted}; it takes ${known} (see --help).`);
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const name = quoted.split(' ')[0] ?? quoted;
      const hint = /ambiguous/.test(e.message) ? ` (for a value that starts with "-", write ${name}=VALUE)` : '';
      return new UsageError(`${command}: ${name} needs a value${hint}.`);
    }
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return new UsageError(`${command}: unexpected argument ${JSON.stringify(quoted)}; values go after their option (${known}).`);
    default:
      return e;
  }
}

/** A whole number in [min, max] written in plain decimal digits. */
export function intOption(command: string, name: string, text: string, min: number, max: number): number {
  if (!/^\d{1,10}$/.test(text)) throw new UsageError(`${command}: --${name} must be a whole number, got ${JSON.stringify(text)}.`);
  const n = Number(text);
  if (n < min || n > max) throw new UsageError(`${command}: --${name} must be between ${min} and ${max}, got ${n}.`);
  return n;
}

const ISO_RE = /^(\d{4})-(\d{2})-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;

/**
 * An ISO 8601 time: a date (`2027-01-31`, midnight UTC) or a date-time with a zone (`Z` or `+03:00`).
 * A date-time without a zone is refused: it would mean a different instant on every machine.
 */
export function isoOption(command: string, name: string, text: string): Date {
  const m = ISO_RE.exec(text);
  const bad = () => new UsageError(`${command}: --${name} must be an ISO 8601 date (2027-01-31) or date-time with a zone (2027-01-31T12:00:00Z), got ${JSON.stringify(text)}.`);
  if (!m) throw bad();
  const [, y, mo, d, h, mi, s] = m;
  const date = new Date(text);
  if (Number.isNaN(date.getTime())) throw bad();
  // Date rolls 2027-02-30 over into March; refuse what does not exist instead.
  const day = new Date(Date.UTC(Number(y), Number(mo) - 1, Number(d)));
  if (day.getUTCFullYear() !== Number(y) || day.getUTCMonth() !== Number(mo) - 1 || day.getUTCDate() !== Number(d)) throw bad();
  if (h !== undefined && (Number(h) > 23 || Number(mi) > 59 || Number(s ?? 0) > 59)) throw bad();
  return date;
}

export function formatUsage(command: string, summary: string, specs: readonly OptionSpec[]): string {
  const synopsis = specs
    .map((s) => {
      const one = s.flag ? `--${s.name}` : `--${s.name} ${s.value}`;
      const shown = s.multiple ? `${one} [${one} ...]` : one;
      return s.required ? shown : `[${shown}]`;
    })
    .join(' ');
  const width = Math.max(...specs.map((s) => s.name.length + s.value.length + 3), 0);
  const lines = specs.map((s) => `  --${(s.flag ? s.name : `${s.name} ${s.value}`).padEnd(width)}  ${s.help}${s.required ? ' (required)' : ''}`);
  return `${wrap(summary, 100)}\n\nUsage: npm run admin -- ${command} ${synopsis}\n\nOptions:\n${lines.join('\n')}\n`;
}

function wrap(text: string, width: number): string {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(/\s+/)) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line ? `${line} ${word}` : word;
    }
  }
  if (line) lines.push(line);
  return lines.join('\n');
}
