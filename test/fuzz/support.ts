// Shared pieces of the property-based fuzz pass: run settings (FUZZ_RUNS, FUZZ_SEED),
// the money gateway the REST and GraphQL files share and the end every fuzz file's gateway comes to,
// a tally of inputs tried per property, the error-body checks of docs/CONTRACTS.md "REST errors" and RFC 6749, a raw HTTP/1.1
// client for what fetch refuses to send (Content-Length oddities, bytes that are not a valid header), a
// money snapshot read through the raw pg pool, and the gateway's own count of 5xx answers from /metrics.
import net from 'node:net';
import fc from 'fast-check';
import type pg from 'pg';
import { expect } from 'vitest';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { setRate } from '../../server/domain/settings.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';

/** Fixed by default so a failure is reproducible; FUZZ_SEED replays another run. */
export const SEED = process.env.FUZZ_SEED !== undefined && process.env.FUZZ_SEED !== '' ? Number(process.env.FUZZ_SEED) : 20261125;
if (!Number.isInteger(SEED)) throw new Error(`FUZZ_SEED must be an integer, got ${process.env.FUZZ_SEED}`);

/** FUZZ_RUNS overrides every property's default run count (longer runs off the CI path). */
export function runs(defaultRuns: number): number {
  const env = process.env.FUZZ_RUNS;
  if (env === undefined || env === '') return defaultRuns;
  const n = Number(env);
  if (!Number.isInteger(n) || n < 1) throw new Error(`FUZZ_RUNS must be a positive integer, got ${env}`);
  return n;
}

/**
 * A test's time limit for a property of `defaultRuns`: generous on a loaded 2-core machine, and scaled
 * with FUZZ_RUNS, since a property that overran would keep sending requests into the next one.
 */
export function fuzzTimeout(defaultRuns: number): number {
  return Math.round(120_000 * Math.max(1, runs(defaultRuns) / defaultRuns));
}

const tally = new Map<string, number>();
const statuses = new Map<string, Map<string, number>>();

/**
 * Runs one asynchronous property with the fixed seed and counts every input tried (shrinking
 * included). Sequential on purpose: each input's money snapshot must not see another input's effect.
 */
export async function fuzz<T>(name: string, arb: fc.Arbitrary<T>, defaultRuns: number, predicate: (input: T) => Promise<number | string | void>): Promise<void> {
  const numRuns = runs(defaultRuns);
  tally.set(name, 0);
  const seen = new Map<string, number>();
  statuses.set(name, seen);
  const details = await fc.check(
    fc.asyncProperty(arb, async (input) => {
      tally.set(name, (tally.get(name) ?? 0) + 1);
      const outcome = await predicate(input);
      if (outcome !== undefined) seen.set(String(outcome), (seen.get(String(outcome)) ?? 0) + 1);
    }),
    { seed: SEED, numRuns },
  );
  if (details.failed) {
    // fast-check's own report prints the whole counterexample; long generated strings would bury it.
    const cut = (s: string) => (s.length > 2000 ? `${s.slice(0, 2000)}... (${s.length} chars)` : s);
    const cause = details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance);
    throw new Error(
      `${name}: property failed after ${details.numRuns} inputs (seed ${details.seed}, path ${details.counterexamplePath}, shrunk ${details.numShrinks} times)\n` +
        `counterexample: ${cut(fc.stringify(details.counterexample))}\ncause: ${cut(cause)}`,
    );
  }
}

/** One line per property for the run's log (and the issue's note): inputs tried, seed. */
export function printTally(file: string): void {
  const lines = [...tally].map(([name, n]) => {
    const by = [...(statuses.get(name) ?? [])].sort(([a], [b]) => a.localeCompare(b)).map(([s, k]) => `${s}×${k}`);
    return `  ${name}: ${n} inputs${by.length ? ` (${by.join(' ')})` : ''}`;
  });
  console.log(`fuzz ${file} (seed ${SEED}, FUZZ_RUNS ${process.env.FUZZ_RUNS ?? 'default'}; ${nodeParserRefusals} refused by Node's parser):\n${lines.join('\n')}`);
}

// ---------------------------------------------------------------------------------------------------
// The gateway under fuzz

