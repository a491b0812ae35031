// The list cursor (opaque to clients: base64url of [created_at in microseconds, id]) and the reading of
// PostgreSQL's plain timestamp text the list query returns.
import { isCanonicalUuid } from '../../../common/names.ts';
import { ApiError } from '../errors.ts';

const UTC_TEXT = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?$/;

/**
 * `timestamp::text` in DateStyle ISO ("2026-11-21 02:25:01.1234", fraction trimmed) as ISO 8601 UTC:
 * milliseconds (truncated, as to_char's MS) for views, microseconds for cursors.
 */
export function utcText(text: string): { millis: string; micros: string } {
  const m = UTC_TEXT.exec(text);
  if (!m) throw new Error(`unexpected timestamp text from the database: ${text}`);
  const frac = (m[3] ?? '').padEnd(6, '0');
  const head = `${m[1]}T${m[2]}.`;
  return { millis: `${head}${frac.slice(0, 3)}Z`, micros: `${head}${frac}Z` };
}

export function encodeCursor(createdAt: string, id: string): string {
  return Buffer.from(JSON.stringify([createdAt, id])).toString('base64url');
}

/**
 * Only the shape encodeCursor writes, and a real instant PostgreSQL accepts: Date.parse also takes
 * 2026-02-30 (as March 2) or year 0, which the `::timestamptz` cast refuses with a 500 (found by
 * test/fuzz/rest.test.ts; regression in test/fuzz/regressions.test.ts).
 */
function issuedCursorTime(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/.test(text) || text.startsWith('0000')) return false;
  const d = new Date(text);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 19) === text.slice(0, 19);
}

/** The position a cursor names; anything encodeCursor did not write is invalid_request. */
export function decodeCursor(cursor: string): { createdAt: string; id: string } {
  try {
    const [createdAt, id] = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8')) as unknown[];
    if (typeof createdAt === 'string' && typeof id === 'string' && issuedCursorTime(createdAt) && isCanonicalUuid(id)) {
      return { createdAt, id };
    }
  } catch {
    // fall through
  }
  throw new ApiError('invalid_request', 'cursor is not one this API issued.');
}
