// Property-based fuzz of the tunnel API: arbitrary purchase bodies, headers, list
// query strings, path ids and methods against a real gateway on a real per-file database. Properties:
// never a 5xx; every error is docs/CONTRACTS.md "REST errors"'s body with a documented code for its status; a refusal never
// moves money (balance, ledger rows and tunnels of every account read through the raw pg pool before
// and after each input); a success moves exactly the price it reports. The gateway's own metrics must
// also count no 5xx at the end (answers no client read, such as on aborted uploads, included).
// Seed and run counts: test/fuzz/support.ts (FUZZ_SEED, FUZZ_RUNS).
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import type { SeededUser } from '../helpers/fixtures.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { keyIdOf } from '../../server/auth/api-keys.ts';
import {
  cents,
  closeFuzzedGateway,
  expectRestAnswer,
  fuzz,
  fuzzTimeout,
  headerValue,
  moneyChanges,
  moneySnapshot,
  nastyKey,
  objectText,
  oddString,
  pct,
  rawHttp,
  serverErrorCount,
  startSellingGateway,
  webhookUrl,
  type Answer,
} from './support.ts';

let gw: RunningGateway;
let rich: SeededUser;
let poor: SeededUser;
let viewer: SeededUser;
/** A tunnel of `rich` and one of `poor`: real ids for the path-parameter property. */
const realIds: string[] = [];

