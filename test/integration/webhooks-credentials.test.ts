// Webhooks end with the credential that registered them, and carry the hidden origin only when asked
// (docs/CONTRACTS.md "Webhooks", docs/SECURITY.md rows 28-30), on the real gateway and real PostgreSQL:
//  - every webhook shows who registered it (`created_by`): the owner's panel session, an API key, a
//    third-party OAuth application (its client id), the operator's CLI; over REST, GraphQL and the CLI;
//  - revoking that API key (the admin CLI), withdrawing that application's grant (/oauth/revoke, with a
//    refresh token or an access token), rotating its client's secret (the portal's
//    rotateApplicationSecret, the CLI's client rotate-secret) or deleting the application disables the
//    webhook: disabled_at and disabled_reason `credential_revoked`, what it had pending given up, no event
//    written for it afterwards, nothing sent; the owner's own webhooks are untouched, and signing out of
//    the panel disables nothing; enabling such a webhook (REST, GraphQL, CLI) is refused, while one
//    disabled for failing is enabled;
//  - a delivery written by a transaction that raced the revocation is still not sent (the worker's check);
//  - deliveries leave `origin_ip` out unless the webhook was registered with include_origin, which the
//    account's own key and panel session may ask for and a third-party application's token may not (403).
// Tokens come from the real login and consent pages through oauth4webapi; deliveries go over real HTTP to
// a receiver on loopback and are verified with the `standardwebhooks` package. The delivery worker is not
// started: each test runs its rounds itself (runOnce), so "nothing was sent" is a fact, not a wait.
import * as oauth from 'oauth4webapi';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { createApiKey, keyIdOf, revokeApiKey } from '../../server/auth/api-keys.ts';
import { addBalance } from '../../server/domain/accounts.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { DeliveryWorker } from '../../server/webhooks/delivery.ts';
import { TunnelEvents } from '../../server/webhooks/events.ts';
import { adminCli, cliOk } from '../helpers/admin-cli.ts';
import { call } from '../helpers/gateway.ts';
import { authorizeUrl, CookieJar, driveAuthorize, pkce, postForm, type Credentials } from '../helpers/oidc.ts';
import { startOidcWorld, type OidcWorld, type TestClient, type TestUser } from '../helpers/oidc-fixture.ts';
import { expectMatchesOpenApi, expectMatchesSchema } from '../helpers/openapi.ts';
import { verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';

let w: OidcWorld;
let as: oauth.AuthorizationServer;
let receiver: WebhookReceiver;
let worker: DeliveryWorker;
const insecure = { [oauth.allowInsecureRequests]: true } as const;
const ORIGIN = '8.8.4.4';
const ep = (name: string) => `${w.issuer}/oauth/${name}`;

beforeAll(async () => {
  receiver = await WebhookReceiver.start();
  // The lab setting: the receiver is http on 127.0.0.1.
  w = await startOidcWorld({ config: { allowPrivateWebhooks: true } });
  as = await oauth.processDiscoveryResponse(new URL(w.issuer), await oauth.discoveryRequest(new URL(w.issuer), insecure));
  const { secretEncryptionKey } = (await loadSecrets(w.gw.testDb.db, {})).secrets;
  worker = new DeliveryWorker(w.gw.testDb.db, {
    allowPrivate: true,
    adminSshPort: w.gw.services.config.adminSshPort,
    encryptionKey: async () => secretEncryptionKey,
    log: createLogger('silent'),
    backoffBaseMs: 1,
  });
}, 120_000);

afterAll(async () => {
  await w?.close();
  await receiver?.close();
});

interface Owner {
  user: TestUser;
  /** A write API key of the owner's account, and its id. */
  key: string;
  keyId: string;
}

async function newOwner(): Promise<Owner> {
  const user = await w.newUser('owner');
  await addBalance(w.gw.testDb.db, user.email, '500');
  const { id, key } = await createApiKey(w.gw.testDb.db, user.accountId, user.userId, 'write');
  return { user, key, keyId: id };
}

/** A code flow through the real pages and oauth4webapi; a fresh browser each time, so each sign-in is a new grant. */
async function codeFlow(client: { id: string; secret?: string; redirectUri: string }, user: Credentials, scope = 'openid profile email') {
  const p = pkce();
  const state = oauth.generateRandomState();
  const url = authorizeUrl(ep('authorize'), { clientId: client.id, redirectUri: client.redirectUri, scope, state, challenge: p.challenge, method: 'S256' });
  const r = await driveAuthorize(url, user, { jar: new CookieJar(), callback: client.redirectUri });
  if (!r.callback) throw new Error(`authorize did not redirect: ${r.last?.status} ${r.last?.body.slice(0, 300)}`);
  const c: oauth.Client = { client_id: client.id };
  const params = oauth.validateAuthResponse(as, c, r.callback, state);
  const auth = client.secret ? oauth.ClientSecretPost(client.secret) : oauth.None();
  const res = await oauth.authorizationCodeGrantRequest(as, c, auth, params, client.redirectUri, p.verifier, insecure);
  const tokens = await oauth.processAuthorizationCodeResponse(as, c, res);
  return { access: tokens.access_token, refresh: tokens.refresh_token!, grant: decodeJwt(tokens.access_token).gid as string };
}

/** The owner signed in to the panel (the first-party client `panel`: the user's own session). */
const panelSignIn = (u: TestUser) => codeFlow({ id: 'panel', redirectUri: `${w.gw.services.config.publicUrl}/callback` }, u, 'profile email');
/** The owner signed in to a third-party application. */
const appSignIn = (c: TestClient, u: TestUser) => codeFlow({ id: c.id, secret: c.secret, redirectUri: c.redirectUris[0]! }, u);

async function register(token: string, body: Record<string, unknown>) {
  const r = await call(w.gw.url, 'POST', '/api/webhooks', { token, body });
  expectMatchesOpenApi('post', '/api/webhooks', r.status, r.body, r.headers);
  return r;
}

/** Registers and expects 201: the webhook and its secret. */
async function registered(token: string, path: string, extra: Record<string, unknown> = {}): Promise<{ id: string; secret: string; webhook: Record<string, unknown> }> {
  const r = await register(token, { url: receiver.url(path), events: ['tunnel.status_changed'], ...extra });
  expect(r.status, r.text).toBe(201);
  return { id: r.body.webhook.id, secret: r.body.secret, webhook: r.body.webhook };
}

/** The account's webhooks as GET /api/webhooks lists them, by id. */
async function listed(token: string): Promise<Map<string, Record<string, any>>> {
  const r = await call(w.gw.url, 'GET', '/api/webhooks', { token });
  expect(r.status).toBe(200);
  expectMatchesOpenApi('get', '/api/webhooks', r.status, r.body, r.headers);
  return new Map((r.body.webhooks as Array<Record<string, any>>).map((h) => [h.id as string, h]));
}

const gql = async (token: string, query: string, variables: Record<string, unknown> = {}) =>
  (await call(w.gw.url, 'POST', '/graphql', { token, body: { query, variables } })).body as { data?: any; errors?: { message: string; extensions?: { code?: string } }[] };

/** One real status move of one of the owner's tunnels (bought, then deleted while pending); returns the tunnel as REST shows it after. */
async function statusEvent(o: Owner): Promise<Record<string, unknown>> {
  const bought = await call(w.gw.url, 'POST', '/api/dedicated', { token: o.key, body: { origin_ip: ORIGIN } });
  expect(bought.status, bought.text).toBe(201);
  const id = bought.body.tunnel.id as string;
  expect((await call(w.gw.url, 'DELETE', `/api/dedicated/${id}`, { token: o.key })).body.tunnel.status).toBe('deleted');
  return (await call(w.gw.url, 'GET', `/api/dedicated/${id}`, { token: o.key })).body.tunnel;
}

const deliveryRows = async (webhookId: string) =>
  (
    await w.gw.testDb.raw.query<{ attempts: number; delivered_at: Date | null; given_up_at: Date | null; last_outcome: string | null }>(
      'select attempts, delivered_at, given_up_at, last_outcome from webhook_delivery where webhook_id = $1 order by created_at',
      [webhookId],
    )
  ).rows;

const REVOKED = { disabled_reason: 'credential_revoked', disabled_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/) };
const ENABLED = { disabled_reason: null, disabled_at: null };

