// The one error type that crosses from the domain to REST, GraphQL and the CLI. Codes and statuses
// are the contract of docs/CONTRACTS.md "REST errors"; the body is always {error, error_description}.
const ERROR_STATUS = {
  invalid_request: 400,
  invalid_origin_ip: 400,
  invalid_promocode: 400,
  invalid_token: 401,
  insufficient_balance: 402,
  insufficient_scope: 403,
  not_found: 404,
  /** A known path with another method; reported as invalid_request with an Allow header. */
  method_not_allowed: 405,
  out_of_stock: 409,
  invalid_state: 409,
  payload_too_large: 413,
  unsupported_media_type: 415,
  /** An Idempotency-Key reused with another request body. */
  idempotency_mismatch: 422,
  rate_limited: 429,
  server_error: 500,
  edge_unavailable: 503,
  /** The database cannot be reached for now (a switch-over, a restart); with Retry-After. */
  unavailable: 503,
} as const;

export type ErrorKind = keyof typeof ERROR_STATUS;
/** The `error` field on the wire: 405, 413, 415 and 422 are reported as invalid_request. */
const REPORTED_AS_INVALID_REQUEST: ReadonlySet<ErrorKind> = new Set(['payload_too_large', 'unsupported_media_type', 'idempotency_mismatch', 'method_not_allowed']);

export type ErrorCode = Exclude<ErrorKind, 'payload_too_large' | 'unsupported_media_type' | 'idempotency_mismatch' | 'method_not_allowed'>;

export interface ErrorBody {
  error: ErrorCode;
  error_description: string;
}

export class ApiError extends Error {
  override name = 'ApiError';
  readonly status: number;
  readonly code: ErrorCode;
  readonly headers: Record<string, string>;
  /**
   * What the operator needs and the client must not see (an internal host and port, say): the
   * adapters log it with the request id and never put it in a body.
   */
  readonly internal: string | undefined;

  constructor(kind: ErrorKind, description: string, headers: Record<string, string> = {}, internal?: string) {
    super(description);
    this.status = ERROR_STATUS[kind];
    this.code = REPORTED_AS_INVALID_REQUEST.has(kind) ? 'invalid_request' : (kind as ErrorCode);
    this.headers = headers;
    this.internal = internal;
  }

  get body(): ErrorBody {
    return { error: this.code, error_description: this.message };
  }
}

export const notFound = (what = 'tunnel') => new ApiError('not_found', `No such ${what} for this account.`);
