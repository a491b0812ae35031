// The parts of an OpenAPI 3.1 document the reference page reads (schema/openapi.yaml, turned into JSON at
// build time), and the pure helpers that arrange it: operations grouped by tag, references followed, error
// codes collected per response, a schema's type in a few words. No rendering here (ApiReference.tsx).

export interface Ref {
  $ref: string;
}

export interface SchemaObject {
  $ref?: string;
  type?: string | string[];
  format?: string;
  description?: string;
  properties?: Record<string, SchemaObject>;
  required?: string[];
  additionalProperties?: boolean | SchemaObject;
  items?: SchemaObject;
  enum?: unknown[];
  const?: unknown;
  allOf?: SchemaObject[];
  oneOf?: SchemaObject[];
  anyOf?: SchemaObject[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  pattern?: string;
  uniqueItems?: boolean;
  default?: unknown;
  examples?: unknown[];
}

export interface Parameter {
  name: string;
  in: 'path' | 'query' | 'header' | 'cookie';
  required?: boolean;
  description?: string;
  schema?: SchemaObject;
}

export interface MediaType {
  schema?: SchemaObject;
  example?: unknown;
}

export interface RequestBody {
  description?: string;
  required?: boolean;
  content?: Record<string, MediaType>;
}

export interface Response {
  description: string;
  headers?: Record<string, unknown>;
  content?: Record<string, MediaType>;
}

export interface Operation {
  operationId?: string;
  tags?: string[];
  summary?: string;
  description?: string;
  deprecated?: boolean;
  security?: Record<string, string[]>[];
  parameters?: (Parameter | Ref)[];
  requestBody?: RequestBody | Ref;
  responses?: Record<string, Response | Ref>;
}

export const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'] as const;
export type Method = (typeof METHODS)[number];

export type PathItem = Partial<Record<Method, Operation>> & { parameters?: (Parameter | Ref)[]; summary?: string; description?: string };

export interface OpenApiDocument {
  openapi: string;
  info: { title: string; version: string; summary?: string; description?: string };
  servers?: { url: string; description?: string }[];
  tags?: { name: string; description?: string }[];
  paths?: Record<string, PathItem>;
  webhooks?: Record<string, PathItem>;
  components?: Record<string, Record<string, unknown>>;
}

const isRef = (x: unknown): x is Ref => typeof x === 'object' && x !== null && typeof (x as Ref).$ref === 'string';

/** The name a `#/components/<kind>/<name>` reference points at. */
export function refName(ref: string): string {
  return decodePointer(ref.slice(ref.lastIndexOf('/') + 1));
}

const decodePointer = (segment: string) => segment.replace(/~1/g, '/').replace(/~0/g, '~');

/** What a local reference (`#/...`, a JSON pointer) points at; undefined when it points nowhere. */
export function lookup(doc: OpenApiDocument, ref: string): unknown {
  if (!ref.startsWith('#/')) return undefined;
  let at: unknown = doc;
  for (const raw of ref.slice(2).split('/')) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<string, unknown>)[decodePointer(raw)];
  }
  return at;
}

/**
 * Follows references until an object that is not one (a reference to a reference is allowed; a loop or a
 * dangling reference answers undefined rather than hanging or throwing on a document the page shows).
 */
export function resolve<T>(doc: OpenApiDocument, x: T | Ref | undefined): T | undefined {
  const seen = new Set<string>();
  let at: unknown = x;
  while (isRef(at)) {
    if (seen.has(at.$ref)) return undefined;
    seen.add(at.$ref);
    at = lookup(doc, at.$ref);
  }
  return at as T | undefined;
}

export interface OperationView {
  /** The HTTP method, or for a webhook the method the gateway sends with. */
  method: Method;
  /** The path, or for a webhook its event name. */
  path: string;
  webhook: boolean;
  operation: Operation;
  /** The path's parameters and the operation's, resolved; the operation's win on the same name and place. */
  parameters: Parameter[];
  /** A stable fragment id for links to this operation. */
  anchor: string;
}

export interface TagGroup {
  name: string;
  description: string | undefined;
  operations: OperationView[];
}

/** An id usable as a URL fragment: `post-api-dedicated-id-provision`. */
export function anchorFor(method: string, path: string): string {
  return `${method}-${path}`
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

function viewsOf(doc: OpenApiDocument, items: Record<string, PathItem> | undefined, webhook: boolean): OperationView[] {
  const out: OperationView[] = [];
  for (const [path, item] of Object.entries(items ?? {})) {
    const shared = (item.parameters ?? []).map((p) => resolve<Parameter>(doc, p)).filter((p): p is Parameter => p !== undefined);
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const own = (operation.parameters ?? []).map((p) => resolve<Parameter>(doc, p)).filter((p): p is Parameter => p !== undefined);
      const parameters = [...shared.filter((s) => !own.some((o) => o.name === s.name && o.in === s.in)), ...own];
      out.push({ method, path, webhook, operation, parameters, anchor: anchorFor(webhook ? `webhook-${method}` : method, path) });
    }
  }
  return out;
}

/**
 * Every operation (paths, then webhooks) under its first tag, tags in the document's order; an operation
 * without a tag, or with a tag the document does not declare, goes to a group of that name at the end.
 */
export function groupByTag(doc: OpenApiDocument, untagged = 'other'): TagGroup[] {
  const groups = new Map<string, TagGroup>();
  for (const tag of doc.tags ?? []) groups.set(tag.name, { name: tag.name, description: tag.description, operations: [] });
  for (const view of [...viewsOf(doc, doc.paths, false), ...viewsOf(doc, doc.webhooks, true)]) {
    const name = view.operation.tags?.[0] ?? untagged;
    if (!groups.has(name)) groups.set(name, { name, description: undefined, operations: [] });
    groups.get(name)!.operations.push(view);
  }
  return [...groups.values()].filter((g) => g.operations.length > 0);
}