/** The accounts the money properties buy with: plenty, too little, and a viewer (who may not buy). */
export interface FuzzAccounts {
  rich: SeededUser;
  poor: SeededUser;
  viewer: SeededUser;
}

/**
 * A gateway on its own database that can sell: a node of 62 protected IPs (fuzzed purchases that
 * succeed never run the pool dry), a rate, the three accounts, and the 10% promocode FUZZ10.
 */
export async function startSellingGateway(): Promise<{ gw: RunningGateway } & FuzzAccounts> {
  const gw = await startGateway();
  await seedNode(gw.testDb.db, '198.18.0.0/26');
  await setRate(gw.testDb.db, '90');
  gw.services.pricing.invalidate();
  const rich = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
  const poor = await seedUser(gw.testDb.db, { balanceUsd: '0.50' });
  const viewer = await seedUser(gw.testDb.db, { balanceUsd: '100.00', role: 'viewer' });
  await createPromocode(gw.testDb.db, { code: 'FUZZ10', percent: 10 });
  return { gw, rich, poor, viewer };
}

/**
 * A fuzz file's end: the tally printed, the gateway closed, and none of its answers a 5xx by its own
 * metrics (answers no client read, such as on aborted uploads, included). Nothing to do without a gateway.
 */
export async function closeFuzzedGateway(gw: RunningGateway | undefined, file: string): Promise<void> {
  if (!gw) return;
  const fives = await serverErrorCount(gw.url);
  printTally(file);
  await gw.close();
  expect(fives.lines, 'the gateway counted 5xx answers during the fuzz').toEqual([]);
}

// ---------------------------------------------------------------------------------------------------
// Error bodies

/** docs/CONTRACTS.md "REST errors": the statuses the tunnel API may answer with an error, and the codes each may carry. */
export const REST_ERROR_CODES: Readonly<Record<number, readonly string[]>> = {
  400: ['invalid_request', 'invalid_origin_ip', 'invalid_promocode'],
  401: ['invalid_token'],
  402: ['insufficient_balance'],
  403: ['insufficient_scope'],
  404: ['not_found'],
  405: ['invalid_request'],
  409: ['out_of_stock', 'invalid_state'],
  413: ['invalid_request'],
  415: ['invalid_request'],
  422: ['invalid_request'],
  429: ['rate_limited'],
  503: ['edge_unavailable'],
};

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** `{"error","error_description"}` exactly: two strings, nothing else. */
export function expectErrorShape(res: Answer, codes: readonly string[], what: string): { error: string; error_description: string } {
  const body = parseJson(res.text) as Record<string, unknown> | undefined;
  expect(body, `${what}: ${res.status} body is not JSON: ${res.text.slice(0, 300)}`).toBeTypeOf('object');
  expect(body).not.toBeNull();
  expect(Object.keys(body!).sort(), `${what}: ${res.status} ${res.text.slice(0, 300)}`).toEqual(['error', 'error_description']);
  expect(body!.error_description, what).toBeTypeOf('string');
  expect((body!.error_description as string).length, what).toBeGreaterThan(0);
  expect(codes, `${what}: ${res.status} with undocumented code ${String(body!.error)}`).toContain(body!.error);
  return body as { error: string; error_description: string };
}

/** Requests Node's HTTP parser refused before any gateway code ran (bad header bytes, oversized head). */
export let nodeParserRefusals = 0;

/**
 * Node answers a request it cannot parse (a DEL byte in a header value, a head over 16 KiB) itself
 * with a bare 400 or 431 and closes the connection; no gateway code runs, so no X-Request-Id.
 */
export function isNodeParserRefusal(res: Answer): boolean {
  return (res.status === 400 || res.status === 431) && res.text === '' && !res.headers.has('x-request-id');
}

