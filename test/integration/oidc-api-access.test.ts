// API access (docs/CONTRACTS.md "Admin CLI"): a client's API access caps what its access tokens may do. Tokens are
// obtained by an independent client library (oauth4webapi) through the real login and consent pages:
//  - none (the default): 403 insufficient_scope on the REST API and GraphQL, userinfo still works;
//  - read: GET works, writes are 403 insufficient_scope even for an owner;
//  - write: an owner buys; a viewer still only reads (never more than the user's role);
// and the consent page says in plain words what the application will be able to do. A none token's requests
// spend the address's anonymous budget (429 after it, as without a credential).
import * as oauth from 'oauth4webapi';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ApiAccess } from '../../server/db/entities.ts';
import { call } from '../helpers/gateway.ts';
import { authorizeUrl, CookieJar, decodeEntities, driveAuthorize, pkce, type Credentials } from '../helpers/oidc.ts';
import { adminCli, startOidcWorld, type OidcWorld, type TestClient } from '../helpers/oidc-fixture.ts';

let w: OidcWorld;
let as: oauth.AuthorizationServer;
const insecure = { [oauth.allowInsecureRequests]: true } as const;

beforeAll(async () => {
  w = await startOidcWorld();
  as = await discover(w.issuer);
});
afterAll(async () => w?.close());

/** The issuer's metadata, as a client reads it. */
const discover = async (issuer: string) => oauth.processDiscoveryResponse(new URL(issuer), await oauth.discoveryRequest(new URL(issuer), insecure));

/** Signs in through the pages and exchanges the code with oauth4webapi; returns the tokens and the consent page's text. */
async function login(c: TestClient, user: Credentials, on: { world: OidcWorld; as: oauth.AuthorizationServer } = { world: w, as }) {
  const { world, as } = on;
  const p = pkce();
  const state = oauth.generateRandomState();
  const redirectUri = c.redirectUris[0]!;
  const url = authorizeUrl(`${world.issuer}/oauth/authorize`, { clientId: c.id, redirectUri, state, challenge: p.challenge, method: 'S256' });
  const r = await driveAuthorize(url, user, { jar: new CookieJar() });
  if (!r.callback) throw new Error(`authorize did not redirect: ${r.last?.status} ${r.last?.body.slice(0, 400)}`);
  const params = oauth.validateAuthResponse(as, { client_id: c.id }, r.callback, state);
  const res = await oauth.authorizationCodeGrantRequest(as, { client_id: c.id }, oauth.ClientSecretPost(c.secret), params, redirectUri, p.verifier, insecure);
  const tokens = await oauth.processAuthorizationCodeResponse(as, { client_id: c.id }, res);
  const consent = r.pages.find((pg) => /Allow access/.test(pg.html));
  const text = consent ? decodeEntities(consent.html.replace(/<[^>]*>/g, ' ')).replace(/\s+/g, ' ') : '';
  return { access: tokens.access_token, consent: text };
}

const rest = (token: string, method = 'GET', body?: unknown) => call(w.gw.url, method, '/api/dedicated', { token, body });
const gql = (token: string, query: string) => call(w.gw.url, 'POST', '/graphql', { token, body: { query } });
const BUY = { name: 'api-access', origin_ip: '8.8.4.4' };
const BUY_GQL = 'mutation { purchaseTunnel(input: { originIp: "8.8.4.4" }) { tunnel { id } } }';

function expectInsufficientScope(res: { status: number; body: { error?: string; error_description?: string } }) {
  expect({ status: res.status, error: res.body.error }).toEqual({ status: 403, error: 'insufficient_scope' });
  expect(Object.keys(res.body).sort()).toEqual(['error', 'error_description']);
}

