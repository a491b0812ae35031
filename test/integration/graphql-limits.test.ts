// GraphQL at /graphql over real HTTP against real PostgreSQL, continued from graphql.test.ts: the 401 policy,
// the depth/cost/alias limits, the HTTP surface, stock running out, and the drift check of schema/schema.graphql,
// all through the real gateway app (one block starts a second gateway with a captured logger to watch what an
// unexpected error logs).
import 'reflect-metadata';
import fs from 'node:fs';
import { getIntrospectionQuery } from 'graphql';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser } from '../helpers/fixtures.ts';
import { buildGraphqlSchema, printGraphqlSchema, QUERY_LIMITS } from '../../server/graphql/index.ts';
import { SCHEMA_FILE } from '../../server/graphql/print-schema.ts';
import { createLogger } from '../../common/log.ts';
import { alice, balanceCents, buy, gql, gw, onlyError, ORIGIN, TUNNEL_FIELDS, useGraphqlWorld } from './graphql-world.ts';

useGraphqlWorld();

describe('authentication', () => {
  it.each([
    ['no credential', undefined, 'Bearer'],
    ['a garbage svc_ key', 'svc_garbage', 'Bearer error="invalid_token"'],
    ['an unknown token kind', 'eyJhbGciOiJub25lIn0.e30.', 'Bearer error="invalid_token"'],
  ])('%s gets invalid_token and, with no data at all, HTTP 401', async (_what, token, challenge) => {
    const res = await gql('{ me { accountId } }', undefined, token);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toBe(challenge);
    expect(onlyError(res).extensions).toEqual({ code: 'invalid_token', status: 401 });
    expect(res.body.data).toBeNull();
  });

  it('a malformed Authorization header is invalid_token', async () => {
    const res = await gql('mutation { deleteTunnel(id: "x") { id } }', undefined, undefined, { authorization: 'Basic dXNlcjpwdw==' });
    expect(res.status).toBe(401);
    expect(onlyError(res).extensions?.code).toBe('invalid_token');
  });

  it('authenticates once per request however many fields need it', async () => {
    const spy = vi.spyOn(gw.services.auth, 'authenticate');
    try {
      const res = await gql('{ me { accountId } tunnels { nextCursor } a: tunnels(limit: 1) { nextCursor } }', undefined, alice.readKey);
      expect(res.body.errors).toBeUndefined();
      expect(spy).toHaveBeenCalledTimes(1);
    } finally {
      spy.mockRestore();
    }
  });

  it('is 401 only when there is no data and every error is invalid_token', async () => {
    const res = await gql('{ pricing { price } me { accountId } }');
    // me is non-null, so data is null and the only error is invalid_token: 401.
    expect(res.status).toBe(401);
    // A refusal that is not about the credential keeps the GraphQL default.
    const notFound = await gql('{ tunnel(id: "00000000-0000-4000-8000-000000000000") { id } }', undefined, alice.readKey);
    expect(notFound.status).toBe(200);
    expect(onlyError(notFound).extensions?.code).toBe('not_found');
    expect(notFound.headers.get('www-authenticate')).toBeNull();
  });
});

