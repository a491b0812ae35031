// The traffic points one GraphQL operation may ask for (docs/CONTRACTS.md "Health and traffic"): at most
// MAX_TRAFFIC_POINTS across all its `Tunnel.traffic` fields, each field counted by its point count (the
// range rules of REST, server/health/index.ts trafficRange) times the tunnels it runs for (the page size
// of an enclosing `tunnels(limit)`). The query-limit rules (limits.ts) cannot do this: Apollo caches
// validation per document, so they never see variable values, and the count depends on the clock. So
// this runs once the operation is known and its variables are at hand, before any resolver: an Apollo
// plugin over HTTP, the execute/subscribe wrapper over graphql-ws. A refusal reads nothing.
import type { ApolloServerPlugin } from '@apollo/server';
import {
  GraphQLError,
  Kind,
  getNamedType,
  isInterfaceType,
  isObjectType,
  type DocumentNode,
  type FieldNode,
  type GraphQLNamedType,
  type GraphQLSchema,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ValueNode,
} from 'graphql';
import { ApiError } from '../domain/errors.ts';
import { MAX_TRAFFIC_POINTS, trafficRange } from '../health/index.ts';
import { TUNNELS_DEFAULT_LIMIT, TUNNELS_MAX_LIMIT } from './limits.ts';

type Variables = Readonly<Record<string, unknown>> | null | undefined;

function argValue(node: FieldNode, name: string, variables: Variables): unknown {
  const arg = node.arguments?.find((a) => a.name.value === name);
  if (!arg) return undefined;
  const v: ValueNode = arg.value;
  if (v.kind === Kind.VARIABLE) return variables?.[v.name.value];
  if (v.kind === Kind.STRING) return v.value;
  if (v.kind === Kind.INT) return Number.parseInt(v.value, 10);
  if (v.kind === Kind.NULL) return null;
  return undefined;
}

/** A DateTime argument as the resolver will see it (the scalar parses it to a Date, the resolver prints ISO). */
function timeArg(v: unknown): string | null {
  if (typeof v !== 'string') return null;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? null : d.toISOString();
}

/** Points one `traffic(from, to, step)` field reads; a range the domain refuses is refused here too (invalid_request). */
function fieldPoints(node: FieldNode, variables: Variables, now: Date): number {
  const step = argValue(node, 'step', variables);
  return trafficRange(
    { from: timeArg(argValue(node, 'from', variables)), to: timeArg(argValue(node, 'to', variables)), step: typeof step === 'string' ? step : null },
    now,
  ).points;
}

/** The page size `tunnels(limit)` will use. */
function pageSize(node: FieldNode, variables: Variables): number {
  const v = argValue(node, 'limit', variables);
  if (v === undefined || v === null) return TUNNELS_DEFAULT_LIMIT;
  return typeof v === 'number' && Number.isInteger(v) ? Math.min(Math.max(v, 1), TUNNELS_MAX_LIMIT) : TUNNELS_MAX_LIMIT;
}

/** Total traffic points of one operation, fragments expanded where spread. */
export function trafficPoints(schema: GraphQLSchema, document: DocumentNode, op: OperationDefinitionNode, variables: Variables, now: Date): number {
  const fragments = new Map(document.definitions.flatMap((d) => (d.kind === Kind.FRAGMENT_DEFINITION ? [[d.name.value, d] as const] : [])));
  const queryType = schema.getQueryType();

  function walk(set: SelectionSetNode, parent: GraphQLNamedType, times: number, visiting: Set<string>): number {
    let total = 0;
    for (const sel of set.selections) {
      if (sel.kind === Kind.FIELD) {
        const name = sel.name.value;
        if (parent.name === 'Tunnel' && name === 'traffic') {
          total += times * fieldPoints(sel, variables, now);
          continue;
        }
        if (!sel.selectionSet || !(isObjectType(parent) || isInterfaceType(parent))) continue;
        const def = parent.getFields()[name];
        if (!def) continue;
        const n = parent === queryType && name === 'tunnels' ? pageSize(sel, variables) : 1;
        total += walk(sel.selectionSet, getNamedType(def.type), times * n, visiting);
      } else if (sel.kind === Kind.INLINE_FRAGMENT) {
        const t = sel.typeCondition ? schema.getType(sel.typeCondition.name.value) : parent;
        total += walk(sel.selectionSet, t ?? parent, times, visiting);
      } else {
        const def = fragments.get(sel.name.value);
        // A cycle is refused by validation; here it must only not recurse for ever.
        if (!def || visiting.has(def.name.value)) continue;
        const t = schema.getType(def.typeCondition.name.value);
        if (!t) continue;
        visiting.add(def.name.value);
        total += walk(def.selectionSet, t, times, visiting);
        visiting.delete(def.name.value);
      }
    }
    return total;
  }

  const root = op.operation === 'query' ? queryType : op.operation === 'mutation' ? schema.getMutationType() : schema.getSubscriptionType();
  return root ? walk(op.selectionSet, root, 1, new Set()) : 0;
}

/** The refusal of an operation over the budget, or with a traffic range the domain refuses; null when it may run. */
export function trafficRefusal(schema: GraphQLSchema, document: DocumentNode, op: OperationDefinitionNode | null | undefined, variables: Variables, now = new Date()): ApiError | null {
  if (!op) return null;
  try {
    const points = trafficPoints(schema, document, op, variables, now);
    if (points <= MAX_TRAFFIC_POINTS) return null;
    return new ApiError(
      'invalid_request',
      `The operation asks for ${points} traffic points (each traffic field's points, times the tunnels it runs for); at most ${MAX_TRAFFIC_POINTS} per operation. Ask for a shorter range, a coarser step or fewer tunnels.`,
    );
  } catch (e) {
    if (e instanceof ApiError) return e;
    throw e;
  }
}

/** The refusal as a GraphQL request error: REST code and status in extensions, HTTP 400. */
export function trafficRefusalError(e: ApiError): GraphQLError {
  return new GraphQLError(e.message, { extensions: { code: e.code, status: e.status, http: { status: e.status } } });
}

/** Over HTTP: checks each operation once it is resolved, before execution. */
export function trafficBudgetPlugin(): ApolloServerPlugin {
  return {
    async requestDidStart() {
      return {
        async didResolveOperation({ schema, document, operation, request }) {
          const refusal = trafficRefusal(schema, document, operation, request.variables);
          if (refusal) throw trafficRefusalError(refusal);
        },
      };
    },
  };
}
