// Property-based fuzz of /graphql: documents built from the schema with arbitrary
// arguments, variables, aliases, fragments and directives; the same documents cut and corrupted; and
// request envelopes of every JSON type. Properties: never a 5xx and never a server_error (or Apollo's
// INTERNAL_SERVER_ERROR) inside a 200; an error outside GraphQL (body reader, rate limit) is docs/CONTRACTS.md "REST errors"'s
// body; every GraphQL error carries a documented code (the REST code with its status in
// extensions.status, or Apollo's request codes); and money moves only for the purchases the response
// reports, by exactly what they report (balance, ledger and tunnels read through the raw pg pool).
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningGateway } from '../helpers/gateway.ts';
import type { SeededUser } from '../helpers/fixtures.ts';
import {
  REST_ERROR_CODES,
  cents,
  closeFuzzedGateway,
  expectErrorShape,
  fuzz,
  fuzzTimeout,
  headerValue,
  isNodeParserRefusal,
  moneyChanges,
  moneySnapshot,
  oddString,
  sometimes,
  startSellingGateway,
  webhookUrl,
  type Answer,
} from './support.ts';

let gw: RunningGateway;
let rich: SeededUser;
let poor: SeededUser;
let viewer: SeededUser;
let tunnelId: string;

/** Apollo's codes for requests that never reached a resolver (and BAD_USER_INPUT for variable coercion). */
const APOLLO_CODES = ['GRAPHQL_PARSE_FAILED', 'GRAPHQL_VALIDATION_FAILED', 'BAD_USER_INPUT', 'BAD_REQUEST', 'PERSISTED_QUERY_NOT_FOUND', 'PERSISTED_QUERY_NOT_SUPPORTED', 'OPERATION_RESOLUTION_FAILURE'];
/** Each REST code with the statuses docs/CONTRACTS.md "REST errors" gives it (invalid_request: 400, and 405/413/415/422). */
const DOMAIN_STATUSES: Record<string, number[]> = {};
for (const [status, codes] of Object.entries(REST_ERROR_CODES)) for (const c of codes) (DOMAIN_STATUSES[c] ??= []).push(Number(status));

interface GqlBody {
  data?: Record<string, unknown> | null;
  errors?: Array<{ message?: unknown; extensions?: { code?: unknown; status?: unknown } }>;
}

/** Every answer of /graphql: a GraphQL response with documented codes, or docs/CONTRACTS.md "REST errors"'s body. */
function expectGraphqlAnswer(res: Answer, what: string): GqlBody | null {
  expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
  if (isNodeParserRefusal(res)) return null;
  const body = (() => {
    try {
      return JSON.parse(res.text) as Record<string, unknown>;
    } catch {
      return undefined;
    }
  })();
  expect(body, `${what}: ${res.status} not JSON: ${res.text.slice(0, 300)}`).toBeTypeOf('object');
  if (body && 'error' in body) {
    const codes = REST_ERROR_CODES[res.status];
    expect(codes, `${what}: ${res.status} ${res.text.slice(0, 300)}`).toBeDefined();
    expectErrorShape(res, codes!, what);
    if (res.status === 429) expect(res.headers.get('retry-after') ?? '', what).toMatch(/^[1-9]\d*$/);
    return null;
  }
  const g = body as GqlBody;
  expect(Object.keys(g).every((k) => k === 'data' || k === 'errors' || k === 'extensions'), `${what}: ${res.text.slice(0, 300)}`).toBe(true);
  if (res.status !== 200) expect(g.errors?.length, `${what}: ${res.status} without errors: ${res.text.slice(0, 300)}`).toBeGreaterThan(0);
  for (const e of g.errors ?? []) {
    expect(e.message, what).toBeTypeOf('string');
    const code = e.extensions?.code;
    expect(code, `${what}: an error without a code: ${JSON.stringify(e).slice(0, 300)}`).toBeTypeOf('string');
    expect(code, `${what}: ${JSON.stringify(e).slice(0, 300)}`).not.toBe('server_error');
    if (typeof code === 'string' && code in DOMAIN_STATUSES) {
      expect(DOMAIN_STATUSES[code], `${what}: ${JSON.stringify(e).slice(0, 300)}`).toContain(e.extensions?.status);
    } else {
      expect(APOLLO_CODES, `${what}: undocumented code ${String(code)}: ${JSON.stringify(e).slice(0, 300)}`).toContain(code);
    }
  }
  if (res.status === 401) {
    expect(g.errors!.every((e) => e.extensions?.code === 'invalid_token'), what).toBe(true);
    expect(res.headers.get('www-authenticate') ?? '', what).toMatch(/^Bearer\b/);
  }
  return g;
}

