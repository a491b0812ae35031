// docs/OPERATOR.md "Operations": logs are one JSON object per line; request lines carry `request_id`
// (also the X-Request-Id header) and never credentials. The real gateway process (server/main.ts, its
// own stdout) is driven through a sign-in, the code exchange, a refresh, API calls with the access token
// and with a svc_ key, a purchase, and refusals of wrong credentials; then every stdout line is read.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { GATEWAY_START_DEADLINE_MS, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { freePort } from '../helpers/ports.ts';
import { call } from '../helpers/gateway.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { exchange, Jar, newClient, signIn, token } from '../helpers/oidc-login.ts';

/** The issuer's cookie jar, also remembering every cookie value it was ever given. */
class RecordingJar extends Jar {
  readonly values = new Set<string>();
  override store(res: Response): void {
    for (const line of res.headers.getSetCookie()) {
      const value = line.split(';')[0]!.split('=').slice(1).join('=').trim();
      if (value.length >= 8) this.values.add(value);
    }
    super.store(res);
  }
}

let t: TestDatabase;
let gw: GatewayProcess;
beforeAll(async () => {
  t = await createTestDatabase();
  const port = await freePort();
  gw = await startGatewayProcess({ DATABASE_URL: t.url, PORT: String(port), PUBLIC_URL: `http://127.0.0.1:${port}`, ACCESS_LOG: 'true', LOG_LEVEL: 'info' });
}, GATEWAY_START_DEADLINE_MS);
afterAll(async () => {
  gw?.kill('SIGKILL');
  await t?.drop();
});

