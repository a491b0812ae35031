// Whether an error means "the database cannot be reached right now" (a switch-over to the standby, a
// restart, all hosts down) rather than a bug: the HTTP adapters answer those 503 `unavailable` with a
// Retry-After (docs/CONTRACTS.md "REST errors"), never 500. The driver layers wrap one another (MikroORM's
// exceptions around pg's errors around the socket's), so the chain of causes is walked.
import { ApiError } from '../domain/errors.ts';

/**
 * SQLSTATEs of a server going away or refusing for now: class 08 (connection exception), 57P01-57P03
 * (admin shutdown, crash shutdown, cannot connect now, as during a restart or a demotion), 25006 (a write on
 * a server that just became a standby), 40001 is not here: a serialization failure is the caller's retry.
 */
const SQLSTATES = new Set(['57P01', '57P02', '57P03', '25006', '53300']);
/** Socket-level codes, and NoPrimaryError's (server/db/multi-host.ts). */
const SOCKET_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'TG_NO_PRIMARY']);
/** What pg and pg-pool say without a code when a connection dies or cannot be had. */
const MESSAGES = /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|terminating connection due to administrator command|the database system is (?:starting up|shutting down|in recovery)|no read-write PostgreSQL|is no longer the primary|Client was closed and is not queryable/i;

export function isDatabaseUnavailable(e: unknown): boolean {
  const seen = new Set<unknown>();
  let cur: unknown = e;
  while (cur && typeof cur === 'object' && !seen.has(cur)) {
    seen.add(cur);
    if (cur instanceof ApiError) return false;
    const code = (cur as { code?: unknown }).code;
    if (typeof code === 'string' && (SOCKET_CODES.has(code) || SQLSTATES.has(code) || code.startsWith('08'))) return true;
    const message = (cur as { message?: unknown }).message;
    if (typeof message === 'string' && MESSAGES.test(message)) return true;
    // AggregateError (a connect to several addresses) carries its own list.
    const errors = (cur as { errors?: unknown }).errors;
    if (Array.isArray(errors) && errors.some((x) => isDatabaseUnavailable(x))) return true;
    cur = (cur as { cause?: unknown }).cause;
  }
  return false;
}

/** Seconds a client should wait before retrying: a switch-over takes seconds (docs/OPERATOR.md). */
export const UNAVAILABLE_RETRY_AFTER_S = 2;

/** The refusal answered while the database is unreachable. */
export function databaseUnavailable(): ApiError {
  return new ApiError('unavailable', 'The database is unavailable for a moment (a switch-over or a restart); retry after the Retry-After seconds.', {
    'Retry-After': String(UNAVAILABLE_RETRY_AFTER_S),
  });
}
