// The inputs the fuzz pass (test/fuzz/*.test.ts) found answering 5xx, kept as plain examples so
// they stay fixed whatever the generators later draw.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { setRate } from '../../server/domain/settings.ts';
import { follow, formAction, get, hidden, Jar, newClient, newUser, pkcePair, post, type Client } from '../helpers/oidc-login.ts';
import { TOKEN_ERROR_CODES, expectRestAnswer, rawHttp, serverErrorCount } from './support.ts';

let gw: RunningGateway;
let user: SeededUser;

beforeAll(async () => {
  gw = await startGateway();
  await seedNode(gw.testDb.db, '198.18.0.0/28');
  await setRate(gw.testDb.db, '90');
  user = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
});
afterAll(async () => gw?.close());

const b64u = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url');

describe('GET /api/dedicated cursor', () => {
  // Date.parse accepted these, PostgreSQL's ::timestamptz / ::uuid casts did not: 500 server_error.
  it.each([
    ['a day February does not have', ['2026-02-30T00:00:00Z', '00000000-0000-1000-8000-000000000000']],
    ['the same in the issued shape', ['2026-02-30T00:00:00.000000Z', '00000000-0000-1000-8000-000000000000']],
    ['year zero', ['0000-01-01T00:00:00.000000Z', '00000000-0000-1000-8000-000000000000']],
    ['a 36-character id that is not a UUID', ['2026-11-25T00:00:00.000000Z', '------------------------------------']],
  ])('is 400 invalid_request for %s', async (_label, cursor) => {
    const res = await call(gw.url, 'GET', `/api/dedicated?cursor=${b64u(cursor)}`, { token: user.readKey });
    expectRestAnswer(res, `cursor ${JSON.stringify(cursor)}`);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
  });

  it('still pages with the cursors it issues', async () => {
    for (let i = 0; i < 3; i++) {
      expect((await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } })).status).toBe(201);
    }
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const res = await call(gw.url, 'GET', `/api/dedicated?limit=1${cursor ? `&cursor=${cursor}` : ''}`, { token: user.readKey });
      expect(res.status, res.text).toBe(200);
      seen.push(...res.body.tunnels.map((t: { id: string }) => t.id));
      cursor = res.body.next_cursor;
    } while (cursor);
    expect(new Set(seen).size).toBe(3);
  });
});

describe('POST /api/dedicated promocode', () => {
  // A NUL byte went to PostgreSQL as a text parameter ("invalid byte sequence for encoding UTF8: 0x00"): 500.
  it.each([['\u0000'], ['FUZZ10\u0000'], ['\u0000FUZZ10']])('is 400 invalid_promocode for %j, and nothing is debited', async (promocode) => {
    const balance = async () => (await gw.testDb.raw.query('select balance_usd::text as b from account where id = $1', [user.accountId])).rows[0].b as string;
    const before = await balance();
    const res = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4', promocode } });
    expectRestAnswer(res, `promocode ${JSON.stringify(promocode)}`, 'POST');
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_promocode');
    expect(await balance()).toBe(before);
  });
});

describe('token and revocation endpoints', () => {
  let client: Client;
  beforeAll(async () => {
    client = await newClient(gw.testDb.db);
  });

  const postForm = async (path: string, form: Record<string, string>) => {
    const res = await fetch(`${gw.services.config.issuerUrl}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      body: new URLSearchParams({ client_id: client.id, client_secret: client.secret, ...form }).toString(),
    });
    const text = await res.text();
    return { status: res.status, body: (text ? JSON.parse(text) : {}) as { error?: string } };
  };

  // The adapter looked a NUL-bearing id up in PostgreSQL, which refuses NUL in text: 500 server_error.
  it.each([
    ['/oauth/token', { grant_type: 'refresh_token', refresh_token: 'a\u0000b' }, 400, 'invalid_grant'],
    ['/oauth/token', { grant_type: 'authorization_code', code: 'a\u0000b', redirect_uri: 'http://127.0.0.1:9/x', code_verifier: 'v'.repeat(43) }, 400, 'invalid_grant'],
  ] as const)('%s answers a NUL in the token with an RFC 6749 error, not 500 (%j)', async (path, form, status, error) => {
    const res = await postForm(path, form);
    expect(res.status).toBe(status);
    expect(TOKEN_ERROR_CODES as readonly string[]).toContain(res.body.error);
    expect(res.body.error).toBe(error);
  });

  it.each([['a\u0000b'], ['eyJa\u0000.b.c']])('/oauth/revoke treats a token with a NUL as unknown (RFC 7009 2.2: 200)', async (token) => {
    const res = await postForm('/oauth/revoke', { token });
    expect(res.status).toBeLessThan(500);
    expect(res.status).toBe(200);
  });
});

describe('login form', () => {
  // checkPassword looked the email up in PostgreSQL, which refuses NUL in text: 500 server_error.
  it.each([['a\u0000b@example.test'], ['\u0000']])('answers an email holding a NUL (%j) with the login page and 401, not 500', async (email) => {
    const issuer = gw.services.config.issuerUrl;
    const client = await newClient(gw.testDb.db);
    await newUser(gw.testDb.db);
    const jar = new Jar();
    const u = new URL(`${issuer}/oauth/authorize`);
    u.search = new URLSearchParams({ client_id: client.id, redirect_uri: client.redirectUri, response_type: 'code', scope: 'openid', code_challenge: pkcePair().challenge, code_challenge_method: 'S256' }).toString();
    const page = (await follow(await get(u.href, jar), issuer, jar)).page!;
    const res = await post(new URL(formAction(page.html), issuer).href, jar, { csrf: hidden(page.html, 'csrf'), email, password: 'some password' }, { origin: new URL(issuer).origin });
    const html = await res.text();
    expect(res.status, html.slice(0, 200)).toBe(401);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    expect(html).toContain('name="password"');
  });
});

describe('a body cut short by the client', () => {
  // The client declares 100 bytes, sends 9 and half-closes. Node answers it a bare 400 itself, but the
  // body readers threw 'aborted' into the error mapper: a logged "unhandled error" and a 500 in the
  // metrics that any client could produce at will.
  async function postsCounted(): Promise<number> {
    const text = await (await fetch(`${gw.url}/metrics`)).text();
    return text
      .split('\n')
      .filter((l) => l.startsWith('tunnelgate_http_requests_total{') && l.includes('method="POST"'))
      .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
  }

  it('is never counted or logged as a 500 (REST, GraphQL, the login form)', async () => {
    const before = await postsCounted();
    const targets = [
      ['/api/dedicated', 'application/json'],
      ['/graphql', 'application/json'],
      ['/interaction/abcdef/login', 'application/x-www-form-urlencoded'],
    ];
    for (const [target, type] of targets) {
      const head = [`POST ${target} HTTP/1.1`, 'Host: 127.0.0.1', 'Connection: close', `Content-Type: ${type}`, `Authorization: Bearer ${user.writeKey}`, 'Content-Length: 100'].join('\r\n');
      const res = await rawHttp(gw.url, head, Buffer.from('{"origin_'), { endAfter: true });
      expect(res.status).toBeLessThan(500);
    }
    // The gateway finishes each request after Node has answered: wait until all three are counted.
    const deadline = Date.now() + 10_000;
    while ((await postsCounted()) < before + targets.length) {
      if (Date.now() > deadline) throw new Error('the gateway did not finish the cut-short requests within 10 s');
      await new Promise((r) => setTimeout(r, 50));
    }
    expect((await serverErrorCount(gw.url)).lines).toEqual([]);
  });
});