async function post(headers: Record<string, string>, body: string): Promise<Answer> {
  const res = await fetch(`${gw.url}/graphql`, { method: 'POST', headers, body });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

beforeAll(async () => {
  ({ gw, rich, poor, viewer } = await startSellingGateway());
  const res = await post({ authorization: `Bearer ${rich.writeKey}`, 'content-type': 'application/json' }, JSON.stringify({ query: 'mutation { purchaseTunnel(input: {originIp: "8.8.4.4"}) { tunnel { id } } }' }));
  tunnelId = (JSON.parse(res.text) as { data: { purchaseTunnel: { tunnel: { id: string } } } }).data.purchaseTunnel.tunnel.id;
});

afterAll(() => closeFuzzedGateway(gw, 'graphql'));

// ---------------------------------------------------------------------------------------------------
// Documents from the schema

const TUNNEL_FIELDS = ['id', 'name', 'protectedIp', 'originIp', 'ports', 'protocol', 'tunnelName', 'status', 'adminSshPort', 'edgeIp', 'createdAt', 'updatedAt'];
const gqlString = (s: string) => JSON.stringify(s);

/** A GraphQL literal of any type, right or wrong for where it lands. */
const literal: fc.Arbitrary<string> = fc.oneof(
  fc.integer().map(String),
  fc.constantFrom('0', '-1', '101', '2147483648', '1e3', '1.5', 'true', 'null', 'ENUM', '[]', '{}', '"8.8.4.4"', `"${'9'.repeat(40)}"`),
  oddString.map(gqlString),
  fc.string({ maxLength: 6 }).map((s) => `{ originIp: ${gqlString(s)} }`),
);

const selection = (fields: string[]): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 6, arbitrary: fc.subarray(fields, { minLength: 1 }).map((f) => `{ ${f.join(' ')} }`) },
    fc.constantFrom('', '{ nope }', '{ __typename }', '{ id id id }', '{ ...F }', '{ ... on Tunnel { id } }', '{ id @skip(if: true) }', '{ id @include(if: $flag) }'),
  );

const idArg = fc.oneof({ weight: 3, arbitrary: fc.constantFrom('$id', 'REAL') }, fc.uuid().map(gqlString), literal);

const rootQuery = fc.oneof(
  fc.constant('pricing { price priceUsd usdRubRate availability { total available inStock } }'),
  selection(['accountId', 'balanceUsd', 'email', 'name', 'permission', 'role', 'userId']).map((s) => `me ${s}`),
  fc.tuple(idArg, selection(TUNNEL_FIELDS)).map(([id, s]) => `tunnel(id: ${id}) ${s}`),
  fc.tuple(idArg, fc.constantFrom('{ tunnelId scripts { origin systemdOrigin } }', '{ tunnelId }', '')).map(([id, s]) => `tunnelSetup(id: ${id}) ${s}`),
  fc.tuple(fc.oneof(fc.constant('$limit'), literal), fc.oneof(fc.constant('$cursor'), literal), selection(TUNNEL_FIELDS)).map(([l, c, s]) => `tunnels(limit: ${l}, cursor: ${c}) { nextCursor tunnels ${s || '{ id }'} }`),
  fc.constantFrom('__typename', '__schema { queryType { name } }', '__type(name: "Tunnel") { name fields { name } }', 'nope', 'tunnel', 'pricing(x: 1) { price }'),
);

