// GraphQL at /graphql: Apollo Server 5 on Koa over the type-graphql schema. The Koa app parses the
// JSON body into ctx.request.body and hands /graphql requests to `middleware`, which answers them
// itself (it never calls `next`: GraphQL is the end of the line for its path).
import type http from 'node:http';
import type Koa from 'koa';
import { ApolloServer } from '@apollo/server';
import { ApolloServerPluginDrainHttpServer } from '@apollo/server/plugin/drainHttpServer';
import { ApolloServerPluginLandingPageDisabled } from '@apollo/server/plugin/disabled';
import { koaMiddleware } from '@as-integrations/koa';
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
  const apollo = new ApolloServer<GraphqlContext>({
    schema: await buildGraphqlSchema(),
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

  return { middleware, stop: () => apollo.stop() };
}
