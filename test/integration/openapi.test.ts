// schema/openapi.yaml against the code: (a) the document is structurally a valid OpenAPI 3.1 document whose
// paths are exactly the router's, (b) real responses of the real gateway on real PostgreSQL match it,
// status by status, including the error bodies and the WWW-Authenticate / Retry-After headers.
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type Router from '@koa/router';
import { restRouter } from '../../server/http/rest/routes.ts';
import { addBalance } from '../../server/domain/accounts.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { setRate } from '../../server/domain/settings.ts';
import { VERSION } from '../../server/version.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import type { RunningGateway } from '../helpers/gateway.ts';
import {
  HTTP_METHODS,
  OPENAPI_FILE,
  OpenApiMismatch,
  compileAllSchemas,
  documentedStatuses,
  expectMatchesOpenApi,
  expectMatchesSchema,
  listOperations,
  loadOpenApi,
  requestBodyErrors,
  resolvePointer,
} from '../helpers/openapi.ts';

type Doc = Record<string, any>;
const doc = loadOpenApi() as Doc;

/** The REST router's operations as `METHOD /path/{param}`, read from the real router's stack. */
function routerOperations(): string[] {
  const build = restRouter as unknown as (...args: unknown[]) => Router;
  const router = build({}, {}, () => '{}');
  const ops = new Set<string>();
  for (const layer of router.stack) {
    const p = String(layer.path).replace(/:(\w+)/g, '{$1}');
    for (const m of layer.methods) if (m !== 'HEAD') ops.add(`${m} ${p}`);
  }
  return [...ops].sort();
}

/** Walks every node of the document, calling `fn` with its JSON pointer. */
function walk(node: unknown, at: string, fn: (node: unknown, at: string) => void): void {
  fn(node, at);
  if (Array.isArray(node)) node.forEach((x, i) => walk(x, `${at}/${i}`, fn));
  else if (node && typeof node === 'object') for (const [k, v] of Object.entries(node)) walk(v, `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`, fn);
}