const purchaseArgs = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('input: $input', 'input: $input, idempotencyKey: $key') },
  {
    weight: 2,
    arbitrary: fc
      .record({ originIp: fc.constantFrom('"8.8.4.4"', '"1.1.1.1"', '"10.0.0.1"', '"192.0.2.1"', '8', 'null'), name: fc.option(literal, { nil: undefined }), promocode: fc.option(fc.constantFrom('"FUZZ10"', '"\\u0000"', '"NOPE"', '1'), { nil: undefined }) })
      .map(({ originIp, name, promocode }) => `input: { originIp: ${originIp}${name ? `, name: ${name}` : ''}${promocode ? `, promocode: ${promocode}` : ''} }`),
  },
  { weight: 1, arbitrary: literal.map((l) => `input: ${l}`) },
);

const rootMutation = fc.oneof(
  { weight: 2, arbitrary: purchaseArgs.map((a) => `purchaseTunnel(${a}) { tunnel { id status } chargedUsd charged currency balanceAfter }`) },
  fc.tuple(fc.constantFrom('provisionTunnel', 'activateTunnel', 'deleteTunnel'), idArg).map(([m, id]) => `${m}(id: ${id}) { id status }`),
);

const VARIABLE_TYPES: Record<string, string> = { id: 'ID!', limit: 'Int!', cursor: 'String', input: 'PurchaseTunnelInput!', key: 'String', flag: 'Boolean!' };

/** Whole documents: 1-3 aliased root fields, the variables and fragment they use, sometimes corrupted. */
const composed: fc.Arbitrary<string> = fc
  .tuple(
    fc.boolean(),
    fc.array(fc.option(fc.constantFrom('a', 'b', 'c', 'tunnel', '__proto__', 'constructor'), { nil: undefined }), { minLength: 1, maxLength: 3 }),
    // Mostly well-formed (so resolvers run); sometimes undeclared variables, an unused fragment, a corruption.
    sometimes(fc.constantFrom('undeclared', 'unused-fragment', 'wrong-type'), 6),
    sometimes(fc.tuple(fc.nat(), fc.oneof(fc.constantFrom('{', '}', '(', '$', '"', '...', '#', '\\', '\u0000', '@', ':'), oddString)), 6),
  )
  .chain(([isMutation, aliases, flaw, corrupt]) =>
    fc.tuple(...aliases.map(() => (isMutation ? rootMutation : rootQuery))).map((fields) => {
      const body = fields.map((f, i) => (aliases[i] ? `${aliases[i]}${i}: ${f}` : i > 0 ? `f${i}: ${f}` : f)).join('\n  ');
      const used = Object.keys(VARIABLE_TYPES).filter((v) => new RegExp(`\\$${v}\\b`).test(body));
      const defs = flaw === 'undeclared' ? [] : used.map((v) => `$${v}: ${flaw === 'wrong-type' ? 'String' : VARIABLE_TYPES[v]}`);
      const fragment = body.includes('...F') || flaw === 'unused-fragment' ? '\nfragment F on Tunnel { id status }' : '';
      let doc = `${isMutation ? 'mutation' : 'query'} Op${defs.length ? `(${defs.join(', ')})` : ''} {\n  ${body}\n}${fragment}`;
      if (corrupt) {
        const at = corrupt[0] % (doc.length + 1);
        doc = doc.slice(0, at) + corrupt[1] + doc.slice(at);
      }
      return doc;
    }),
  );

/** Mostly composed documents; a share of plain purchases so the money checks see successes too. */
const document: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: composed },
  fc.constantFrom(
    'mutation Buy($input: PurchaseTunnelInput!, $key: String) { purchaseTunnel(input: $input, idempotencyKey: $key) { tunnel { id } chargedUsd balanceAfter } }',
    'mutation Buy($input: PurchaseTunnelInput!) { a: purchaseTunnel(input: $input) { tunnel { id } chargedUsd } b: purchaseTunnel(input: $input) { tunnel { id } chargedUsd } }',
  ),
);