describe('created_by: the credential that registered each webhook', () => {
  it('REST, GraphQL and the admin CLI show session, api_key, oauth_client and operator; the grant is never shown', async () => {
    const o = await newOwner();
    const panel = await panelSignIn(o.user);
    const app = await w.newClient();
    const allowed = await appSignIn(app, o.user);
    const bySession = await registered(panel.access, '/by-session');
    const byKey = await registered(o.key, '/by-key');
    const byApp = await registered(allowed.access, '/by-app');
    expect(bySession.webhook).toMatchObject({ created_by: { kind: 'session', id: o.user.userId }, include_origin: false, ...ENABLED });
    expect(byKey.webhook).toMatchObject({ created_by: { kind: 'api_key', id: keyIdOf(o.key) }, include_origin: false, ...ENABLED });
    expect(byApp.webhook).toMatchObject({ created_by: { kind: 'oauth_client', id: app.id }, include_origin: false, ...ENABLED });

    const list = await listed(o.key);
    expect([...list.values()].map((h) => h.created_by)).toEqual([
      { kind: 'session', id: o.user.userId },
      { kind: 'api_key', id: o.keyId },
      { kind: 'oauth_client', id: app.id },
    ]);
    const rest = await call(w.gw.url, 'GET', '/api/webhooks', { token: o.key });
    expect(rest.text).not.toContain(allowed.grant);

    const g = await gql(o.key, '{ webhooks { id includeOrigin createdBy { kind id } disabledAt disabledReason } }');
    expect(g.errors).toBeUndefined();
    expect(g.data.webhooks).toEqual([
      { id: bySession.id, includeOrigin: false, createdBy: { kind: 'SESSION', id: o.user.userId }, disabledAt: null, disabledReason: null },
      { id: byKey.id, includeOrigin: false, createdBy: { kind: 'API_KEY', id: o.keyId }, disabledAt: null, disabledReason: null },
      { id: byApp.id, includeOrigin: false, createdBy: { kind: 'OAUTH_CLIENT', id: app.id }, disabledAt: null, disabledReason: null },
    ]);

    const env = { ALLOW_PRIVATE_WEBHOOKS: 'true' };
    const made = cliOk(await adminCli(w.gw.testDb.url, ['webhook', 'create', '--email', o.user.email, '--url', receiver.url('/by-operator'), '--include-origin'], env));
    expect(made).toMatchObject({ created_by: { kind: 'operator', id: null }, include_origin: true, ...ENABLED });
    const cli = cliOk(await adminCli(w.gw.testDb.url, ['webhook', 'list', '--email', o.user.email]));
    expect(cli.items.map((h: { id: string; created_by: unknown }) => [h.id, h.created_by])).toEqual([
      [bySession.id, { kind: 'session', id: o.user.userId }],
      [byKey.id, { kind: 'api_key', id: o.keyId }],
      [byApp.id, { kind: 'oauth_client', id: app.id }],
      [made.id, { kind: 'operator', id: null }],
    ]);
    expect(JSON.stringify(cli)).not.toContain(allowed.grant);
  }, 180_000);

  it('signing out of the panel (its refresh token revoked) disables nothing the owner registered in it', async () => {
    const o = await newOwner();
    const panel = await panelSignIn(o.user);
    const hook = await registered(panel.access, '/session-signed-out');
    const r = await postForm(ep('revoke'), { token: panel.refresh, token_type_hint: 'refresh_token', client_id: 'panel' });
    expect(r.status).toBe(200);
    expect((await call(w.gw.url, 'GET', '/api/webhooks', { token: panel.access })).status).toBe(401);
    expect((await listed(o.key)).get(hook.id)).toMatchObject(ENABLED);
    await statusEvent(o);
    await worker.runOnce();
    expect(receiver.to('/session-signed-out')).toHaveLength(1);
    expect(verified(hook.secret, receiver.to('/session-signed-out')[0]!).type).toBe('tunnel.status_changed');
  });
});

