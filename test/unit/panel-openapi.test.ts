// The API reference page's helpers (panel/src/pages/developers/api/openapi.ts), on small documents made
// here and on the repository's own schema/openapi.yaml, which the page renders.
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import {
  anchorFor,
  constraints,
  errorCodes,
  groupByTag,
  mergeAllOf,
  resolve,
  sortedStatuses,
  typeLabel,
  type OpenApiDocument,
  type SchemaObject,
} from '../../panel/src/pages/developers/api/openapi.ts';

const small: OpenApiDocument = {
  openapi: '3.1.0',
  info: { title: 'T', version: '1' },
  tags: [{ name: 'b', description: 'second' }, { name: 'a' }, { name: 'unused' }],
  paths: {
    '/x/{id}': {
      parameters: [
        { name: 'id', in: 'path', required: true, schema: { type: 'string', format: 'uuid' } },
        { name: 'q', in: 'query', description: 'path-level' },
      ],
      get: { tags: ['a'], parameters: [{ $ref: '#/components/parameters/Q' }], responses: { '404': { $ref: '#/components/responses/NotFound' }, '200': { description: 'ok' } } },
      delete: { responses: {} },
    },
    '/y': { post: { tags: ['b'], responses: {} } },
  },
  webhooks: { 'thing.happened': { post: { tags: ['b'], responses: {} } } },
  components: {
    parameters: { Q: { name: 'q', in: 'query', description: 'operation-level' } },
    responses: {
      NotFound: {
        description: '`not_found`: no such thing; also `gone`: when deleted. Not a code: `x`.',
        content: { 'application/json': { schema: { allOf: [{ $ref: '#/components/schemas/Error' }, { properties: { error: { const: 'not_found' } } }] } } },
      },
    },
    schemas: {
      Error: { type: 'object', required: ['error'], properties: { error: { type: 'string' }, error_description: { type: 'string' } } },
      Loop: { $ref: '#/components/schemas/Loop' },
      Node: { type: 'object', properties: { child: { $ref: '#/components/schemas/Node' } } },
    },
  },
};

describe('groupByTag', () => {
  it('puts each operation under its first tag in the order tags are declared, webhooks after paths, untagged last, empty tags dropped', () => {
    const groups = groupByTag(small);
    expect(groups.map((g) => [g.name, g.operations.map((o) => `${o.webhook ? 'hook ' : ''}${o.method} ${o.path}`)])).toEqual([
      ['b', ['post /y', 'hook post thing.happened']],
      ['a', ['get /x/{id}']],
      ['other', ['delete /x/{id}']],
    ]);
    expect(groups[0]!.description).toBe('second');
  });

  it("merges the path's parameters with the operation's, the operation's winning for the same name and place", () => {
    const get = groupByTag(small).find((g) => g.name === 'a')!.operations[0]!;
    expect(get.parameters.map((p) => [p.name, p.in, p.description])).toEqual([
      ['id', 'path', undefined],
      ['q', 'query', 'operation-level'],
    ]);
    const del = groupByTag(small).find((g) => g.name === 'other')!.operations[0]!;
    expect(del.parameters.map((p) => p.description)).toEqual([undefined, 'path-level']);
  });

  it('gives every operation of the real document a distinct anchor, and lists each exactly once', () => {
    const doc = parse(readFileSync(new URL('../../schema/openapi.yaml', import.meta.url), 'utf8')) as OpenApiDocument;
    const views = groupByTag(doc).flatMap((g) => g.operations);
    const expected = [doc.paths, doc.webhooks].flatMap((items) =>
      Object.entries(items ?? {}).flatMap(([path, item]) => Object.keys(item).filter((k) => ['get', 'put', 'post', 'delete', 'patch'].includes(k)).map((m) => `${m} ${path}`)),
    );
    expect(views.map((v) => `${v.method} ${v.path}`).sort()).toEqual(expected.sort());
    expect(new Set(views.map((v) => v.anchor)).size).toBe(views.length);
    // The purchase documents its refusals: the reference must show them.
    const purchase = views.find((v) => v.method === 'post' && v.path === '/api/dedicated')!;
    const codes = sortedStatuses(purchase.operation.responses).flatMap((s) => errorCodes(doc, purchase.operation.responses![s]));
    expect(codes).toEqual(expect.arrayContaining(['invalid_promocode', 'insufficient_balance', 'out_of_stock', 'invalid_token', 'rate_limited']));
  });
});

