// The depth/cost/alias rule on small hand-made schemas, including the shapes this product's schema
// cannot express (recursion) and documents built to make a naive validator blow up.
import { buildSchema, parse, specifiedRules, validate, type GraphQLError } from 'graphql';
import { describe, expect, it } from 'vitest';
import { queryLimitsRule, QUERY_LIMITS } from '../../server/graphql/limits.ts';

const schema = buildSchema(`
  type Node { name: String, child: Node, children: [Node!]! }
  type TunnelPage { tunnels: [Node!]!, nextCursor: String }
  type Query { node: Node, tunnels(limit: Int = 20): TunnelPage!, pricing: Int }
  type Mutation { buy: Int }
`);

const check = (doc: string, limits = QUERY_LIMITS): readonly GraphQLError[] => validate(schema, parse(doc), [...specifiedRules, queryLimitsRule(limits)]);
const limitsHit = (doc: string, limits = QUERY_LIMITS) =>
  check(doc, limits)
    .map((e) => e.extensions.limit)
    .filter(Boolean);

const nest = (levels: number, field = 'child') => {
  let s = 'name';
  for (let i = 1; i < levels; i++) s = `${field} { ${s} }`;
  return s;
};

describe('queryLimitsRule', () => {
  it('allows depth 8 and refuses depth 9', () => {
    expect(check(`{ node { ${nest(7)} } }`)).toEqual([]);
    const errors = check(`{ node { ${nest(8)} } }`);
    expect(errors).toHaveLength(1);
    expect(errors[0]!.extensions).toEqual({ limit: 'max_depth', actual: 9, max: 8 });
    expect(errors[0]!.message).toMatch(/nested 9 fields deep; the limit is 8/);
  });

  it('measures depth through named and inline fragments', () => {
    const doc = `{ node { ...A } } fragment A on Node { child { ... on Node { child { ...B } } } } fragment B on Node { ${nest(6)} }`;
    expect(limitsHit(doc)).toEqual(['max_depth']);
  });

  it('multiplies the cost under tunnels(limit) by the page size, counting a variable as 100', () => {
    // 10 + n * (1 + 5): 5 selected fields under each tunnel.
    const page = (limit: string) => `tunnels(limit: ${limit}) { tunnels { name child { name } children { name } } }`;
    const tight = { ...QUERY_LIMITS, maxCost: 10 + 50 * 6 };
    expect(limitsHit(`{ ${page('50')} }`, tight)).toEqual([]);
    expect(limitsHit(`{ ${page('51')} }`, tight)).toEqual(['max_cost']);
    expect(limitsHit(`query Q($n: Int) { ${page('$n')} }`, tight)).toEqual(['max_cost']);
    // Without a limit the default page of 20 is assumed.
    expect(limitsHit(`{ tunnels { tunnels { name child { name } children { name } } } }`, { ...QUERY_LIMITS, maxCost: 10 + 20 * 6 })).toEqual([]);
    expect(limitsHit(`{ tunnels { tunnels { name child { name } children { name } } } }`, { ...QUERY_LIMITS, maxCost: 10 + 20 * 6 - 1 })).toEqual(['max_cost']);
  });

  it('stays linear on documents that expand exponentially', () => {
    // F0 spreads F1 twice, F1 spreads F2 twice ... : 2^40 fields once expanded.
    const frags = Array.from({ length: 40 }, (_, i) => `fragment F${i} on Node { a${i}: child { ...F${i + 1} } b${i}: child { ...F${i + 1} } }`).join('\n');
    const doc = `{ node { ...F0 } } ${frags} fragment F40 on Node { name }`;
    const hit = limitsHit(doc);
    expect(hit).toContain('max_cost');
    expect(hit).toContain('max_depth');
  });

  it('does not loop on fragment cycles (graphql-js reports the cycle)', () => {
    const errors = check('{ node { ...A } } fragment A on Node { child { ...B } } fragment B on Node { child { ...A } }');
    expect(errors.some((e) => /Cannot spread fragment "A" within itself/.test(e.message))).toBe(true);
  });

  it('counts aliases, and root mutation fields per operation', () => {
    const aliases = (n: number) => `{ ${Array.from({ length: n }, (_, i) => `p${i}: pricing`).join(' ')} }`;
    expect(limitsHit(aliases(QUERY_LIMITS.maxAliases))).toEqual([]);
    expect(limitsHit(aliases(QUERY_LIMITS.maxAliases + 1))).toEqual(['max_aliases']);
    const buys = (n: number) => `mutation { ${Array.from({ length: n }, (_, i) => `b${i}: buy`).join(' ')} }`;
    expect(limitsHit(buys(QUERY_LIMITS.maxRootMutations))).toEqual([]);
    expect(limitsHit(buys(QUERY_LIMITS.maxRootMutations + 1))).toEqual(['max_mutations']);
    // Spread through a fragment on the root still counts.
    expect(limitsHit(`mutation { ...M } fragment M on Mutation { ${Array.from({ length: 6 }, (_, i) => `b${i}: buy`).join(' ')} }`)).toEqual(['max_mutations']);
  });

  it('does not count __Type.ofType towards depth, but counts it in the cost', () => {
    let chain = 'name';
    for (let i = 0; i < 20; i++) chain = `ofType { ${chain} }`;
    expect(limitsHit(`{ __type(name: "Node") { ${chain} } }`)).toEqual([]);
    expect(limitsHit(`{ __type(name: "Node") { ${chain} } }`, { ...QUERY_LIMITS, maxCost: 20 })).toEqual(['max_cost']);
    // Other introspection fields count like any field.
    expect(limitsHit(`{ __schema { types { fields { args { type { inputFields { type { inputFields { name } } } } } } } } }`)).toContain('max_depth');
  });
});