async function send(method: string, path: string, headers: Record<string, string>, body?: string, base = gw.url): Promise<Answer> {
  let res: Response;
  try {
    res = await fetch(base + path, { method, headers, body });
  } catch (e) {
    // undici refuses some header values the wire allows (an empty Authorization, for one): send those raw.
    if (!/invalid .*header/i.test(String((e as { cause?: unknown }).cause))) throw new Error(`${method} ${path.slice(0, 200)}: ${(e as Error).message} (${String((e as { cause?: unknown }).cause)})`);
    const payload = Buffer.from(body ?? '');
    const lines = [`${method} ${path} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
    if (body !== undefined) lines.push(`Content-Length: ${payload.length}`);
    return rawHttp(base, lines.join('\r\n'), payload);
  }
  return { status: res.status, headers: res.headers, text: await res.text() };
}

beforeAll(async () => {
  ({ gw, rich, poor, viewer } = await startSellingGateway());
  await createPromocode(gw.testDb.db, { code: 'FUZZONCE', percent: 50, maxUses: 1 });
  for (const who of [rich, viewer]) {
    const res = await send('POST', '/api/dedicated', { authorization: `Bearer ${who.writeKey}`, 'content-type': 'application/json' }, JSON.stringify({ name: 'seed', origin_ip: '8.8.4.4' }));
    expect(res.status, res.text).toBe(201);
    realIds.push((JSON.parse(res.text) as { tunnel: { id: string } }).tunnel.id);
  }
});

afterAll(() => closeFuzzedGateway(gw, 'rest'));

// ---------------------------------------------------------------------------------------------------
// Arbitraries

const credential = (): fc.Arbitrary<{ label: string; header: string | undefined }> =>
  fc.oneof(
    { weight: 8, arbitrary: fc.constantFrom('rich-write', 'rich-read', 'poor-write', 'viewer-write').map((label) => ({ label, header: `Bearer ${keyOf(label)}` })) },
    {
      weight: 3,
      arbitrary: fc
        .oneof(
          fc.constant(''),
          fc.constant('Bearer'),
          fc.constant('Bearer '),
          fc.constant('bearer svc_'),
          headerValue.map((v) => `Bearer ${v}`),
          headerValue.map((v) => `Basic ${v}`),
          headerValue,
          // A real key with its secret changed, its case changed or padded: the lookup must still refuse it.
          fc.tuple(fc.constantFrom('rich-write', 'poor-write'), fc.nat({ max: 60 }), fc.constantFrom('A', '-', '_', ' ', '\t')).map(
            ([l, i, c]) => `Bearer ${keyOf(l).slice(0, 10 + i)}${c}${keyOf(l).slice(11 + i)}`,
          ),
          fc.constantFrom('rich-write').map((l) => `Bearer ${keyOf(l).toUpperCase()}`),
          fc.constantFrom('rich-write').map((l) => `Bearer  ${keyOf(l)}`),
          fc.constantFrom('rich-write').map((l) => `Bearer ${keyOf(l)}, Bearer ${keyOf('poor-write')}`),
          fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), minLength: 32, maxLength: 32 }).map((h) => `Bearer svc_${h}_${'A'.repeat(43)}`),
          // JWT-shaped strings (routed to the access-token verifier): garbage parts, alg none, huge parts.
          fc.tuple(fc.base64String({ maxLength: 60 }), fc.base64String({ maxLength: 200 }), fc.base64String({ maxLength: 60 })).map(
            ([a, b, c]) => `Bearer eyJ${a.replace(/[+/=]/g, '')}.${b.replace(/[+/=]/g, '') || 'e30'}.${c.replace(/[+/=]/g, '') || 'x'}`,
          ),
          fc.jsonValue().map((p) => `Bearer ${b64u(JSON.stringify({ alg: 'none', typ: 'at+jwt' }))}.${b64u(JSON.stringify(p) ?? 'null')}.`),
        )
        .map((h) => ({ label: 'garbage', header: h })),
    },
    { weight: 1, arbitrary: fc.constant({ label: 'none', header: undefined }) },
  );

const b64u = (s: string) => Buffer.from(s).toString('base64url');

function keyOf(label: string): string {
  switch (label) {
    case 'rich-write':
      return rich.writeKey;
    case 'rich-read':
      return rich.readKey;
    case 'poor-write':
      return poor.writeKey;
    case 'viewer-write':
      return viewer.writeKey;
    default:
      throw new Error(label);
  }
}

/** origin_ip candidates: valid public ones (so some purchases succeed), near misses, and anything. */
const originIp: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom('8.8.4.4', '1.1.1.1', '9.9.9.9', '93.184.216.34') },
  fc.constantFrom(
    '192.0.2.1', // the edge's own public address
    '198.18.0.5', // inside a protected pool
    '127.0.0.1',
    '0.0.0.0',
    '255.255.255.255',
    '224.0.0.1',
    '10.0.0.1',
    '08.8.4.4',
    '8.8.4.4 ',
    ' 8.8.4.4',
    '8.8.4.4\n',
    '8.8.4.4/32',
    '8.8.4',
    '8.8.4.4.4',
    '256.1.1.1',
    '::ffff:8.8.4.4',
    '\u0668.\u0668.\u0664.\u0664',
    '８.８.４.４',
    '0x8.8.4.4',
    '134744072',
  ),
  fc.ipV4(),
  fc.ipV4Extended(),
  fc.ipV6(),
  oddString,
  fc.jsonValue({ maxDepth: 2 }),
);

const purchaseValue = (field: string): fc.Arbitrary<unknown> => {
  if (field === 'origin_ip') return originIp;
  if (field === 'promocode') return fc.oneof({ weight: 2, arbitrary: fc.constantFrom('FUZZ10', 'fuzz10', ' FUZZ10 ', 'FUZZONCE', 'NOPE', 'FUZZ10\u0000', '\u0000') }, oddString, fc.jsonValue({ maxDepth: 2 }));
  return fc.oneof({ weight: 3, arbitrary: fc.constantFrom('web', '', ' ', 'a'.repeat(100), 'a'.repeat(101), 'tab\there', '\u0000') }, oddString, fc.jsonValue({ maxDepth: 2 }));
};

/** A purchase body as text: mostly objects (with nasty and repeated keys), sometimes anything else. */
const purchaseBody: fc.Arbitrary<string> = fc.oneof(
  {
    // Near-valid: these reach the money (201, 402, 409, idempotent replays and mismatches).
    weight: 3,
    arbitrary: fc
      .record(
        {
          name: fc.constantFrom('web', 'db', ' spaced ', '\u{1F600}'),
          origin_ip: fc.constantFrom('8.8.4.4', '1.1.1.1', '9.9.9.9'),
          promocode: fc.constantFrom('FUZZ10', 'fuzz10', 'FUZZONCE', 'NOPE', 'FUZZ10\u0000', '\u0000'),
          // Tunnel settings: valid, near-valid and wrong.
          ports: fc.constantFrom('*', '443,80,81', ' 22 , 80 ', '1-65535', '0', '65536', '80-79', 'a', '', 443, null),
          protocol: fc.constantFrom('both', 'tcp', 'udp', 'icmp', '', null),
          protection: fc.oneof(
            fc.record(
              {
                syn_proxy: fc.oneof(fc.boolean(), fc.constant('yes')),
                source_pps_limit: fc.oneof(fc.constant(null), fc.integer({ min: 0, max: 2_000_000 })),
                drop_fragments: fc.boolean(),
                // Attack settings (docs/CONTRACTS.md "Attacks"): in range, at the edges, out of range, wrong types.
                max_flows: fc.oneof(fc.integer({ min: 0, max: 2_000_000 }), fc.constantFrom(999, 1000, 1_000_000, 1_000_001, null, '65536', 1500.5)),
                alert_pps: fc.oneof(fc.constant(null), fc.integer({ min: 0, max: 200_000_000 }), fc.constantFrom(99, 100, 100_000_000, 100_000_001, 'auto', 250.5)),
              },
              { requiredKeys: [] },
            ),
            fc.jsonValue({ maxDepth: 2 }),
          ),
        },
        { requiredKeys: ['origin_ip'] },
      )
      .map((o) => objectText(Object.entries(o))),
  },
  {
    weight: 4,
    arbitrary: fc
      .tuple(
        // Each field present most of the time, so a good share of inputs get past validation to the money.
        fc.option(purchaseValue('name'), { nil: undefined, freq: 2 }),
        fc.option(purchaseValue('origin_ip'), { nil: undefined, freq: 6 }),
        fc.option(purchaseValue('promocode'), { nil: undefined, freq: 2 }),
        fc.oneof(
          { weight: 2, arbitrary: fc.constant([] as Array<[string, unknown]>) },
          fc.array(fc.tuple(fc.oneof(nastyKey, fc.constantFrom('ORIGIN_IP', 'origin_ip ', 'originIp', 'name', 'origin_ip'), fc.string({ maxLength: 12 })), fc.jsonValue({ maxDepth: 2 })), { minLength: 1, maxLength: 2 }),
        ),
      )
      .map(([name, originIp, promocode, extra]) => {
        const fields: Array<[string, unknown]> = [];
        if (name !== undefined) fields.push(['name', name]);
        if (originIp !== undefined) fields.push(['origin_ip', originIp]);
        if (promocode !== undefined) fields.push(['promocode', promocode]);
        return objectText([...fields, ...extra]);
      }),
  },
  { weight: 1, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
  {
    weight: 1,
    arbitrary: fc.oneof(
      fc.constantFrom('', ' ', '{', '{"origin_ip":', '{"origin_ip":"8.8.4.4"', '[]', 'null', '\ufeff{"origin_ip":"8.8.4.4"}', '{"origin_ip":"8.8.4.4"}garbage', '{"a":1}{"b":2}'),
      fc.string({ unit: 'binary', maxLength: 200 }),
      fc.nat({ max: 40 }).map((d) => '['.repeat(d * 250) + ']'.repeat(d * 250)),
      fc.integer({ min: 60, max: 80 }).map((kib) => JSON.stringify({ name: 'x'.repeat(kib * 1024), origin_ip: '8.8.4.4' })),
    ),
  },
);

const contentType = fc.oneof(
  { weight: 6, arbitrary: fc.constant('application/json') },
  {
    weight: 2,
    arbitrary: fc.constantFrom('application/json; charset=utf-8', 'APPLICATION/JSON', 'application/json;charset=utf-16', 'application/jsonx', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json;;', ''),
  },
  { weight: 1, arbitrary: headerValue },
);

const idempotencyKey = fc.option(fc.oneof({ weight: 3, arbitrary: fc.constantFrom('k1', 'k2', 'same-key') }, headerValue, fc.constant('k'.repeat(256))), { nil: undefined, freq: 2 });

// ---------------------------------------------------------------------------------------------------

describe('fuzz: POST /api/dedicated', () => {
  it('never 5xx, documented errors, and money moves only on a success, by exactly its price', { timeout: fuzzTimeout(200) }, async () => {
    await fuzz(
      'POST /api/dedicated (body, credential, Idempotency-Key, Content-Type)',
      fc.record({ cred: credential(), body: purchaseBody, type: contentType, key: idempotencyKey }),
      200,
      async ({ cred, body, type, key }) => {
        const headers: Record<string, string> = {};
        if (cred.header !== undefined) headers.authorization = cred.header;
        if (type !== '') headers['content-type'] = type;
        if (key !== undefined) headers['idempotency-key'] = key;
        const before = await moneySnapshot(gw.testDb.raw);
        const res = await send('POST', '/api/dedicated', headers, body);
        const what = `POST ${JSON.stringify({ cred: cred.label, type, key: key?.slice(0, 40), body: body.slice(0, 200) })}`;
        expectRestAnswer(res, what, 'POST');
        const changes = moneyChanges(before, await moneySnapshot(gw.testDb.raw));
        if (res.status >= 300) {
          expect(changes, `${what}: a refusal (${res.status}) changed money`).toEqual([]);
          return res.text && (res.status === 400 || res.status === 409) ? `${res.status} ${(JSON.parse(res.text) as { error: string }).error}` : res.status;
        }
        // A success: 201 for a new purchase or the replay of one (same key, same body: no second debit).
        expect(res.status, what).toBe(201);
        const out = JSON.parse(res.text) as { charged_usd: number; balance_after: number; tunnel: { id: string } };
        if (changes.length === 0) {
          expect(key, `${what}: a 201 without a debit must be an idempotent replay`).toBeDefined();
          return '201 replay';
        }
        expect(changes, what).toHaveLength(1);
        const [c] = changes;
        expect(c!.account, what).toBe(cred.label === 'viewer-write' ? viewer.accountId : cred.label === 'poor-write' ? poor.accountId : rich.accountId);
        expect(cents(c!.before!.balance) - cents(c!.after!.balance), what).toBe(BigInt(Math.round(out.charged_usd * 100)));
        expect(cents(c!.after!.balance), what).toBe(BigInt(Math.round(out.balance_after * 100)));
        expect(c!.after!.ledger - c!.before!.ledger, what).toBe(1);
        expect(c!.after!.tunnels - c!.before!.tunnels, what).toBe(1);
        return 201;
      },
    );
  });
});

describe('fuzz: POST /api/webhooks', () => {
  const events = fc.oneof(
    { weight: 4, arbitrary: fc.constant(undefined) },
    { weight: 2, arbitrary: fc.constantFrom<unknown>(['tunnel.status_changed'], ['tunnel.health_changed', 'tunnel.status_changed'], [], ['tunnel.exploded'], 'tunnel.status_changed', null) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
  );
  // include_origin: absent most often, else the booleans (the key is the account's own, so true is allowed), null, or anything.
  const includeOrigin = fc.oneof(
    { weight: 4, arbitrary: fc.constant(undefined) },
    { weight: 3, arbitrary: fc.constantFrom<unknown>(true, false, null, 'true', 1, 0, []) },
    { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 1 }) },
  );
  const body = fc.oneof(
    {
      weight: 8,
      arbitrary: fc
        .tuple(webhookUrl, events, includeOrigin)
        .map(([url, ev, io]) => objectText([['url', url], ...(ev === undefined ? [] : [['events', ev] as [string, unknown]]), ...(io === undefined ? [] : [['include_origin', io] as [string, unknown]])])),
    },
    { weight: 1, arbitrary: fc.tuple(fc.jsonValue({ maxDepth: 2 }), nastyKey).map(([url, k]) => objectText([['url', url], [k, 1]])) },
    { weight: 1, arbitrary: fc.jsonValue().map((v) => JSON.stringify(v)) },
  );

  it('never 5xx; 201 stores a URL that fits its column, every refusal is a documented 400', { timeout: fuzzTimeout(200) }, async () => {
    await fuzz('POST /api/webhooks (url: schemes, hosts, ports, multi-byte and long paths; events; include_origin)', body, 200, async (text) => {
      const headers = { authorization: `Bearer ${rich.writeKey}`, 'content-type': 'application/json' };
      const res = await send('POST', '/api/webhooks', headers, text);
      const what = `POST /api/webhooks ${text.slice(0, 200)} (${text.length} characters)`;
      expectRestAnswer(res, what, 'POST');
      const sent = (() => {
        try {
          return (JSON.parse(text) as { include_origin?: unknown } | null)?.include_origin;
        } catch {
          return undefined;
        }
      })();
      if (res.status === 201) {
        const { webhook } = JSON.parse(res.text) as { webhook: { id: string; url: string; include_origin: boolean; created_by: unknown } };
        // Only a boolean (or null, the default) is taken, and stored as sent.
        expect([undefined, null, true, false], what).toContain(sent);
        expect(webhook.include_origin, what).toBe(sent === true);
        expect(webhook.created_by, what).toEqual({ kind: 'api_key', id: keyIdOf(rich.writeKey) });
        expect(webhook.url.length, what).toBeLessThanOrEqual(2048);
        expect(new URL(webhook.url).protocol, what).toBe('https:');
        expect(new URL(webhook.url).port, what).not.toBe('52222');
        // Deleted again, so the 10-webhook cap never answers for the inputs that follow.
        expect((await send('DELETE', `/api/webhooks/${webhook.id}`, { authorization: headers.authorization })).status, what).toBe(204);
        return 201;
      }
      expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBe(400);
      return `400 ${(JSON.parse(res.text) as { error: string }).error}${sent === undefined || sent === null || typeof sent === 'boolean' ? '' : ' (include_origin not a boolean)'}`;
    });
  });
});

describe('fuzz: GET /api/dedicated query strings', () => {
  const cursorText = fc.oneof(
    fc.string({ unit: fc.constantFrom(...'0123456789-:TZ.+ '), maxLength: 30 }),
    fc.constantFrom('2026-02-30T00:00:00Z', '1', 'Tue Mar 01 2022', '2026-11-25T03:00:00.1234567Z', '+275760-09-13T00:00:00Z', '0000-01-01', '2026-11-25 03:00:00 GMT+14', '2026-11-25T25:00:00Z'),
    fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
  );
  const cursorId = fc.oneof(fc.uuid(), fc.string({ unit: fc.constantFrom(...'0123456789abcdef-'), minLength: 36, maxLength: 36 }));
  const cursor = fc.oneof(
    fc.tuple(cursorText, cursorId).map((p) => b64u(JSON.stringify(p))),
    fc.jsonValue().map((v) => b64u(JSON.stringify(v))),
    fc.string({ unit: 'binary', maxLength: 60 }).map(b64u),
    oddString.map(pct),
    fc.constantFrom('%', '%zz', '%E0%A4%A', '%00', '', '=', '+'),
  );
  const limit = fc.oneof(
    fc.integer({ min: -5, max: 1005 }).map(String),
    fc.constantFrom('', '0', '00', '007', '1.5', '1e2', ' 5', '5 ', '+5', '-0', '0x10', '１', '100', '101', '999', '9999'),
    oddString.map(pct),
  );
  const pair = fc.oneof(
    { weight: 3, arbitrary: limit.map((v) => `limit=${v}`) },
    { weight: 3, arbitrary: cursor.map((v) => `cursor=${v}`) },
    { weight: 1, arbitrary: fc.tuple(fc.oneof(nastyKey, fc.string({ maxLength: 10 })), oddString).map(([k, v]) => `${pct(k)}=${pct(v)}`) },
    { weight: 1, arbitrary: fc.constantFrom('limit', 'cursor', 'limit[]=1', 'limit[a]=1', '&', '=', 'limit=1&limit=2', '__proto__[limit]=1') },
  );

  it('never 5xx and errors are documented', { timeout: fuzzTimeout(200) }, async () => {
    await fuzz('GET /api/dedicated?query', fc.record({ pairs: fc.array(pair, { maxLength: 3 }), cred: credential() }), 200, async ({ pairs, cred }) => {
      const headers: Record<string, string> = cred.header === undefined ? {} : { authorization: cred.header };
      const query = pairs.join('&');
      const res = await send('GET', `/api/dedicated${query ? `?${query}` : ''}`, headers);
      expectRestAnswer(res, `GET ?${query.slice(0, 300)} as ${cred.label}`);
      if (res.status === 200) expect(Object.keys(JSON.parse(res.text) as object).sort()).toEqual(['next_cursor', 'tunnels']);
      return res.status;
    });
  });
});

describe('fuzz: path ids and methods', () => {
  const id = fc.oneof(
    fc.constant(null), // one of the real tunnels (set in beforeAll)
    fc.uuid().map(pct),
    fc.uuid().map((u) => u.toUpperCase()),
    oddString.map(pct),
    fc.constantFrom('%', '%zz', '%E0%A4%A', '%00', '%2F', '..', '.', '%2e%2e', '00000000-0000-0000-0000-000000000000', 'ffffffff-ffff-ffff-ffff-ffffffffffff', '------------------------------------', 'pricing'),
    fc.integer({ min: 1, max: 90 }).map((n) => 'a'.repeat(n * 100)),
  );
  const route = fc.constantFrom<[string, string]>(
    ['GET', ''],
    ['GET', '/setup'],
    ['GET', '/setup/origin.sh'],
    ['GET', '/setup/systemd_origin.service'],
    ['POST', '/provision'],
    ['POST', '/activate'],
    ['DELETE', ''],
    ['PUT', ''],
    ['PATCH', '/setup'],
    ['PATCH', ''],
    ['HEAD', ''],
    ['OPTIONS', '/activate'],
    ['POST', ''],
    ['GET', '/setup/extra'],
    ['GET', '//setup'],
  );
  const body = fc.option(fc.oneof(fc.constantFrom('{}', ' ', '{"a":1}', 'null', '[', '{"__proto__":{}}'), fc.jsonValue().map((v) => JSON.stringify(v))), { nil: undefined });

  it('never 5xx, errors documented, and no request here moves money', { timeout: fuzzTimeout(150) }, async () => {
    await fuzz(
      '/api/dedicated/:id (id, method, body, credential)',
      fc.record({ id, pick: fc.nat({ max: 1 }), route, body, type: contentType, cred: credential() }),
      150,
      async ({ id, pick, route: [method, suffix], body, type, cred }) => {
        const path = `/api/dedicated/${id ?? realIds[pick]!}${suffix}`;
        const headers: Record<string, string> = cred.header === undefined ? {} : { authorization: cred.header };
        if (body !== undefined && type !== '') headers['content-type'] = type;
        const before = await moneySnapshot(gw.testDb.raw);
        const res = await send(method, path, headers, method === 'GET' || method === 'HEAD' ? undefined : body);
        const what = `${method} ${path.slice(0, 200)} as ${cred.label} body ${String(body).slice(0, 100)}`;
        expectRestAnswer(res, what, method);
        // No refunds (docs/CONTRACTS.md "Tunnel lifecycle"): provision, activate and delete never touch the ledger.
        expect(moneyChanges(before, await moneySnapshot(gw.testDb.raw)), what).toEqual([]);
        return res.status;
      },
    );
  });
});

describe('fuzz: raw HTTP framing (Content-Length, Transfer-Encoding, methods, targets)', () => {
  // What fetch will not send. Node's HTTP parser answers broken framing itself before the app runs
  // (a bodiless 400); everything that reaches the app must get the documented error body.
  const target = fc.oneof(fc.constantFrom('/api/dedicated', '/graphql', '/api/dedicated/pricing', '/api/dedicated/x/provision'), oddString.map((s) => `/api/${pct(s)}`));
  const framing = fc.oneof(
    fc.nat({ max: 400 }).map((n) => ({ cl: String(n), te: undefined as string | undefined })),
    fc.constantFrom('abc', '-1', '1e3', '0x10', ' 12', '12, 12', '99999999999999999999', '').map((cl) => ({ cl, te: undefined })),
    fc.constantFrom('chunked', 'gzip', 'chunked, chunked', 'identity').map((te) => ({ cl: undefined as string | undefined, te })),
    fc.constant({ cl: '10', te: 'chunked' }),
  );

  it('never 5xx; the app answers with documented bodies, Node with a bare 400', { timeout: fuzzTimeout(100) }, async () => {
    await fuzz(
      'raw HTTP framing',
      fc.record({ target, method: fc.constantFrom('POST', 'DELETE', 'GET', 'PUT'), framing, body: purchaseBody, cred: fc.constantFrom('rich-write', 'poor-write') }),
      100,
      async ({ target, method, framing, body, cred }) => {
        const lines = [`${method} ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', 'Content-Type: application/json', `Authorization: Bearer ${keyOf(cred)}`];
        if (framing.cl !== undefined) lines.push(`Content-Length: ${framing.cl}`);
        if (framing.te !== undefined) lines.push(`Transfer-Encoding: ${framing.te}`);
        const payload = framing.te === 'chunked' ? Buffer.from(`${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`) : Buffer.from(body);
        const before = await moneySnapshot(gw.testDb.raw);
        // Half-closed after the bytes: a declared length longer than what was sent is a body cut short.
        const res = await rawHttp(gw.url, lines.join('\r\n'), payload, { endAfter: true });
        const what = `${method} ${target} ${JSON.stringify(framing)} ${body.slice(0, 100)}`;
        if (res.status !== 0) {
          expect(res.status, `${what}: ${res.text.slice(0, 200)}`).toBeLessThan(500);
          if (target.startsWith('/api')) expectRestAnswer(res, what, method);
        }
        const changes = moneyChanges(before, await moneySnapshot(gw.testDb.raw));
        if (res.status !== 201) expect(changes, what).toEqual([]);
        return res.status;
      },
    );
  });
});

