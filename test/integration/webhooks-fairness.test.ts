// One tenant cannot stall every tenant's webhooks (docs/CONTRACTS.md "Webhooks", "Fairness and limits";
// docs/SECURITY.md): the delivery worker's claim is fair across accounts and holds at most 2 attempts in
// flight per webhook across replicas; a connection that never completes frees its slot after the connect
// timeout; a webhook failing for 24 hours is disabled (and can be enabled again); a webhook's pending
// deliveries are capped.
//
// The real gateway and real PostgreSQL; deliveries go over real HTTP on loopback to endpoints in
// test/helpers/webhook-receiver.ts: a receiver that answers, a black hole that accepts and never answers,
// and an address whose connection never completes. Workers here are not started on a timer: the test
// drives each poll (startDue) and observes what was claimed (in the database, at the endpoints), so
// nothing depends on how fast the host is. Times are moved through the worker's injected clock.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { loadSecrets } from '../../server/secrets/load.ts';
import { DeliveryWorker, type DeliveryOptions } from '../../server/webhooks/delivery.ts';
import { MAX_PENDING_PER_WEBHOOK, TunnelEvents } from '../../server/webhooks/events.ts';
import { adminCli, cliFailed, cliOk } from '../helpers/admin-cli.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { expectMatchesOpenApi, expectMatchesSchema } from '../helpers/openapi.ts';
import { until } from '../helpers/wait.ts';
import { BlackHole, NeverConnects, signedWith, verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';

let gw: RunningGateway;
let receiver: WebhookReceiver;
let hole: BlackHole;
let events: TunnelEvents;
const workers: DeliveryWorker[] = [];
const extraDbs: Database[] = [];

beforeAll(async () => {
  receiver = await WebhookReceiver.start();
  hole = await BlackHole.start();
  // The lab setting: http URLs and loopback allowed (every endpoint here is on 127.0.0.1).
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  await seedNode(gw.testDb.db, '198.18.0.0/27');
  events = new TunnelEvents(gw.services.config.adminSshPort);
}, 120_000);

// Each test starts from an empty outbox: its workers would otherwise take the rows an earlier test left.
afterEach(async () => {
  await gw.testDb.raw.query('delete from webhook');
  hole.cutAll();
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});

afterAll(async () => {
  // The black hole first: the attempts it holds end at once, so the workers stop without waiting.
  await hole?.close();
  await Promise.all(workers.map((w) => w.stop()));
  await Promise.all(extraDbs.map((d) => d.close()));
  await gw?.close();
  await receiver?.close();
});

/** A worker as a replica runs it (on `db`: another replica has its own pool), driven by the test. */
function worker(o: Partial<DeliveryOptions> = {}, db: Database = gw.testDb.db): DeliveryWorker {
  const w = new DeliveryWorker(db, {
    allowPrivate: true,
    adminSshPort: gw.services.config.adminSshPort,
    encryptionKey: () => loadSecrets(gw.testDb.db).then((l) => l.secrets.secretEncryptionKey),
    log: createLogger('silent'),
    // Long: an attempt held by the black hole stays in flight until the test ends it.
    timeoutMs: 120_000,
    ...o,
  });
  workers.push(w);
  return w;
}

/** A second replica's own connection pool on the same database. */
async function replicaDb(): Promise<Database> {
  const d = new Database(await openOrm({ databaseUrl: gw.testDb.url, dataDir: '' }));
  extraDbs.push(d);
  return d;
}

interface Tenant {
  user: SeededUser;
  tunnelId: string;
  hooks: { id: string; secret: string; path: string }[];
}

/** An account with one tunnel and a webhook per URL (tunnel.health_changed, or the events given). */
async function tenant(urls: string[], eventsOf: string[] = ['tunnel.health_changed']): Promise<Tenant> {
  const user = await seedUser(gw.testDb.db);
  const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(bought.status).toBe(201);
  const hooks = [];
  for (const url of urls) {
    const r = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url, events: eventsOf } });
    expect(r.status).toBe(201);
    hooks.push({ id: r.body.webhook.id as string, secret: r.body.secret as string, path: new URL(url).pathname });
  }
  return { user, tunnelId: bought.body.tunnel.id as string, hooks };
}

