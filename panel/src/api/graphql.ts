// The panel's one way to the API: GraphQL over fetch for queries and mutations, graphql-ws for live
// subscriptions. Documents come typed from src/graphql/generated.ts (built from the schema), so a call's
// variables and result are checked at build time. A refusal comes back as an ApiFailure carrying the
// API's error code (the same codes as the REST error body, docs/CONTRACTS.md "REST errors").
import { createClient, type Client } from 'graphql-ws';
import { accessToken } from '../auth/session.ts';
import type { TypedDocumentString } from '../graphql/generated.ts';

export class ApiFailure extends Error {
  constructor(
    /** invalid_request, insufficient_balance, not_found, ... or network_error. */
    readonly code: string,
    message: string,
    /** Extra fields the API sent with the error (retry_after, ...). */
    readonly extensions: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

interface GraphqlError {
  message: string;
  extensions?: Record<string, unknown>;
}

function failure(errors: readonly GraphqlError[]): ApiFailure {
  const first = errors[0]!;
  const code = typeof first.extensions?.code === 'string' ? first.extensions.code : 'server_error';
  return new ApiFailure(code, first.message, first.extensions ?? {});
}

export async function request<R, V>(document: TypedDocumentString<R, V>, variables?: V): Promise<R> {
  const send = async (token: string) =>
    fetch('/graphql', {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: document.toString(), variables: variables ?? {} }),
    });
  let response: Response;
  try {
    response = await send(await accessToken());
    // An access token refused mid-session (expired early, key rotated) is refreshed once, silently.
    if (response.status === 401) response = await send(await accessToken(true));
  } catch (err) {
    if (err instanceof ApiFailure) throw err;
    throw new ApiFailure('network_error', err instanceof Error ? err.message : String(err));
  }
  let body: { data?: R | null; errors?: GraphqlError[] };
  try {
    body = (await response.json()) as typeof body;
  } catch {
    throw new ApiFailure('server_error', `the API answered ${response.status} without a GraphQL body`);
  }
  if (body.errors?.length) throw failure(body.errors);
  if (body.data == null) throw new ApiFailure('server_error', 'the API answered no data');
  return body.data;
}

let ws: Client | undefined;

function socket(): Client {
  ws ??= createClient({
    url: new URL('/graphql', location.href.replace(/^http/, 'ws')).href,
    lazy: true,
    // Each (re)connection carries a fresh token: the server closes a socket whose credential no longer
    // holds (4403), and the reconnect then signs in with the refreshed one.
    connectionParams: async () => ({ Authorization: `Bearer ${await accessToken()}` }),
    retryAttempts: Infinity,
    shouldRetry: () => true,
    on: {
      closed: (event) => {
        if ((event as CloseEvent | undefined)?.code === 4403) void accessToken(true).catch(() => {});
      },
    },
  });
  return ws;
}

/** Calls `next` with each result of a subscription until the returned function is called. */
export function subscribe<R, V>(document: TypedDocumentString<R, V>, variables: V, next: (data: R) => void, error: (e: ApiFailure) => void): () => void {
  return socket().subscribe<R>(
    { query: document.toString(), variables: variables as Record<string, unknown> },
    {
      next: (result) => {
        if (result.errors?.length) error(failure(result.errors as GraphqlError[]));
        else if (result.data) next(result.data);
      },
      error: (e) => error(e instanceof ApiFailure ? e : new ApiFailure('network_error', e instanceof Error ? e.message : 'the live connection failed')),
      complete: () => {},
    },
  );
}
