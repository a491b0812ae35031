// Webhooks (docs/CONTRACTS.md "Webhooks") on the real gateway and
// real PostgreSQL, delivered over real HTTP to a receiver in this file that verifies every delivery with
// the `standardwebhooks` package (an independent Standard Webhooks implementation). The delivery worker
// runs in the gateway's process with a short poll and backoff base; the give-up test moves the worker's
// clock instead of waiting. Events come from real status moves (a pending tunnel deleted), or, for
// `tunnel.health_changed` (whose producer is other work), from its emit function called in a transaction.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TunnelEvents } from '../../server/webhooks/events.ts';
import { DeliveryWorker } from '../../server/webhooks/delivery.ts';
import { validateWebhookInput } from '../../server/webhooks/service.ts';
import { systemResolver } from '../../server/webhooks/ssrf.ts';
import { createLogger } from '../../common/log.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi, expectMatchesSchema } from '../helpers/openapi.ts';
import { adminCli, cliFailed, cliOk } from '../helpers/admin-cli.ts';
import { until } from '../helpers/wait.ts';
import { verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';

let gw: RunningGateway;
let strict: RunningGateway;
let user: SeededUser;
let other: SeededUser;
let strictUser: SeededUser;
let receiver: WebhookReceiver;
/** Added to the delivery worker's clock (the give-up test moves it 25 hours on). */
let clockOffset = 0;
/** A name the strict gateway's injected resolver maps to loopback. */
const REBOUND = 'hooks.rebound.test';
let resolved: string[] = [];

beforeAll(async () => {
  receiver = await WebhookReceiver.start();
  // The lab setting: http URLs and loopback allowed (the receiver is on 127.0.0.1).
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  await seedNode(gw.testDb.db, '198.18.0.0/28');
  user = await seedUser(gw.testDb.db);
  other = await seedUser(gw.testDb.db);
  // A long request timeout: the test of a held request releases it itself, long before.
  gw.services.webhooks.startDelivery(createLogger('silent'), { pollMs: 20, backoffBaseMs: 1, timeoutMs: 120_000, now: () => Date.now() + clockOffset });
  // Production rules: https only, public addresses only, checked when a delivery is sent.
  strict = await startGateway({ config: { allowPrivateWebhooks: false } });
  await seedNode(strict.testDb.db, '198.18.0.0/28');
  strictUser = await seedUser(strict.testDb.db);
  strict.services.webhooks.startDelivery(createLogger('silent'), {
    pollMs: 20,
    backoffBaseMs: 1,
    resolve: async (host) => {
      resolved.push(host);
      // Every other name (localhost included) through the system resolver, as in production.
      return host === REBOUND ? ['127.0.0.1'] : systemResolver(host);
    },
  });
}, 120_000);

afterAll(async () => {
  await gw?.close();
  await strict?.close();
  await receiver?.close();
});

async function register(g: RunningGateway, token: string, body: unknown) {
  const r = await call(g.url, 'POST', '/api/webhooks', { token, body });
  expectMatchesOpenApi('post', '/api/webhooks', r.status, r.body, r.headers);
  return r;
}

/** Buys a tunnel and deletes it while pending: one status move (pending -> deleted), no agent needed. */
async function statusEvent(g: RunningGateway, u: SeededUser): Promise<string> {
  const bought = await call(g.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(bought.status).toBe(201);
  const id = bought.body.tunnel.id as string;
  const d = await call(g.url, 'DELETE', `/api/dedicated/${id}`, { token: u.writeKey });
  expect(d.body.tunnel.status).toBe('deleted');
  return id;
}

const row = async (g: RunningGateway, id: string) =>
  (await g.testDb.raw.query('select attempts, last_outcome, delivered_at, given_up_at from webhook_delivery where id = $1', [id])).rows[0] as {
    attempts: number;
    last_outcome: string | null;
    delivered_at: Date | null;
    given_up_at: Date | null;
  };

describe('registration (REST)', () => {
  it('POST 201 with a whsec_ secret shown once and stored encrypted; GET lists without secrets; DELETE 204', async () => {
    const r = await register(gw, user.writeKey, { url: receiver.url('/reg') });
    expect(r.status).toBe(201);
    expect(r.body.secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(Buffer.from(r.body.secret.slice(6), 'base64').length).toBeGreaterThanOrEqual(24);
    expect(r.body.webhook).toMatchObject({ url: receiver.url('/reg'), events: ['tunnel.status_changed', 'tunnel.health_changed', 'tunnel.attack_started', 'tunnel.attack_ended', 'webhook.disabled'], disabled_at: null, disabled_reason: null });
    // At rest: only the AES-GCM ciphertext (server/secrets/at-rest.ts), never the secret or its key bytes.
    const [stored] = (await gw.testDb.raw.query('select secret_ciphertext from webhook where id = $1', [r.body.webhook.id])).rows;
    expect(stored.secret_ciphertext).toMatch(/^v1\./);
    expect(stored.secret_ciphertext).not.toContain(r.body.secret.slice(6));

    const list = await call(gw.url, 'GET', '/api/webhooks', { token: user.readKey });
    expect(list.status).toBe(200);
    expectMatchesOpenApi('get', '/api/webhooks', list.status, list.body, list.headers);
    expect(list.body.webhooks).toEqual([r.body.webhook]);
    expect(list.text).not.toContain('whsec_');

    const del = await call(gw.url, 'DELETE', `/api/webhooks/${r.body.webhook.id}`, { token: user.writeKey });
    expect(del.status).toBe(204);
    expectMatchesOpenApi('delete', '/api/webhooks/{id}', del.status, undefined, del.headers);
    expect((await call(gw.url, 'GET', '/api/webhooks', { token: user.readKey })).body.webhooks).toEqual([]);
  });

  it("another account's webhook is 404 on DELETE and absent from its list; a read key cannot write", async () => {
    const mine = await register(gw, user.writeKey, { url: receiver.url('/owned') });
    const theirs = await call(gw.url, 'DELETE', `/api/webhooks/${mine.body.webhook.id}`, { token: other.writeKey });
    expect(theirs.status).toBe(404);
    expect(theirs.body.error).toBe('not_found');
    expectMatchesOpenApi('delete', '/api/webhooks/{id}', theirs.status, theirs.body, theirs.headers);
    expect((await call(gw.url, 'GET', '/api/webhooks', { token: other.readKey })).body.webhooks).toEqual([]);
    for (const bad of ['not-a-uuid', '00000000-0000-4000-8000-000000000000']) {
      expect((await call(gw.url, 'DELETE', `/api/webhooks/${bad}`, { token: user.writeKey })).status).toBe(404);
    }
    const readOnly = await register(gw, user.readKey, { url: receiver.url('/ro') });
    expect(readOnly.status).toBe(403);
    expect(readOnly.body.error).toBe('insufficient_scope');
    expect((await call(gw.url, 'GET', '/api/webhooks', { token: user.readKey })).body.webhooks.map((w: { id: string }) => w.id)).toEqual([mine.body.webhook.id]);
    expect((await call(gw.url, 'DELETE', `/api/webhooks/${mine.body.webhook.id}`, { token: user.writeKey })).status).toBe(204);
  });

  it('refuses bad input with 400 invalid_request naming the field (production rules: https, public literals)', async () => {
    const cases: [unknown, RegExp][] = [
      [{}, /url is required/],
      [{ url: 42 }, /url is required/],
      [{ url: 'not a url' }, /url is not an absolute URL/],
      [{ url: 'http://hooks.example.com/x' }, /url must be https/],
      [{ url: 'ftp://hooks.example.com/x' }, /url must be https/],
      [{ url: 'https://user:pw@hooks.example.com/x' }, /url must not carry/],
      [{ url: 'https://hooks.example.com/x#frag' }, /url must not have a fragment/],
      [{ url: 'https://127.0.0.1/x' }, /url: 127\.0\.0\.1 is not a public address/],
      [{ url: 'https://10.1.2.3/x' }, /url: 10\.1\.2\.3 is not a public address/],
      [{ url: 'https://[::1]/x' }, /IPv6/],
      [{ url: `https://hooks.example.com/${'a'.repeat(2100)}` }, /url is longer than 2048/],
      [{ url: 'https://hooks.example.com/x', events: [] }, /events must be a non-empty array/],
      [{ url: 'https://hooks.example.com/x', events: 'tunnel.status_changed' }, /events must be a non-empty array/],
      [{ url: 'https://hooks.example.com/x', events: ['tunnel.exploded'] }, /events: unknown event "tunnel.exploded"/],
      [{ url: 'https://hooks.example.com/x', secret: 'mine' }, /Unknown field: "secret"/],
    ];
    for (const [body, why] of cases) {
      const r = await register(strict, strictUser.writeKey, body);
      expect({ body, status: r.status, error: r.body.error }).toEqual({ body, status: 400, error: 'invalid_request' });
      expect(r.body.error_description).toMatch(why);
    }
    // The same URL rules in the lab setting accept http and loopback.
    expect(validateWebhookInput({ url: 'http://127.0.0.1:9/x' }, true)).toEqual({ url: 'http://127.0.0.1:9/x', events: ['tunnel.status_changed', 'tunnel.health_changed', 'tunnel.attack_started', 'tunnel.attack_ended', 'webhook.disabled'], includeOrigin: false });
    // Deliveries go over IPv4 only, so an IPv6 literal is refused in every setting.
    expect(() => validateWebhookInput({ url: 'http://[::1]:9/x' }, true)).toThrow(/IPv6/);
  });

  it('caps an account at 10 webhooks', async () => {
    const u = await seedUser(strict.testDb.db);
    for (let i = 0; i < 10; i++) expect((await register(strict, u.writeKey, { url: `https://hooks.example.com/${i}` })).status).toBe(201);
    const over = await register(strict, u.writeKey, { url: 'https://hooks.example.com/11' });
    expect(over.status).toBe(400);
    expect(over.body.error_description).toMatch(/at most 10 webhooks/);
  });
});

describe('deliveries', () => {
  it('a status change is delivered once, signed (standardwebhooks verifies it), with the tunnel as REST shows it less origin_ip', async () => {
    const path = '/status';
    const { body: created } = await register(gw, user.writeKey, { url: receiver.url(path), events: ['tunnel.status_changed'] });
    const tunnelId = await statusEvent(gw, user);
    const [d] = await until('the status webhook', () => receiver.to(path).length >= 1 && receiver.to(path));
    const event = verified(created.secret, d!);
    expect(d!.method).toBe('POST');
    expect(d!.headers['content-type']).toBe('application/json');
    expect(d!.headers['webhook-id']).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(Math.abs(Number(d!.headers['webhook-timestamp']) - Date.now() / 1000)).toBeLessThan(300);
    expect(d!.headers['webhook-signature']).toMatch(/^v1,[A-Za-z0-9+/]+=*$/);
    expect(Object.keys(event).sort()).toEqual(['data', 'timestamp', 'type']);
    expect(event.type).toBe('tunnel.status_changed');
    expectMatchesSchema('TunnelEvent', event);
    const now = await call(gw.url, 'GET', `/api/dedicated/${tunnelId}`, { token: user.readKey });
    // The origin goes only to webhooks registered with include_origin (webhooks-credentials.test.ts).
    const { origin_ip: origin, ...shown } = now.body.tunnel;
    expect(origin).toBe('8.8.4.4');
    expect(event.data.tunnel).toEqual(shown);
    // A signature made with another secret does not verify: the check above can fail.
    expect(() => verified('whsec_' + Buffer.alloc(24, 7).toString('base64'), d!)).toThrow();
    await until('the delivery recorded as delivered', async () => (await row(gw, d!.headers['webhook-id'] as string))?.delivered_at);
    const r = await row(gw, d!.headers['webhook-id'] as string);
    expect(r).toMatchObject({ attempts: 1, last_outcome: 'status 200', given_up_at: null });
    // Exactly one: no second status move happened, and nothing is left to send.
    expect((await gw.testDb.raw.query(`select count(*)::int as n from webhook_delivery d join webhook w on w.id = d.webhook_id where w.url = $1`, [receiver.url(path)])).rows[0].n).toBe(1);
  });

  it('a receiver answering 500 three times gets the fourth try, with the same webhook-id and body', async () => {
    const path = '/flaky';
    receiver.script(path, [500, 500, 500]);
    const { body: created } = await register(gw, user.writeKey, { url: receiver.url(path), events: ['tunnel.status_changed'] });
    await statusEvent(gw, user);
    await until('four tries', () => receiver.to(path).length >= 4);
    const tries = receiver.to(path);
    const id = tries[0]!.headers['webhook-id'] as string;
    await until('the fourth try recorded as delivered', async () => (await row(gw, id))?.delivered_at);
    expect(tries).toHaveLength(4);
    for (const t of tries) {
      expect(t.headers['webhook-id']).toBe(id);
      expect(t.body).toBe(tries[0]!.body);
      expect(verified(created.secret, t).type).toBe('tunnel.status_changed');
    }
    expect(await row(gw, id)).toMatchObject({ attempts: 4, last_outcome: 'status 200' });
  });

  it('tunnel.health_changed goes only to webhooks that take it; an event in a rolled-back transaction is never written', async () => {
    const health = '/health';
    const statusOnly = '/status-only';
    const { body: h } = await register(gw, user.writeKey, { url: receiver.url(health), events: ['tunnel.health_changed'] });
    await register(gw, user.writeKey, { url: receiver.url(statusOnly), events: ['tunnel.status_changed'] });
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
    const id = bought.body.tunnel.id as string;
    const events = new TunnelEvents(gw.services.config.adminSshPort);
    const count = async () => Number((await gw.testDb.raw.query('select count(*) from webhook_delivery')).rows[0].count);
    const before = await count();
    // A status move whose transaction fails: its event goes with it.
    await expect(
      gw.testDb.db.transaction(async (sql) => {
        expect(await gw.services.provisioning.transitions.moveIn(sql, id, ['pending'], 'deleted')).toBe(true);
        expect(await count()).toBe(before); // not visible outside the transaction yet
        throw new Error('roll back');
      }),
    ).rejects.toThrow('roll back');
    expect(await count()).toBe(before);
    expect((await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey })).body.tunnel.status).toBe('pending');

    await gw.testDb.db.transaction((sql) => events.healthChanged(sql, id));
    const [d] = await until('the health webhook', () => receiver.to(health).length >= 1 && receiver.to(health));
    const event = verified(h.secret, d!);
    expect(event.type).toBe('tunnel.health_changed');
    const { origin_ip: _origin, ...shown } = bought.body.tunnel;
    expect(event.data.tunnel).toEqual(shown);
    expect(receiver.to(statusOnly)).toHaveLength(0);
  });

  it('gives up 24 hours after the event, recorded (the worker clock moved, not waited for)', async () => {
    const path = '/down';
    receiver.script(path, Array(1000).fill(503));
    await register(gw, user.writeKey, { url: receiver.url(path), events: ['tunnel.status_changed'] });
    await statusEvent(gw, user);
    await until('a first failed try', () => receiver.to(path).length >= 1);
    const id = receiver.to(path)[0]!.headers['webhook-id'] as string;
    clockOffset = 25 * 3600_000;
    try {
      await until('the delivery given up', async () => (await row(gw, id))?.given_up_at);
    } finally {
      clockOffset = 0;
    }
    const r = await row(gw, id);
    expect(r.delivered_at).toBeNull();
    expect(r.last_outcome).toBe('status 503');
  });

  it('an endpoint that does not answer holds one attempt, not the others: a later event elsewhere is delivered meanwhile', async () => {
    const slow = '/slow';
    const fast = '/fast';
    receiver.script(slow, ['hold']);
    await register(gw, user.writeKey, { url: receiver.url(slow), events: ['tunnel.status_changed'] });
    await statusEvent(gw, user);
    await until('the slow endpoint holding its request', () => receiver.to(slow).length === 1);
    await register(gw, user.writeKey, { url: receiver.url(fast), events: ['tunnel.status_changed'] });
    await statusEvent(gw, user);
    await until('the other endpoint served', () => receiver.to(fast).length >= 1);
    const held = await row(gw, receiver.to(slow)[0]!.headers['webhook-id'] as string);
    expect(held).toMatchObject({ attempts: 1, last_outcome: null, delivered_at: null });
    receiver.release();
    await until('the held attempt recorded', async () => (await row(gw, receiver.to(slow)[0]!.headers['webhook-id'] as string)).delivered_at);
  });

  it('backoff: the first retry within 30 s by default, doubling, at most an hour apart', () => {
    const w = new DeliveryWorker(gw.testDb.db, { allowPrivate: false, adminSshPort: 52222, encryptionKey: async () => Buffer.alloc(32), log: createLogger('silent') });
    expect(w.backoff(1)).toBeLessThanOrEqual(30_000);
    expect(w.backoff(2)).toBe(2 * w.backoff(1));
    expect(w.backoff(50)).toBe(3600_000);
  });
});

describe('SSRF guard at delivery (ALLOW_PRIVATE_WEBHOOKS not set)', () => {
  it('a host name resolving to 127.0.0.1 is refused when sent: a failed attempt recorded, no connection made', async () => {
    // A bare TCP listener on loopback counts connections: any request at all would show up here.
    let connections = 0;
    const trap = net.createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => trap.listen(0, '127.0.0.1', r));
    const port = (trap.address() as net.AddressInfo).port;
    try {
      for (const host of [REBOUND, 'localhost']) {
        const r = await register(strict, strictUser.writeKey, { url: `https://${host}:${port}/hook`, events: ['tunnel.status_changed'] });
        expect(r.status).toBe(201); // a name is checked when a delivery is sent, not only now
      }
      await statusEvent(strict, strictUser);
      const outcomes = await until('both deliveries refused', async () => {
        const rows = (await strict.testDb.raw.query(`select w.url, d.attempts, d.last_outcome, d.delivered_at from webhook_delivery d join webhook w on w.id = d.webhook_id where w.url like '%:' || $1 || '/hook'`, [port])).rows;
        return rows.length === 2 && rows.every((x) => x.attempts >= 1 && x.last_outcome) && rows;
      });
      for (const o of outcomes) {
        expect(o.last_outcome).toMatch(/^refused: (hooks\.rebound\.test|localhost) resolves to 127\.0\.0\.1 is not a public unicast address$/);
        expect(o.delivered_at).toBeNull();
      }
      expect(resolved).toContain(REBOUND);
      expect(connections).toBe(0);
    } finally {
      await new Promise<void>((r) => trap.close(() => r()));
    }
  });

  it('with ALLOW_PRIVATE_WEBHOOKS the request goes to the address the resolver gave, with the URL host as Host (no second lookup)', async () => {
    // hooks.rebound.test exists in no DNS: a delivery that looked the name up again could not connect.
    const lab = gw.services.webhooks;
    const path = '/rebound';
    const { body: created } = await register(gw, user.writeKey, { url: `http://${REBOUND}:${receiver.port}${path}`, events: ['tunnel.status_changed'] });
    await lab.stopDelivery();
    try {
      lab.startDelivery(createLogger('silent'), { pollMs: 20, backoffBaseMs: 1, resolve: async (host) => (host === REBOUND ? ['127.0.0.1'] : []) });
      await statusEvent(gw, user);
      const [d] = await until('the delivery through the checked address', () => receiver.to(path).length >= 1 && receiver.to(path));
      expect(d!.headers.host).toBe(`${REBOUND}:${receiver.port}`);
      expect(verified(created.secret, d!).type).toBe('tunnel.status_changed');
    } finally {
      await lab.stopDelivery();
      lab.startDelivery(createLogger('silent'), { pollMs: 20, backoffBaseMs: 1, timeoutMs: 120_000, now: () => Date.now() + clockOffset });
    }
  });
});