describe('fuzz: 429 bodies under a tight limit', () => {
  it('a limited gateway answers 429 with the documented body and Retry-After, never a 5xx', { timeout: fuzzTimeout(60) }, async () => {
    const tight = await startGateway({ testDb: gw.testDb, config: { rateLimitPerMinute: 60, rateLimitBurst: 3 } });
    try {
      let limited = 0;
      await fuzz(
        'rate limited (tight gateway)',
        fc.record({ cred: credential(), path: fc.constantFrom('/api/dedicated', '/api/dedicated?limit=1', `/api/dedicated/${'0'.repeat(8)}`, '/api/nope'), method: fc.constantFrom('GET', 'POST', 'DELETE') }),
        60,
        async ({ cred, path, method }) => {
          const headers: Record<string, string> = cred.header === undefined ? {} : { authorization: cred.header };
          const before = await moneySnapshot(gw.testDb.raw);
          const answer = await send(method, path, { ...headers, 'content-type': 'application/json' }, method === 'POST' ? '{"origin_ip":"8.8.4.4"}' : undefined, tight.url);
          expectRestAnswer(answer, `${method} ${path} as ${cred.label} (tight)`, method);
          if (answer.status === 429) limited++;
          if (answer.status !== 201) expect(moneyChanges(before, await moneySnapshot(gw.testDb.raw))).toEqual([]);
          return answer.status;
        },
      );
      // The property is about 429 bodies, so it must actually have met some.
      expect(limited).toBeGreaterThan(0);
      expect((await serverErrorCount(tight.url)).lines).toEqual([]);
    } finally {
      await tight.close();
    }
  });
});
