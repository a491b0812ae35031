// How errors leave GraphQL. A domain ApiError keeps its REST code and status (docs/CONTRACTS.md "REST
// errors") in `extensions.code` and `extensions.status`; anything unexpected is logged once here and
// reaches the client as `server_error` with no internals. Apollo's own codes for requests that never
// ran (GRAPHQL_PARSE_FAILED, GRAPHQL_VALIDATION_FAILED, BAD_USER_INPUT, BAD_REQUEST ...) pass through.
//
// HTTP status policy: resolver errors are part of a normal GraphQL response, so the status stays 200
// (partial data stays usable), with one exception: when the response has no data at all and every
// error is invalid_token, it is 401 with the WWW-Authenticate challenge, like REST. A panel can then
// refresh its token on the status alone, and no data is lost because there is none. (Root fields are
// non-null, so `{ pricing me }` without a credential has no data either and is 401; any other error
// in the response, or any data, keeps 200.)
import { unwrapResolverError } from '@apollo/server/errors';
import { HeaderMap } from '@apollo/server';
import { GraphQLError } from 'graphql';
import type { ApolloServerPlugin } from '@apollo/server';
import type { GraphQLFormattedError } from 'graphql';
import { ApiError } from '../domain/errors.ts';
import { UNAVAILABLE_RETRY_AFTER_S, databaseUnavailable, isDatabaseUnavailable } from '../db/unavailable.ts';
import type { Logger } from '../../common/log.ts';
import type { GraphqlContext } from './context.ts';

/** True for errors that are bugs rather than refusals: they become server_error. */
function isUnexpected(original: unknown, code: unknown): boolean {
  return !(original instanceof ApiError) && !isDatabaseUnavailable(original) && (code === undefined || code === null || code === 'INTERNAL_SERVER_ERROR');
}

export function formatGraphqlError(formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError {
  const unwrapped = unwrapResolverError(error);
  // The database out of reach for now (a switch-over): `unavailable` with retry_after, never server_error.
  const original = !(unwrapped instanceof ApiError) && isDatabaseUnavailable(unwrapped) ? databaseUnavailable() : unwrapped;
  const where = { ...(formatted.locations ? { locations: formatted.locations } : {}), ...(formatted.path ? { path: formatted.path } : {}) };
  if (original instanceof ApiError) {
    // A domain rate_limited (the origin-change limit of updateTunnel) says when to retry, as REST's Retry-After does.
    const retry = original.headers['Retry-After'];
    return { message: original.message, ...where, extensions: { code: original.code, status: original.status, ...(retry !== undefined ? { retry_after: Number(retry) } : {}) } };
  }
  if (isUnexpected(original, formatted.extensions?.code)) {
    return {
      message: 'Internal error; quote the X-Request-Id of this response to support.',
      ...where,
      extensions: { code: 'server_error', status: 500 },
    };
  }
  return formatted;
}

/**
 * A refusal that happens before GraphQL runs (the request gate's 429), answered as a GraphQL request
 * error: no `data`, one error carrying the REST code and status, and for 429 `retry_after` (seconds,
 * the Retry-After header's value), the same extensions the WebSocket transport sends.
 */
export function graphqlRefusalBody(e: ApiError): { errors: GraphQLFormattedError[] } {
  const retry = e.headers['Retry-After'];
  const extensions = { code: e.code, status: e.status, ...(retry !== undefined ? { retry_after: Number(retry) } : {}) };
  return { errors: [{ message: e.message, extensions }] };
}

/** Logs unexpected errors (with the request id) and applies the 401 policy above. */
export function errorPlugin(log: Logger): ApolloServerPlugin<GraphqlContext> {
  return {
    async requestDidStart() {
      return {
        async didEncounterErrors({ errors, contextValue, operationName }) {
          for (const err of errors) {
            const original = unwrapResolverError(err);
            if (original instanceof ApiError && original.internal !== undefined) {
              log.warn('graphql refusal', { request_id: contextValue.requestId, operation: operationName ?? null, error: original.code, detail: original.internal });
            }
            if (!isUnexpected(original, err.extensions?.code)) continue;
            log.error('graphql error', {
              request_id: contextValue.requestId,
              operation: operationName ?? null,
              path: err.path?.join('.') ?? null,
              err: original instanceof Error ? original : err,
            });
          }
        },
        async willSendResponse({ response, contextValue }) {
          if (response.body.kind !== 'single') return;
          const { data, errors } = response.body.singleResult;
          if (data == null && errors?.length && errors.every((e) => e.extensions?.code === 'invalid_token')) {
            response.http.status = 401;
            response.http.headers.set('www-authenticate', contextValue.auth.error?.headers['WWW-Authenticate'] ?? 'Bearer');
          }
          // Likewise 403 when the credential itself was refused as a whole: a token of a client registered
          // without API access (docs/CONTRACTS.md "Admin CLI"). A viewer's refused mutation is not this case (auth succeeded).
          // No data at all because the database is out of reach: 503 with Retry-After, as REST answers.
          if (data == null && errors?.length && errors.every((e) => e.extensions?.code === 'unavailable')) {
            response.http.status = 503;
            response.http.headers.set('retry-after', String(UNAVAILABLE_RETRY_AFTER_S));
          }
          const refused = contextValue.auth.error;
          if (data == null && errors?.length && refused?.code === 'insufficient_scope' && errors.every((e) => e.extensions?.code === 'insufficient_scope')) {
            response.http.status = 403;
            response.http.headers.set('www-authenticate', refused.headers['WWW-Authenticate'] ?? 'Bearer error="insufficient_scope"');
          }
        },
      };
    },
  };
}

/** The database out of reach before any resolver ran (the credential's check): a 503 request error with Retry-After. */
export function unavailableGraphqlError(): GraphQLError {
  const e = databaseUnavailable();
  return new GraphQLError(e.message, {
    extensions: { code: e.code, status: e.status, retry_after: UNAVAILABLE_RETRY_AFTER_S, http: { status: e.status, headers: new HeaderMap([['retry-after', String(UNAVAILABLE_RETRY_AFTER_S)]]) } },
  });
}