/** Variables: the right shapes, the wrong ones, and anything. */
const variables: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record(
      {
        id: fc.oneof({ weight: 3, arbitrary: fc.constant('REAL') }, fc.uuid(), oddString, fc.jsonValue({ maxDepth: 1 })),
        limit: fc.oneof({ weight: 3, arbitrary: fc.integer({ min: -2, max: 102 }) }, fc.constantFrom(2147483648, 1.5, '5', null)),
        cursor: fc.oneof(oddString, fc.constant(null), fc.jsonValue({ maxDepth: 1 })),
        input: fc.oneof(
          { weight: 4, arbitrary: fc.record({ originIp: fc.constantFrom('8.8.4.4', '1.1.1.1', '10.0.0.1', '08.8.4.4'), name: fc.option(fc.oneof(oddString, fc.jsonValue({ maxDepth: 1 }))), promocode: fc.option(fc.constantFrom('FUZZ10', '\u0000', 'NOPE')) }, { requiredKeys: ['originIp'] }) },
          fc.dictionary(fc.oneof(fc.constantFrom('originIp', 'name', 'promocode', '__proto__', 'constructor'), fc.string({ maxLength: 8 })), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
          fc.jsonValue({ maxDepth: 2 }),
        ),
        key: fc.oneof(fc.constantFrom('gk1', 'gk2'), headerValue, fc.jsonValue({ maxDepth: 1 })),
        flag: fc.oneof({ weight: 4, arbitrary: fc.boolean() }, fc.jsonValue({ maxDepth: 1 })),
      },
      { requiredKeys: ['id', 'limit', 'input', 'flag'] },
    ),
  },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
);

const credential = fc.constantFrom('rich', 'rich', 'rich', 'rich-read', 'poor', 'viewer', 'none', 'garbage');
function authHeader(c: string): Record<string, string> {
  const key = { rich: rich.writeKey, 'rich-read': rich.readKey, poor: poor.writeKey, viewer: viewer.writeKey, none: '', garbage: 'svc_nope' }[c]!;
  return key ? { authorization: `Bearer ${key}` } : {};
}

const ACCOUNT_OF = (c: string) => ({ rich: rich.accountId, poor: poor.accountId, viewer: viewer.accountId })[c];

/** The purchases a response reports (every alias), with what each says it charged. */
function reportedPurchases(data: Record<string, unknown> | null | undefined): Array<{ id: string; chargedUsd: number; balanceAfter: number }> {
  const out: Array<{ id: string; chargedUsd: number; balanceAfter: number }> = [];
  for (const v of Object.values(data ?? {})) {
    const p = v as { tunnel?: { id?: unknown }; chargedUsd?: unknown; balanceAfter?: unknown } | null;
    if (p && typeof p === 'object' && p.tunnel && typeof p.tunnel.id === 'string' && typeof p.chargedUsd === 'number') {
      out.push({ id: p.tunnel.id, chargedUsd: p.chargedUsd, balanceAfter: p.balanceAfter as number });
    }
  }
  return out;
}