/** `n` tunnel.health_changed events of the tenant's tunnel, written as the gateway writes them: one outbox row per webhook each. */
async function healthEvents(t: Tenant, n: number): Promise<void> {
  await gw.testDb.db.transaction(async (sql) => {
    for (let i = 0; i < n; i++) await events.healthChanged(sql, t.tunnelId);
  });
}

/** Attempts in flight (lease not over) per account, as the database holds them. */
async function inFlightByAccount(): Promise<Record<string, number>> {
  const { rows } = await gw.testDb.raw.query(
    `select w.account_id, count(*)::int as n from webhook_delivery d join webhook w on w.id = d.webhook_id where d.lease_until > now() group by w.account_id`,
  );
  return Object.fromEntries(rows.map((r) => [r.account_id, r.n]));
}

const deliveredTo = async (webhookId: string) =>
  (await gw.testDb.raw.query(`select count(*)::int as n from webhook_delivery where webhook_id = $1 and delivered_at is not null`, [webhookId])).rows[0].n as number;

describe('fair claims', () => {
  it("one tenant's black-holed endpoints with many pending deliveries do not hold another tenant's delivery: it is claimed while theirs are in flight, and first when a slot frees", async () => {
    // 4 slots in this process, 2 per account: the shape of the defaults (16 and 8) at a scale the test can fill.
    const w = worker({ concurrency: 4, maxInFlightPerAccount: 2 });
    const attacker = await tenant(['/a1-0', '/a1-1', '/a1-2'].map((p) => hole.url(p)));
    const second = await tenant(['/a2-0', '/a2-1', '/a2-2'].map((p) => hole.url(p)));
    const victim = await tenant([receiver.url('/victim')]);
    const victimHook = victim.hooks[0]!.id;
    await healthEvents(attacker, 150); // 450 due rows, all older than anything the victim will send

    // The attacker's rows are due first and all 4 slots are free.
    await w.startDue();
    await until("the attacker's attempts at the black hole", () => hole.openTo() > 0 && hole.openTo() === w.inFlightCount);

    // The victim's event, written after 450 older ones: claimed in the next poll while the attacker's 2
    // attempts are still held open.
    await healthEvents(victim, 1);
    expect(await w.startDue()).toBe(1);
    await until("the victim's delivery recorded", async () => (await deliveredTo(victimHook)) === 1);
    expect(receiver.to('/victim')).toHaveLength(1);
    expect(verified(victim.hooks[0]!.secret, receiver.to('/victim')[0]!).type).toBe('tunnel.health_changed');
    // The attacker's attempts were in flight the whole time: it got 2 of the 4 slots, never all.
    expect(hole.openTo()).toBe(2);
    await until('the victim attempt off the slots', () => w.inFlightCount === 2);

    // A second attacker takes the 2 slots left: every slot is held by a black hole now.
    await healthEvents(second, 150);
    expect(await w.startDue()).toBe(2);
    await until("both attackers' attempts at the black hole", () => hole.openTo() === 4);
    expect(Object.values(await inFlightByAccount()).sort()).toEqual([2, 2]);

    // The victim's next event finds no free slot: it waits for one attempt to end (at worst one attempt's
    // timeout), and then it goes first, ahead of both attackers' older rows.
    await healthEvents(victim, 1);
    expect(await w.startDue()).toBe(0);
    const firstAttackerPath = hole.openPaths().find((p) => p.startsWith('/a1-'))!;
    hole.cutOne(firstAttackerPath); // as when that attempt's timeout ends
    await until('the ended attempt recorded', () => w.inFlightCount === 3);
    expect(await w.startDue()).toBe(1);
    await until("the victim's second delivery recorded", async () => (await deliveredTo(victimHook)) === 2);
    expect(receiver.to('/victim')).toHaveLength(2);
    expect(hole.openTo()).toBe(3);
  });

  it('at most 2 attempts in flight per webhook, across two replicas polling at once, as the endpoint counts its open connections', async () => {
    const one = worker({ concurrency: 8, maxInFlightPerAccount: 8 });
    const two = worker({ concurrency: 8, maxInFlightPerAccount: 8 }, await replicaDb());
    const t = await tenant(['/w-0', '/w-1'].map((p) => hole.url(p)));
    await healthEvents(t, 60); // 60 due rows per webhook
    for (let round = 0; round < 3; round++) await Promise.all([one.startDue(), two.startDue()]);
    const claimed = one.inFlightCount + two.inFlightCount;
    // Every claimed attempt is one connection held open at the black hole: wait for all of them.
    await until('every claimed attempt at the endpoint', () => hole.openTo('/w-0') + hole.openTo('/w-1') === claimed);
    expect({ claimed, w0: hole.maxOpen.get('/w-0'), w1: hole.maxOpen.get('/w-1') }).toEqual({ claimed: 4, w0: 2, w1: 2 });
    // Both replicas' claims as the database holds them: 2 leases per webhook.
    const { rows } = await gw.testDb.raw.query(`select webhook_id, count(*)::int as n from webhook_delivery where lease_until > now() and webhook_id = any($1) group by webhook_id`, [
      t.hooks.map((h) => h.id),
    ]);
    expect(rows.map((r) => r.n)).toEqual([2, 2]);
  });
});