describe('limits against abusive queries', () => {
  const fullPage = (alias: string, limit: string) => `${alias}: tunnels(limit: ${limit}) { tunnels { ${TUNNEL_FIELDS} } nextCursor }`;

  it('the standard introspection query passes the limits', async () => {
    const res = await gql(getIntrospectionQuery());
    expect(res.status).toBe(200);
    expect(res.body.errors).toBeUndefined();
    const names = res.body.data.__schema.types.map((t: { name: string }) => t.name);
    expect(names).toEqual(expect.arrayContaining(['Tunnel', 'TunnelStatus', 'PurchaseResult', 'Pricing']));
  });

  it('refuses a query nested deeper than the limit', async () => {
    // 9 levels without tripping graphql-js's own introspection list rule (two inputFields).
    const deep = '{ __schema { directives { args { type { inputFields { type { inputFields { type { name } } } } } } } } }';
    const res = await gql(deep);
    expect(res.status).toBe(400);
    const err = onlyError(res);
    expect(err.extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', limit: 'max_depth', actual: 9, max: QUERY_LIMITS.maxDepth });
    // One level less is fine.
    const ok = await gql('{ __schema { directives { args { type { inputFields { type { inputFields { name } } } } } } } }');
    expect(ok.status).toBe(200);
    expect(ok.body.errors).toBeUndefined();
  });

  it('a full page of 100 tunnels fits the cost limit, two do not', async () => {
    const one = await gql(`{ ${fullPage('a', '100')} }`, undefined, alice.readKey);
    expect(one.status).toBe(200);
    expect(one.body.errors).toBeUndefined();
    const two = await gql(`{ ${fullPage('a', '100')} ${fullPage('b', '100')} }`, undefined, alice.readKey);
    expect(two.status).toBe(400);
    expect(onlyError(two).extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', limit: 'max_cost', max: QUERY_LIMITS.maxCost });
    expect(two.body.data).toBeUndefined();
  });

  it('a limit given by a variable is costed at the maximum page size', async () => {
    const res = await gql(`query P($n: Int!) { ${fullPage('a', '$n')} ${fullPage('b', '$n')} }`, { n: 1 }, alice.readKey);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions?.limit).toBe('max_cost');
  });

  it('counts fragments at every place they are spread', async () => {
    const frag = `fragment F on TunnelPage { tunnels { ${TUNNEL_FIELDS} } }`;
    const res = await gql(`{ a: tunnels(limit: 100) { ...F } b: tunnels(limit: 100) { ...F } } ${frag}`, undefined, alice.readKey);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions?.limit).toBe('max_cost');
  });

  it('refuses more aliases than the limit', async () => {
    const fields = Array.from({ length: QUERY_LIMITS.maxAliases + 1 }, (_, i) => `p${i}: pricing { price }`).join(' ');
    const res = await gql(`{ ${fields} }`);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions).toMatchObject({ limit: 'max_aliases', actual: QUERY_LIMITS.maxAliases + 1 });
  });

  it('refuses more mutations per request than the limit, before charging anything', async () => {
    const before = await balanceCents(alice.accountId);
    const fields = Array.from({ length: QUERY_LIMITS.maxRootMutations + 1 }, (_, i) => `b${i}: purchaseTunnel(input: { originIp: "${ORIGIN}" }) { charged }`).join(' ');
    const res = await gql(`mutation { ${fields} }`, undefined, alice.writeKey);
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions).toMatchObject({ limit: 'max_mutations' });
    expect(await balanceCents(alice.accountId)).toBe(before);
  });

  it('a purchase cannot share its operation with another mutation, whose failure would hide the charge (fuzz finding)', async () => {
    const before = await balanceCents(alice.accountId);
    const res = await gql(
      `mutation { a: purchaseTunnel(input: { originIp: "${ORIGIN}" }) { charged } b: provisionTunnel(id: "00000000-0000-4000-8000-000000000000") { id } }`,
      undefined,
      alice.writeKey,
    );
    expect(res.status).toBe(400);
    expect(onlyError(res).extensions).toMatchObject({ limit: 'max_mutations', actual: 2 });
    expect(await balanceCents(alice.accountId)).toBe(before);
  });

  it('refuses batched requests, parse errors and unknown fields with Apollo codes', async () => {
    const batch = await call(gw.url, 'POST', '/graphql', { body: [{ query: '{ pricing { price } }' }, { query: '{ pricing { price } }' }] });
    expect(batch.status).toBe(400);
    expect(batch.text).toMatch(/batch/i);
    const parse = await gql('{ pricing { price ');
    expect(parse.status).toBe(400);
    expect(onlyError(parse).extensions?.code).toBe('GRAPHQL_PARSE_FAILED');
    const unknown = await gql('{ pricing { cost } }');
    expect(unknown.status).toBe(400);
    expect(onlyError(unknown).extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
  });
});

