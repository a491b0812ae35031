// Property-based fuzz of the issuer's public inputs: the token and revocation
// endpoints (form bodies with arbitrary grant parameters, client authentication in every shape), the
// authorize endpoint (arbitrary query parameters), and the login form POST (arbitrary fields, bodies,
// Origin headers and interaction ids). Properties: never a 5xx; token and revocation errors are JSON
// with an RFC 6749 5.2 / RFC 7009 / RFC 8707 code (or our 429 rate_limited with Retry-After); authorize
// errors sent back to the client carry an RFC 6749 4.1.2.1 / OIDC Core 3.1.2.6 code and echo `state`;
// the login form answers a page or a redirect, 429 with Retry-After; nothing here moves money.
import http from 'node:http';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode } from '../helpers/fixtures.ts';
import { exchange, follow, formAction, get, hidden, Jar, newClient, newUser, pkcePair, signIn, type Client } from '../helpers/oidc-login.ts';
import {
  AUTHORIZE_ERROR_CODES,
  TOKEN_ERROR_CODES,
  closeFuzzedGateway,
  expectErrorShape,
  fuzz,
  fuzzTimeout,
  headerValue,
  isNodeParserRefusal,
  moneyChanges,
  moneySnapshot,
  nastyKey,
  oddString,
  pct,
  rawHttp,
  sometimes,
  type Answer,
} from './support.ts';

let gw: RunningGateway;
let issuer: string;
let client: Client;
let other: Client;
let user: { email: string; password: string };
let refreshToken = '';
let accessToken = '';
let money: Awaited<ReturnType<typeof moneySnapshot>>;

beforeAll(async () => {
  gw = await startGateway();
  issuer = gw.services.config.issuerUrl;
  await seedNode(gw.testDb.db, '198.18.0.0/28');
  client = await newClient(gw.testDb.db);
  other = await newClient(gw.testDb.db);
  user = await newUser(gw.testDb.db);
  // One real grant: its refresh and access tokens are among the fuzzed values.
  const s = await signIn(issuer, client, user);
  const t = await exchange(issuer, client, s.code, s.verifier);
  expect(t.status, JSON.stringify(t.body)).toBe(200);
  refreshToken = t.body.refresh_token!;
  accessToken = t.body.access_token!;
  money = await moneySnapshot(gw.testDb.raw);
});

afterAll(async () => {
  if (!gw) return;
  const after = await moneySnapshot(gw.testDb.raw);
  await closeFuzzedGateway(gw, 'oidc');
  expect(moneyChanges(money, after), 'the issuer moved money').toEqual([]);
});

