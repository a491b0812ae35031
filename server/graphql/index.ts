// GraphQL at /graphql: Apollo Server 5 on Koa over the type-graphql schema. The Koa app parses the
// JSON body into ctx.request.body and hands /graphql requests to `middleware`, which answers them
// itself (it never calls `next`: GraphQL is the end of the line for its path).
import type http from 'node:http';
import type Koa from 'koa';
import { ApolloServer } from '@apollo/server';
import { ApolloServerPluginDrainHttpServer } from '@apollo/server/plugin/drainHttpServer';
import { ApolloServerPluginLandingPageDisabled } from '@apollo/server/plugin/disabled';
import { koaMiddleware } from '@as-integrations/koa';
import { GraphQLError, execute, getOperationAST, specifiedRules, subscribe, validate, type ExecutionArgs } from 'graphql';
import { useServer } from 'graphql-ws/use/ws';
import { WebSocketServer, type WebSocket } from 'ws';
import type { Duplex } from 'node:stream';
import type { Context as WsServerContext } from 'graphql-ws';
import type { Principal } from '../auth/principal.ts';
import { isDatabaseUnavailable } from '../db/unavailable.ts';
import { ApiError } from '../domain/errors.ts';
import { clientAddress } from '../http/client-address.ts';
import type { Admission, RequestGate } from '../http/middleware/request-gate.ts';
import { addressKey } from '../oidc/login-limits.ts';
import type { Logger } from '../../common/log.ts';
import type { Services } from '../services.ts';
import { createContext, type GraphqlContext } from './context.ts';
import { errorPlugin, formatGraphqlError, unavailableGraphqlError } from './errors.ts';
import { queryLimitsRule } from './limits.ts';
import { buildGraphqlSchema } from './schema.ts';
import { SubscriptionCaps, type SubscriptionSlots } from './subscriptions.ts';
import { trafficBudgetPlugin, trafficRefusal, trafficRefusalError } from './traffic-budget.ts';

export { buildGraphqlSchema, printGraphqlSchema } from './schema.ts';
export { QUERY_LIMITS } from './limits.ts';

declare module 'koa' {
  interface Request {
    /** Parsed JSON body, set by the app before the GraphQL middleware reads it. */
    body?: unknown;
  }
}

/** Parser guard: a document over this many tokens is refused before validation (the standard introspection query is ~160). */
const MAX_TOKENS = 5000;

export async function createGraphql(
  services: Services,
  httpServer: http.Server,
  log: Logger,
  gate: RequestGate,
): Promise<{ middleware: Koa.Middleware; closeSockets(): void; stop(): Promise<void> }> {
  const glog = log.child({ component: 'graphql' });
  const schema = await buildGraphqlSchema();
  const apollo = new ApolloServer<GraphqlContext>({
    schema,
    // Integrators generate clients from it; it is counted in the depth and cost limits like any query.
    introspection: true,
    csrfPrevention: true,
    allowBatchedHttpRequests: false,
    persistedQueries: false,
    includeStacktraceInErrorResponses: false,
    // main.ts owns signals and shutdown order; it calls stop().
    stopOnTerminationSignals: false,
    parseOptions: { maxTokens: MAX_TOKENS },
    validationRules: [queryLimitsRule()],
    formatError: formatGraphqlError,
    logger: {
      debug: (m: unknown) => glog.debug(String(m)),
      info: (m: unknown) => glog.info(String(m)),
      warn: (m: unknown) => glog.warn(String(m)),
      error: (m: unknown) => glog.error(String(m)),
    },
    plugins: [ApolloServerPluginDrainHttpServer({ httpServer }), ApolloServerPluginLandingPageDisabled(), errorPlugin(glog), trafficBudgetPlugin()],
  });
  await apollo.start();

  const apolloMiddleware = koaMiddleware(apollo, {
    context: async ({ ctx }) =>
      Promise.resolve().then(() => createContext(
        services,
        glog,
        ctx.get('authorization') || undefined,
        typeof ctx.state.requestId === 'string' ? ctx.state.requestId : null,
        ctx.state.admission as Admission | undefined,
      )).catch((e: unknown) => {
        // The credential could not be checked because the database is out of reach (a switch-over):
        // the request error REST answers too, 503 with Retry-After, not Apollo's 500 for a failed context.
        if (isDatabaseUnavailable(e)) throw unavailableGraphqlError();
        throw e;
      }),
  });

  const middleware: Koa.Middleware = async (ctx) => {
    // Apollo's Koa integration answers a POST whose parsed body is falsy (`null`, `false`, `0`, "")
    // with a plain-text 500; such a body is the client's mistake.
    if (ctx.method === 'POST' && (ctx.request.body === null || typeof ctx.request.body !== 'object')) {
      ctx.status = 400;
      ctx.body = { errors: [{ message: 'The POST body must be a JSON object with a "query".', extensions: { code: 'BAD_REQUEST' } }] };
      return;
    }
    await apolloMiddleware(ctx, async () => {});
  };

  const ws = subscriptionServer(services, httpServer, schema, glog, gate);

  return {
    middleware,
    closeSockets: () => ws.closeSockets(),
    stop: async () => {
      await ws.stop();
      await apollo.stop();
    },
  };
}