/** Never a 5xx; an error is the documented body for its status; 401 challenges, 429 says when to retry. */
export function expectRestAnswer(res: Answer, what: string, method = 'GET'): void {
  expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
  if (res.status < 400) return;
  if (isNodeParserRefusal(res)) {
    nodeParserRefusals++;
    return;
  }
  const codes = REST_ERROR_CODES[res.status];
  expect(codes, `${what}: undocumented status ${res.status} ${res.text.slice(0, 300)}`).toBeDefined();
  if (method === 'HEAD') return;
  expect(res.headers.get('content-type') ?? '', `${what}: ${res.status} ${JSON.stringify([...res.headers])} ${res.text.slice(0, 200)}`).toMatch(/^application\/json/);
  expectErrorShape(res, codes!, what);
  if (res.status === 401) expect(res.headers.get('www-authenticate') ?? '', what).toMatch(/^Bearer\b/);
  if (res.status === 429) expect(res.headers.get('retry-after') ?? '', what).toMatch(/^[1-9]\d*$/);
  if (res.status === 405) expect(res.headers.get('allow') ?? '', what).not.toBe('');
}

/** RFC 6749 5.2 (token), RFC 7009 2.2.1 (revocation), RFC 8707 (invalid_target), plus our rate_limited (429). */
export const TOKEN_ERROR_CODES = [
  'invalid_request',
  'invalid_client',
  'invalid_grant',
  'unauthorized_client',
  'unsupported_grant_type',
  'invalid_scope',
  'invalid_target',
  'unsupported_token_type',
  'rate_limited',
] as const;

/** RFC 6749 4.1.2.1 and OpenID Connect Core 3.1.2.6: what an authorization error redirect may carry. */
export const AUTHORIZE_ERROR_CODES = [
  'invalid_request',
  'unauthorized_client',
  'access_denied',
  'unsupported_response_type',
  'invalid_scope',
  'temporarily_unavailable',
  'interaction_required',
  'login_required',
  'account_selection_required',
  'consent_required',
  'invalid_request_uri',
  'invalid_request_object',
  'request_not_supported',
  'request_uri_not_supported',
  'registration_not_supported',
  'invalid_target',
  'invalid_client',
  // oidc-provider's answer to a response_mode it does not offer (web_message, jwt): OAuth 2.0 JARM's code.
  'unsupported_response_mode',
] as const;

// ---------------------------------------------------------------------------------------------------
// Money: read beside the code under test, through the test's own pg pool

export interface MoneyRow {
  balance: string;
  ledger: number;
  tunnels: number;
}

/** Every account's balance (exact numeric text), ledger row count and tunnel count. */
export async function moneySnapshot(raw: pg.Pool): Promise<Map<string, MoneyRow>> {
  const { rows } = await raw.query<{ id: string; balance: string; ledger: number; tunnels: number }>(
    `select a.id, a.balance_usd::text as balance,
            (select count(*)::int from ledger_entry l where l.account_id = a.id) as ledger,
            (select count(*)::int from tunnel t where t.account_id = a.id) as tunnels
       from account a`,
  );
  return new Map(rows.map((r) => [r.id, { balance: r.balance, ledger: r.ledger, tunnels: r.tunnels }]));
}

/** Accounts whose balance, ledger or tunnels changed between two snapshots. */
export function moneyChanges(before: Map<string, MoneyRow>, after: Map<string, MoneyRow>): Array<{ account: string; before: MoneyRow | undefined; after: MoneyRow | undefined }> {
  const out: Array<{ account: string; before: MoneyRow | undefined; after: MoneyRow | undefined }> = [];
  for (const id of new Set([...before.keys(), ...after.keys()])) {
    const a = before.get(id);
    const b = after.get(id);
    if (a?.balance !== b?.balance || a?.ledger !== b?.ledger || a?.tunnels !== b?.tunnels) out.push({ account: id, before: a, after: b });
  }
  return out;
}

/** Exact decimal text ("98.89") to cents, without a float. */
export function cents(text: string): bigint {
  const m = /^(-?)(\d+)(?:\.(\d{1,2}))?$/.exec(text);
  if (!m) throw new Error(`not a money amount: ${text}`);
  const v = BigInt(m[2]!) * 100n + BigInt((m[3] ?? '0').padEnd(2, '0'));
  return m[1] ? -v : v;
}

// ---------------------------------------------------------------------------------------------------
// The gateway's own view: every answer it produced, including those no client read

