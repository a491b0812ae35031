// Limits against abusive queries, checked as GraphQL validation rules: a query over a limit is refused
// before any resolver runs, with Apollo's GRAPHQL_VALIDATION_FAILED code (HTTP 400) and
// `extensions.limit` naming the limit. Apollo caches validation per document, so the rules cannot
// see variable values: a `limit` passed as a variable counts as the maximum.
//
// The model, per operation (fragments expanded where they are spread; @skip/@include ignored, so the
// figures are upper bounds):
// - depth: nesting of fields. `__Type.ofType` does not count: it is the linear wrapper chain
//   (NonNull -> List -> Named) that the standard introspection query spells out seven levels deep,
//   and every level is one object at most. Introspection fields count like any other.
// - cost: every selected field costs 1; a root Query or Mutation field (one that runs a resolver
//   against the database) costs 10; the selection under `tunnels(limit: n)` is multiplied by n
//   (default 20, a variable counts as 100), and likewise under `ledger(limit: n)`. `Tunnel.traffic`,
//   `Tunnel.healthChanges` and `Tunnel.attacks` cost 10 too (each reads the database for each tunnel). A page
//   of 100 tunnels with every field but those three costs 2,310 (23 a tunnel: a page of 86 fits); the standard
//   introspection query costs 220 at depth 6.
// - traffic points: not here (they depend on variables and the clock); traffic-budget.ts allows at most
//   10,000 per operation, counted by each traffic field's points times its tunnels, before execution.
// - aliases: at most 20 aliased fields, so one request cannot fan a resolver out many times.
// - mutations: one root mutation field per operation. Mutation results are non-null, so when a later
//   root field failed the whole `data` became null and hid a purchase the earlier field had already
//   charged (found by the fuzz pass, test/fuzz/README.md): a client retrying without an idempotency key
//   would buy twice. One write per request also keeps the HTTP rate limit counting every write.
// Introspection lists (`types`, `fields`, ...) are bounded by the size of this schema and their
// nesting by graphql-js's MaxIntrospectionDepthRule (part of the specified rules), so they count per
// selection rather than per element. Batched HTTP requests (a JSON array body) are refused by Apollo
// (`allowBatchedHttpRequests: false`).
import {
  GraphQLError,
  Kind,
  SchemaMetaFieldDef,
  TypeMetaFieldDef,
  getNamedType,
  isInterfaceType,
  isObjectType,
  type FieldNode,
  type GraphQLNamedType,
  type GraphQLObjectType,
  type OperationDefinitionNode,
  type SelectionSetNode,
  type ValidationContext,
  type ValidationRule,
} from 'graphql';

/** Default and maximum of `tunnels(limit)` (the domain refuses more than 100). */
export const TUNNELS_DEFAULT_LIMIT = 20;
export const TUNNELS_MAX_LIMIT = 100;

export interface QueryLimits {
  maxDepth: number;
  maxCost: number;
  maxAliases: number;
  maxRootMutations: number;
}

export const QUERY_LIMITS: Readonly<QueryLimits> = Object.freeze({ maxDepth: 8, maxCost: 2000, maxAliases: 20, maxRootMutations: 1 });

/** Cost of a root field: it runs a resolver that goes to the database. */
const ROOT_FIELD_COST = 10;

interface Measure {
  cost: number;
  depth: number;
  aliases: number;
}

const ZERO: Measure = Object.freeze({ cost: 0, depth: 0, aliases: 0 });

/** The page size `tunnels(limit)` will use, as far as the document tells. */
function pageSize(node: FieldNode): number {
  const arg = node.arguments?.find((a) => a.name.value === 'limit');
  if (!arg) return TUNNELS_DEFAULT_LIMIT;
  if (arg.value.kind === Kind.INT) {
    const n = Number.parseInt(arg.value.value, 10);
    return Math.min(Math.max(n, 1), TUNNELS_MAX_LIMIT);
  }
  return TUNNELS_MAX_LIMIT;
}