describe('openapi.yaml as a document', () => {
  it('has the required top-level structure of OpenAPI 3.1', () => {
    expect(doc.openapi).toMatch(/^3\.1\.\d+$/);
    expect(doc.jsonSchemaDialect).toBe('https://json-schema.org/draft/2020-12/schema');
    expect(typeof doc.info?.title).toBe('string');
    expect(typeof doc.info?.version).toBe('string');
    expect(doc.paths && typeof doc.paths).toBe('object');
    const allowed = ['openapi', 'info', 'jsonSchemaDialect', 'servers', 'paths', 'webhooks', 'components', 'security', 'tags', 'externalDocs'];
    for (const k of Object.keys(doc)) expect(allowed.includes(k) || k.startsWith('x-'), `unknown top-level key ${k}`).toBe(true);
    for (const k of Object.keys(doc.paths)) expect(k, 'paths start with /').toMatch(/^\//);
    // Servers: {PUBLIC_URL} with a default, every variable used in the URL declared.
    expect(doc.servers).toHaveLength(1);
    for (const s of doc.servers) {
      for (const [, v] of String(s.url).matchAll(/\{(\w+)\}/g)) expect(typeof s.variables?.[v!]?.default, `server variable ${v}`).toBe('string');
    }
    expect(doc.servers[0].url).toBe('{PUBLIC_URL}');
    // Security: bearer, describing both credential kinds.
    const bearer = doc.components.securitySchemes.bearerAuth;
    expect(bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(bearer.description).toMatch(/svc_/);
    expect(bearer.description).toMatch(/JWT/);
  });

  it('resolves every $ref', () => {
    const refs: string[] = [];
    walk(doc, '#', (node) => {
      if (node && typeof node === 'object' && typeof (node as Doc).$ref === 'string') refs.push((node as Doc).$ref);
    });
    expect(refs.length).toBeGreaterThan(50);
    for (const ref of refs) expect(() => resolvePointer(doc, ref), ref).not.toThrow();
    // And a dangling one would be caught:
    expect(() => resolvePointer(doc, '#/components/schemas/Nope')).toThrow(/does not resolve/);
  });

  it('compiles every schema with Ajv 2020 in strict mode (no unknown keyword or format)', () => {
    expect(compileAllSchemas()).toBeGreaterThan(40);
  });

  it('gives every operation a unique operationId, tags, and documented responses', () => {
    const ids = new Set<string>();
    const tags = new Set((doc.tags ?? []).map((t: Doc) => t.name));
    const schemes = new Set(Object.keys(doc.components.securitySchemes));
    const ops = listOperations();
    expect(ops.length).toBe(24);
    for (const { method, path, operation } of ops) {
      const where = `${method.toUpperCase()} ${path}`;
      expect(typeof operation.operationId, where).toBe('string');
      expect(ids.has(operation.operationId as string), `duplicate operationId ${operation.operationId}`).toBe(false);
      ids.add(operation.operationId as string);
      for (const t of (operation.tags ?? []) as string[]) expect(tags.has(t), `${where}: undeclared tag ${t}`).toBe(true);
      for (const req of (operation.security ?? doc.security ?? []) as Doc[]) {
        for (const name of Object.keys(req)) expect(schemes.has(name), `${where}: unknown security scheme ${name}`).toBe(true);
      }
      const responses = operation.responses as Doc;
      expect(Object.keys(responses ?? {}).length, `${where} has responses`).toBeGreaterThan(0);
      for (const [status, r] of Object.entries(responses)) {
        expect(status, where).toMatch(/^([1-5]\d\d|[1-5]XX|default)$/);
        const resolved = r.$ref ? resolvePointer(doc, r.$ref) : r;
        expect(typeof (resolved as Doc).description, `${where} ${status} has a description`).toBe('string');
        // Every error response uses the one Error schema.
        if (Number(status) >= 400 && !path.startsWith('/readyz')) {
          const schema = (resolved as Doc).content['application/json'].schema;
          expect(JSON.stringify(schema), `${where} ${status} uses Error`).toMatch(/#\/components\/schemas\/(Error|InvalidRequestError)"/);
        }
      }
      // Path template parameters are declared as required path parameters, and only those.
      const item = doc.paths[path];
      const params = [...(item.parameters ?? []), ...((operation.parameters as Doc[]) ?? [])].map((p: Doc) => (p.$ref ? resolvePointer(doc, p.$ref) : p) as Doc);
      const inPath = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort();
      const declared = params.filter((p) => p.in === 'path');
      expect(declared.map((p) => p.name).sort(), `${where} path parameters`).toEqual(inPath);
      for (const p of declared) expect(p.required, `${where} path parameter ${p.name} is required`).toBe(true);
      for (const p of params) expect(['path', 'query', 'header', 'cookie']).toContain(p.in);
    }
    // Path items hold only operations and the shared keys.
    for (const [p, item] of Object.entries(doc.paths as Doc)) {
      for (const k of Object.keys(item)) {
        expect([...HTTP_METHODS, 'parameters', 'summary', 'description', 'servers', '$ref'].includes(k as never), `${p}: unknown key ${k}`).toBe(true);
      }
    }
  });

  it('documents exactly the routes the REST router serves, and the root endpoints', () => {
    const fromRouter = routerOperations();
    const fromDoc = listOperations()
      .filter((o) => o.path.startsWith('/api/'))
      .map((o) => `${o.method.toUpperCase()} ${o.path}`)
      .sort();
    expect(fromRouter.length).toBeGreaterThanOrEqual(9);
    expect(fromDoc).toEqual(fromRouter);
    const root = listOperations()
      .filter((o) => !o.path.startsWith('/api/'))
      .map((o) => `${o.method.toUpperCase()} ${o.path}`)
      .sort();
    expect(root).toEqual(['GET /healthz', 'GET /metrics', 'GET /readyz']);
  });

  it('documents the error statuses of docs/CONTRACTS.md "REST errors" where the routes can produce them', () => {
    const statuses = (m: string, p: string) => documentedStatuses(m, p).sort();
    expect(statuses('post', '/api/dedicated')).toEqual(['201', '400', '401', '402', '403', '409', '413', '415', '422', '429', '500']);
    expect(statuses('get', '/api/dedicated')).toEqual(['200', '400', '401', '403', '429', '500']);
    expect(statuses('get', '/api/dedicated/{id}')).toEqual(['200', '401', '403', '404', '429', '500']);
    expect(statuses('get', '/api/dedicated/{id}/setup')).toEqual(['200', '401', '403', '404', '409', '429', '500']);
    for (const file of ['origin.sh', 'systemd_origin.service']) {
      expect(statuses('get', `/api/dedicated/{id}/setup/${file}`)).toEqual(['200', '401', '403', '404', '409', '429', '500']);
    }
    expect(statuses('post', '/api/dedicated/{id}/provision')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500']);
    expect(statuses('post', '/api/dedicated/{id}/activate')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500', '503']);
    expect(statuses('delete', '/api/dedicated/{id}')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500']);
    expect(statuses('patch', '/api/dedicated/{id}')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500']);
    expect(statuses('get', '/api/dedicated/pricing')).toEqual(['200', '500']);
    // Reads are 403 too for an access token of a client without API access (docs/CONTRACTS.md "Admin CLI").
    // The error code enum is the one of docs/CONTRACTS.md "REST errors".
    expect(doc.components.schemas.Error.properties.error.enum.sort()).toEqual(
      [
        'invalid_request', 'invalid_origin_ip', 'invalid_promocode', 'invalid_token', 'insufficient_balance', 'insufficient_scope',
        'not_found', 'out_of_stock', 'invalid_state', 'rate_limited', 'server_error', 'edge_unavailable',
      ].sort(),
    );
    expect(doc.components.schemas.TunnelStatus.enum).toEqual(['pending', 'provisioning', 'provisioned', 'active', 'failed', 'deleting', 'deleted']);
  });

  it('the validator rejects responses that drift from the document', () => {
    const tunnel = {
      id: randomUUID(), name: null, protected_ip: '198.18.0.1', origin_ip: '8.8.8.8', ports: '*', protocol: 'both',
      protection: { syn_proxy: false, source_pps_limit: null, drop_fragments: false, max_flows: 65536, alert_pps: null },
      tunnel_name: 'tg-abcdefghij', status: 'pending', health: 'unknown', health_checked_at: null, admin_ssh_port: 52222, edge_ip: '192.0.2.1',
      created_at: new Date().toISOString(), updated_at: new Date().toISOString(),
    };
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 200, { tunnel })).not.toThrow();
    // An extra field, a wrong enum, a wrong format, a missing field, an unwrapped tunnel.
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 200, { tunnel: { ...tunnel, secret: 1 } })).toThrow(OpenApiMismatch);
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 200, { tunnel: { ...tunnel, status: 'running' } })).toThrow(/must be equal to one of the allowed values/);
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 200, { tunnel: { ...tunnel, origin_ip: '8.8.8' } })).toThrow(/must match format "ipv4"/);
    const { name: _, ...noName } = tunnel;
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 200, { tunnel: noName })).toThrow(/required property 'name'/);
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 200, tunnel)).toThrow(OpenApiMismatch);
    // A deleted tunnel in a list, a non-pending tunnel in a purchase result.
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated', 200, { tunnels: [{ ...tunnel, status: 'deleted' }], next_cursor: null })).toThrow(OpenApiMismatch);
    // An undocumented status, an error code that does not belong to the status, a missing header.
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/pricing', 404, { error: 'not_found', error_description: 'x' })).toThrow(/status 404 is not documented/);
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 404, { error: 'invalid_state', error_description: 'x' })).toThrow(OpenApiMismatch);
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/{id}', 404, { error: 'not_found' })).toThrow(/error_description/);
    const headers = { 'content-type': 'application/json; charset=utf-8', 'x-request-id': 'abc' };
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated', 401, { error: 'invalid_token', error_description: 'x' }, headers)).toThrow(/WWW-Authenticate is missing/);
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated', 429, { error: 'rate_limited', error_description: 'x' }, { ...headers, 'retry-after': 'soon' })).toThrow(/Retry-After/);
    expect(() => expectMatchesOpenApi('GET', '/api/dedicated/pricing', 200, {}, { ...headers, 'content-type': 'text/html' })).toThrow(/Content-Type text\/html is not documented/);
    expect(() => expectMatchesOpenApi('GET', '/api/nope', 200, {})).toThrow(/no path/);
    expect(() => expectMatchesOpenApi('PUT', '/api/dedicated', 200, {})).toThrow(/no PUT/);
  });

  it('documents the purchase body the implementation accepts', () => {
    const ok = (b: unknown) => expect(requestBodyErrors('post', '/api/dedicated', b), JSON.stringify(b)).toEqual([]);
    const bad = (b: unknown) => expect(requestBodyErrors('post', '/api/dedicated', b).length, JSON.stringify(b)).toBeGreaterThan(0);
    ok({ origin_ip: '8.8.8.8' });
    ok({ name: 'x', origin_ip: '8.8.8.8', promocode: 'WELCOME' });
    ok({ name: null, origin_ip: '8.8.8.8', promocode: null });
    bad({});
    bad({ origin_ip: '8.8.8.8', extra: 1 });
    bad({ origin_ip: 8 });
    bad({ origin_ip: '8.8.8' });
    bad({ origin_ip: '8.8.8.8', name: 'x'.repeat(101) });
    bad({ origin_ip: '8.8.8.8', name: 'a\nb' });
    bad([]);
    // The settings (docs/CONTRACTS.md "Tunnel settings").
    ok({ origin_ip: '8.8.8.8', ports: '22, 80,443,25565-25575', protocol: 'udp', protection: { syn_proxy: true, source_pps_limit: null } });
    ok({ origin_ip: '8.8.8.8', ports: '*', protection: {} });
    bad({ origin_ip: '8.8.8.8', ports: 'http' });
    bad({ origin_ip: '8.8.8.8', protocol: 'icmp' });
    bad({ origin_ip: '8.8.8.8', protection: { source_pps_limit: 9 } });
    bad({ origin_ip: '8.8.8.8', protection: { ports: '*' } });
  });

  it('documents the PATCH body the implementation accepts', () => {
    const ok = (b: unknown) => expect(requestBodyErrors('patch', '/api/dedicated/{id}', b), JSON.stringify(b)).toEqual([]);
    const bad = (b: unknown) => expect(requestBodyErrors('patch', '/api/dedicated/{id}', b).length, JSON.stringify(b)).toBeGreaterThan(0);
    ok({});
    ok({ name: null, origin_ip: '8.8.4.4', ports: '80', protocol: 'tcp', protection: { drop_fragments: true, source_pps_limit: 1000000 } });
    bad({ promocode: 'X' });
    bad({ origin_ip: null });
    bad({ protection: null });
    bad({ protection: { syn_proxy: 'yes' } });
    bad({ protection: { source_pps_limit: 1000001 } });
  });
});

