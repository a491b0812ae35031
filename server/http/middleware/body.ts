// Reads a JSON request body with exact errors: 415 for another media type, 413 past the limit (read
// no further), 400 for malformed JSON. Bodies are parsed here rather than by a generic parser so the
// error bodies are the documented ones.
import type { Context } from 'koa';
import { ApiError } from '../../domain/errors.ts';

export async function readJsonBody(ctx: Context, limit: number, opts: { required: boolean }): Promise<unknown> {
  const declared = ctx.get('content-length');
  const hasBody = (declared !== '' && declared !== '0') || ctx.get('transfer-encoding') !== '';
  if (!hasBody) {
    if (opts.required) throw new ApiError('invalid_request', 'A JSON request body is required.');
    return undefined;
  }
  if (declared !== '' && Number(declared) > limit) {
    throw new ApiError('payload_too_large', `The request body is larger than ${limit} bytes.`);
  }
  const type = ctx.get('content-type');
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new ApiError('unsupported_media_type', `Send the body as application/json${type ? `, not ${type.split(';')[0]}` : ''}.`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > limit) {
        // Stop reading; the connection is closed after the response so the rest is never buffered.
        ctx.set('Connection', 'close');
        throw new ApiError('payload_too_large', `The request body is larger than ${limit} bytes.`);
      }
      chunks.push(chunk);
    }
  } catch (e) {
    if (e instanceof ApiError) throw e;
    // The client closed before sending the body it declared ('aborted'): its mistake, so not logged
    // and counted as a 500 (found by test/fuzz/rest.test.ts).
    throw new ApiError('invalid_request', 'The request body ended before its declared length.');
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') {
    if (opts.required) throw new ApiError('invalid_request', 'A JSON request body is required.');
    return undefined;
  }
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new ApiError('invalid_request', `The body is not valid JSON: ${(e as Error).message}`);
  }
}

/** Checks a parsed body is an object with only the allowed keys. */
export function expectObject(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new ApiError('invalid_request', 'The body must be a JSON object.');
  }
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length) {
    throw new ApiError('invalid_request', `Unknown field${unknown.length > 1 ? 's' : ''}: ${unknown.map((k) => JSON.stringify(k.slice(0, 64))).join(', ')}.`);
  }
  return body as Record<string, unknown>;
}
