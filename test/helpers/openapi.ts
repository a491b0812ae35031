// Validates real HTTP responses against schema/openapi.yaml: the documented status must exist for the
// operation, the body must match its JSON Schema (Ajv, draft 2020-12, formats checked), and documented
// headers (WWW-Authenticate, Retry-After, X-Request-Id, ...) must be present and well formed.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

// ajv-formats is CommonJS with `exports.default`; under NodeNext its default import is the module object.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as unknown as (ajv: Ajv2020) => Ajv2020;

export const OPENAPI_FILE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../schema/openapi.yaml');

/** The base URI the document's schemas are registered under; `#/components/...` refs are rewritten to it. */
const DOC_ID = 'urn:tunnelgate:openapi';

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
type JsonObject = { [k: string]: Json };

export type HttpMethod = 'get' | 'put' | 'post' | 'delete' | 'options' | 'head' | 'patch' | 'trace';
export const HTTP_METHODS: readonly HttpMethod[] = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

export interface OpenApiDocument extends JsonObject {
  openapi: string;
  paths: { [path: string]: JsonObject };
  components: JsonObject;
}

export type HeadersLike = Headers | Record<string, string | string[] | undefined> | Map<string, string>;

export class OpenApiMismatch extends Error {
  override name = 'OpenApiMismatch';
}

let cached: { doc: OpenApiDocument; ajv: Ajv2020; validators: Map<string, ValidateFunction> } | null = null;

/** Parses the YAML (once per process). */
export function loadOpenApi(): OpenApiDocument {
  return state().doc;
}

function state() {
  if (cached) return cached;
  const doc = YAML.parse(fs.readFileSync(OPENAPI_FILE, 'utf8')) as OpenApiDocument;
  // strict: unknown keywords and unknown formats are errors, so a typo in the document cannot silently
  // weaken a schema. strictTypes is off: refinements such as `allOf: [{$ref}, {properties: ...}]`
  // legitimately omit `type`.
  const ajv = new Ajv2020({ strict: true, strictTypes: false, allowUnionTypes: true, allErrors: true, validateFormats: true });
  addFormats(ajv);
  const components = (doc.components ?? {}) as JsonObject;
  const schemas = (components.schemas ?? {}) as JsonObject;
  const defs: JsonObject = {};
  for (const [name, schema] of Object.entries(schemas)) defs[name] = rewriteRefs(schema);
  ajv.addSchema({ $id: DOC_ID, $defs: defs } as object);
  cached = { doc, ajv, validators: new Map() };
  return cached;
}

/** `#/components/schemas/X` -> `urn:tunnelgate:openapi#/$defs/X`; any other in-document ref is an error here. */
function rewriteRefs(node: Json): Json {
  if (Array.isArray(node)) return node.map(rewriteRefs);
  if (node === null || typeof node !== 'object') return node;
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === '$ref' && typeof v === 'string') {
      const m = /^#\/components\/schemas\/([^/]+)$/.exec(v);
      if (!m) throw new OpenApiMismatch(`schema $ref ${v} does not point at #/components/schemas/<name>`);
      out[k] = `${DOC_ID}#/$defs/${m[1]}`;
    } else {
      out[k] = rewriteRefs(v);
    }
  }
  return out;
}

/** Resolves a local JSON pointer (`#/a/b`) in the document; throws if it does not resolve. */
export function resolvePointer(doc: Json, ref: string): Json {
  if (!ref.startsWith('#')) throw new OpenApiMismatch(`only local $refs are used in this document, got ${ref}`);
  let node: Json = doc;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (node === null || typeof node !== 'object' || !(key in node)) throw new OpenApiMismatch(`$ref ${ref} does not resolve`);
    node = (node as JsonObject)[key] as Json;
  }
  return node;
}

/** Follows `$ref` (a Reference Object) until a concrete object is reached. */
function deref<T extends Json>(node: T): T {
  let cur: Json = node;
  for (let i = 0; i < 10 && cur && typeof cur === 'object' && !Array.isArray(cur) && typeof (cur as JsonObject).$ref === 'string'; i++) {
    cur = resolvePointer(state().doc, (cur as JsonObject).$ref as string);
  }
  return cur as T;
}