/**
 * The `allOf` parts of a schema merged into one object schema (properties and required lists joined,
 * later parts refining earlier ones), so `allOf: [Error, {properties: {error: {const: x}}}]` reads as one
 * object. Only the structural keywords are merged; the outer schema's own keywords are kept.
 */
export function mergeAllOf(doc: OpenApiDocument, schema: SchemaObject, seen: ReadonlySet<string> = new Set()): SchemaObject {
  if (!schema.allOf) return schema;
  const { allOf, ...outer } = schema;
  let merged: SchemaObject = { ...outer };
  for (const part of allOf) {
    let next = part;
    if (part.$ref) {
      if (seen.has(part.$ref)) continue;
      const target = resolve<SchemaObject>(doc, part);
      if (!target) continue;
      next = mergeAllOf(doc, target, new Set([...seen, part.$ref]));
    } else next = mergeAllOf(doc, part, seen);
    const properties: Record<string, SchemaObject> = { ...merged.properties };
    for (const [name, prop] of Object.entries(next.properties ?? {})) properties[name] = { ...properties[name], ...prop };
    merged = {
      ...next,
      ...merged,
      description: merged.description ?? next.description,
      type: merged.type ?? next.type,
      properties: Object.keys(properties).length ? properties : undefined,
      required: [...new Set([...(merged.required ?? []), ...(next.required ?? [])])],
    };
    if (!merged.required?.length) delete merged.required;
    if (!merged.properties) delete merged.properties;
  }
  return merged;
}

const literal = (v: unknown) => (typeof v === 'string' ? v : JSON.stringify(v));

/** A schema's type in a few words: `string (uuid)`, `array of Tunnel`, `"a" | "b"`, `integer`, `Tunnel`. */
export function typeLabel(doc: OpenApiDocument, schema: SchemaObject | undefined): string {
  if (!schema) return 'any';
  if (schema.$ref) return refName(schema.$ref);
  if (schema.const !== undefined) return JSON.stringify(schema.const);
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(' | ');
  const alternatives = schema.oneOf ?? schema.anyOf;
  if (alternatives) return alternatives.map((s) => typeLabel(doc, s)).join(' | ');
  if (schema.allOf) {
    const refs = schema.allOf.filter((s) => s.$ref);
    if (refs.length === 1 && schema.allOf.length === 1) return refName(refs[0]!.$ref!);
    const merged = mergeAllOf(doc, schema);
    return merged.properties ? 'object' : typeLabel(doc, { ...merged, allOf: undefined });
  }
  const types = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  const words = types.map((t) => {
    if (t === 'array') return `array of ${typeLabel(doc, schema.items)}`;
    if (t === 'string' && schema.format) return `string (${schema.format})`;
    return t;
  });
  if (words.length) return words.join(' | ');
  if (schema.properties) return 'object';
  return 'any';
}

/** The constraints a schema states, as short phrases: `1 to 100`, `at most 100 characters`, `pattern ^a$`. */
export function constraints(schema: SchemaObject): string[] {
  const out: string[] = [];
  const range = (lo: number | undefined, hi: number | undefined, unit: string) => {
    if (lo !== undefined && hi !== undefined) out.push(`${lo} to ${hi}${unit}`);
    else if (lo !== undefined) out.push(`at least ${lo}${unit}`);
    else if (hi !== undefined) out.push(`at most ${hi}${unit}`);
  };
  range(schema.minimum, schema.maximum, '');
  if (schema.exclusiveMinimum !== undefined) out.push(`more than ${schema.exclusiveMinimum}`);
  if (schema.exclusiveMaximum !== undefined) out.push(`less than ${schema.exclusiveMaximum}`);
  range(schema.minLength, schema.maxLength, ' characters');
  range(schema.minItems, schema.maxItems, ' items');
  if (schema.uniqueItems) out.push('unique items');
  if (schema.pattern) out.push(`pattern ${schema.pattern}`);
  if (schema.default !== undefined) out.push(`default ${literal(schema.default)}`);
  return out;
}

/** An error code written as the `code`: at the start of a response's description (the document's convention). */
const DESCRIBED_CODE = /`([a-z][a-z0-9_]*)`\s*:/g;

/**
 * The error codes a response can carry: the `const` of its body's `error` property (directly, through
 * `allOf` or a reference), then those its description names as `` `code`: ``, each once, in that order.
 */
export function errorCodes(doc: OpenApiDocument, response: Response | Ref | undefined): string[] {
  const r = resolve<Response>(doc, response);
  if (!r) return [];
  const codes: string[] = [];
  for (const media of Object.values(r.content ?? {})) {
    const body = media.schema && resolve<SchemaObject>(doc, media.schema);
    if (!body) continue;
    const error = mergeAllOf(doc, body).properties?.error;
    if (error && typeof error.const === 'string') codes.push(error.const);
  }
  for (const m of r.description.matchAll(DESCRIBED_CODE)) codes.push(m[1]!);
  return [...new Set(codes)];
}

/** Response statuses in order: `2XX`-style and numeric codes sorted, `default` last. */
export function sortedStatuses(responses: Record<string, unknown> | undefined): string[] {
  const key = (s: string) => (s === 'default' ? 1000 : Number.parseInt(s.replace(/X/gi, '0'), 10) || 999);
  return Object.keys(responses ?? {}).sort((a, b) => key(a) - key(b) || a.localeCompare(b));
}

export const isErrorStatus = (status: string) => status === 'default' || /^[45]/.test(status);
