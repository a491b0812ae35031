// Structured JSON logs: one object per line on stdout, for both programs. Fields are chosen by the
// caller, and callers never pass tokens, keys or passwords on purpose; the redaction rules below are the
// safety net for the ones that slip in by accident (an echoed header, a driver's error text): every string
// in a line (the message, field values, error messages and stacks) passes through them before it is written.
export type Level = 'debug' | 'info' | 'warn' | 'error';
const ORDER: Record<Level | 'silent', number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 };

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  error(msg: string, fields?: Record<string, unknown>): void;
  child(fields: Record<string, unknown>): Logger;
}

/** One rewrite of free text: every match of `pattern` (a global RegExp) becomes `replacement`. */
export interface RedactionRule {
  pattern: RegExp;
  replacement: string;
}

/**
 * The credentials the product hands out: svc_ API keys keep their first 6 id characters (enough to find
 * the key in `apikey list`), and anything after `Bearer` is masked whole; and the password of a URL
 * (`postgres://user:password@host`, as a driver's error may quote DATABASE_URL) keeps only its user; a
 * webhook signing secret (`whsec_`, server/webhooks/signing.ts) is masked whole. The default of every logger.
 */
export const CREDENTIAL_REDACTIONS: readonly RedactionRule[] = [
  { pattern: /(svc_[0-9a-f]{6})[0-9a-f]*_[A-Za-z0-9_-]+/g, replacement: '$1…' },
  { pattern: /(Bearer\s+)\S+/gi, replacement: '$1…' },
  { pattern: /whsec_[A-Za-z0-9+/=]+/g, replacement: 'whsec_…' },
  { pattern: /([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*):[^\s@/]*@/gi, replacement: '$1:…@' },
];

/** Applies the rules to free text (what the logger does to every string it writes). */
export function redact(text: string, rules: readonly RedactionRule[] = CREDENTIAL_REDACTIONS): string {
  let out = text;
  for (const r of rules) out = out.replace(r.pattern, r.replacement);
  return out;
}

/**
 * `redactions` replaces the default rules (CREDENTIAL_REDACTIONS); pass [] for none. A child logger keeps
 * its parent's level, output and rules.
 */
export function createLogger(
  level: Level | 'silent' = 'info',
  base: Record<string, unknown> = {},
  out: (line: string) => void = (l) => process.stdout.write(l),
  redactions: readonly RedactionRule[] = CREDENTIAL_REDACTIONS,
): Logger {
  const min = ORDER[level];
  const replacer = lineReplacer(redactions);
  const emit = (lvl: Level, msg: string, fields?: Record<string, unknown>) => {
    if (ORDER[lvl] < min) return;
    out(JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...base, ...fields }, replacer) + '\n');
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
    child: (f) => createLogger(level, { ...base, ...f }, out, redactions),
  };
}

/** Errors as {name, message, stack}, bigints as text, every string through the redaction rules. */
function lineReplacer(rules: readonly RedactionRule[]): (key: string, value: unknown) => unknown {
  return (_key, value) => {
    if (typeof value === 'string') return rules.length === 0 ? value : redact(value, rules);
    if (value instanceof Error) return { name: value.name, message: value.message, stack: value.stack };
    if (typeof value === 'bigint') return value.toString();
    return value;
  };
}
