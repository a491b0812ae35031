// GraphQL at /graphql: Apollo Server 5 on Koa over the type-graphql schema. The Koa app parses the
// JSON body into ctx.request.body and hands /graphql requests to `middleware`, which answers them
// itself (it never calls `next`: GraphQL is the end of the line for its path).
import type http from 'node:http';
import type Koa from 'koa';
import { ApolloServer } from '@apollo/server';
import { ApolloServerPluginDrainHttpServer } from '@apollo/server/plugin/drainHttpServer';
import { ApolloServerPluginLandingPageDisabled } from '@apollo/server/plugin/disabled';
import { koaMiddleware } from '@as-integrations/koa';
import { GraphQLError, specifiedRules, validate } from 'graphql';
import { useServer } from 'graphql-ws/use/ws';
import { WebSocketServer } from 'ws';
import type { Logger } from '../log.ts';
import type { Services } from '../services.ts';
import { createContext, type GraphqlContext } from './context.ts';
import { errorPlugin, formatGraphqlError } from './errors.ts';
import { queryLimitsRule } from './limits.ts';
import { buildGraphqlSchema } from './schema.ts';

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
): Promise<{ middleware: Koa.Middleware; stop(): Promise<void> }> {
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
    plugins: [ApolloServerPluginDrainHttpServer({ httpServer }), ApolloServerPluginLandingPageDisabled(), errorPlugin(glog)],
  });
  await apollo.start();

  const apolloMiddleware = koaMiddleware(apollo, {
    context: async ({ ctx }) =>
      createContext(services, glog, ctx.get('authorization') || undefined, typeof ctx.state.requestId === 'string' ? ctx.state.requestId : null),
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

  const ws = subscriptionServer(services, httpServer, schema, glog);

  return {
    middleware,
    stop: async () => {
      await ws.stop();
      await apollo.stop();
    },
  };
}

/** The credential of a graphql-ws connection: connectionParams.Authorization (any case), like the HTTP header. */
function authorizationOf(params: Readonly<Record<string, unknown>> | undefined): string | undefined {
  if (!params) return undefined;
  for (const [k, v] of Object.entries(params)) if (k.toLowerCase() === 'authorization' && typeof v === 'string') return v;
  return undefined;
}

/**
 * Subscriptions (graphql-ws) on the same HTTP server and path. The connection authenticates once, at
 * connection_init, with the same Authenticator as HTTP (a bad credential closes it with 4403); each
 * operation is validated with the same query limits and its errors carry the REST codes.
 */
function subscriptionServer(services: Services, httpServer: http.Server, schema: Awaited<ReturnType<typeof buildGraphqlSchema>>, log: Logger) {
  const wss = new WebSocketServer({ server: httpServer, path: '/graphql' });
  const server = useServer(
    {
      schema,
      validate: (s, doc) => validate(s, doc, [...specifiedRules, queryLimitsRule()]),
      onConnect: async (ctx) => {
        try {
          await services.auth.authenticate(authorizationOf(ctx.connectionParams));
          return true;
        } catch {
          return false;
        }
      },
      context: (ctx) => createContext(services, log, authorizationOf(ctx.connectionParams), null),
      onNext: (_ctx, _id, _payload, _args, result) =>
        result.errors ? { ...result, errors: result.errors.map((e) => formatGraphqlError(e.toJSON(), e) as unknown as GraphQLError) } : result,
      onError: (_ctx, _id, _payload, errors) => errors.map((e) => formatGraphqlError(e.toJSON(), e) as unknown as GraphQLError),
    },
    wss,
  );
  return {
    stop: async () => {
      for (const c of wss.clients) c.terminate();
      await server.dispose();
      await new Promise<void>((r) => wss.close(() => r()));
    },
  };
}