describe('fuzz: GraphQL documents and variables', () => {
  it('never 5xx or server_error, documented codes, money moves only for reported purchases', { timeout: fuzzTimeout(250) }, async () => {
    await fuzz('POST /graphql (documents, variables, credential)', fc.record({ doc: document, vars: variables, cred: credential, op: sometimes(fc.constantFrom('Op', 'Other', ''), 6) }), 250, async ({ doc, vars, cred, op }) => {
      const query = doc.replace(/REAL/g, JSON.stringify(tunnelId));
      const v = vars && typeof vars === 'object' && !Array.isArray(vars) ? JSON.parse(JSON.stringify(vars).replace(/REAL/g, tunnelId)) : vars;
      const before = await moneySnapshot(gw.testDb.raw);
      const tunnelsBefore = new Set((await gw.testDb.raw.query<{ id: string }>('select id from tunnel')).rows.map((r) => r.id));
      const res = await post({ ...authHeader(cred), 'content-type': 'application/json' }, JSON.stringify({ query, variables: v, operationName: op }));
      const what = `graphql as ${cred}: ${query.slice(0, 400)} vars ${JSON.stringify(v)?.slice(0, 200)}`;
      const g = expectGraphqlAnswer(res, what);
      const changes = moneyChanges(before, await moneySnapshot(gw.testDb.raw));
      // A purchase repeated with the same idempotencyKey in one operation replays the first: one tunnel, reported twice.
      const fresh = [...new Map(reportedPurchases(g?.data).filter((p) => !tunnelsBefore.has(p.id)).map((p) => [p.id, p])).values()];
      // What the database says was bought: tunnels that did not exist before, with what each charged.
      const created = (await gw.testDb.raw.query<{ id: string; account_id: string; charged: string }>('select id, account_id, charged_usd::text as charged from tunnel')).rows.filter(
        (r) => !tunnelsBefore.has(r.id),
      );
      if (created.length === 0) {
        expect(changes, `${what}: money moved without a purchase`).toEqual([]);
        expect(fresh, what).toEqual([]);
      } else {
        expect(changes, what).toHaveLength(1);
        const [c] = changes;
        expect(c!.account, what).toBe(ACCOUNT_OF(cred));
        expect(created.every((r) => r.account_id === c!.account), what).toBe(true);
        const charged = created.reduce((sum, r) => sum + cents(r.charged), 0n);
        expect(cents(c!.before!.balance) - cents(c!.after!.balance), what).toBe(charged);
        expect(c!.after!.ledger - c!.before!.ledger, what).toBe(created.length);
        expect(c!.after!.tunnels - c!.before!.tunnels, what).toBe(created.length);
        // Every purchase made is reported, with the charge the ledger has: a mutation operation holds one
        // root field (server/graphql/limits.ts), so no later field's failure can null out a purchase.
        expect(fresh.map((p) => p.id).sort(), `${what}: ${res.text.slice(0, 300)}`).toEqual(created.map((r) => r.id).sort());
        expect(fresh.reduce((sum, p) => sum + BigInt(Math.round(p.chargedUsd * 100)), 0n), what).toBe(charged);
      }
      const codes = [...new Set((g?.errors ?? []).map((e) => String(e.extensions?.code)))].sort().join(',');
      return `${res.status}${created.length ? ` bought${created.length}` : ''}${codes ? ` ${codes}` : ''}`;
    });
  });
});