/** Sum of tunnelgate_http_requests_total with a 5xx status, by the gateway's metrics. */
export async function serverErrorCount(base: string): Promise<{ total: number; lines: string[] }> {
  const res = await fetch(`${base}/metrics`);
  const text = await res.text();
  const lines = text.split('\n').filter((l) => l.startsWith('tunnelgate_http_requests_total{') && /status="5\d\d"/.test(l));
  const total = lines.reduce((s, l) => s + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  return { total, lines };
}

// ---------------------------------------------------------------------------------------------------
// Raw HTTP/1.1, for requests fetch would refuse or correct

export interface RawAnswer extends Answer {
  /** False when the server closed without a complete response. */
  complete: boolean;
}

function dechunk(body: Buffer): Buffer | null {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = body.indexOf('\r\n', at);
    if (eol < 0) return null;
    const size = parseInt(body.subarray(at, eol).toString('latin1').split(';')[0]!, 16);
    if (!Number.isFinite(size)) return null;
    if (size === 0) return Buffer.concat(parts);
    parts.push(body.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

/**
 * Sends `head` (request line and headers, CRLF-separated, without the blank line) and `body`, then
 * half-closes when `endAfter` is set; reads the first response. `Connection: close` is the caller's.
 */
export function rawHttp(base: string, head: string, body: Buffer, opts: { endAfter?: boolean; timeoutMs?: number } = {}): Promise<RawAnswer> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    const chunks: Buffer[] = [];
    let settled = false;
    const finish = () => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      const all = Buffer.concat(chunks);
      const sep = all.indexOf('\r\n\r\n');
      if (sep < 0) return resolve({ status: 0, headers: new Headers(), text: all.toString('latin1'), complete: false });
      const lines = all.subarray(0, sep).toString('latin1').split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
      const headers = new Headers();
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        if (i > 0) headers.append(l.slice(0, i).trim(), l.slice(i + 1).trim());
      }
      let payload: Buffer | null = all.subarray(sep + 4);
      let complete = true;
      if (/chunked/i.test(headers.get('transfer-encoding') ?? '')) {
        payload = dechunk(payload);
        complete = payload !== null;
      } else if (headers.has('content-length')) {
        const n = Number(headers.get('content-length'));
        complete = payload.length >= n;
        payload = payload.subarray(0, n);
      }
      resolve({ status, headers, text: (payload ?? Buffer.alloc(0)).toString('utf8'), complete });
    };
    // A safety bound only: every case here is answered or closed by the server well before it.
    const timer = setTimeout(() => {
      if (!settled) {
        settled = true;
        socket.destroy();
        reject(new Error(`no answer within ${opts.timeoutMs ?? 10_000} ms to ${JSON.stringify(head.slice(0, 200))}`));
      }
    }, opts.timeoutMs ?? 10_000);
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', finish);
    socket.on('close', finish);
    socket.on('error', () => finish());
    socket.write(Buffer.concat([Buffer.from(`${head}\r\n\r\n`, 'latin1'), body]));
    if (opts.endAfter) socket.end();
  });
}

// ---------------------------------------------------------------------------------------------------
// Arbitraries shared by several files

/** Keys that have bitten JavaScript servers before: prototype pollution and inherited names. */
export const nastyKey = fc.constantFrom('__proto__', 'constructor', 'prototype', 'toString', 'valueOf', 'hasOwnProperty', '__defineGetter__', 'then', '');

/** Strings a parser may stumble on: unicode of every plane, controls, lone surrogates, long runs. */
export const oddString: fc.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('\u0000', '\ud800', '\udfff', '\u202e', '\ufeff', '%', '%00', '%zz', '%E0%A4%A', '../..', 'null', 'undefined', 'NaN', '-0', '1e309', '0x10', ' ', '\t\n'),
  // Long runs, kept under Node's 16 KiB header limit even when percent-encoded in a URL.
  fc.integer({ min: 1, max: 20 }).chain((n) => fc.constantFrom('a', '\u00e9', '\u{1F600}', '9', '.').map((c) => c.repeat(n * 50))),
);

/** Header values fetch will send (latin-1 bytes, no CR, LF or NUL); empty and padded ones included. */
export const headerValue: fc.Arbitrary<string> = fc.oneof(
  fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 80 }),
  fc.string({ unit: fc.integer({ min: 0x20, max: 0xff }).map((c) => String.fromCharCode(c)), maxLength: 80 }),
  fc.integer({ min: 1, max: 60 }).map((n) => 'k'.repeat(n * 100)),
);