describe('GraphQL, admin CLI and metrics over the same service', () => {
  const gql = async (token: string, query: string, variables?: Record<string, unknown>) =>
    (await call(gw.url, 'POST', '/graphql', { token, body: { query, variables } })).body as { data?: any; errors?: { message: string; extensions?: { code?: string } }[] };

  it('createWebhook, webhooks, deleteWebhook; validation and not_found as REST', async () => {
    const created = await gql(user.writeKey, 'mutation($i: CreateWebhookInput!) { createWebhook(input: $i) { secret webhook { id url events createdAt } } }', {
      i: { url: receiver.url('/gql'), events: ['TUNNEL_HEALTH_CHANGED'] },
    });
    expect(created.errors).toBeUndefined();
    expect(created.data.createWebhook.secret).toMatch(/^whsec_/);
    expect(created.data.createWebhook.webhook.events).toEqual(['TUNNEL_HEALTH_CHANGED']);
    const id = created.data.createWebhook.webhook.id;
    const rest = (await call(gw.url, 'GET', '/api/webhooks', { token: user.readKey })).body.webhooks.find((w: { id: string }) => w.id === id);
    expect(rest).toMatchObject({ url: receiver.url('/gql'), events: ['tunnel.health_changed'] });
    const listed = await gql(user.readKey, '{ webhooks { id } }');
    expect(listed.data.webhooks.map((w: { id: string }) => w.id)).toContain(id);
    const bad = await gql(user.writeKey, 'mutation { createWebhook(input: {url: "ftp://x.example"}) { secret } }');
    expect(bad.errors?.[0]?.extensions?.code).toBe('invalid_request');
    const foreign = await gql(other.writeKey, `mutation { deleteWebhook(id: "${id}") }`);
    expect(foreign.errors?.[0]?.extensions?.code).toBe('not_found');
    expect((await gql(user.writeKey, `mutation { deleteWebhook(id: "${id}") }`)).data.deleteWebhook).toBe(true);
  });

  it('webhook create / list / delete print JSON; bad input fails with the CLI error contract', async () => {
    const env = { ALLOW_PRIVATE_WEBHOOKS: 'true' };
    const made = cliOk(await adminCli(gw.testDb.url, ['webhook', 'create', '--email', other.email, '--url', receiver.url('/cli'), '--event', 'tunnel.status_changed'], env));
    expect(made).toMatchObject({ url: receiver.url('/cli'), events: ['tunnel.status_changed'] });
    expect(made.secret).toMatch(/^whsec_/);
    const listed = cliOk(await adminCli(gw.testDb.url, ['webhook', 'list', '--email', other.email]));
    expect(listed.items.map((w: { id: string }) => w.id)).toEqual([made.id]);
    expect(JSON.stringify(listed)).not.toContain('whsec_');
    // Without ALLOW_PRIVATE_WEBHOOKS an http URL is refused, as in REST.
    cliFailed(await adminCli(gw.testDb.url, ['webhook', 'create', '--email', other.email, '--url', receiver.url('/cli')]), 1, 'invalid_request', /url must be https/);
    cliFailed(await adminCli(gw.testDb.url, ['webhook', 'create', '--email', other.email, '--url', 'https://x.example/h', '--event', 'nope'], env), 1, 'invalid_request', /unknown event "nope"/);
    cliFailed(await adminCli(gw.testDb.url, ['webhook', 'create', '--email', other.email, '--url', 'https://x.example/h', '--events', 'tunnel.status_changed,nope2'], env), 1, 'invalid_request', /unknown event "nope2"/);
    cliFailed(await adminCli(gw.testDb.url, ['webhook', 'create', '--email', 'nobody@example.test', '--url', 'https://x.example/h']), 1, 'not_found');
    expect(cliOk(await adminCli(gw.testDb.url, ['webhook', 'delete', '--id', made.id]))).toEqual({ id: made.id, deleted: true });
    cliFailed(await adminCli(gw.testDb.url, ['webhook', 'delete', '--id', made.id]), 1, 'not_found');
  }, 120_000);

  it('/metrics counts delivery attempts by outcome and shows what is pending', async () => {
    const text = (await call(gw.url, 'GET', '/metrics')).text;
    const value = (outcome: string) => Number(new RegExp(`^tunnelgate_webhook_deliveries_total\\{outcome="${outcome}"\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
    expect(value('delivered')).toBeGreaterThanOrEqual(4);
    expect(value('failed')).toBeGreaterThanOrEqual(4);
    expect(value('given_up')).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/^tunnelgate_webhook_deliveries_pending \d+$/m);
    const strictText = (await call(strict.url, 'GET', '/metrics')).text;
    expect(strictText).toMatch(/^tunnelgate_webhook_deliveries_total\{outcome="refused"\} [1-9]\d*$/m);
  });
});