describe('revoking the credential disables the webhook', () => {
  it('an API key revoked with the admin CLI: its webhook disabled, its pending delivery given up, nothing written or sent after; the owner’s other webhook still served', async () => {
    const o = await newOwner();
    const leaked = await createApiKey(w.gw.testDb.db, o.user.accountId, o.user.userId, 'write');
    const control = await registered(o.key, '/key-control');
    const hook = await registered(leaked.key, '/key-revoked');
    expect(hook.webhook.created_by).toEqual({ kind: 'api_key', id: leaked.id });

    // While the key lives its webhook is served: one delivered, one failing and due again.
    await statusEvent(o);
    await worker.runOnce();
    expect(receiver.to('/key-revoked')).toHaveLength(1);
    expect(verified(hook.secret, receiver.to('/key-revoked')[0]!).type).toBe('tunnel.status_changed');
    receiver.script('/key-revoked', [503]);
    await statusEvent(o);
    await worker.runOnce();
    expect(receiver.to('/key-revoked')).toHaveLength(2);
    expect((await deliveryRows(hook.id)).map((d) => [d.attempts, d.delivered_at === null, d.given_up_at === null])).toEqual([
      [1, false, true],
      [1, true, true],
    ]);

    expect(cliOk(await adminCli(w.gw.testDb.url, ['apikey', 'revoke', '--id', leaked.id]))).toEqual({ id: leaked.id, revoked: true });
    expect((await call(w.gw.url, 'GET', '/api/webhooks', { token: leaked.key })).status).toBe(401);
    const list = await listed(o.key);
    expect(list.get(hook.id)).toMatchObject({ created_by: { kind: 'api_key', id: leaked.id }, ...REVOKED });
    expect(list.get(control.id)).toMatchObject(ENABLED);
    const [, pending] = await deliveryRows(hook.id);
    expect(pending).toMatchObject({ delivered_at: null, given_up_at: expect.any(Date), last_outcome: 'not sent: webhook disabled (credential_revoked)' });

    await statusEvent(o);
    expect(await deliveryRows(hook.id)).toHaveLength(2);
    await worker.runOnce();
    await worker.runOnce();
    expect(receiver.to('/key-control')).toHaveLength(3);
    expect(receiver.to('/key-revoked')).toHaveLength(2);
    // Nor can it be sent a test event.
    const test = await call(w.gw.url, 'POST', `/api/webhooks/${hook.id}/test`, { token: o.key });
    expect({ status: test.status, error: test.body.error }).toEqual({ status: 409, error: 'invalid_state' });
    expectMatchesOpenApi('post', '/api/webhooks/{id}/test', test.status, test.body, test.headers);
  }, 120_000);

  it('a delivery written by a fan-out that raced the revocation stays unsent: the worker takes nothing of a disabled webhook', async () => {
    const o = await newOwner();
    const leaked = await createApiKey(w.gw.testDb.db, o.user.accountId, o.user.userId, 'write');
    const hook = await registered(leaked.key, '/race');
    const bought = await call(w.gw.url, 'POST', '/api/dedicated', { token: o.key, body: { origin_ip: ORIGIN } });
    const events = new TunnelEvents(w.gw.services.config.adminSshPort);
    // The event's transaction reads the webhook as enabled and writes its row, then stays open while the
    // key is revoked and commits after: the revocation could not see (or give up) that row.
    let written!: () => void;
    let release!: () => void;
    const wrote = new Promise<void>((r) => (written = r));
    const held = new Promise<void>((r) => (release = r));
    const event = w.gw.testDb.db.transaction(async (sql) => {
      await events.statusChanged(sql, bought.body.tunnel.id);
      written();
      await held;
    });
    await wrote;
    expect(await revokeApiKey(w.gw.testDb.db, leaked.id)).toBe(true);
    release();
    await event;
    expect((await listed(o.key)).get(hook.id)).toMatchObject(REVOKED);
    expect(await deliveryRows(hook.id)).toEqual([{ attempts: 0, delivered_at: null, given_up_at: null, last_outcome: null }]);

    await worker.runOnce();
    expect(receiver.to('/race')).toHaveLength(0);
    expect((await deliveryRows(hook.id))[0]!.attempts).toBe(0);
  });

  it("an application's grant withdrawn at /oauth/revoke (refresh token, then access token): the webhooks of that grant disabled, another grant's kept", async () => {
    const o = await newOwner();
    const app = await w.newClient();
    const first = await appSignIn(app, o.user);
    const second = await appSignIn(app, o.user);
    const third = await appSignIn(app, o.user);
    expect(new Set([first.grant, second.grant, third.grant]).size).toBe(3);
    const h1 = await registered(first.access, '/grant-1');
    const h2 = await registered(second.access, '/grant-2');
    const h3 = await registered(third.access, '/grant-3');
    const mine = await registered(o.key, '/grant-owner');

    // oidc-provider's revocation of the grant (a refresh token revoked ends its grant).
    expect((await postForm(ep('revoke'), { token: first.refresh, client_id: app.id, client_secret: app.secret })).status).toBe(200);
    let list = await listed(o.key);
    expect(list.get(h1.id)).toMatchObject({ created_by: { kind: 'oauth_client', id: app.id }, ...REVOKED });
    expect([list.get(h2.id), list.get(h3.id), list.get(mine.id)]).toEqual([expect.objectContaining(ENABLED), expect.objectContaining(ENABLED), expect.objectContaining(ENABLED)]);

    // The gateway's own revocation of an access token (a JWT: its grant ends).
    expect((await postForm(ep('revoke'), { token: third.access, client_id: app.id, client_secret: app.secret })).status).toBe(200);
    list = await listed(o.key);
    expect(list.get(h3.id)).toMatchObject(REVOKED);
    expect(list.get(h2.id)).toMatchObject(ENABLED);

    await statusEvent(o);
    await worker.runOnce();
    expect(verified(h2.secret, receiver.to('/grant-2')[0]!).type).toBe('tunnel.status_changed');
    expect(receiver.to('/grant-owner')).toHaveLength(1);
    expect([receiver.to('/grant-1').length, receiver.to('/grant-3').length]).toEqual([0, 0]);
    expect([(await deliveryRows(h1.id)).length, (await deliveryRows(h3.id)).length]).toEqual([0, 0]);
  });

  it("an application's secret rotated (portal rotateApplicationSecret, CLI client rotate-secret) or the application deleted: every webhook its tokens registered disabled", async () => {
    const o = await newOwner();
    const panel = await panelSignIn(o.user);
    const CREATE = 'mutation($i: CreateApplicationInput!) { createApplication(input: $i) { application { id redirectUris } clientSecret } }';
    const portalApp = async (): Promise<TestClient> => {
      const r = await gql(panel.access, CREATE, { i: { name: 'Integration', redirectUris: ['http://127.0.0.1:9/portal/cb'], public: false, apiAccess: 'WRITE' } });
      expect(r.errors).toBeUndefined();
      return { id: r.data.createApplication.application.id, secret: r.data.createApplication.clientSecret, redirectUris: r.data.createApplication.application.redirectUris };
    };
    const rotated = await portalApp();
    const deleted = await portalApp();
    const operators = await w.newClient();
    const hooks = {
      rotatedA: await registered((await appSignIn(rotated, o.user)).access, '/rotate-portal-a'),
      rotatedB: await registered((await appSignIn(rotated, o.user)).access, '/rotate-portal-b'),
      deleted: await registered((await appSignIn(deleted, o.user)).access, '/delete-portal'),
      cli: await registered((await appSignIn(operators, o.user)).access, '/rotate-cli'),
      session: await registered(panel.access, '/rotate-session'),
      key: await registered(o.key, '/rotate-key'),
    };

    const r = await gql(panel.access, 'mutation($id: ID!) { rotateApplicationSecret(id: $id) { clientSecret } }', { id: rotated.id });
    expect(r.errors).toBeUndefined();
    let list = await listed(o.key);
    expect([list.get(hooks.rotatedA.id), list.get(hooks.rotatedB.id)]).toEqual([expect.objectContaining(REVOKED), expect.objectContaining(REVOKED)]);
    expect([list.get(hooks.deleted.id), list.get(hooks.cli.id)]).toEqual([expect.objectContaining(ENABLED), expect.objectContaining(ENABLED)]);

    expect((await gql(panel.access, 'mutation($id: ID!) { deleteApplication(id: $id) }', { id: deleted.id })).data.deleteApplication).toBe(true);
    expect((await listed(o.key)).get(hooks.deleted.id)).toMatchObject(REVOKED);

    expect(cliOk(await adminCli(w.gw.testDb.url, ['client', 'rotate-secret', '--client-id', operators.id]))).toMatchObject({ client_id: operators.id });
    list = await listed(o.key);
    expect(list.get(hooks.cli.id)).toMatchObject({ created_by: { kind: 'oauth_client', id: operators.id }, ...REVOKED });
    // The owner's own webhooks stand.
    expect([list.get(hooks.session.id), list.get(hooks.key.id)]).toEqual([expect.objectContaining(ENABLED), expect.objectContaining(ENABLED)]);

    await statusEvent(o);
    await worker.runOnce();
    expect([receiver.to('/rotate-session').length, receiver.to('/rotate-key').length]).toEqual([1, 1]);
    for (const path of ['/rotate-portal-a', '/rotate-portal-b', '/delete-portal', '/rotate-cli']) expect(receiver.to(path), path).toHaveLength(0);
  }, 120_000);

  it('a webhook disabled because its credential was revoked cannot be enabled again (REST, GraphQL, CLI: 409 invalid_state, still disabled), also when it was failing first; one disabled for failing can', async () => {
    const o = await newOwner();
    const leaked = await createApiKey(w.gw.testDb.db, o.user.accountId, o.user.userId, 'write');
    const revoked = await registered(leaked.key, '/enable-revoked');
    // Disabled for failing before the revocation (the worker's 24-hour rule has its own test): the
    // revocation gives it the final reason, so enabling cannot bring it back either.
    const failingFirst = await registered(leaked.key, '/enable-failing-first');
    const failing = await registered(o.key, '/enable-failing');
    await w.gw.testDb.raw.query(`update webhook set disabled_at = now(), disabled_reason = 'failing' where id = any($1::uuid[])`, [[failingFirst.id, failing.id]]);
    cliOk(await adminCli(w.gw.testDb.url, ['apikey', 'revoke', '--id', leaked.id]));

    for (const id of [revoked.id, failingFirst.id]) {
      const r = await call(w.gw.url, 'POST', `/api/webhooks/${id}/enable`, { token: o.key });
      expect({ status: r.status, error: r.body.error }).toEqual({ status: 409, error: 'invalid_state' });
      expect(r.body.error_description).toMatch(/credential .*revoked.*create a new webhook/);
      expectMatchesOpenApi('post', '/api/webhooks/{id}/enable', r.status, r.body, r.headers);
      const g = await gql(o.key, 'mutation($id: ID!) { enableWebhook(id: $id) { id disabledAt } }', { id });
      expect(g.errors?.[0]?.extensions?.code).toBe('invalid_state');
      const c = await adminCli(w.gw.testDb.url, ['webhook', 'enable', '--id', id]);
      expect(c.code).toBe(1);
      expect(JSON.parse(c.stderr)).toMatchObject({ error: 'invalid_state', error_description: expect.stringMatching(/create a new webhook/) });
      expect((await listed(o.key)).get(id)).toMatchObject(REVOKED);
    }
    // Nothing is sent to them after the refused enables.
    await statusEvent(o);
    await worker.runOnce();
    expect([receiver.to('/enable-revoked').length, receiver.to('/enable-failing-first').length]).toEqual([0, 0]);

    // The owner's own webhook disabled for failing is enabled as before, and is served again.
    const r = await call(w.gw.url, 'POST', `/api/webhooks/${failing.id}/enable`, { token: o.key });
    expect(r.status, r.text).toBe(200);
    expect(r.body.webhook).toMatchObject({ id: failing.id, created_by: { kind: 'api_key', id: o.keyId }, ...ENABLED });
    await statusEvent(o);
    await worker.runOnce();
    expect(receiver.to('/enable-failing')).toHaveLength(1);
  }, 120_000);
});