function compile(key: string, schema: Json): ValidateFunction {
  const s = state();
  let v = s.validators.get(key);
  if (!v) {
    v = s.ajv.compile(rewriteRefs(schema) as object);
    s.validators.set(key, v);
  }
  return v;
}

function formatErrors(errors: ErrorObject[] | null | undefined): string {
  return (errors ?? [])
    .map((e) => `  - ${e.instancePath || '(root)'} ${e.message ?? ''}${Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : ''} [${e.schemaPath}]`)
    .join('\n');
}

function preview(value: unknown): string {
  const text = typeof value === 'string' ? JSON.stringify(value) : JSON.stringify(value, null, 0) ?? String(value);
  return text.length > 600 ? `${text.slice(0, 600)}…` : text;
}

export interface DocumentedOperation {
  method: HttpMethod;
  path: string;
  operation: JsonObject;
}

export function getOperation(method: string, pathTemplate: string): JsonObject {
  const { doc } = state();
  const item = doc.paths?.[pathTemplate];
  if (!item) throw new OpenApiMismatch(`openapi.yaml has no path ${pathTemplate} (documented: ${Object.keys(doc.paths ?? {}).join(', ')})`);
  const op = item[method.toLowerCase()];
  if (!op || typeof op !== 'object') {
    const has = HTTP_METHODS.filter((m) => m in item).map((m) => m.toUpperCase());
    throw new OpenApiMismatch(`openapi.yaml has no ${method.toUpperCase()} ${pathTemplate} (documented methods: ${has.join(', ') || 'none'})`);
  }
  return op as JsonObject;
}

/** Every operation of the document. */
export function listOperations(): DocumentedOperation[] {
  const out: DocumentedOperation[] = [];
  for (const [p, item] of Object.entries(state().doc.paths ?? {})) {
    for (const m of HTTP_METHODS) if (item[m] && typeof item[m] === 'object') out.push({ method: m, path: p, operation: item[m] as JsonObject });
  }
  return out;
}

export function documentedStatuses(method: string, pathTemplate: string): string[] {
  return Object.keys((getOperation(method, pathTemplate).responses ?? {}) as JsonObject);
}

function normalizeHeaders(h: HeadersLike | undefined): Map<string, string> | null {
  if (!h) return null;
  const out = new Map<string, string>();
  if (typeof (h as Headers).forEach === 'function' && !(h instanceof Map)) {
    (h as Headers).forEach((v, k) => out.set(k.toLowerCase(), v));
  } else if (h instanceof Map) {
    for (const [k, v] of h) out.set(k.toLowerCase(), v);
  } else {
    for (const [k, v] of Object.entries(h)) if (v !== undefined) out.set(k.toLowerCase(), Array.isArray(v) ? v.join(', ') : v);
  }
  return out;
}

const baseType = (contentType: string) => contentType.split(';')[0]!.trim().toLowerCase();
const isJson = (mediaType: string) => mediaType === 'application/json' || mediaType.endsWith('+json');

/**
 * Throws an OpenApiMismatch with a readable explanation unless `status` is documented for
 * `method pathTemplate` and `body` (parsed JSON, or text for non-JSON media types) matches its schema.
 * With `headers`, also checks the Content-Type against the documented media types and every documented
 * response header (required ones must be present; present ones must match their schema).
 */