// ---------------------------------------------------------------------------------------------------------

/** A real request; the response body is parsed JSON for JSON responses, text otherwise. */
async function req(gw: RunningGateway, method: string, path: string, opts: { token?: string; json?: unknown; raw?: string | Uint8Array; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Uint8Array | undefined = opts.raw;
  if (opts.json !== undefined) {
    body = JSON.stringify(opts.json);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(gw.url + path, { method, headers, body });
  const text = await res.text();
  const json = /^application\/json/i.test(res.headers.get('content-type') ?? '') ? (JSON.parse(text) as any) : undefined;
  return { status: res.status, headers: res.headers, body: json, text };
}

/** Calls and validates against the document; returns the response for further assertions. */
async function checked(
  gw: RunningGateway,
  method: string,
  template: string,
  path: string,
  expectedStatus: number,
  opts: Parameters<typeof req>[3] = {},
) {
  const res = await req(gw, method, path, opts);
  expect(res.status, `${method} ${path}: ${res.text.slice(0, 300)}`).toBe(expectedStatus);
  expectMatchesOpenApi(method, template, res.status, res.body !== undefined ? res.body : res.text, res.headers);
  return res;
}

describe('real responses match openapi.yaml', () => {
  let gw: RunningGateway;
  let lean: RunningGateway;
  let a: SeededUser;
  let poor: SeededUser;
  let other: SeededUser;
  const ID = '/api/dedicated/{id}';

  beforeAll(async () => {
    const { startGateway } = await import('../helpers/gateway.ts');
    [gw, lean] = await Promise.all([startGateway(), startGateway({ config: { rateLimitPerMinute: 1, rateLimitBurst: 2 } })]);
    // 100 RUB at 160 RUB/USD is 0.625 USD: the half-up rule makes it 0.63.
    await setRate(gw.testDb.db, '160');
    await seedNode(gw.testDb.db, '198.18.0.0/28'); // 14 usable protected IPs
    [a, poor, other] = await Promise.all([
      seedUser(gw.testDb.db, { balanceUsd: '100.00' }),
      seedUser(gw.testDb.db, { balanceUsd: '0.50' }),
      seedUser(gw.testDb.db, { balanceUsd: '100.00' }),
    ]);
    await createPromocode(gw.testDb.db, { code: 'HALF', percent: 50 });
  });

  afterAll(async () => {
    await Promise.all([gw?.close(), lean?.close()]);
  });

  const balance = async (u: SeededUser) =>
    (await gw.testDb.raw.query<{ b: string }>('select balance_usd::text as b from account where id = $1', [u.accountId])).rows[0]!.b;

  const buy = async (u: SeededUser, body: Record<string, unknown> = {}) =>
    (await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: u.writeKey, json: { origin_ip: '8.8.8.8', ...body } })).body;

  it('GET /api/openapi.json serves the YAML document', async () => {
    const res = await checked(gw, 'GET', '/api/openapi.json', '/api/openapi.json', 200);
    expect(res.body).toEqual(YAML.parse(fs.readFileSync(OPENAPI_FILE, 'utf8')));
  });

  it('GET /healthz, /readyz, /metrics', async () => {
    expect((await checked(gw, 'GET', '/healthz', '/healthz', 200)).body).toEqual({ status: 'ok', version: VERSION });
    expect((await checked(gw, 'GET', '/readyz', '/readyz', 200)).body.status).toBe('ready');
    expect((await checked(gw, 'GET', '/metrics', '/metrics', 200)).text).toMatch(/# TYPE /);
  });

  it('GET /api/dedicated/pricing: 200, rounded half up, no auth needed (a token is ignored)', async () => {
    const res = await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200);
    expect(res.body).toEqual({
      price: 100, currency: 'RUB', price_usd: 0.63, usd_rub_rate: 160, billing: 'one_time',
      includes: ['dedicated_public_ip', 'full_tcp_udp_nat', 'gre_tunnel'], admin_ssh_port: 52222,
      availability: { total: 14, available: 14, in_stock: true },
    });
    await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200, { token: 'garbage' });
  });

  it('POST /api/dedicated: 201 with every field, balance_after = previous balance - charged_usd', async () => {
    const before = await balance(a);
    const r = await buy(a, { name: ' web ', origin_ip: '8.8.4.4' });
    expect(r.tunnel).toMatchObject({ name: 'web', origin_ip: '8.8.4.4', status: 'pending', ports: '*', protocol: 'both', admin_ssh_port: 52222 });
    expect(before).toBe('100.00');
    expect(r).toMatchObject({ charged: 100, charged_usd: 0.63, currency: 'RUB', balance_after: 99.37 });
    expect(r.next_steps).toEqual({ setup: `/api/dedicated/${r.tunnel.id}/setup`, provision: `/api/dedicated/${r.tunnel.id}/provision` });
    expect(await balance(a)).toBe('99.37');
    // A promocode: 50 RUB at 160 is 0.3125 USD -> 0.31.
    const p = await buy(a, { promocode: 'half' });
    expect(p).toMatchObject({ charged: 50, charged_usd: 0.31, balance_after: 99.06 });
    expect((await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200)).body.availability).toEqual({ total: 14, available: 12, in_stock: true });
  });

  it('POST /api/dedicated with Idempotency-Key: the same body replays the first status and body', async () => {
    const key = randomUUID();
    const body = { origin_ip: '9.9.9.9', name: 'idem' };
    const first = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: a.writeKey, json: body, headers: { 'idempotency-key': key } });
    const after = await balance(a);
    const again = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: a.writeKey, json: body, headers: { 'idempotency-key': key } });
    expect(again.body).toEqual(first.body);
    expect(await balance(a)).toBe(after);
    // Only the replay carries Idempotent-Replayed (a documented header, checked against its schema).
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    // A refusal is not kept: once its cause is gone, the same key buys.
    const u = await seedUser(gw.testDb.db, { balanceUsd: '0.10' });
    const k2 = randomUUID();
    await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 402, { token: u.writeKey, json: body, headers: { 'idempotency-key': k2 } });
    await addBalance(gw.testDb.db, u.email, '5.00');
    const bought = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: u.writeKey, json: body, headers: { 'idempotency-key': k2 } });
    expect(bought.headers.get('idempotent-replayed')).toBeNull();
    // A malformed key.
    const bad = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 400, { token: a.writeKey, json: body, headers: { 'idempotency-key': 'k'.repeat(256) } });
    expect(bad.body.error).toBe('invalid_request');
  });

  it('POST /api/dedicated with a reused Idempotency-Key and another body: 422 invalid_request (docs/CONTRACTS.md "REST shapes")', async () => {
    const key = randomUUID();
    await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: other.writeKey, json: { origin_ip: '9.9.9.9' }, headers: { 'idempotency-key': key } });
    const before = await balance(other);
    const res = await req(gw, 'POST', '/api/dedicated', { token: other.writeKey, json: { origin_ip: '1.1.1.1' }, headers: { 'idempotency-key': key } });
    expect(res.body?.error).toBe('invalid_request');
    expect(await balance(other)).toBe(before);
    expect(res.status, `expected 422 for a reused Idempotency-Key, got ${res.status}: ${res.text}`).toBe(422);
    expectMatchesOpenApi('POST', '/api/dedicated', res.status, res.body, res.headers);
  });

  it('POST /api/dedicated: 400, 401, 402, 403, 413, 415 bodies', async () => {
    const P = '/api/dedicated';
    const post = (status: number, opts: Parameters<typeof req>[3]) => checked(gw, 'POST', P, P, status, opts);
    const w = a.writeKey;
    const code = async (status: number, opts: Parameters<typeof req>[3]) => (await post(status, opts)).body.error;
    expect(await code(400, { token: w, raw: '{"origin_ip": ', headers: { 'content-type': 'application/json' } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: [] })).toBe('invalid_request');
    expect(await code(400, { token: w })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { origin_ip: '8.8.8.8', color: 'red' } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { name: 'no ip' } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { origin_ip: 8 } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { origin_ip: '10.0.0.1' } })).toBe('invalid_origin_ip');
    expect(await code(400, { token: w, json: { origin_ip: '8.8.8' } })).toBe('invalid_origin_ip');
    expect(await code(400, { token: w, json: { origin_ip: '8.8.8.8', promocode: 'NOSUCHCODE' } })).toBe('invalid_promocode');
    // 401, with the Bearer challenge (checked by the validator), for no, malformed and unknown credentials.
    expect(await code(401, {})).toBe('invalid_token');
    expect(await code(401, { headers: { authorization: 'Basic dXNlcjpwdw==' }, json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    expect(await code(401, { token: 'svc_garbage', json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    expect(await code(401, { token: `svc_${'0'.repeat(32)}_${'A'.repeat(43)}`, json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    expect(await code(401, { token: 'eyJhbGciOiJIUzI1NiJ9.e30.x', json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    // 403: read permission.
    expect(await code(403, { token: a.readKey, json: { origin_ip: '8.8.8.8' } })).toBe('insufficient_scope');
    // 402: 0.50 USD < 0.63 USD; nothing debited.
    expect(await code(402, { token: poor.writeKey, json: { origin_ip: '8.8.8.8' } })).toBe('insufficient_balance');
    expect(await balance(poor)).toBe('0.50');
    // 413, 415.
    const big = JSON.stringify({ origin_ip: '8.8.8.8', name: 'x'.repeat(70 * 1024) });
    expect(await code(413, { token: w, raw: big, headers: { 'content-type': 'application/json' } })).toBe('invalid_request');
    expect(await code(415, { token: w, raw: 'origin_ip=8.8.8.8', headers: { 'content-type': 'application/x-www-form-urlencoded' } })).toBe('invalid_request');
    expect(await code(415, { token: w, raw: '{"origin_ip":"8.8.8.8"}', headers: { 'content-type': 'text/plain' } })).toBe('invalid_request');
  });

  it('GET /api/dedicated: newest first, cursor pages, deleted left out, 400 and 401', async () => {
    const L = '/api/dedicated';
    const all = (await checked(gw, 'GET', L, L, 200, { token: a.readKey })).body;
    expect(all.next_cursor).toBeNull();
    expect(all.tunnels.length).toBeGreaterThanOrEqual(3);
    const times = all.tunnels.map((t: any) => t.created_at);
    expect([...times].sort().reverse()).toEqual(times);
    // Page by page with limit=1 yields the same list.
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const q: string = `?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const page: any = (await checked(gw, 'GET', L, L + q, 200, { token: a.writeKey })).body;
      expect(page.tunnels.length).toBe(1);
      seen.push(page.tunnels[0].id);
      cursor = page.next_cursor;
    } while (cursor);
    expect(seen).toEqual(all.tunnels.map((t: any) => t.id));
    for (const q of ['?limit=0', '?limit=101', '?limit=abc', '?limit=1&limit=2', '?cursor=bm9wZQ', '?page=2']) {
      expect((await checked(gw, 'GET', L, L + q, 400, { token: a.readKey })).body.error, q).toBe('invalid_request');
    }
    await checked(gw, 'GET', L, L, 401, {});
    await checked(gw, 'GET', L, L, 401, { token: 'not-a-key' });
    // Another account sees none of these.
    expect((await checked(gw, 'GET', L, L, 200, { token: poor.readKey })).body).toEqual({ tunnels: [], next_cursor: null });
  });

  it('GET /api/dedicated/{id} and /setup: 200, 401, 404 (unknown, not a UUID, another account)', async () => {
    const t = (await buy(a)).tunnel;
    expect((await checked(gw, 'GET', ID, `/api/dedicated/${t.id}`, 200, { token: a.readKey })).body).toEqual({ tunnel: t });
    const setup = (await checked(gw, 'GET', `${ID}/setup`, `/api/dedicated/${t.id}/setup`, 200, { token: a.readKey })).body;
    expect(setup.tunnel_id).toBe(t.id);
    expect(setup.scripts.origin).toContain(t.tunnel_name);
    // Each script as plain text, the same bytes as in the JSON, for `curl ... | sudo bash`.
    for (const [file, field] of [['origin.sh', 'origin'], ['systemd_origin.service', 'systemd_origin']] as const) {
      const text = await checked(gw, 'GET', `${ID}/setup/${file}`, `/api/dedicated/${t.id}/setup/${file}`, 200, { token: a.readKey });
      expect(text.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      expect(text.text).toBe(setup.scripts[field]);
    }
    expect((await req(gw, 'GET', `/api/dedicated/${t.id}/setup/origin.sh`, { token: a.readKey })).text).toMatch(/^#!\/usr\/bin\/env bash\n/);
    const pathsToCheck = [[ID, ''], [`${ID}/setup`, '/setup'], [`${ID}/setup/origin.sh`, '/setup/origin.sh'], [`${ID}/setup/systemd_origin.service`, '/setup/systemd_origin.service']] as const;
    for (const [tmpl, suffix] of pathsToCheck) {
      await checked(gw, 'GET', tmpl, `/api/dedicated/${t.id}${suffix}`, 401, {});
      for (const id of [randomUUID(), 'not-a-uuid', t.id]) {
        const token = id === t.id ? other.readKey : a.readKey;
        expect((await checked(gw, 'GET', tmpl, `/api/dedicated/${id}${suffix}`, 404, { token })).body.error).toBe('not_found');
      }
    }
  });

  it('POST provision / activate with no agent answering: activate 409, provision 202, delete 202; 400, 401, 403, 404, 413, 415', async () => {
    const t = (await buy(a)).tunnel;
    for (const op of ['provision', 'activate']) {
      const tmpl = `${ID}/${op}`;
      const path = `/api/dedicated/${t.id}/${op}`;
      expect((await checked(gw, 'POST', tmpl, path, 400, { token: a.writeKey, json: { force: true } })).body.error).toBe('invalid_request');
      expect((await checked(gw, 'POST', tmpl, path, 400, { token: a.writeKey, raw: '{', headers: { 'content-type': 'application/json' } })).body.error).toBe('invalid_request');
      await checked(gw, 'POST', tmpl, path, 401, {});
      expect((await checked(gw, 'POST', tmpl, path, 403, { token: a.readKey })).body.error).toBe('insufficient_scope');
      await checked(gw, 'POST', tmpl, `/api/dedicated/${randomUUID()}/${op}`, 404, { token: a.writeKey });
      await checked(gw, 'POST', tmpl, path, 404, { token: other.writeKey });
      await checked(gw, 'POST', tmpl, path, 413, { token: a.writeKey, raw: `{"a":"${'x'.repeat(70 * 1024)}"}`, headers: { 'content-type': 'application/json' } });
      await checked(gw, 'POST', tmpl, path, 415, { token: a.writeKey, raw: 'go', headers: { 'content-type': 'text/plain' } });
    }
    // Nothing changed so far.
    expect((await checked(gw, 'GET', ID, `/api/dedicated/${t.id}`, 200, { token: a.readKey })).body.tunnel.status).toBe('pending');
    const activate = `/api/dedicated/${t.id}/activate`;
    expect((await checked(gw, 'POST', `${ID}/activate`, activate, 409, { token: a.writeKey, json: {} })).body.error).toBe('invalid_state');
    // This gateway runs no worker, so the agent never answers: 202 with the documented shape.
    const p = await checked(gw, 'POST', `${ID}/provision`, `/api/dedicated/${t.id}/provision`, 202, { token: a.writeKey });
    expect(p.body.tunnel.status).toBe('provisioning');
    expect((await checked(gw, 'POST', `${ID}/activate`, activate, 409, { token: a.writeKey })).body.error).toBe('invalid_state');
    const d = await checked(gw, 'DELETE', ID, `/api/dedicated/${t.id}`, 202, { token: a.writeKey });
    expect(d.body.tunnel.status).toBe('deleting');
  });

  it('DELETE /api/dedicated/{id}: 200 deleted at once (IP back in the pool, no refund), then 409; 400, 401, 403, 404, 413, 415', async () => {
    const t = (await buy(a)).tunnel;
    const path = `/api/dedicated/${t.id}`;
    const free = async () => (await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200)).body.availability.available;
    const availableBefore = await free();
    const balanceBefore = await balance(a);
    await checked(gw, 'DELETE', ID, path, 401, {});
    expect((await checked(gw, 'DELETE', ID, path, 403, { token: a.readKey })).body.error).toBe('insufficient_scope');
    await checked(gw, 'DELETE', ID, path, 404, { token: other.writeKey });
    await checked(gw, 'DELETE', ID, `/api/dedicated/${randomUUID()}`, 404, { token: a.writeKey });
    await checked(gw, 'DELETE', ID, path, 400, { token: a.writeKey, json: { reason: 'x' } });
    await checked(gw, 'DELETE', ID, path, 413, { token: a.writeKey, raw: `{"a":"${'x'.repeat(70 * 1024)}"}`, headers: { 'content-type': 'application/json' } });
    await checked(gw, 'DELETE', ID, path, 415, { token: a.writeKey, raw: 'x', headers: { 'content-type': 'text/plain' } });
    const del = (await checked(gw, 'DELETE', ID, path, 200, { token: a.writeKey })).body;
    expect(del.tunnel).toMatchObject({ id: t.id, status: 'deleted', protected_ip: t.protected_ip });
    expect(await free()).toBe(availableBefore + 1);
    expect(await balance(a)).toBe(balanceBefore);
    expect((await checked(gw, 'DELETE', ID, path, 409, { token: a.writeKey })).body.error).toBe('invalid_state');
    // A deleted tunnel is still readable, has no setup, and is left out of the list.
    expect((await checked(gw, 'GET', ID, path, 200, { token: a.readKey })).body.tunnel.status).toBe('deleted');
    expect((await checked(gw, 'GET', `${ID}/setup`, `${path}/setup`, 409, { token: a.readKey })).body.error).toBe('invalid_state');
    expect((await checked(gw, 'GET', `${ID}/setup/origin.sh`, `${path}/setup/origin.sh`, 409, { token: a.readKey })).body.error).toBe('invalid_state');
    const list = (await checked(gw, 'GET', '/api/dedicated', '/api/dedicated?limit=100', 200, { token: a.readKey })).body;
    expect(list.tunnels.map((x: any) => x.id)).not.toContain(t.id);
  });

  it('PATCH /api/dedicated/{id}: 200 (pending stores, normalised), 202 (on the edge, no agent answering), 400, 401, 403, 404, 409, 413, 415', async () => {
    const t = (await buy(a)).tunnel;
    const path = `/api/dedicated/${t.id}`;
    const patched = await checked(gw, 'PATCH', ID, path, 200, { token: a.writeKey, json: { ports: '443,80,81', protection: { source_pps_limit: 500 } } });
    expect(patched.body.tunnel).toMatchObject({ status: 'pending', ports: '80-81,443', protocol: 'both', protection: { syn_proxy: false, source_pps_limit: 500, drop_fragments: false } });
    expect((await checked(gw, 'PATCH', ID, path, 400, { token: a.writeKey, json: { colour: 'red' } })).body.error).toBe('invalid_request');
    expect((await checked(gw, 'PATCH', ID, path, 400, { token: a.writeKey, json: { origin_ip: '10.0.0.1' } })).body.error).toBe('invalid_origin_ip');
    expect((await checked(gw, 'PATCH', ID, path, 400, { token: a.writeKey })).body.error).toBe('invalid_request');
    await checked(gw, 'PATCH', ID, path, 401, { json: {} });
    expect((await checked(gw, 'PATCH', ID, path, 403, { token: a.readKey, json: { name: 'x' } })).body.error).toBe('insufficient_scope');
    await checked(gw, 'PATCH', ID, path, 404, { token: other.writeKey, json: { name: 'x' } });
    await checked(gw, 'PATCH', ID, `/api/dedicated/${randomUUID()}`, 404, { token: a.writeKey, json: { name: 'x' } });
    await checked(gw, 'PATCH', ID, path, 413, { token: a.writeKey, raw: `{"name":"${'x'.repeat(70 * 1024)}"}`, headers: { 'content-type': 'application/json' } });
    await checked(gw, 'PATCH', ID, path, 415, { token: a.writeKey, raw: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    // On the edge (provisioning; this gateway runs no worker, so the agent never answers): 202, stored.
    expect((await checked(gw, 'POST', `${ID}/provision`, `${path}/provision`, 202, { token: a.writeKey })).body.tunnel.status).toBe('provisioning');
    const waiting = await checked(gw, 'PATCH', ID, path, 202, { token: a.writeKey, json: { protocol: 'udp' } });
    expect(waiting.body.tunnel).toMatchObject({ status: 'provisioning', protocol: 'udp', ports: '80-81,443' });
    await checked(gw, 'DELETE', ID, path, 202, { token: a.writeKey });
    expect((await checked(gw, 'PATCH', ID, path, 409, { token: a.writeKey, json: { name: 'late' } })).body.error).toBe('invalid_state');
  });

  it('paths and methods outside the document answer with the Error body', async () => {
    const nf = await req(gw, 'GET', '/api/nothing-here', { token: a.readKey });
    expect(nf.status).toBe(404);
    expectMatchesSchema('Error', nf.body);
    expect(nf.body.error).toBe('not_found');
    const wrong = await req(gw, 'PUT', '/api/dedicated', { token: a.writeKey, json: {} });
    expect(wrong.status).toBe(405);
    expectMatchesSchema('InvalidRequestError', wrong.body);
    expect(wrong.headers.get('allow')).toMatch(/POST/);
  });

  it('409 out_of_stock when no protected IP is free; nothing is debited', async () => {
    const u = await seedUser(lean.testDb.db, { balanceUsd: '10.00' });
    const pricing = (await checked(lean, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200)).body;
    expect(pricing.availability).toEqual({ total: 0, available: 0, in_stock: false });
    const res = await checked(lean, 'POST', '/api/dedicated', '/api/dedicated', 409, { token: u.writeKey, json: { origin_ip: '8.8.8.8' } });
    expect(res.body.error).toBe('out_of_stock');
    const { rows } = await lean.testDb.raw.query<{ b: string }>('select balance_usd::text as b from account where id = $1', [u.accountId]);
    expect(rows[0]!.b).toBe('10.00');
  });

  it('429 rate_limited with Retry-After, per credential and for anonymous callers; pricing is not limited', async () => {
    const u = await seedUser(lean.testDb.db);
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 200, { token: u.readKey });
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 200, { token: u.readKey });
    for (const [m, tmpl, path] of [
      ['GET', '/api/dedicated', '/api/dedicated'],
      ['POST', '/api/dedicated', '/api/dedicated'],
      ['GET', ID, `/api/dedicated/${randomUUID()}`],
      ['GET', `${ID}/setup`, `/api/dedicated/${randomUUID()}/setup`],
      ['POST', `${ID}/provision`, `/api/dedicated/${randomUUID()}/provision`],
      ['POST', `${ID}/activate`, `/api/dedicated/${randomUUID()}/activate`],
      ['DELETE', ID, `/api/dedicated/${randomUUID()}`],
    ] as const) {
      const res = await checked(lean, m, tmpl, path, 429, { token: u.readKey });
      expect(res.body.error).toBe('rate_limited');
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    // The other credential of the same account has its own budget.
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 200, { token: u.writeKey });
    // Anonymous callers are limited by address: 401, 401, then 429.
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 401, {});
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 401, {});
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 429, {});
    for (let i = 0; i < 5; i++) await checked(lean, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200);
    await checked(lean, 'GET', '/api/openapi.json', '/api/openapi.json', 200);
  });

  it('500 server_error quotes the request id and leaks no internals; /readyz 503 when migrations are pending', async () => {
    const u = await seedUser(lean.testDb.db);
    await lean.testDb.raw.query('alter table tunnel rename to tunnel_moved_by_test');
    try {
      const res = await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 500, { token: u.readKey, headers: { 'x-request-id': 'openapi-test-500' } });
      expect(res.headers.get('x-request-id')).toBe('openapi-test-500');
      expect(res.body.error_description).toContain('openapi-test-500');
      expect(res.text).not.toMatch(/tunnel_moved_by_test|relation|select/i);
    } finally {
      await lean.testDb.raw.query('alter table tunnel_moved_by_test rename to tunnel');
    }
    await lean.testDb.raw.query('create table mikro_orm_migrations_saved as select * from mikro_orm_migrations; delete from mikro_orm_migrations');
    try {
      const res = await checked(lean, 'GET', '/readyz', '/readyz', 503);
      expect(res.body).toMatchObject({ status: 'not_ready' });
    } finally {
      await lean.testDb.raw.query('insert into mikro_orm_migrations select * from mikro_orm_migrations_saved; drop table mikro_orm_migrations_saved');
    }
    expect((await checked(lean, 'GET', '/readyz', '/readyz', 200)).body.status).toBe('ready');
  });
});