/** Measures one operation; fragments are measured once each however often they are spread. */
function measureOperation(context: ValidationContext, op: OperationDefinitionNode): Measure & { rootFields: number } {
  const schema = context.getSchema();
  const queryType = schema.getQueryType();
  const mutationType = schema.getMutationType();
  const fragmentMemo = new Map<string, Measure>();

  const isRoot = (t: GraphQLNamedType) => t === queryType || t === mutationType;

  function fieldType(parent: GraphQLNamedType, name: string): GraphQLNamedType | null {
    if (name === '__typename') return null;
    if (parent === queryType && name === '__schema') return getNamedType(SchemaMetaFieldDef.type);
    if (parent === queryType && name === '__type') return getNamedType(TypeMetaFieldDef.type);
    if (isObjectType(parent) || isInterfaceType(parent)) {
      const def = parent.getFields()[name];
      return def ? getNamedType(def.type) : null;
    }
    return null;
  }

  function field(node: FieldNode, parent: GraphQLNamedType, visiting: Set<string>): Measure {
    const name = node.name.value;
    const type = fieldType(parent, name);
    const child = node.selectionSet && type ? selections(node.selectionSet, type, visiting) : ZERO;
    const own = (isRoot(parent) && !name.startsWith('__')) || (parent.name === 'Tunnel' && (name === 'traffic' || name === 'healthChanges' || name === 'attacks')) ? ROOT_FIELD_COST : 1;
    const times = parent === queryType && (name === 'tunnels' || name === 'ledger') ? pageSize(node) : 1;
    const counts = !(name === 'ofType' && parent.name === '__Type');
    return {
      cost: own + times * child.cost,
      depth: (counts ? 1 : 0) + child.depth,
      aliases: (node.alias && node.alias.value !== name ? 1 : 0) + child.aliases,
    };
  }

  function fragment(name: string, visiting: Set<string>): Measure {
    const known = fragmentMemo.get(name);
    if (known) return known;
    // A cycle is reported by NoFragmentCyclesRule; here it only must not recurse forever.
    if (visiting.has(name)) return ZERO;
    const def = context.getFragment(name);
    const type = def ? schema.getType(def.typeCondition.name.value) : undefined;
    if (!def || !type) return ZERO;
    visiting.add(name);
    const m = selections(def.selectionSet, type, visiting);
    visiting.delete(name);
    fragmentMemo.set(name, m);
    return m;
  }

  function selections(set: SelectionSetNode, parent: GraphQLNamedType, visiting: Set<string>): Measure {
    let cost = 0;
    let depth = 0;
    let aliases = 0;
    for (const sel of set.selections) {
      let m: Measure;
      if (sel.kind === Kind.FIELD) m = field(sel, parent, visiting);
      else if (sel.kind === Kind.FRAGMENT_SPREAD) m = fragment(sel.name.value, visiting);
      else {
        const t = sel.typeCondition ? schema.getType(sel.typeCondition.name.value) : parent;
        m = selections(sel.selectionSet, t ?? parent, visiting);
      }
      cost += m.cost;
      aliases += m.aliases;
      if (m.depth > depth) depth = m.depth;
    }
    return { cost, depth, aliases };
  }

  /** Root fields after expanding fragments at the top level (each a resolver call). */
  function rootFields(set: SelectionSetNode, visiting: Set<string>): number {
    let n = 0;
    for (const sel of set.selections) {
      if (sel.kind === Kind.FIELD) n += sel.name.value === '__typename' ? 0 : 1;
      else if (sel.kind === Kind.INLINE_FRAGMENT) n += rootFields(sel.selectionSet, visiting);
      else if (!visiting.has(sel.name.value)) {
        const def = context.getFragment(sel.name.value);
        if (def) {
          visiting.add(sel.name.value);
          n += rootFields(def.selectionSet, visiting);
          visiting.delete(sel.name.value);
        }
      }
    }
    return n;
  }

  const root: GraphQLObjectType | null | undefined =
    op.operation === 'query' ? queryType : op.operation === 'mutation' ? mutationType : schema.getSubscriptionType();
  if (!root) return { ...ZERO, rootFields: 0 };
  return { ...selections(op.selectionSet, root, new Set()), rootFields: rootFields(op.selectionSet, new Set()) };
}

export function queryLimitsRule(limits: QueryLimits = QUERY_LIMITS): ValidationRule {
  return (context) => ({
    OperationDefinition(op) {
      const m = measureOperation(context, op);
      const name = op.name ? `Operation ${op.name.value}` : 'The operation';
      const report = (limit: string, actual: number, max: number, message: string) =>
        context.reportError(new GraphQLError(message, { nodes: [op], extensions: { limit, actual, max } }));
      if (m.depth > limits.maxDepth) {
        report('max_depth', m.depth, limits.maxDepth, `${name} is nested ${m.depth} fields deep; the limit is ${limits.maxDepth}.`);
      }
      if (m.cost > limits.maxCost) {
        report(
          'max_cost',
          m.cost,
          limits.maxCost,
          `${name} has an estimated cost of ${m.cost}; the limit is ${limits.maxCost}. Ask for fewer fields or a smaller tunnels(limit).`,
        );
      }
      if (m.aliases > limits.maxAliases) {
        report('max_aliases', m.aliases, limits.maxAliases, `${name} uses ${m.aliases} aliases; the limit is ${limits.maxAliases}.`);
      }
      if (op.operation === 'mutation' && m.rootFields > limits.maxRootMutations) {
        report('max_mutations', m.rootFields, limits.maxRootMutations, `${name} runs ${m.rootFields} mutations; the limit is ${limits.maxRootMutations} per request.`);
      }
      // Nothing below the operation needs this rule's visitor.
      return false;
    },
  });
}
