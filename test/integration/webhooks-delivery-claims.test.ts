// What docs/CONTRACTS.md "Webhooks" promises of one delivery attempt and its retries, each held to the
// letter: the retry schedule (5 s, then doubling, at most an hour apart), redirects not followed, the 10 s
// bound on an answer, and two workers (two replicas) never sending one delivery at the same time.
//
// The real gateway and PostgreSQL, real HTTP on loopback. The workers are driven by the test (startDue)
// on an injected calendar clock, so the schedule is read exactly from the outbox rather than waited for;
// only the 10 s bound is real time, because it is what is checked.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { loadSecrets } from '../../server/secrets/load.ts';
import { DeliveryWorker, type DeliveryOptions } from '../../server/webhooks/delivery.ts';
import { TunnelEvents } from '../../server/webhooks/events.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { until } from '../helpers/wait.ts';
import { BlackHole, WebhookReceiver } from '../helpers/webhook-receiver.ts';

let gw: RunningGateway;
let receiver: WebhookReceiver;
let hole: BlackHole;
let redirector: http.Server;
let events: TunnelEvents;
const workers: DeliveryWorker[] = [];
const extraDbs: Database[] = [];

beforeAll(async () => {
  receiver = await WebhookReceiver.start();
  hole = await BlackHole.start();
  // Answers every request with a redirect to the receiver's /redirected path.
  redirector = http.createServer((req, res) => {
    req.resume();
    res.writeHead(302, { location: receiver.url('/redirected') }).end();
  });
  await new Promise<void>((r) => redirector.listen(0, '127.0.0.1', r));
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  await seedNode(gw.testDb.db, '198.18.12.0/28');
  events = new TunnelEvents(gw.services.config.adminSshPort);
}, 120_000);

afterEach(async () => {
  await gw.testDb.raw.query('delete from webhook');
  hole.cutAll();
  receiver.release(200);
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});

afterAll(async () => {
  await hole?.close();
  await Promise.all(workers.map((w) => w.stop()));
  await Promise.all(extraDbs.map((d) => d.close()));
  await gw?.close();
  await receiver?.close();
  await new Promise<void>((r) => (redirector ? redirector.close(() => r()) : r()));
});

/** A worker with the product's defaults (unless `o` says otherwise), driven by the test. */
function worker(o: Partial<DeliveryOptions> = {}, db: Database = gw.testDb.db): DeliveryWorker {
  const w = new DeliveryWorker(db, {
    allowPrivate: true,
    adminSshPort: gw.services.config.adminSshPort,
    encryptionKey: () => loadSecrets(gw.testDb.db).then((l) => l.secrets.secretEncryptionKey),
    log: createLogger('silent'),
    ...o,
  });
  workers.push(w);
  return w;
}

/** One account, one tunnel, one webhook at `url`; returns the webhook's id and the tunnel's. */
async function hookAt(url: string): Promise<{ webhookId: string; tunnelId: string }> {
  const user = await seedUser(gw.testDb.db);
  const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(bought.status).toBe(201);
  const r = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url, events: ['tunnel.health_changed'] } });
  expect(r.status).toBe(201);
  return { webhookId: r.body.webhook.id as string, tunnelId: bought.body.tunnel.id as string };
}

async function healthEvents(tunnelId: string, n: number): Promise<void> {
  await gw.testDb.db.transaction(async (sql) => {
    for (let i = 0; i < n; i++) await events.healthChanged(sql, tunnelId);
  });
}

interface Row {
  attempts: number;
  next_ms: number;
  last_outcome: string | null;
  delivered: boolean;
}
async function rowsOf(webhookId: string): Promise<Row[]> {
  const { rows } = await gw.testDb.raw.query<Row>(
    `select attempts, (extract(epoch from next_attempt_at) * 1000)::bigint::float8 as next_ms, last_outcome, delivered_at is not null as delivered
       from webhook_delivery where webhook_id = $1 order by created_at, id`,
    [webhookId],
  );
  return rows;
}