export function expectMatchesOpenApi(method: string, pathTemplate: string, status: number, body: unknown, headers?: HeadersLike): void {
  const where = `${method.toUpperCase()} ${pathTemplate} -> ${status}`;
  const op = getOperation(method, pathTemplate);
  const responses = (op.responses ?? {}) as JsonObject;
  const key = [String(status), `${String(status)[0]}XX`, 'default'].find((k) => k in responses);
  if (!key) {
    throw new OpenApiMismatch(`${where}: status ${status} is not documented for this operation (documented: ${Object.keys(responses).join(', ')}); body: ${preview(body)}`);
  }
  const response = deref(responses[key] as JsonObject);
  const problems: string[] = [];
  const hdrs = normalizeHeaders(headers);

  const content = (response.content ?? null) as JsonObject | null;
  if (!content || Object.keys(content).length === 0) {
    if (body !== undefined && body !== '' && body !== null) problems.push(`the documented response has no body, but got ${preview(body)}`);
  } else {
    const types = Object.keys(content);
    let mediaType: string;
    const received = hdrs?.get('content-type');
    if (received !== undefined) {
      const found = types.find((t) => t.toLowerCase() === baseType(received));
      if (!found) problems.push(`Content-Type ${received} is not documented (documented: ${types.join(', ')})`);
      mediaType = found ?? types[0]!;
    } else if (hdrs) {
      problems.push(`no Content-Type header (documented: ${types.join(', ')})`);
      mediaType = types[0]!;
    } else {
      mediaType = types.find(isJson) ?? types[0]!;
    }
    const schema = ((content[mediaType] ?? {}) as JsonObject).schema;
    if (schema !== undefined) {
      const validate = compile(`${method.toLowerCase()} ${pathTemplate} ${key} ${mediaType}`, schema);
      if (!validate(body)) problems.push(`body does not match the ${mediaType} schema:\n${formatErrors(validate.errors)}`);
    }
  }

  if (hdrs) {
    for (const [name, raw] of Object.entries((response.headers ?? {}) as JsonObject)) {
      const header = deref(raw as JsonObject);
      const value = hdrs.get(name.toLowerCase());
      if (value === undefined) {
        if (header.required === true) problems.push(`required header ${name} is missing`);
        continue;
      }
      if (header.schema !== undefined) {
        const validate = compile(`header ${method.toLowerCase()} ${pathTemplate} ${key} ${name}`, header.schema);
        if (!validate(value)) problems.push(`header ${name}: ${JSON.stringify(value)} does not match its schema:\n${formatErrors(validate.errors)}`);
      }
    }
  }

  if (problems.length) {
    throw new OpenApiMismatch(`${where} (documented as response ${key}) does not match openapi.yaml:\n- ${problems.join('\n- ')}\nbody: ${preview(body)}`);
  }
}

/** Validates a value against `#/components/schemas/<name>`; throws an OpenApiMismatch when it does not match. */
export function expectMatchesSchema(name: string, value: unknown): void {
  const validate = compile(`schema ${name}`, { $ref: `#/components/schemas/${name}` });
  if (!validate(value)) throw new OpenApiMismatch(`value does not match #/components/schemas/${name}:\n${formatErrors(validate.errors)}\nvalue: ${preview(value)}`);
}

/** Errors of a request body against the documented JSON request body of an operation ([] when it matches). */
export function requestBodyErrors(method: string, pathTemplate: string, body: unknown): string[] {
  const op = getOperation(method, pathTemplate);
  const rb = op.requestBody ? deref(op.requestBody as JsonObject) : null;
  const schema = rb ? (((rb.content as JsonObject | undefined)?.['application/json'] as JsonObject | undefined)?.schema ?? null) : null;
  if (schema === null) throw new OpenApiMismatch(`${method.toUpperCase()} ${pathTemplate} documents no JSON request body`);
  const validate = compile(`request ${method.toLowerCase()} ${pathTemplate}`, schema);
  return validate(body) ? [] : formatErrors(validate.errors).split('\n');
}

/**
 * Compiles every schema the document uses (components, responses, headers, parameters, request bodies) so
 * an unknown keyword, an unknown format or a dangling $ref fails loudly. Returns how many were compiled.
 */
export function compileAllSchemas(): number {
  const { doc } = state();
  let n = 0;
  const seen = (key: string, schema: Json) => {
    compile(key, schema);
    n++;
  };
  for (const name of Object.keys(((doc.components?.schemas ?? {}) as JsonObject))) seen(`schema ${name}`, { $ref: `#/components/schemas/${name}` });
  const walk = (node: Json, at: string) => {
    if (Array.isArray(node)) return node.forEach((x, i) => walk(x, `${at}/${i}`));
    if (node === null || typeof node !== 'object') return;
    for (const [k, v] of Object.entries(node)) {
      // A `schema` member of a media type, header or parameter object (not the components.schemas map).
      if (k === 'schema' && v && typeof v === 'object' && !Array.isArray(v)) seen(`walk ${at}/schema`, v);
      else if (!(at === '#/components' && k === 'schemas')) walk(v, `${at}/${k}`);
    }
  };
  walk(doc.paths as Json, '#/paths');
  walk(doc.components as Json, '#/components');
  return n;
}