describe('connect timeout', () => {
  it('an address whose connection never completes ends the attempt after connectTimeoutMs, not the whole timeout', async () => {
    const dead = await NeverConnects.start();
    try {
      const w = worker({ connectTimeoutMs: 500, timeoutMs: 120_000 });
      const t = await tenant([dead.url('/never')]);
      await healthEvents(t, 1);
      // runOnce waits for the outcome: 120 s without the connect timeout, which the test's bound catches.
      expect(await w.runOnce()).toBe(1);
      const { rows } = await gw.testDb.raw.query('select attempts, last_outcome, delivered_at, lease_until from webhook_delivery where webhook_id = $1', [t.hooks[0]!.id]);
      expect(rows).toEqual([{ attempts: 1, last_outcome: 'error: no connection within 500 ms', delivered_at: null, lease_until: null }]);
    } finally {
      await dead.close();
    }
  });

  it("a name whose DNS never answers ends the attempt after connectTimeoutMs too (the resolution counts toward it)", async () => {
    // The injected resolver never answers, as a tenant's name server that drops queries.
    const w = worker({ connectTimeoutMs: 500, timeoutMs: 120_000, resolve: () => new Promise<string[]>(() => {}) });
    const t = await tenant(['http://hooks.never-answers.test:9/x']);
    await healthEvents(t, 1);
    expect(await w.runOnce()).toBe(1);
    const { rows } = await gw.testDb.raw.query('select attempts, last_outcome, lease_until from webhook_delivery where webhook_id = $1', [t.hooks[0]!.id]);
    expect(rows).toEqual([{ attempts: 1, last_outcome: 'error: no connection within 500 ms', lease_until: null }]);
  });
});