describe('one attempt and its retries', () => {
  it('the retry schedule: 5 s after the first failure, then 10 s, 20 s, 40 s, doubling, at most an hour apart', async () => {
    const { webhookId, tunnelId } = await hookAt(receiver.url('/retried'));
    receiver.script('/retried', [500, 500, 500]);
    await healthEvents(tunnelId, 1);
    // The calendar the worker sees, a second ahead of the event so the row is due; moved by the test.
    let now = Date.now() + 1000;
    const w = worker({ now: () => now });
    for (const [n, wait] of [5_000, 10_000, 20_000].entries()) {
      expect(await w.startDue()).toBe(1);
      // The failed attempt n+1 puts the next one exactly `wait` after the moment it failed.
      await until(`attempt ${n + 1} failed and the next is due ${wait} ms later`, async () => {
        const r = (await rowsOf(webhookId))[0]!;
        return r.attempts === n + 1 && r.last_outcome === 'status 500' && r.next_ms === now + wait ? r : null;
      });
      now += wait;
    }
    // The fourth answer is 200: delivered, the schedule over.
    expect(await w.startDue()).toBe(1);
    await until('delivered', async () => (await rowsOf(webhookId))[0]!.delivered);
    expect(receiver.to('/retried')).toHaveLength(4);
    // Further out the doubling goes on until the hour.
    expect([4, 5, 6, 10, 11, 12, 40].map((n) => w.backoff(n))).toEqual([40_000, 80_000, 160_000, 2_560_000, 3_600_000, 3_600_000, 3_600_000]);
  });

  it('a redirect is not followed: the attempt fails with the 302, and the address it pointed at gets nothing', async () => {
    const port = (redirector.address() as AddressInfo).port;
    const { webhookId, tunnelId } = await hookAt(`http://127.0.0.1:${port}/moved`);
    await healthEvents(tunnelId, 1);
    const w = worker();
    expect(await w.startDue()).toBe(1);
    await until('the attempt answered', async () => (await rowsOf(webhookId))[0]!.last_outcome);
    expect((await rowsOf(webhookId))[0]).toMatchObject({ attempts: 1, last_outcome: 'status 302', delivered: false });
    expect(receiver.to('/redirected')).toEqual([]);
  });

  it('an endpoint that accepts and never answers: the attempt ends after 10 s (the default) as failed', async () => {
    const { webhookId, tunnelId } = await hookAt(hole.url('/silent'));
    await healthEvents(tunnelId, 1);
    const w = worker();
    expect(await w.startDue()).toBe(1);
    await until('the black hole holds the request', async () => hole.openTo('/silent') === 1);
    const row = await until('the attempt ended', async () => (await rowsOf(webhookId))[0]!.last_outcome, 60_000);
    expect(row).toBe('error: no answer within 10000 ms');
    expect((await rowsOf(webhookId))[0]!.delivered).toBe(false);
  }, 90_000);

  it('two workers (two replicas) polling together never send one delivery twice at once, and each is delivered once', async () => {
    const { webhookId, tunnelId } = await hookAt(receiver.url('/pair'));
    // Every first attempt is held open by the receiver until the test releases it.
    receiver.script('/pair', ['hold', 'hold', 'hold', 'hold', 'hold', 'hold']);
    await healthEvents(tunnelId, 6);
    const other = new Database(await openOrm({ databaseUrl: gw.testDb.url, dataDir: '' }));
    extraDbs.push(other);
    const a = worker({ timeoutMs: 120_000 });
    const b = worker({ timeoutMs: 120_000 }, other);
    // Both poll again and again while attempts are held: what is in flight is never taken a second time.
    for (let i = 0; i < 10; i++) await Promise.all([a.startDue(), b.startDue()]);
    await until('the held attempts arrived', async () => receiver.to('/pair').length >= 2);
    for (let i = 0; i < 5; i++) await Promise.all([a.startDue(), b.startDue()]);
    const heldIds = receiver.to('/pair').map((d) => d.headers['webhook-id']);
    expect(new Set(heldIds).size).toBe(heldIds.length);
    // Released (and every later attempt answered at once): each of the six is delivered exactly once.
    receiver.script('/pair', []);
    receiver.release(200);
    await until('all six delivered', async () => {
      await Promise.all([a.startDue(), b.startDue()]);
      return (await rowsOf(webhookId)).every((r) => r.delivered) ? true : null;
    });
    const ids = receiver.to('/pair').map((d) => d.headers['webhook-id']);
    expect(ids).toHaveLength(6);
    expect(new Set(ids).size).toBe(6);
  });
});