describe('references', () => {
  it('follows references, and answers undefined for a loop or a dangling one instead of hanging', () => {
    expect(resolve<SchemaObject>(small, { $ref: '#/components/schemas/Error' })?.required).toEqual(['error']);
    expect(resolve(small, { $ref: '#/components/schemas/Loop' })).toBeUndefined();
    expect(resolve(small, { $ref: '#/components/schemas/Missing' })).toBeUndefined();
    expect(resolve(small, { $ref: 'https://elsewhere/schema.json' })).toBeUndefined();
  });
});

describe('errorCodes', () => {
  it("takes the body's error const and the codes the description names as `code`:, each once", () => {
    expect(errorCodes(small, { $ref: '#/components/responses/NotFound' })).toEqual(['not_found', 'gone']);
    expect(errorCodes(small, { description: 'fine' })).toEqual([]);
    expect(errorCodes(small, undefined)).toEqual([]);
  });
});

describe('mergeAllOf', () => {
  it('joins properties and required lists, later parts refining earlier ones', () => {
    const merged = mergeAllOf(small, { description: 'outer', allOf: [{ $ref: '#/components/schemas/Error' }, { required: ['error_description'], properties: { error: { const: 'x' } } }] });
    expect(merged.description).toBe('outer');
    expect(merged.required).toEqual(['error', 'error_description']);
    expect(merged.properties?.error).toEqual({ type: 'string', const: 'x' });
    expect(Object.keys(merged.properties ?? {})).toEqual(['error', 'error_description']);
  });

  it('stops at a reference already being merged', () => {
    const merged = mergeAllOf(small, { allOf: [{ $ref: '#/components/schemas/Error' }] }, new Set(['#/components/schemas/Error']));
    expect(merged.properties).toBeUndefined();
  });
});

describe('typeLabel and constraints', () => {
  it('says a type in a few words', () => {
    expect(typeLabel(small, { type: 'string', format: 'uuid' })).toBe('string (uuid)');
    expect(typeLabel(small, { type: 'array', items: { $ref: '#/components/schemas/Node' } })).toBe('array of Node');
    expect(typeLabel(small, { enum: ['tcp', 'udp'] })).toBe('"tcp" | "udp"');
    expect(typeLabel(small, { type: ['string', 'null'] })).toBe('string | null');
    expect(typeLabel(small, { const: 'x' })).toBe('"x"');
    expect(typeLabel(small, { oneOf: [{ type: 'integer' }, { $ref: '#/components/schemas/Error' }] })).toBe('integer | Error');
    expect(typeLabel(small, { allOf: [{ $ref: '#/components/schemas/Error' }] })).toBe('Error');
    expect(typeLabel(small, { properties: { a: {} } })).toBe('object');
    expect(typeLabel(small, undefined)).toBe('any');
  });

  it('states the constraints a schema sets', () => {
    expect(constraints({ minimum: 1, maximum: 100 })).toEqual(['1 to 100']);
    expect(constraints({ maxLength: 100, pattern: '^a$', default: 20 })).toEqual(['at most 100 characters', 'pattern ^a$', 'default 20']);
    expect(constraints({ minItems: 1, uniqueItems: true, exclusiveMinimum: 0 })).toEqual(['more than 0', 'at least 1 items', 'unique items']);
    expect(constraints({})).toEqual([]);
  });
});

describe('small helpers', () => {
  it('sorts statuses numerically with default last, and makes fragment ids', () => {
    expect(sortedStatuses({ default: {}, '404': {}, '2XX': {}, '200': {}, '500': {} })).toEqual(['200', '2XX', '404', '500', 'default']);
    expect(anchorFor('post', '/api/dedicated/{id}/provision')).toBe('post-api-dedicated-id-provision');
  });
});