describe('HTTP surface', () => {
  it('refuses a GET query without a CSRF preflight header, and serves no landing page', async () => {
    const q = encodeURIComponent('{ pricing { price } }');
    const plain = await call(gw.url, 'GET', `/graphql?query=${q}`);
    expect(plain.status).toBe(400);
    expect(plain.text).toMatch(/CSRF/);
    const preflighted = await call(gw.url, 'GET', `/graphql?query=${q}`, { headers: { 'apollo-require-preflight': 'true' } });
    expect(preflighted.status).toBe(200);
    expect(preflighted.body.data.pricing.price).toBe(100);
    // A browser opening /graphql is sent to the panel's explorer page (server/http/panel.ts), not shown Apollo's.
    const browser = await fetch(`${gw.url}/graphql`, { headers: { accept: 'text/html' }, redirect: 'manual' });
    expect(browser.status).toBe(302);
    expect(browser.headers.get('location')).toBe('/developers/graphql');
    expect(await browser.text()).not.toMatch(/<html/i);
  });

  it('answers a JSON body that is not an object with 400, not 500', async () => {
    for (const raw of ['null', 'false', '0', '"{ pricing { price } }"']) {
      const res = await call(gw.url, 'POST', '/graphql', { raw, headers: { 'content-type': 'application/json' } });
      expect(res.status, raw).toBe(400);
    }
  });
});

describe('unexpected errors', () => {
  // The gateway's own app (the same createGateway as npm start), with its log lines captured.
  let logged: RunningGateway;
  const lines: string[] = [];

  beforeAll(async () => {
    logged = await startGateway({ testDb: gw.testDb, log: createLogger('error', {}, (l) => lines.push(l)) });
  });
  afterAll(async () => {
    await logged?.close();
  });

  it('become server_error with no internals in the response, and are logged', async () => {
    const spy = vi.spyOn(logged.services.pricing, 'get').mockRejectedValueOnce(new Error('connect ECONNREFUSED postgres://tunnelgate:hunter2@db'));
    try {
      const res = await call(logged.url, 'POST', '/graphql', { body: { query: '{ pricing { price } }' } });
      expect(res.status).toBe(200);
      const err = res.body.errors[0];
      expect(err.extensions).toEqual({ code: 'server_error', status: 500 });
      expect(res.text).not.toMatch(/hunter2|ECONNREFUSED|stack/i);
      const line = lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'graphql error');
      expect(line).toBeDefined();
      expect(line.err.message).toMatch(/ECONNREFUSED/);
      expect(line.path).toBe('pricing');
      expect(typeof line.request_id).toBe('string');
      expect(lines.join('\n')).not.toMatch(/hunter2/);
    } finally {
      spy.mockRestore();
    }
  });
});

describe('out of stock', () => {
  it('once every protected IP is taken, purchaseTunnel is out_of_stock and charges nothing', async () => {
    const rich = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
    const { available } = (await gw.services.pricing.get()).availability;
    for (let i = 0; i < available; i++) {
      const res = await buy(rich.writeKey);
      expect(res.body.errors, JSON.stringify(res.body.errors)).toBeUndefined();
    }
    const before = await balanceCents(rich.accountId);
    const res = await buy(rich.writeKey);
    expect(onlyError(res).extensions).toEqual({ code: 'out_of_stock', status: 409 });
    expect(await balanceCents(rich.accountId)).toBe(before);
    const pricing = await gql('{ pricing { availability { available inStock } } }');
    expect(pricing.body.data.pricing.availability).toEqual({ available: 0, inStock: false });
  });
});

describe('schema/schema.graphql', () => {
  it('is what the code generates (run `npm run schema:graphql` after changing the schema)', async () => {
    const generated = printGraphqlSchema(await buildGraphqlSchema());
    const checkedIn = fs.existsSync(SCHEMA_FILE) ? fs.readFileSync(SCHEMA_FILE, 'utf8') : '';
    expect(checkedIn, 'schema/schema.graphql is out of date: run `npm run schema:graphql` and commit the result').toBe(generated);
  });
});