it('every request line carries request_id (= X-Request-Id), and no line holds a credential', async () => {
  await seedNode(t.db, '198.18.30.0/30');
  // Created after the gateway started: the client's secret is encrypted with the key it generated.
  const user = await seedUser(t.db);
  const client = await newClient(t.db);
  const jar = new RecordingJar();
  const secrets: Record<string, string> = {
    password: user.password,
    'client secret': client.secret,
    'write key': user.writeKey,
    'write key secret part': user.writeKey.split('_').slice(2).join('_'),
    'read key': user.readKey,
    'read key secret part': user.readKey.split('_').slice(2).join('_'),
  };
  const seenIds: string[] = [];
  const expectId = (headers: Headers) => {
    const id = headers.get('x-request-id');
    expect(id).toMatch(/^[\w.-]{1,64}$/);
    seenIds.push(id!);
  };

  // Sign-in (login form with the password, consent), code exchange, refresh.
  const s = await signIn(gw.url, client, { email: user.email, password: user.password }, jar);
  secrets.code = s.code;
  secrets['pkce verifier'] = s.verifier;
  const ex = await exchange(gw.url, client, s.code, s.verifier);
  expect(ex.status).toBe(200);
  expectId(ex.headers);
  const refreshed = await token(gw.url, client, { grant_type: 'refresh_token', refresh_token: ex.body.refresh_token! });
  expect(refreshed.status).toBe(200);
  expectId(refreshed.headers);
  Object.assign(secrets, {
    'access token': ex.body.access_token!,
    'refresh token': ex.body.refresh_token!,
    'id token': ex.body.id_token!,
    'rotated access token': refreshed.body.access_token!,
    'rotated refresh token': refreshed.body.refresh_token!,
  });
  for (const [i, v] of [...jar.values].entries()) secrets[`cookie value ${i}`] = v;

  // The API with the access token (REST and GraphQL) and with the svc_ keys; a purchase.
  const listed = await call(gw.url, 'GET', '/api/dedicated', { token: refreshed.body.access_token! });
  expect(listed.status).toBe(200);
  expectId(listed.headers);
  const me = await call(gw.url, 'POST', '/graphql', { token: refreshed.body.access_token!, body: { query: '{ me { accountId } }' } });
  expect(me.status).toBe(200);
  expectId(me.headers);
  const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'logs', origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'log-test-1' } });
  expect(bought.status).toBe(201);
  expectId(bought.headers);
  const read = await call(gw.url, 'GET', `/api/dedicated/${bought.body.tunnel.id}`, { token: user.readKey, headers: { 'x-request-id': 'caller-chosen-id.1' } });
  expect(read.status).toBe(200);
  expect(read.headers.get('x-request-id')).toBe('caller-chosen-id.1');
  seenIds.push('caller-chosen-id.1');

  // Refusals must not log what was refused either: a made-up key, a wrong client secret, a replayed code.
  const madeUpKey = `svc_${randomBytes(16).toString('hex')}_${randomBytes(32).toString('base64url').slice(0, 43)}`;
  secrets['made-up key'] = madeUpKey;
  const refusedKey = await call(gw.url, 'GET', '/api/dedicated', { token: madeUpKey });
  expect(refusedKey.status).toBe(401);
  expectId(refusedKey.headers);
  const wrongSecret = `wrong-${randomBytes(12).toString('hex')}`;
  secrets['wrong client secret'] = wrongSecret;
  const refusedClient = await token(gw.url, client, { grant_type: 'refresh_token', refresh_token: refreshed.body.refresh_token! }, wrongSecret);
  expect(refusedClient.status).toBe(401);
  expectId(refusedClient.headers);
  const replay = await exchange(gw.url, client, s.code, s.verifier);
  expect(replay.status).toBe(400);
  expectId(replay.headers);

  // The probes and the metrics scrape, and a path nothing serves, for their route labels below.
  expect((await call(gw.url, 'GET', '/readyz', { headers: { 'x-request-id': 'log-test-readyz' } })).status).toBe(200);
  expect((await fetch(`${gw.url}/metrics`, { headers: { 'x-request-id': 'log-test-metrics' } })).status).toBe(200);
  expect((await call(gw.url, 'GET', '/no-such-page', { headers: { 'x-request-id': 'log-test-unmatched' } })).status).toBe(404);
  // A last request whose log line marks the end of what this test caused
  const marker = await call(gw.url, 'GET', '/healthz', { headers: { 'x-request-id': 'log-test-end' } });
  expect(marker.status).toBe(200);
  // (or at the first request line without an id: the assertions below then say what is wrong).
  await gw.waitForLog((l) => l.request_id === 'log-test-end' || (l.msg === 'request' && l.request_id === undefined));

  const parsed = gw.lines.map((line) => JSON.parse(line) as Record<string, unknown>);
  const requests = parsed.filter((l) => l.msg === 'request');
  // Sign-in alone is several requests; everything above is at least a dozen.
  expect(requests.length).toBeGreaterThanOrEqual(15);
  for (const l of requests) expect(l.request_id, JSON.stringify(l)).toMatch(/^[\w.-]{1,64}$/);
  const loggedIds = new Set(requests.map((l) => l.request_id));
  for (const id of seenIds) expect(loggedIds.has(id), `X-Request-Id ${id} has no request line`).toBe(true);
  // Request ids are unique per request (the caller-chosen ones aside).
  const generated = requests.map((l) => String(l.request_id)).filter((id) => !id.startsWith('caller-') && !id.startsWith('log-test'));
  expect(new Set(generated).size).toBe(generated.length);
  // Every other line that speaks of a request names it too (refusals, errors).
  for (const l of parsed) if ('path' in l && 'method' in l) expect(l.request_id, JSON.stringify(l)).toBeTruthy();

  // Health probes and the scrape carry their own route labels, in the log and in the metrics; only a
  // path nothing serves is `unmatched`.
  const routeOf = (id: string) => requests.find((l) => l.request_id === id)?.route;
  expect(routeOf('log-test-end')).toBe('/healthz');
  expect(routeOf('log-test-readyz')).toBe('/readyz');
  expect(routeOf('log-test-metrics')).toBe('/metrics');
  expect(routeOf('log-test-unmatched')).toBe('unmatched');
  const scraped = await (await fetch(`${gw.url}/metrics`)).text();
  expect(scraped).toMatch(/tunnelgate_http_requests_total\{method="GET",route="\/healthz",status="200"\} [1-9]/);
  expect(scraped).toMatch(/tunnelgate_http_requests_total\{method="GET",route="\/readyz",status="200"\} [1-9]/);

  const all = gw.lines.join('\n');
  for (const [what, value] of Object.entries(secrets)) {
    expect(value.length, what).toBeGreaterThanOrEqual(8);
    expect(all.includes(value), `${what} appears in the gateway's stdout`).toBe(false);
  }
  expect(gw.stderr()).toBe('');
}, 120_000);