describe('fuzz: GraphQL createWebhook', () => {
  const events = fc.oneof(
    { weight: 4, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.constantFrom<unknown>(['TUNNEL_STATUS_CHANGED'], ['TUNNEL_HEALTH_CHANGED', 'TUNNEL_STATUS_CHANGED'], [], ['tunnel.status_changed'], null) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  );
  const includeOrigin = fc.oneof(
    { weight: 4, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: fc.constantFrom<unknown>(true, false, null, 'true', 1) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 1 }) },
  );
  const CREATE = 'mutation($i: CreateWebhookInput!) { createWebhook(input: $i) { webhook { id url includeOrigin createdBy { kind } } } }';

  it('never 5xx or server_error; a created webhook fits its column, a refusal is invalid_request (400) or a coercion error', { timeout: fuzzTimeout(150) }, async () => {
    await fuzz('createWebhook (url: schemes, hosts, ports, multi-byte and long paths; events; includeOrigin)', fc.record({ url: webhookUrl, events, io: includeOrigin }), 150, async ({ url, events: ev, io }) => {
      const headers = { ...authHeader('rich'), 'content-type': 'application/json' };
      const i = { url, ...(ev === undefined ? {} : { events: ev }), ...(io === undefined ? {} : { includeOrigin: io }) };
      const res = await post(headers, JSON.stringify({ query: CREATE, variables: { i } }));
      const what = `createWebhook ${JSON.stringify(i).slice(0, 300)} (${url.length} characters)`;
      const g = expectGraphqlAnswer(res, what);
      const made = (g?.data?.createWebhook as { webhook: { id: string; url: string; includeOrigin: boolean; createdBy: { kind: string } } } | undefined)?.webhook;
      if (made) {
        // A Boolean or null only (GraphQL coerces nothing else), stored as sent, recorded as the key's.
        expect([undefined, null, true, false], what).toContain(io);
        expect(made.includeOrigin, what).toBe(io === true);
        expect(made.createdBy, what).toEqual({ kind: 'API_KEY' });
        expect(made.url.length, what).toBeLessThanOrEqual(2048);
        expect(new URL(made.url).port, what).not.toBe('52222');
        const del = await post(headers, JSON.stringify({ query: `mutation { deleteWebhook(id: ${JSON.stringify(made.id)}) }` }));
        expect((JSON.parse(del.text) as { data?: { deleteWebhook?: boolean } }).data?.deleteWebhook, what).toBe(true);
        return 'created';
      }
      const codes = [...new Set((g?.errors ?? []).map((e) => String(e.extensions?.code)))].sort().join(',');
      expect(['invalid_request', 'BAD_USER_INPUT'], `${what}: ${res.text.slice(0, 300)}`).toContain(codes);
      return `${res.status} ${codes}`;
    });
  });
});

describe('fuzz: GraphQL request envelopes', () => {
  const envelope = fc.oneof(
    fc.jsonValue().map((v) => JSON.stringify(v)),
    fc.record({ query: fc.oneof(fc.jsonValue({ maxDepth: 1 }), oddString, fc.constant('{ pricing { price } }')), variables: fc.jsonValue({ maxDepth: 2 }), operationName: fc.jsonValue({ maxDepth: 1 }), extensions: fc.jsonValue({ maxDepth: 2 }) }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
    fc.array(fc.constant({ query: '{ pricing { price } }' }), { maxLength: 3 }).map((a) => JSON.stringify(a)),
    fc.constantFrom('', '{', 'null', '0', 'false', '""', '{"query": "{ pricing { price } }", "extensions": {"persistedQuery": {"version": 1, "sha256Hash": "00"}}}', '{"query":"{ __typename }","variables":"{}"}', '{"__proto__":{"query":"{ me { email } }"}}'),
    fc.string({ unit: 'binary', maxLength: 100 }),
  );
  const method = fc.constantFrom('POST', 'POST', 'POST', 'GET', 'PUT', 'DELETE');
  const type = fc.constantFrom('application/json', 'application/json', 'text/plain', 'application/graphql', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x');

  it('never 5xx and documented errors for any envelope, method and content type', { timeout: fuzzTimeout(150) }, async () => {
    await fuzz('/graphql envelopes (method, content type, body)', fc.record({ envelope, method, type, cred: credential, preflight: fc.boolean(), qs: fc.option(oddString.map((s) => `query=${encodeURIComponent(s.replace(/[\ud800-\udfff]/g, ''))}`), { nil: undefined }) }), 150, async ({ envelope, method, type, cred, preflight, qs }) => {
      const before = await moneySnapshot(gw.testDb.raw);
      const headers: Record<string, string> = { ...authHeader(cred), 'content-type': type };
      if (preflight) headers['apollo-require-preflight'] = 'true';
      const res = await fetch(`${gw.url}/graphql${qs ? `?${qs}` : ''}`, { method, headers, body: method === 'GET' ? undefined : envelope });
      const answer = { status: res.status, headers: res.headers, text: await res.text() };
      expectGraphqlAnswer(answer, `${method} ${type} ${envelope.slice(0, 200)} ${qs?.slice(0, 100) ?? ''}`);
      expect(moneyChanges(before, await moneySnapshot(gw.testDb.raw))).toEqual([]);
      return answer.status;
    });
  });
});