describe('client API access (none | read | write)', () => {
  it('none: the token is refused by REST and GraphQL with 403 insufficient_scope; userinfo still answers', async () => {
    const c = await w.newClient(undefined, 'none');
    const { access, consent } = await login(c, w.owner);
    expect(consent).toContain('No access to your tunnels or your balance');
    expect(consent).not.toMatch(/spend your balance/);

    expectInsufficientScope(await rest(access));
    expectInsufficientScope(await rest(access, 'POST', BUY));
    const q = await gql(access, '{ me { userId } }');
    expect(q.status).toBe(403);
    expect(q.body.errors[0].extensions.code).toBe('insufficient_scope');
    expect(q.body.data ?? null).toBeNull();
    const m = await gql(access, BUY_GQL);
    expect(m.status).toBe(403);
    expect(m.body.errors[0].extensions.code).toBe('insufficient_scope');

    const ui = await call(w.gw.url, 'GET', '/oauth/userinfo', { token: access });
    expect(ui.status).toBe(200);
    expect(ui.body.sub).toBe(w.owner.userId);
    // Nothing was bought.
    const { rows } = await w.gw.testDb.raw.query('select balance_usd from account where id = $1', [w.owner.accountId]);
    expect(rows[0].balance_usd).toBe('50.00');
  });

  it('read: GET works, POST is 403 insufficient_scope even for an owner (REST and GraphQL)', async () => {
    const c = await w.newClient(undefined, 'read');
    const { access, consent } = await login(c, w.owner);
    expect(consent).toContain('View your tunnels and your balance');
    expect(consent).not.toMatch(/Buy, change and delete/);

    expect((await rest(access)).status).toBe(200);
    const post = await rest(access, 'POST', BUY);
    expect({ status: post.status, error: post.body.error }).toEqual({ status: 403, error: 'insufficient_scope' });
    const me = await gql(access, '{ me { userId permission } }');
    expect(me.body.data.me).toEqual({ userId: w.owner.userId, permission: 'READ' });
    const m = await gql(access, BUY_GQL);
    expect(m.body.errors[0].extensions.code).toBe('insufficient_scope');
  });

  it('write: an owner buys; a viewer still only reads (never more than the role)', async () => {
    const c = await w.newClient(undefined, 'write');
    const owner = await login(c, w.owner);
    expect(owner.consent).toContain('Buy, change and delete tunnels and spend your balance');
    const bought = await rest(owner.access, 'POST', BUY);
    expect(bought.status).toBe(201);
    expect((await gql(owner.access, '{ me { permission } }')).body.data.me.permission).toBe('WRITE');

    const viewer = await login(c, w.viewer);
    // The page tells the viewer what their tokens will really do.
    expect(viewer.consent).toContain('View your tunnels and your balance');
    expect((await rest(viewer.access)).status).toBe(200);
    const refused = await rest(viewer.access, 'POST', BUY);
    expect({ status: refused.status, error: refused.body.error }).toEqual({ status: 403, error: 'insufficient_scope' });
  });

  it('the admin CLI creates with none by default, lists it, and client update applies to tokens already issued', async () => {
    const created = await adminCli(w.gw.testDb.url, ['client', 'create', '--name', 'CLI app', '--redirect-uri', 'http://127.0.0.1:9/cli-cb']);
    expect(created.api_access).toBe('none');
    const c: TestClient = { id: created.client_id as string, secret: created.client_secret as string, redirectUris: ['http://127.0.0.1:9/cli-cb'] };
    const { access } = await login(c, w.owner);
    expectInsufficientScope(await rest(access));

    const updated = await adminCli(w.gw.testDb.url, ['client', 'update', '--client-id', c.id, '--api-access', 'read']);
    expect(updated).toEqual({ client_id: c.id, api_access: 'read' });
    expect((await rest(access)).status).toBe(200);

    const listed = (await adminCli(w.gw.testDb.url, ['client', 'list', '--limit', '1000'])) as { items: Array<{ client_id: string; api_access: ApiAccess }>; next_cursor: unknown };
    const mine = listed.items.find((i) => i.client_id === c.id);
    expect(mine).toMatchObject({ client_id: c.id, name: 'CLI app', api_access: 'read', redirect_uris: ['http://127.0.0.1:9/cli-cb'] });
    expect(JSON.stringify(listed)).not.toContain(c.secret);
    const withWrite = await adminCli(w.gw.testDb.url, ['client', 'create', '--name', 'W', '--redirect-uri', 'http://127.0.0.1:9/w', '--api-access', 'write']);
    expect(withWrite.api_access).toBe('write');
  }, 120_000);
});