/**
 * A client's protocol fault (a message over maxPayload, a bad frame) is an `error` event on which ws
 * has already closed the socket with the right code (1009, 1002 ...); graphql-ws would print it to
 * stderr as an internal error. It is the client's mistake: one structured log line instead.
 */
function quietProtocolErrors(ws: WebSocket, log: Logger, address: string): void {
  const emit = ws.emit.bind(ws);
  ws.emit = ((event: string | symbol, ...args: unknown[]) => {
    const code = (args[0] as { code?: unknown } | undefined)?.code;
    if (event === 'error' && typeof code === 'string' && code.startsWith('WS_ERR_')) {
      log.info('websocket closed on a protocol error', { address, code });
      return true;
    }
    return emit(event, ...args);
  }) as typeof ws.emit;
}

type WsContext = WsServerContext<Record<string, unknown>, { socket: WebSocket; request: http.IncomingMessage }>;

/** The credential of a graphql-ws connection: connectionParams.Authorization (any case), like the HTTP header. */
function authorizationOf(params: Readonly<Record<string, unknown>> | undefined): string | undefined {
  if (!params) return undefined;
  for (const [k, v] of Object.entries(params)) if (k.toLowerCase() === 'authorization' && typeof v === 'string') return v;
  return undefined;
}

/** Close codes of the socket (graphql-ws uses 44xx for the HTTP-like refusals). */
const FORBIDDEN = 4403;
/** How long a drain waits for a peer's answer to its close frame before cutting the socket. */
const CLOSE_GRACE_MS = 2_000;
const TOO_MANY = 4429;

interface Connection {
  address: string;
  authorization: string | undefined;
  principal: Principal | null;
  recheck: NodeJS.Timeout | null;
  /** This socket's share of the subscription caps (subscriptions.ts). */
  slots: SubscriptionSlots;
}

/**
 * Why a re-check must end a live connection, or null when it may stay: the credential refused (revoked,
 * expired, its application's API access lowered to none: any 401 or 403 of the Authenticator), or still
 * valid but for another account or with less permission than the socket was opened with (a role change,
 * API access lowered to read). Operations already running were allowed under the old permission, so the
 * socket closes rather than carrying it on; the client reconnects with what it now holds.
 */
export function recheckRefusal(before: Principal | null, outcome: { principal: Principal } | { error: unknown }): string | null {
  if ('error' in outcome) {
    const e = outcome.error;
    return e instanceof ApiError && (e.status === 401 || e.status === 403) ? e.code : null;
  }
  const now = outcome.principal;
  if (before && now.accountId !== before.accountId) return 'account_changed';
  if (before && before.permission === 'write' && now.permission !== 'write') return 'permission_lowered';
  return null;
}