describe('disabled after 24 hours of failures', () => {
  it('a webhook failing for 24 hours (the worker clock moved) is disabled: shown in the list, its pending given up, no new deliveries, webhook.disabled to the other webhooks that take it', async () => {
    let offset = 0;
    const w = worker({ now: () => Date.now() + offset, backoffBaseMs: 1, timeoutMs: 10_000 });
    receiver.script('/down', Array(100).fill(503));
    // 503, then 200 (its failure clock restarts), then 503s again.
    receiver.script('/flaky', [503, 200, ...Array(100).fill(503)]);
    const t = await tenant([receiver.url('/down'), receiver.url('/flaky')]);
    const notices = await call(gw.url, 'POST', '/api/webhooks', { token: t.user.writeKey, body: { url: receiver.url('/notices'), events: ['webhook.disabled'] } });
    const tunnelsOnly = await call(gw.url, 'POST', '/api/webhooks', { token: t.user.writeKey, body: { url: receiver.url('/tunnels-only'), events: ['tunnel.health_changed'] } });
    const [down, flaky] = t.hooks;
    const list = async () => (await call(gw.url, 'GET', '/api/webhooks', { token: t.user.readKey })).body.webhooks as Record<string, unknown>[];
    const hook = async (id: string) => (await list()).find((h) => h.id === id)!;

    await healthEvents(t, 1);
    await w.runOnce(); // /down 503, /flaky 503, /tunnels-only 200
    offset = 60_000;
    await w.runOnce(); // the retries: /down 503, /flaky 200
    expect(receiver.to('/flaky')).toHaveLength(2);
    expect(await hook(down!.id)).toMatchObject({ disabled_at: null, disabled_reason: null });

    // 23 hours on: still failing, still enabled.
    offset = 23 * 3600_000;
    await healthEvents(t, 1);
    await w.runOnce();
    expect(await hook(down!.id)).toMatchObject({ disabled_at: null });

    // 25 hours after its first failure: disabled. /flaky, failing again only since its success, is not.
    offset = 25 * 3600_000;
    await healthEvents(t, 1);
    await w.runOnce();
    const listed = await call(gw.url, 'GET', '/api/webhooks', { token: t.user.readKey });
    expectMatchesOpenApi('get', '/api/webhooks', listed.status, listed.body, listed.headers);
    const disabled = listed.body.webhooks.find((h: { id: string }) => h.id === down!.id);
    expect(disabled.disabled_reason).toBe('failing');
    expect(new Date(disabled.disabled_at).getTime()).toBeGreaterThan(Date.now() + 24 * 3600_000); // the worker's clock, moved
    expect(await hook(flaky!.id)).toMatchObject({ disabled_at: null });
    const pending = await gw.testDb.raw.query(`select count(*)::int as n from webhook_delivery where webhook_id = $1 and delivered_at is null and given_up_at is null`, [down!.id]);
    expect(pending.rows[0].n).toBe(0);

    // The notice: one signed webhook.disabled to the other webhook that takes it, with the webhook as listed.
    await w.runOnce();
    const [notice] = receiver.to('/notices');
    // Signed at the worker's moved clock: the signature checked, not the timestamp's distance from now.
    const event = signedWith(notices.body.secret, notice!);
    expect(() => signedWith(tunnelsOnly.body.secret, notice!)).toThrow(/not signed/);
    expect(event.type).toBe('webhook.disabled');
    expectMatchesSchema('WebhookDisabledEvent', event);
    expect(event.data.webhook).toEqual(disabled);
    expect(receiver.to('/notices')).toHaveLength(1);
    expect(receiver.to('/tunnels-only').map((d) => signedWith(tunnelsOnly.body.secret, d).type)).toEqual(Array(3).fill('tunnel.health_changed'));

    // Disabled: no delivery is written for it, and a test event is refused.
    const before = receiver.to('/down').length;
    await healthEvents(t, 1);
    const rows = await gw.testDb.raw.query(`select count(*)::int as n from webhook_delivery where webhook_id = $1 and given_up_at is null`, [down!.id]);
    expect(rows.rows[0].n).toBe(0);
    await w.runOnce();
    expect(receiver.to('/down')).toHaveLength(before);
    const test = await call(gw.url, 'POST', `/api/webhooks/${down!.id}/test`, { token: t.user.writeKey });
    expect(test.status).toBe(409);
    expect(test.body.error).toBe('invalid_state');
    expectMatchesOpenApi('post', '/api/webhooks/{id}/test', test.status, test.body, test.headers);

    // Enabled again: deliveries resume with the next event.
    const enabled = await call(gw.url, 'POST', `/api/webhooks/${down!.id}/enable`, { token: t.user.writeKey });
    expect(enabled.status).toBe(200);
    expectMatchesOpenApi('post', '/api/webhooks/{id}/enable', enabled.status, enabled.body, enabled.headers);
    expect(enabled.body.webhook).toEqual({ ...disabled, disabled_at: null, disabled_reason: null });
    receiver.script('/down', []);
    await healthEvents(t, 1);
    await w.runOnce();
    expect(receiver.to('/down')).toHaveLength(before + 1);
    expect(await hook(down!.id)).toMatchObject({ disabled_at: null });
  });

  it("enable: 404 for another account's webhook or none, 403 for a read key; GraphQL enableWebhook and the CLI's webhook enable / list show the same", async () => {
    const owner = await tenant([receiver.url('/enable-me')]);
    const stranger = await seedUser(gw.testDb.db);
    const id = owner.hooks[0]!.id;
    const disable = () => gw.testDb.raw.query(`update webhook set disabled_at = now(), disabled_reason = 'failing' where id = $1`, [id]);
    await disable();

    for (const [who, target, status] of [
      [stranger.writeKey, id, 404],
      [owner.user.writeKey, 'not-a-uuid', 404],
      [owner.user.writeKey, '00000000-0000-4000-8000-000000000000', 404],
      [owner.user.readKey, id, 403],
    ] as const) {
      const r = await call(gw.url, 'POST', `/api/webhooks/${target}/enable`, { token: who });
      expect({ target, status: r.status }).toEqual({ target, status });
      expectMatchesOpenApi('post', '/api/webhooks/{id}/enable', r.status, r.body, r.headers);
    }
    expect((await call(gw.url, 'GET', '/api/webhooks', { token: owner.user.readKey })).body.webhooks[0]).toMatchObject({ disabled_reason: 'failing' });

    const gql = async (token: string, query: string) => (await call(gw.url, 'POST', '/graphql', { token, body: { query } })).body as { data?: any; errors?: { extensions?: { code?: string } }[] };
    const listed = await gql(owner.user.readKey, '{ webhooks { id disabledAt disabledReason } }');
    expect(listed.data.webhooks).toEqual([{ id, disabledAt: expect.any(String), disabledReason: 'failing' }]);
    expect((await gql(stranger.writeKey, `mutation { enableWebhook(id: "${id}") { id } }`)).errors?.[0]?.extensions?.code).toBe('not_found');
    expect((await gql(owner.user.readKey, `mutation { enableWebhook(id: "${id}") { id } }`)).errors?.[0]?.extensions?.code).toBe('insufficient_scope');
    const enabled = await gql(owner.user.writeKey, `mutation { enableWebhook(id: "${id}") { id disabledAt disabledReason } }`);
    expect(enabled.data.enableWebhook).toEqual({ id, disabledAt: null, disabledReason: null });

    await disable();
    const cliList = cliOk(await adminCli(gw.testDb.url, ['webhook', 'list', '--email', owner.user.email]));
    expect(cliList.items).toEqual([expect.objectContaining({ id, disabled_reason: 'failing', disabled_at: expect.any(String) })]);
    expect(cliOk(await adminCli(gw.testDb.url, ['webhook', 'enable', '--id', id]))).toMatchObject({ id, disabled_at: null, disabled_reason: null });
    cliFailed(await adminCli(gw.testDb.url, ['webhook', 'enable', '--id', '00000000-0000-4000-8000-000000000000']), 1, 'not_found');
    expect((await call(gw.url, 'GET', '/api/webhooks', { token: owner.user.readKey })).body.webhooks[0]).toMatchObject({ disabled_at: null, disabled_reason: null });

    // Enabling an enabled webhook changes nothing, its failure clock included: calling enable over and
    // over cannot keep a failing endpoint from being disabled.
    await gw.testDb.raw.query(`update webhook set failing_since = now() - interval '23 hours' where id = $1`, [id]);
    const again = await call(gw.url, 'POST', `/api/webhooks/${id}/enable`, { token: owner.user.writeKey });
    expect(again.status).toBe(200);
    expect(again.body.webhook).toMatchObject({ id, disabled_at: null });
    expect((await gw.testDb.raw.query('select failing_since from webhook where id = $1', [id])).rows[0].failing_since).not.toBeNull();
  }, 150_000);
});

