// schema/openapi.yaml against the code, as a document: structurally a valid OpenAPI 3.1 document whose paths are
// exactly the router's, every schema compiling, and its request schemas refusing what the routes refuse. The real
// gateway's answers on real PostgreSQL, status by status, are checked against it in openapi.test.ts.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type Router from '@koa/router';
import { restRouter } from '../../server/http/rest/routes.ts';
import {
  HTTP_METHODS,
  OpenApiMismatch,
  compileAllSchemas,
  documentedStatuses,
  expectMatchesOpenApi,
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
    // 503 on every operation: `unavailable` while the database is out of reach (a switch-over), and on
    // activate also `edge_unavailable`.
    expect(statuses('post', '/api/dedicated')).toEqual(['201', '400', '401', '402', '403', '409', '413', '415', '422', '429', '500', '503']);
    expect(statuses('get', '/api/dedicated')).toEqual(['200', '400', '401', '403', '429', '500', '503']);
    expect(statuses('get', '/api/dedicated/{id}')).toEqual(['200', '401', '403', '404', '429', '500', '503']);
    expect(statuses('get', '/api/dedicated/{id}/setup')).toEqual(['200', '401', '403', '404', '409', '429', '500', '503']);
    for (const file of ['origin.sh', 'systemd_origin.service']) {
      expect(statuses('get', `/api/dedicated/{id}/setup/${file}`)).toEqual(['200', '401', '403', '404', '409', '429', '500', '503']);
    }
    expect(statuses('post', '/api/dedicated/{id}/provision')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500', '503']);
    expect(statuses('post', '/api/dedicated/{id}/activate')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500', '503']);
    expect(statuses('delete', '/api/dedicated/{id}')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500', '503']);
    expect(statuses('patch', '/api/dedicated/{id}')).toEqual(['200', '202', '400', '401', '403', '404', '409', '413', '415', '429', '500', '503']);
    expect(statuses('get', '/api/dedicated/pricing')).toEqual(['200', '500', '503']);
    // Reads are 403 too for an access token of a client without API access (docs/CONTRACTS.md "Admin CLI").
    // The error code enum is the one of docs/CONTRACTS.md "REST errors".
    expect(doc.components.schemas.Error.properties.error.enum.sort()).toEqual(
      [
        'invalid_request', 'invalid_origin_ip', 'invalid_promocode', 'invalid_token', 'insufficient_balance', 'insufficient_scope',
        'not_found', 'out_of_stock', 'invalid_state', 'rate_limited', 'server_error', 'edge_unavailable',
        'unavailable',
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