describe('origin_ip only for a webhook registered with include_origin, by the account itself', () => {
  it('left out by default; included for the own API key and the panel session that asked (REST and GraphQL)', async () => {
    const o = await newOwner();
    const panel = await panelSignIn(o.user);
    const plain = await registered(o.key, '/origin-plain');
    const withOrigin = await registered(o.key, '/origin-key', { include_origin: true });
    const fromPanel = await registered(panel.access, '/origin-panel', { include_origin: true });
    expect([plain.webhook.include_origin, withOrigin.webhook.include_origin, fromPanel.webhook.include_origin]).toEqual([false, true, true]);
    const g = await gql(panel.access, 'mutation($i: CreateWebhookInput!) { createWebhook(input: $i) { secret webhook { id includeOrigin createdBy { kind } } } }', {
      i: { url: receiver.url('/origin-graphql'), events: ['TUNNEL_STATUS_CHANGED'], includeOrigin: true },
    });
    expect(g.errors).toBeUndefined();
    expect(g.data.createWebhook.webhook).toMatchObject({ includeOrigin: true, createdBy: { kind: 'SESSION' } });
    expect((await listed(o.key)).get(withOrigin.id)).toMatchObject({ include_origin: true });

    const tunnel = await statusEvent(o);
    expect(tunnel.origin_ip).toBe(ORIGIN);
    await worker.runOnce();
    const [d] = receiver.to('/origin-plain');
    const event = verified(plain.secret, d!);
    expectMatchesSchema('TunnelEvent', event);
    expect(event.data.tunnel).not.toHaveProperty('origin_ip');
    expect(d!.body).not.toContain(ORIGIN);
    const { origin_ip: _origin, ...withoutOrigin } = tunnel;
    expect(event.data.tunnel).toEqual(withoutOrigin);
    for (const [path, secret] of [
      ['/origin-key', withOrigin.secret],
      ['/origin-panel', fromPanel.secret],
      ['/origin-graphql', g.data.createWebhook.secret as string],
    ] as const) {
      const full = verified(secret, receiver.to(path)[0]!);
      expectMatchesSchema('TunnelEvent', full);
      expect(full.data.tunnel, path).toEqual(tunnel);
    }
  });

  it("a third-party application's token asking for it is refused with 403 insufficient_scope (REST and GraphQL), nothing stored; without it, it registers", async () => {
    const o = await newOwner();
    const app = await w.newClient();
    const allowed = await appSignIn(app, o.user);
    const count = async () => (await listed(o.key)).size;

    const refused = await register(allowed.access, { url: receiver.url('/app-origin'), include_origin: true });
    expect({ status: refused.status, error: refused.body.error }).toEqual({ status: 403, error: 'insufficient_scope' });
    expect(Object.keys(refused.body).sort()).toEqual(['error', 'error_description']);
    expect(refused.body.error_description).toMatch(/include_origin/);
    const g = await gql(allowed.access, 'mutation($i: CreateWebhookInput!) { createWebhook(input: $i) { secret } }', { i: { url: receiver.url('/app-origin'), includeOrigin: true } });
    expect(g.errors?.[0]?.extensions?.code).toBe('insufficient_scope');
    expect(g.data ?? null).toBeNull();
    expect(await count()).toBe(0);

    const typo = await register(allowed.access, { url: receiver.url('/app-origin'), include_origin: 'true' });
    expect({ status: typo.status, error: typo.body.error }).toEqual({ status: 400, error: 'invalid_request' });
    expect(typo.body.error_description).toMatch(/include_origin must be true or false/);

    const ok = await registered(allowed.access, '/app-origin', { include_origin: false });
    expect(ok.webhook).toMatchObject({ include_origin: false, created_by: { kind: 'oauth_client', id: app.id } });
    expect(await count()).toBe(1);
  });
});