describe('pending cap', () => {
  it(`at most ${MAX_PENDING_PER_WEBHOOK} deliveries wait per webhook: more give up the oldest, the newest are kept`, async () => {
    const t = await tenant([hole.url('/capped')]);
    const id = t.hooks[0]!.id;
    // 995 at once (one transaction: equally old), then 10 one by one, each newer than the last.
    await healthEvents(t, MAX_PENDING_PER_WEBHOOK - 5);
    for (let i = 0; i < 10; i++) await healthEvents(t, 1);
    const { rows } = await gw.testDb.raw.query(
      `select given_up_at is not null as given_up, last_outcome, created_at = (select min(created_at) from webhook_delivery where webhook_id = $1) as oldest
         from webhook_delivery where webhook_id = $1`,
      [id],
    );
    const given = rows.filter((r) => r.given_up);
    expect({ total: rows.length, waiting: rows.length - given.length, given: given.length }).toEqual({ total: MAX_PENDING_PER_WEBHOOK + 5, waiting: MAX_PENDING_PER_WEBHOOK, given: 5 });
    for (const g of given) expect(g).toEqual({ given_up: true, oldest: true, last_outcome: `not sent: more than ${MAX_PENDING_PER_WEBHOOK} deliveries pending for this webhook` });
  });
});