/**
 * Subscriptions (graphql-ws) on the same HTTP server and path, under the same limits as HTTP:
 * - messages over BODY_LIMIT_BYTES are refused by ws itself (maxPayload, close 1009) before anything
 *   is parsed or authenticated;
 * - at most WS_CONNECTIONS_PER_ADDRESS open sockets per client address (the upgrade is answered 429);
 * - connection_init goes through the request gate like an HTTP request (failed logins spend the
 *   address's failure budget; a bad credential closes with 4403, a spent budget with 4429), and every
 *   operation spends the credential's (or, anonymous, the address's) request budget;
 * - the credential is re-checked every WS_AUTH_RECHECK_MS: a revoked key, an expired access token, a
 *   revoked grant, API access lowered, or less permission than before (recheckRefusal) closes the socket
 *   with 4403, ending its subscriptions; only an infrastructure failure of the check keeps it open;
 * - at most 10 subscriptions run per socket and 50 per credential (subscriptions.ts).
 * Each operation is validated with the same query limits as HTTP and its errors carry the REST codes.
 */
function subscriptionServer(
  services: Services,
  httpServer: http.Server,
  schema: Awaited<ReturnType<typeof buildGraphqlSchema>>,
  log: Logger,
  gate: RequestGate,
) {
  const { bodyLimitBytes, trustProxy, wsConnectionsPerAddress, wsAuthRecheckMs } = services.config;
  const wss = new WebSocketServer({ noServer: true, maxPayload: bodyLimitBytes });
  const open = new Map<string, number>();
  const connections = new WeakMap<WebSocket, Connection>();
  const caps = new SubscriptionCaps();

  let closing = false;
  const onUpgrade = (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    if (closing) {
      socket.end('HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      return;
    }
    if (new URL(req.url ?? '/', 'http://x').pathname !== '/graphql') {
      socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      return;
    }
    const address = addressKey(clientAddress(req, trustProxy));
    const count = open.get(address) ?? 0;
    if (count >= wsConnectionsPerAddress) {
      const body = JSON.stringify({ error: 'rate_limited', error_description: `At most ${wsConnectionsPerAddress} open WebSocket connections per address.` });
      socket.end(`HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
      return;
    }
    // Counted from the upgrade to the TCP close, so a handshake that never finishes counts too.
    open.set(address, count + 1);
    socket.once('close', () => {
      const n = (open.get(address) ?? 1) - 1;
      if (n <= 0) open.delete(address);
      else open.set(address, n);
    });
    wss.handleUpgrade(req, socket, head, (ws) => {
      quietProtocolErrors(ws, log, address);
      wss.emit('connection', ws, req);
    });
  };
  httpServer.on('upgrade', onUpgrade);

  const connectionOf = (ctx: WsContext): Connection => {
    const socket = ctx.extra.socket;
    let c = connections.get(socket);
    if (!c) {
      c = { address: clientAddress(ctx.extra.request, trustProxy), authorization: undefined, principal: null, recheck: null, slots: caps.socket() };
      connections.set(socket, c);
    }
    return c;
  };

  /** Re-authenticates a live connection's credential; closes the socket when it no longer holds. */
  const watch = (socket: WebSocket, c: Connection) => {
    c.recheck = setInterval(() => {
      services.auth.authenticate(c.authorization).then(
        (p) => {
          const refusal = recheckRefusal(c.principal, { principal: p });
          if (refusal) {
            log.info('websocket credential changed; closing', { credential: p.credential.kind, reason: refusal });
            socket.close(FORBIDDEN, 'Forbidden: the credential no longer has the permission this connection was opened with');
            return;
          }
          c.principal = p;
        },
        (e: unknown) => {
          const refusal = recheckRefusal(c.principal, { error: e });
          if (refusal) {
            log.info('websocket credential refused; closing', { credential: c.principal?.credential.kind ?? null, reason: refusal });
            socket.close(FORBIDDEN, 'Forbidden: the credential was revoked, expired or lost API access');
          } else {
            // The database may be briefly away: keep the socket, try again next round.
            log.warn('websocket credential re-check failed', { err: e });
          }
        },
      );
    }, wsAuthRecheckMs);
    c.recheck.unref();
  };

  const trafficRefusalOf = (args: ExecutionArgs): GraphQLError | null => {
    const refusal = trafficRefusal(args.schema, args.document, getOperationAST(args.document, args.operationName), args.variableValues);
    return refusal ? trafficRefusalError(refusal) : null;
  };

  const rateLimitedError = (e: ApiError) =>
    new GraphQLError(e.message, { extensions: { code: e.code, status: e.status, retry_after: Number(e.headers['Retry-After'] ?? 1) } });

  const server = useServer<Record<string, unknown>, { socket: WebSocket; request: http.IncomingMessage }>(
    {
      schema,
      validate: (s, doc) => validate(s, doc, [...specifiedRules, queryLimitsRule()]),
      // The traffic budget (traffic-budget.ts), checked before any resolver runs, as over HTTP.
      execute: (args: ExecutionArgs) => {
        const refusal = trafficRefusalOf(args);
        return refusal ? { errors: [refusal] } : execute(args);
      },
      subscribe: (args: ExecutionArgs) => {
        const refusal = trafficRefusalOf(args);
        return refusal ? { errors: [refusal] } : subscribe(args);
      },
      onConnect: async (ctx) => {
        const c = connectionOf(ctx);
        c.authorization = authorizationOf(ctx.connectionParams);
        try {
          const admission = await gate.admit(c.address, c.authorization);
          if (admission.error) return false;
          c.principal = admission.principal;
        } catch (e) {
          if (e instanceof ApiError && e.code === 'rate_limited') {
            ctx.extra.socket.close(TOO_MANY, 'Too many requests');
            return false;
          }
          throw e;
        }
        if (c.principal) watch(ctx.extra.socket, c);
        return true;
      },
      onSubscribe: (ctx) => {
        const c = connectionOf(ctx);
        try {
          if (c.principal) gate.charge(c.principal);
          else gate.chargeAnonymous(c.address);
        } catch (e) {
          if (e instanceof ApiError) return [rateLimitedError(e)];
          throw e;
        }
        return undefined;
      },
      onClose: (ctx) => {
        const c = connections.get(ctx.extra.socket);
        if (c?.recheck) clearInterval(c.recheck);
      },
      context: (ctx) => {
        const c = connectionOf(ctx);
        const context = createContext(services, log, c.authorization, null, { principal: c.principal, error: null });
        context.subscriptions = c.slots;
        return context;
      },
      onNext: (_ctx, _id, _payload, _args, result) =>
        result.errors ? { ...result, errors: result.errors.map((e) => formatGraphqlError(e.toJSON(), e) as unknown as GraphQLError) } : result,
      onError: (_ctx, _id, _payload, errors) => errors.map((e) => formatGraphqlError(e.toJSON(), e) as unknown as GraphQLError),
    },
    wss,
  );
  return {
    /**
     * Ends every WebSocket with 1001 (going away) and refuses new ones: a drain must not wait on them. An
     * upgraded socket still counts as a connection of the HTTP server, so server.close() would wait for a
     * live subscription for ever; the client reconnects, to another replica. A peer that does not answer
     * the closing handshake is cut after CLOSE_GRACE_MS.
     */
    closeSockets: () => {
      closing = true;
      for (const c of wss.clients) {
        c.close(1001, 'Going away');
        setTimeout(() => c.terminate(), CLOSE_GRACE_MS).unref();
      }
    },
    stop: async () => {
      httpServer.off('upgrade', onUpgrade);
      for (const c of wss.clients) c.terminate();
      await server.dispose();
    },
  };
}