function parseJson(text: string): Record<string, unknown> | undefined {
  try {
    const v = JSON.parse(text) as unknown;
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One request from a chosen loopback source address (the sign-in limits count per address). Header
 * values node:http refuses to send (a DEL byte, say) go out over a raw socket instead.
 */
async function request(url: string, opts: { method: string; headers: Record<string, string>; body?: string | Buffer; from?: string }): Promise<Answer> {
  try {
    return await viaNodeHttp(url, opts);
  } catch (e) {
    if ((e as { code?: string }).code !== 'ERR_INVALID_CHAR') throw e;
    const u = new URL(url);
    const payload = Buffer.from(opts.body ?? '');
    const lines = [`${opts.method} ${u.pathname}${u.search} HTTP/1.1`, `Host: ${u.host}`, 'Connection: close', ...Object.entries(opts.headers).map(([k, v]) => `${k}: ${v}`)];
    if (opts.body !== undefined) lines.push(`Content-Length: ${payload.length}`);
    return rawHttp(u.origin, lines.join('\r\n'), payload);
  }
}

function viaNodeHttp(url: string, opts: { method: string; headers: Record<string, string>; body?: string | Buffer; from?: string }): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: opts.method, headers: opts.headers, localAddress: opts.from, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const headers = new Headers();
        for (const [k, v] of Object.entries(res.headers)) if (v !== undefined) for (const x of Array.isArray(v) ? v : [v]) headers.append(k, x);
        resolve({ status: res.statusCode ?? 0, headers, text: Buffer.concat(chunks).toString('utf8') });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

// ---------------------------------------------------------------------------------------------------
// Token and revocation endpoints

const realValue = (v: string) => (v === 'REFRESH' ? refreshToken : v === 'ACCESS' ? accessToken : v === 'CLIENT' ? client.id : v === 'SECRET' ? client.secret : v === 'REDIRECT' ? client.redirectUri : v);

const tokenParam: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.constantFrom('authorization_code', 'refresh_token', 'client_credentials', 'password', 'implicit', 'urn:ietf:params:oauth:grant-type:device_code', 'urn:ietf:params:oauth:grant-type:token-exchange', 'urn:ietf:params:oauth:grant-type:jwt-bearer', 'ciba', '', 'AUTHORIZATION_CODE').map((v): [string, string] => ['grant_type', v]),
  fc.oneof(fc.constantFrom('REFRESH', 'ACCESS', 'a\u0000b'), oddString, fc.base64String({ maxLength: 60 })).map((v): [string, string] => ['code', v]),
  fc.oneof(fc.constantFrom('REFRESH', 'ACCESS', 'a\u0000b'), oddString).map((v): [string, string] => ['refresh_token', v]),
  fc.oneof(fc.constantFrom('REDIRECT', 'http://127.0.0.1:9/other', ''), oddString).map((v): [string, string] => ['redirect_uri', v]),
  fc.oneof(fc.string({ minLength: 43, maxLength: 128, unit: fc.constantFrom(...'abcdefghijklmnopqrstuvwxyz0123456789-._~') }), oddString).map((v): [string, string] => ['code_verifier', v]),
  fc.oneof(fc.constantFrom('openid', 'openid profile email offline_access', 'admin', '', 'openid openid'), oddString).map((v): [string, string] => ['scope', v]),
  fc.oneof(fc.constantFrom(`${'http://127.0.0.1'}/api`, 'urn:x', 'http://evil.example/api', ''), oddString).map((v): [string, string] => ['resource', v]),
  fc.oneof(fc.constantFrom('CLIENT', 'nope', ''), oddString).map((v): [string, string] => ['client_id', v]),
  fc.oneof(fc.constantFrom('SECRET', 'wrong', ''), oddString).map((v): [string, string] => ['client_secret', v]),
  fc.oneof(fc.constantFrom('REFRESH', 'ACCESS', 'a\u0000b'), oddString).map((v): [string, string] => ['token', v]),
  fc.constantFrom('access_token', 'refresh_token', 'id_token', 'nope').map((v): [string, string] => ['token_type_hint', v]),
  fc.constantFrom('urn:ietf:params:oauth:client-assertion-type:jwt-bearer', 'x').map((v): [string, string] => ['client_assertion_type', v]),
  fc.oneof(fc.constant('eyJhbGciOiJub25lIn0.e30.'), oddString).map((v): [string, string] => ['client_assertion', v]),
  fc.tuple(fc.oneof(nastyKey, fc.string({ maxLength: 10 })), oddString),
);

/** Client authentication as an Authorization header, right, wrong and malformed. */
const basicAuth = fc.oneof(
  // Mostly right (in the header or the body), so the grant parameters are what gets examined.
  { weight: 3, arbitrary: fc.constantFrom('RIGHT', 'BODY') },
  sometimes(
    fc.oneof(
    fc.tuple(fc.constantFrom('CLIENT', 'nope', ''), fc.oneof(fc.constantFrom('SECRET', 'wrong', ''), oddString)).map(([id, secret]) => `Basic ${Buffer.from(`${pct(realValue(id))}:${pct(realValue(secret))}`).toString('base64')}`),
    fc.constantFrom('Basic', 'Basic ', 'Basic !!!', 'Basic Og==', `Basic ${Buffer.from('%E0%A4%A:%zz').toString('base64')}`, `Basic ${Buffer.from('no-colon').toString('base64')}`, `Basic ${Buffer.from('\u00e9:\u00e9', 'latin1').toString('base64')}`, 'Bearer x'),
    headerValue.map((v) => `Basic ${v}`),
    ),
    2,
  ),
);

const formBody = fc.oneof(
  { weight: 5, arbitrary: fc.array(tokenParam, { maxLength: 7 }).map((ps) => ps.map(([k, v]) => `${pct(k)}=${pct(realValue(v))}`).join('&')) },
  fc.constantFrom('', '&&&', '=', 'grant_type', 'grant_type=refresh_token&grant_type=refresh_token', 'grant_type=%', 'grant_type=%zz&code=%E0%A4%A', 'a[b]=1&a[c]=2', '__proto__[x]=1'),
  fc.string({ unit: 'binary', maxLength: 100 }),
  fc.integer({ min: 1, max: 40 }).map((k) => `grant_type=refresh_token&refresh_token=${'r'.repeat(k * 1024)}`),
);

describe('fuzz: token and revocation endpoints', () => {
  it('never 5xx; errors are RFC 6749 / 7009 / 8707 JSON (or 429 rate_limited)', { timeout: fuzzTimeout(250) }, async () => {
    await fuzz(
      'POST /oauth/token and /oauth/revoke (form, client auth, content type)',
      fc.record({
        path: fc.constantFrom('/oauth/token', '/oauth/token', '/oauth/revoke'),
        body: formBody,
        auth: basicAuth,
        type: fc.oneof({ weight: 6, arbitrary: fc.constant('application/x-www-form-urlencoded') }, fc.constantFrom('application/x-www-form-urlencoded; charset=utf-8', 'application/json', 'text/plain', 'multipart/form-data; boundary=x', '')),
        method: fc.oneof({ weight: 8, arbitrary: fc.constant('POST') }, fc.constantFrom('GET', 'PUT')),
      }),
      250,
      async ({ path, body: form, auth, type, method }) => {
        let body = form;
        const headers: Record<string, string> = { accept: 'application/json' };
        if (type) headers['content-type'] = type;
        if (auth === 'RIGHT') headers.authorization = `Basic ${Buffer.from(`${pct(client.id)}:${pct(client.secret)}`).toString('base64')}`;
        else if (auth && auth !== 'BODY') headers.authorization = auth;
        if (auth === 'BODY') body = `client_id=${pct(client.id)}&client_secret=${pct(client.secret)}${body ? `&${body}` : ''}`;
        const res = await request(issuer + path, { method, headers, body: method === 'GET' ? undefined : body });
        const what = `${method} ${path} ${type} auth ${String(auth).slice(0, 60)} body ${body.slice(0, 300)}`;
        expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
        if (isNodeParserRefusal(res)) return 'node 400';
        if (res.status === 200) return 200; // a real refresh or revocation
        if (method !== 'POST' && res.status === 404) {
          // Not an endpoint of the issuer for that method: the gateway's own docs/CONTRACTS.md "REST errors" answer.
          expectErrorShape(res, ['not_found'], what);
          return '404 not_found';
        }
        const json = parseJson(res.text);
        expect(json, `${what}: ${res.status} ${res.text.slice(0, 300)}`).toBeDefined();
        // RFC 6749 5.2: error required, error_description optional; our own 429 has both.
        expect(Object.keys(json!).every((k) => k === 'error' || k === 'error_description' || k === 'error_uri'), `${what}: ${res.text.slice(0, 300)}`).toBe(true);
        expect(TOKEN_ERROR_CODES as readonly string[], `${what}: ${res.status} ${res.text.slice(0, 300)}`).toContain(json!.error);
        if (res.status === 429) {
          expectErrorShape(res, ['rate_limited'], what);
          expect(res.headers.get('retry-after') ?? '', what).toMatch(/^[1-9]\d*$/);
        } else {
          expect([400, 401, 404, 405], `${what}: ${res.status} ${res.text.slice(0, 300)}`).toContain(res.status);
        }
        return `${res.status} ${String(json!.error)}`;
      },
    );
  });
});

// ---------------------------------------------------------------------------------------------------
// Authorize endpoint

const authorizeParam: fc.Arbitrary<[string, string]> = fc.oneof(
  fc.oneof(fc.constantFrom('CLIENT', 'OTHER', 'nope', ''), oddString).map((v): [string, string] => ['client_id', v]),
  fc.oneof(fc.constantFrom('REDIRECT', 'OTHER_REDIRECT', 'http://127.0.0.1:9/evil', 'javascript:alert(1)', ''), oddString).map((v): [string, string] => ['redirect_uri', v]),
  fc.oneof(fc.constantFrom('code', 'token', 'id_token', 'code id_token', 'none', '', 'CODE'), oddString).map((v): [string, string] => ['response_type', v]),
  fc.oneof(fc.constantFrom('openid', 'openid profile email', 'profile', 'openid offline_access', 'openid admin', ''), oddString).map((v): [string, string] => ['scope', v]),
  fc.oneof(fc.constantFrom('s1', ''), oddString).map((v): [string, string] => ['state', v]),
  oddString.map((v): [string, string] => ['nonce', v]),
  fc.oneof(fc.constant('CHALLENGE'), oddString).map((v): [string, string] => ['code_challenge', v]),
  fc.constantFrom('S256', 'plain', 'S512', '').map((v): [string, string] => ['code_challenge_method', v]),
  fc.constantFrom('none', 'login', 'consent', 'select_account', 'login consent', 'bogus').map((v): [string, string] => ['prompt', v]),
  fc.oneof(fc.constantFrom('0', '-1', '1e9', 'x'), oddString).map((v): [string, string] => ['max_age', v]),
  fc.constantFrom('query', 'fragment', 'form_post', 'web_message', 'jwt', 'x').map((v): [string, string] => ['response_mode', v]),
  fc.oneof(fc.constant('eyJhbGciOiJub25lIn0.e30.'), oddString).map((v): [string, string] => ['request', v]),
  fc.oneof(fc.constant('https://evil.example/r'), oddString).map((v): [string, string] => ['request_uri', v]),
  fc.oneof(fc.constant('{"userinfo":{"email":null}}'), fc.jsonValue({ maxDepth: 2 }).map((j) => JSON.stringify(j)), oddString).map((v): [string, string] => ['claims', v]),
  fc.oneof(fc.constantFrom('http://127.0.0.1/api', 'urn:x'), oddString).map((v): [string, string] => ['resource', v]),
  fc.oneof(fc.constantFrom('en', 'ru', 'x'), oddString).map((v): [string, string] => ['ui_locales', v]),
  oddString.map((v): [string, string] => ['id_token_hint', v]),
  fc.tuple(fc.oneof(nastyKey, fc.string({ maxLength: 10 })), oddString),
);

describe('fuzz: authorize endpoint', () => {
  it('never 5xx; errors sent to the client carry a documented code and the state', { timeout: fuzzTimeout(200) }, async () => {
    const { challenge } = pkcePair();
    const real = (v: string) =>
      v === 'CLIENT' ? client.id : v === 'OTHER' ? other.id : v === 'REDIRECT' ? client.redirectUri : v === 'OTHER_REDIRECT' ? other.redirectUri : v === 'CHALLENGE' ? challenge : v;
    await fuzz(
      'GET/POST /oauth/authorize (query parameters)',
      fc.record({
        // A valid base most of the time, so the fuzzed parameters reach past client and redirect_uri checks.
        base: fc.boolean(),
        params: fc.array(authorizeParam, { maxLength: 6 }),
        method: fc.oneof({ weight: 6, arbitrary: fc.constant('GET') }, fc.constant('POST')),
        raw: sometimes(fc.constantFrom('%', '%zz', 'client_id=%E0%A4%A', '&&', 'a=1&a=2&a=3'), 8),
      }),
      200,
      async ({ base, params, method, raw }) => {
        const q = new URLSearchParams();
        if (base) {
          q.set('client_id', client.id);
          q.set('redirect_uri', client.redirectUri);
          q.set('response_type', 'code');
          q.set('scope', 'openid');
          q.set('code_challenge', challenge);
          q.set('code_challenge_method', 'S256');
        }
        for (const [k, v] of params) {
          const value = real(v).replace(/[\ud800-\udfff]/g, '\ufffd');
          if (base && q.has(k)) q.set(k, value);
          else q.append(k.replace(/[\ud800-\udfff]/g, '\ufffd'), value);
        }
        const query = [q.toString(), raw].filter(Boolean).join('&');
        const url = `${issuer}/oauth/authorize${method === 'GET' ? `?${query}` : ''}`;
        const res = await request(url, {
          method,
          headers: { accept: 'text/html', ...(method === 'POST' ? { 'content-type': 'application/x-www-form-urlencoded' } : {}) },
          body: method === 'POST' ? query : undefined,
        });
        const what = `${method} authorize ${query.slice(0, 400)}`;
        expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
        if (isNodeParserRefusal(res)) return 'node 400';
        if (method !== 'GET' && res.status === 404) {
          expectErrorShape(res, ['not_found'], what);
          return '404 not_found';
        }
        if (res.status >= 300 && res.status < 400) {
          const loc = new URL(res.headers.get('location') ?? '', issuer);
          if (loc.origin === new URL(issuer).origin && loc.pathname.includes('/interaction/')) return `${res.status} interaction`;
          // Back to the client: only to a registered redirect_uri, with a documented error and the state.
          expect([client.redirectUri, other.redirectUri], `${what}: redirected to ${loc.href}`).toContain(`${loc.origin}${loc.pathname}`);
          const params = new URLSearchParams(loc.search || loc.hash.slice(1));
          const error = params.get('error');
          if (error !== null) {
            expect(AUTHORIZE_ERROR_CODES as readonly string[], `${what}: ${loc.href}`).toContain(error);
            const state = q.getAll('state');
            if (state.length === 1 && state[0] !== '') expect(params.get('state'), `${what}: ${loc.href}`).toBe(state[0]);
          }
          return `${res.status} client ${error ?? 'code'}`;
        }
        // A page (the issuer could not trust redirect_uri): an error page, never a stack or server_error.
        expect([200, 400, 401, 403, 404, 405, 429], `${what}: ${res.status} ${res.text.slice(0, 300)}`).toContain(res.status);
        expect(res.text, what).not.toMatch(/server_error|\bat [\w.]+ \(.*:\d+:\d+\)/);
        const json = parseJson(res.text);
        if (json) expect([...AUTHORIZE_ERROR_CODES, 'rate_limited', 'invalid_client'] as string[], `${what}: ${res.text.slice(0, 300)}`).toContain(json.error);
        return res.status;
      },
    );
  });
});

// ---------------------------------------------------------------------------------------------------
// Login form

interface Interaction {
  uid: string;
  action: string;
  csrf: string;
  jar: Jar;
}

async function openInteraction(prompt = 'login'): Promise<Interaction> {
  const jar = new Jar();
  const { challenge } = pkcePair();
  const u = new URL(`${issuer}/oauth/authorize`);
  u.search = new URLSearchParams({ client_id: client.id, redirect_uri: client.redirectUri, response_type: 'code', scope: 'openid profile email', code_challenge: challenge, code_challenge_method: 'S256', prompt }).toString();
  const step = await follow(await get(u.href, jar), issuer, jar);
  const html = step.page?.html ?? '';
  const action = formAction(html);
  if (!action) throw new Error(`no login form: ${step.page?.status} ${html.slice(0, 300)}`);
  const uid = /\/interaction\/([^/]+)\/login$/.exec(action)?.[1];
  if (!uid) throw new Error(`unexpected login action ${action}`);
  return { uid, action: new URL(action, issuer).href, csrf: hidden(html, 'csrf'), jar };
}

const loginField: fc.Arbitrary<[string, string]> = fc.oneof(
  { weight: 3, arbitrary: fc.oneof(fc.constantFrom('USER', 'USER_UPPER', 'USER_SPACED', 'nobody@example.test', '', '@', 'a@b', 'a\u0000b@example.test'), oddString).map((v): [string, string] => ['email', v]) },
  { weight: 3, arbitrary: fc.oneof(fc.constantFrom('PASSWORD', 'wrong password', ''), oddString).map((v): [string, string] => ['password', v]) },
  fc.oneof(fc.constantFrom('CSRF', ''), oddString).map((v): [string, string] => ['csrf', v]),
  fc.tuple(fc.oneof(nastyKey, fc.constantFrom('decision', 'email', 'password'), fc.string({ maxLength: 10 })), oddString),
);

describe('fuzz: login form POST', () => {
  it('never 5xx; a page or a redirect; 429 says when to retry', { timeout: fuzzTimeout(100) }, async () => {
    let current: Interaction | null = null;
    let sources = 0;
    await fuzz(
      'POST /interaction/:uid/login (fields, body, Origin, uid)',
      fc.record({
        csrfRight: fc.constantFrom(true, true, true, true, false),
        fields: fc.array(loginField, { minLength: 1, maxLength: 5 }),
        raw: sometimes(fc.oneof(fc.constantFrom('%', 'email=%E0%A4%A&password=%zz', 'email&password', '&&&=&'), fc.string({ unit: 'binary', maxLength: 80 }), fc.integer({ min: 8, max: 12 }).map((k) => `password=${'p'.repeat(k * 1024)}`)), 8),
        type: fc.oneof({ weight: 8, arbitrary: fc.constant('application/x-www-form-urlencoded') }, fc.constantFrom('application/x-www-form-urlencoded; charset=iso-8859-1', 'text/plain', 'application/json', '')),
        origin: fc.constantFrom('SAME', 'SAME', 'SAME', 'SAME', 'SAME', 'NONE', 'NONE', 'https://evil.example', 'null'),
        uid: fc.constantFrom('SAME', 'SAME', 'SAME', 'SAME', 'OTHER', 'consent'),
      }),
      100,
      async ({ csrfRight, fields, raw, type, origin, uid }) => {
        current ??= await openInteraction();
        const it = current;
        const value = (v: string) =>
          v === 'USER' ? user.email : v === 'USER_UPPER' ? ` ${user.email.toUpperCase()} ` : v === 'USER_SPACED' ? `${user.email}\t` : v === 'PASSWORD' ? user.password : v === 'CSRF' ? it.csrf : v;
        const form = new URLSearchParams();
        if (csrfRight) form.set('csrf', it.csrf);
        for (const [k, v] of fields) form.append(k.replace(/[\ud800-\udfff]/g, '\ufffd'), value(v).replace(/[\ud800-\udfff]/g, '\ufffd'));
        const body = raw ?? form.toString();
        const path = uid === 'SAME' ? it.action : uid === 'OTHER' ? `${issuer}/interaction/AAAAAAAAAAAAAAAAAAAAA/login` : it.action.replace(/\/login$/, '/consent');
        const headers: Record<string, string> = { cookie: it.jar.header(), accept: 'text/html' };
        if (type) headers['content-type'] = type;
        if (origin !== 'NONE') headers.origin = origin === 'SAME' ? new URL(issuer).origin : origin;
        // A fresh loopback source per input keeps the per-address sign-in limit from answering everything
        // with 429; the per-(account, address) limit still shows up when one address repeats.
        const from = `127.0.${1 + Math.floor(sources / 250)}.${2 + (sources++ % 250)}`;
        const res = await request(path, { method: 'POST', headers, body, from });
        const what = `login ${uid} ${type} origin ${origin} body ${body.slice(0, 300)}`;
        expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
        if (isNodeParserRefusal(res)) return 'node 400';
        expect([200, 302, 303, 400, 401, 403, 429], `${what}: ${res.status} ${res.text.slice(0, 300)}`).toContain(res.status);
        if (res.status === 429) expect(res.headers.get('retry-after') ?? '', what).toMatch(/^[1-9]\d*$/);
        if (res.status >= 300 && res.status < 400) {
          const loc = new URL(res.headers.get('location') ?? '', issuer);
          expect(loc.origin, what).toBe(new URL(issuer).origin);
          // A successful sign-in moves the interaction on: the next input gets a fresh one.
          current = null;
        } else {
          expect(res.headers.get('content-type') ?? '', what).toMatch(/^text\/html/);
          expect(res.text, what).not.toMatch(/server_error|\bat [\w.]+ \(.*:\d+:\d+\)/);
        }
        return res.status;
      },
    );
  });
});

// ---------------------------------------------------------------------------------------------------
// Userinfo, discovery and keys

describe('fuzz: userinfo, discovery and keys', () => {
  const authorization = fc.oneof(
    { weight: 2, arbitrary: fc.constantFrom('Bearer ACCESS', 'bearer ACCESS', 'Bearer   ACCESS', 'Bearer ACCESS ') },
    fc.constantFrom('', 'Bearer', 'Bearer ', 'Basic Og==', 'Bearer eyJ.eyJ.x', 'Bearer ACCESSx', 'Bearer xACCESS', 'Bearer REFRESH'),
    fc.tuple(fc.nat({ max: 300 }), fc.constantFrom('A', '-', '_', '.', '\u00e9')).map(([i, c]) => `Bearer SPLICE${i}:${c}`),
    headerValue.map((v) => `Bearer ${v}`),
    fc.integer({ min: 1, max: 6 }).map((k) => `Bearer ${'a'.repeat(k * 1024)}`),
  );
  const resolve = (a: string) =>
    a.startsWith('Bearer SPLICE')
      ? (() => {
          const [, i, c] = /^Bearer SPLICE(\d+):(.*)$/s.exec(a)!;
          const at = Number(i) % accessToken.length;
          return `Bearer ${accessToken.slice(0, at)}${c}${accessToken.slice(at + 1)}`;
        })()
      : a.replace('ACCESS', accessToken).replace('REFRESH', refreshToken);

  it('never 5xx; userinfo errors are RFC 6750 codes with a challenge; discovery and keys are JSON', { timeout: fuzzTimeout(150) }, async () => {
    await fuzz(
      'GET/POST /oauth/userinfo, discovery, jwks (Authorization, method, query)',
      fc.record({
        path: fc.constantFrom('/oauth/userinfo', '/oauth/userinfo', '/oauth/userinfo', '/.well-known/openid-configuration', '/oauth/jwks'),
        method: fc.oneof({ weight: 4, arbitrary: fc.constant('GET') }, fc.constantFrom('POST', 'PUT', 'DELETE', 'HEAD')),
        auth: fc.oneof({ weight: 6, arbitrary: authorization }, fc.constant(undefined)),
        query: sometimes(oddString.map((s) => `?${pct(s)}=${pct(s)}`), 4),
      }),
      150,
      async ({ path, method, auth, query }) => {
        const headers: Record<string, string> = { accept: 'application/json' };
        if (auth !== undefined) headers.authorization = resolve(auth);
        const res = await request(`${issuer}${path}${query ?? ''}`, { method, headers });
        const what = `${method} ${path}${(query ?? '').slice(0, 100)} auth ${String(auth).slice(0, 80)}`;
        expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
        if (isNodeParserRefusal(res) || method === 'HEAD') return res.status;
        const json = parseJson(res.text);
        expect(json, `${what}: ${res.status} ${res.text.slice(0, 300)}`).toBeDefined();
        if (res.status === 200) return 200;
        if (path === '/oauth/userinfo') {
          expect(['invalid_token', 'invalid_request', 'insufficient_scope', 'rate_limited'], `${what}: ${res.text.slice(0, 300)}`).toContain(json!.error);
          if (res.status === 401) expect(res.headers.get('www-authenticate') ?? '', what).toMatch(/^Bearer\b/);
        }
        expectErrorShape(res, ['invalid_token', 'invalid_request', 'insufficient_scope', 'rate_limited', 'not_found'], what);
        return `${res.status} ${String(json!.error)}`;
      },
    );
  });
});

// ---------------------------------------------------------------------------------------------------
// Consent form

describe('fuzz: consent form POST', () => {
  /** An interaction past the login, showing the consent form (a fresh browser each time). */
  async function openConsent(): Promise<Interaction> {
    const login = await openInteraction('login consent');
    const res = await request(login.action, {
      method: 'POST',
      headers: { cookie: login.jar.header(), accept: 'text/html', 'content-type': 'application/x-www-form-urlencoded', origin: new URL(issuer).origin },
      body: new URLSearchParams({ csrf: login.csrf, email: user.email, password: user.password }).toString(),
    });
    // The jar of oidc-login.ts reads Set-Cookie from a fetch Response; hand it the same headers.
    login.jar.store(new Response(null, { headers: res.headers }));
    const step = await follow(await get(new URL(res.headers.get('location') ?? '', issuer).href, login.jar), issuer, login.jar);
    const html = step.page?.html ?? '';
    const action = formAction(html);
    if (!/\/consent$/.test(action)) throw new Error(`no consent form: ${step.page?.status} ${html.slice(0, 300)}`);
    return { uid: login.uid, action: new URL(action, issuer).href, csrf: hidden(html, 'csrf'), jar: login.jar };
  }

  const consentField: fc.Arbitrary<[string, string]> = fc.oneof(
    { weight: 4, arbitrary: fc.oneof(fc.constantFrom('allow', 'deny', 'ALLOW', '', 'allow ', 'maybe'), oddString).map((v): [string, string] => ['decision', v]) },
    fc.oneof(fc.constantFrom('CSRF', ''), oddString).map((v): [string, string] => ['csrf', v]),
    fc.tuple(fc.oneof(nastyKey, fc.constantFrom('scope', 'email', 'grantId'), fc.string({ maxLength: 10 })), oddString),
  );

  it('never 5xx; a page or a redirect back to the client', { timeout: fuzzTimeout(60) }, async () => {
    let current: Interaction | null = null;
    await fuzz(
      'POST /interaction/:uid/consent (fields, body, Origin, uid)',
      fc.record({
        csrfRight: fc.constantFrom(true, true, true, true, false),
        fields: fc.array(consentField, { minLength: 1, maxLength: 4 }),
        raw: sometimes(fc.oneof(fc.constantFrom('%', 'decision=%E0%A4%A', 'decision&csrf', '&&&=&'), fc.string({ unit: 'binary', maxLength: 80 })), 8),
        type: fc.oneof({ weight: 8, arbitrary: fc.constant('application/x-www-form-urlencoded') }, fc.constantFrom('text/plain', 'application/json', '')),
        origin: fc.constantFrom('SAME', 'SAME', 'SAME', 'SAME', 'NONE', 'https://evil.example'),
        uid: fc.constantFrom('SAME', 'SAME', 'SAME', 'SAME', 'SAME', 'OTHER', 'login'),
      }),
      60,
      async ({ csrfRight, fields, raw, type, origin, uid }) => {
        current ??= await openConsent();
        const it = current;
        const form = new URLSearchParams();
        if (csrfRight) form.set('csrf', it.csrf);
        for (const [k, v] of fields) form.append(k.replace(/[\ud800-\udfff]/g, '\ufffd'), (v === 'CSRF' ? it.csrf : v).replace(/[\ud800-\udfff]/g, '\ufffd'));
        const body = raw ?? form.toString();
        const path = uid === 'SAME' ? it.action : uid === 'OTHER' ? `${issuer}/interaction/AAAAAAAAAAAAAAAAAAAAA/consent` : it.action.replace(/\/consent$/, '/login');
        const headers: Record<string, string> = { cookie: it.jar.header(), accept: 'text/html' };
        if (type) headers['content-type'] = type;
        if (origin !== 'NONE') headers.origin = origin === 'SAME' ? new URL(issuer).origin : origin;
        const res = await request(path, { method: 'POST', headers, body });
        const what = `consent ${uid} ${type} origin ${origin} body ${body.slice(0, 300)}`;
        expect(res.status, `${what}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
        if (isNodeParserRefusal(res)) return 'node 400';
        expect([200, 302, 303, 400, 401, 403, 429], `${what}: ${res.status} ${res.text.slice(0, 300)}`).toContain(res.status);
        if (res.status >= 300 && res.status < 400) {
          // Allow or deny moves the interaction on to the issuer's authorize resume: a fresh one next time.
          expect(new URL(res.headers.get('location') ?? '', issuer).origin, what).toBe(new URL(issuer).origin);
          current = null;
          return res.status;
        }
        expect(res.headers.get('content-type') ?? '', what).toMatch(/^text\/html/);
        expect(res.text, what).not.toMatch(/server_error|\bat [\w.]+ \(.*:\d+:\d+\)/);
        return res.status;
      },
    );
  });
});
