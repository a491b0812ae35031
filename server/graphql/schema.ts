// The GraphQL schema, built from the type-graphql classes. Decorator metadata needs reflect-metadata
// loaded first and a transpiler that emits it (loader/register.mjs, vitest's oxc, tsc; not tsx).
import 'reflect-metadata';
import { lexicographicSortSchema, printSchema, type GraphQLSchema } from 'graphql';
import { buildSchema } from 'type-graphql';
import { resolvers } from './resolvers.ts';

export async function buildGraphqlSchema(): Promise<GraphQLSchema> {
  return buildSchema({
    resolvers,
    // Inputs are validated by the domain's own functions (validatePurchase ...), as for REST.
    validate: false,
    // Every subscription brings its own `subscribe` (fed by the tunnel status bus, across replicas);
    // type-graphql insists on a PubSub anyway, so this one refuses topic-based use.
    pubSub: {
      publish: () => undefined,
      subscribe: () => {
        throw new Error('topic subscriptions are not used; give the @Subscription a subscribe function');
      },
    },
  });
}

const SCHEMA_HEADER = '# Generated from server/graphql by `npm run schema:graphql`; do not edit by hand.\n\n';

/** The text of schema/schema.graphql: sorted, so the file only changes when the schema does. */
export function printGraphqlSchema(schema: GraphQLSchema): string {
  return SCHEMA_HEADER + printSchema(lexicographicSortSchema(schema)) + '\n';
}