describe('a token of a client without API access (none)', () => {
  // Such a token is a genuine credential, so its refusal is not charged as a failed authentication; but
  // GraphQL still runs what needs no caller for it (pricing), so it must spend its address's anonymous
  // budget like a request with no credential at all (docs/SECURITY.md), or holding one buys unlimited requests.
  // The gate's clock is the test's: no budget refills unless the test moves it. It starts at the wall
  // clock's now because access tokens' expiry is checked against the same injected clock (a fixed date
  // years ahead made the token expired: 401 instead of 403); the test moves it by seconds only.
  const BURST = 8;
  let now = Date.now();
  let limited: OidcWorld;
  let on: { world: OidcWorld; as: oauth.AuthorizationServer };
  beforeAll(async () => {
    // 60 a minute refills one request a second of the test's clock; the issuer's own budget (the same
    // clock) is the same burst, enough for the one sign-in below.
    limited = await startOidcWorld({ config: { rateLimitPerMinute: 60, rateLimitBurst: BURST }, clock: () => now });
    on = { world: limited, as: await discover(limited.issuer) };
  });
  afterAll(async () => limited?.close());

  const PRICING = '{ pricing { price } }';
  /** Half the budget on REST, half on GraphQL's public pricing, then one more of each: the statuses. */
  async function spend(token: string | undefined) {
    const statuses: number[] = [];
    const codes: Array<string | undefined> = [];
    for (let i = 0; i < BURST / 2; i++) statuses.push((await call(limited.gw.url, 'GET', '/api/dedicated', { token })).status);
    for (let i = 0; i < BURST / 2; i++) {
      const r = await call(limited.gw.url, 'POST', '/graphql', { token, body: { query: PRICING } });
      statuses.push(r.status);
      if (r.status === 200) expect(r.body.data.pricing).toHaveProperty('price');
    }
    const rest = await call(limited.gw.url, 'GET', '/api/dedicated', { token });
    const gql = await call(limited.gw.url, 'POST', '/graphql', { token, body: { query: PRICING } });
    statuses.push(rest.status, gql.status);
    codes.push(rest.body.error, gql.body.errors?.[0]?.extensions?.code);
    const retryAfter = [rest, gql].map((r) => Number(r.headers.get('retry-after')));
    return { statuses, codes, retryAfter };
  }

  it('is refused with 429 after the anonymous budget on REST and GraphQL, as a request without a credential is', async () => {
    const c = await limited.newClient(undefined, 'none');
    const { access } = await login(c, limited.owner, on);

    // Without a credential: the anonymous budget of this address, then 429 on both.
    const anonymous = await spend(undefined);
    expect(anonymous.statuses).toEqual([...Array(BURST / 2).fill(401), ...Array(BURST / 2).fill(200), 429, 429]);
    expect(anonymous.codes).toEqual(['rate_limited', 'rate_limited']);
    expect(anonymous.retryAfter.every((s) => s >= 1)).toBe(true);

    // The budget refilled (the test's clock moves BURST seconds): the none token gets exactly as many.
    now += BURST * 1000;
    const none = await spend(access);
    expect(none.statuses).toEqual([...Array(BURST / 2).fill(403), ...Array(BURST / 2).fill(200), 429, 429]);
    expect(none.codes).toEqual(['rate_limited', 'rate_limited']);
    expect(none.retryAfter.every((s) => s >= 1)).toBe(true);

    // It is the address's one budget: sending no credential now buys nothing more.
    expect((await call(limited.gw.url, 'POST', '/graphql', { body: { query: PRICING } })).status).toBe(429);
    // One second later exactly one request has refilled, whichever way it is sent.
    now += 1000;
    expectInsufficientScope(await call(limited.gw.url, 'GET', '/api/dedicated', { token: access }));
    expect((await call(limited.gw.url, 'GET', '/api/dedicated', { token: access })).status).toBe(429);
  });
});