/** A JSON object as text, so `__proto__` and repeated keys really are on the wire. */
export function objectText(entries: Array<[string, unknown]>): string {
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v) ?? 'null'}`).join(',')}}`;
}

/** encodeURIComponent that survives lone surrogates (they go out as U+FFFD, as a browser would send them). */
export function pct(s: string): string {
  return encodeURIComponent(s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, '\ufffd'));
}

/** `arb` about once in `oneIn` draws, else undefined (fc.option's freq counts the other way round). */
export function sometimes<T>(arb: fc.Arbitrary<T>, oneIn: number): fc.Arbitrary<T | undefined> {
  return fc.oneof({ weight: oneIn - 1, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: arb });
}

/**
 * Webhook URLs (REST `POST /api/webhooks`, GraphQL `createWebhook`): schemes right, odd and wrong; hosts
 * as names, IDNs, IP literals of every kind and nonsense; ports including our admin SSH port; paths of
 * multi-byte characters long enough that their percent-encoded form passes the 2,048-character column
 * while the text sent does not (the review found 2,000 `é` answering 500).
 */
export const webhookUrl: fc.Arbitrary<string> = (() => {
  const scheme = fc.oneof(
    { weight: 6, arbitrary: fc.constant('https://') },
    { weight: 3, arbitrary: fc.constantFrom('http://', 'HTTPS://', 'ftp://', 'file://', 'javascript:', 'data:text/plain,', 'ws://', 'gopher://', 'https:', 'https:/', 'https:///', '//', '') },
    { weight: 1, arbitrary: oddString.map((s) => `${s}://`) },
  );
  const host = fc.oneof(
    { weight: 5, arbitrary: fc.constantFrom('hooks.example.com', 'b\u00fccher.example', '\u4f8b\u3048.\u30c6\u30b9\u30c8', 'xn--bcher-kva.example', 'HOOKS.EXAMPLE.COM.', 'localhost') },
    { weight: 2, arbitrary: fc.constantFrom('8.8.8.8', '127.0.0.1', '10.0.0.1', '0x7f.1', '2130706433', '[::1]', '[::ffff:127.0.0.1]', '192.0.2.1', '') },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 300 }).map((n) => `${'\u00e9'.repeat(n)}.example`) },
    { weight: 1, arbitrary: oddString },
  );
  const port = fc.oneof({ weight: 4, arbitrary: fc.constant('') }, { weight: 2, arbitrary: fc.constantFrom(':443', ':52222', ':0', ':65535', ':65536', ':99999', ':abc', ':') }, { weight: 1, arbitrary: fc.integer({ min: 1, max: 65535 }).map((p) => `:${p}`) });
  const path = fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom('/hook', '', '/', '/a?b=c', '/x#frag', '/%zz', '/%00', '/\u0000', '/ space', '/\\x') },
    // Runs of 1- to 4-byte UTF-8 around the bound: 300 to 2,100 characters sent, up to 12 times that stored.
    { weight: 3, arbitrary: fc.tuple(fc.constantFrom('\u00e9', '\u20ac', '\u{1F600}', 'a', '%C3%A9', ' '), fc.integer({ min: 300, max: 2100 })).map(([c, n]) => `/${c.repeat(n)}`) },
    { weight: 2, arbitrary: fc.string({ unit: fc.constantFrom('\u00e9', '\u20ac', '\u{1F600}', 'a', '/', '%', '?', '#', '\ud800'), maxLength: 400 }).map((s) => `/${s}`) },
    { weight: 1, arbitrary: oddString.map((s) => `/${s}`) },
  );
  const userinfo = fc.oneof({ weight: 8, arbitrary: fc.constant('') }, { weight: 1, arbitrary: fc.constantFrom('user@', 'user:pw@', '\u00e9:\u00e9@') });
  return fc.oneof(
    { weight: 9, arbitrary: fc.tuple(scheme, userinfo, host, port, path).map((parts) => parts.join('')) },
    { weight: 1, arbitrary: oddString },
  );
})();
