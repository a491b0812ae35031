// At least once across a crash: the gateway process is killed with SIGKILL while a
// delivery is in flight (the receiver has the request and holds its answer), after the event was
// committed. The gateway started again on the same database sends it again once the dead attempt's
// lease ends: the same webhook-id and the same body bytes, verified with `standardwebhooks`.
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { call } from '../helpers/gateway.ts';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { until } from '../helpers/wait.ts';
import { verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';

let t: TestDatabase;
let user: SeededUser;
let receiver: WebhookReceiver;
const gateways: GatewayProcess[] = [];
// Loopback receiver: the lab setting. The edge worker stays off (no agent here); the webhook worker on.
const env = () => ({ DATABASE_URL: t.url, ALLOW_PRIVATE_WEBHOOKS: 'true', WEBHOOK_WORKER: 'true', EDGE_WORKER: 'false', LOG_LEVEL: 'info' });

beforeAll(async () => {
  t = await createTestDatabase();
  await seedNode(t.db, '198.18.0.0/28');
  user = await seedUser(t.db);
  receiver = await WebhookReceiver.start();
});
afterEach(() => {
  for (const g of gateways.splice(0)) g.kill('SIGKILL');
});
afterAll(async () => {
  await receiver?.close();
  await t?.drop();
});

it('a gateway killed mid-delivery delivers after restart, with the same webhook-id and body', async () => {
  const path = '/crash';
  // The first try is held unanswered (the gateway dies waiting); the next is answered 200.
  receiver.script(path, ['hold']);
  const first = await startGatewayProcess(env());
  gateways.push(first);
  const hook = await call(first.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: receiver.url(path), events: ['tunnel.status_changed'] } });
  expect(hook.status).toBe(201);
  const bought = await call(first.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect((await call(first.url, 'DELETE', `/api/dedicated/${bought.body.tunnel.id}`, { token: user.writeKey })).body.tunnel.status).toBe('deleted');

  await until('the first try in flight', () => receiver.to(path).length === 1);
  first.kill('SIGKILL');
  expect(await first.exited).toBeNull(); // killed by the signal, no exit of its own
  const id = receiver.to(path)[0]!.headers['webhook-id'] as string;
  const [mid] = (await t.raw.query('select attempts, delivered_at from webhook_delivery where id = $1', [id])).rows;
  expect(mid).toEqual({ attempts: 1, delivered_at: null });

  const second = await startGatewayProcess(env());
  gateways.push(second);
  await until('the delivery sent again after the restart', () => receiver.to(path).length >= 2, 150_000);
  const [a, b] = receiver.to(path);
  expect(b!.headers['webhook-id']).toBe(id);
  expect(b!.body).toBe(a!.body);
  const event = verified(hook.body.secret, b!);
  expect(event.type).toBe('tunnel.status_changed');
  expect(event.data.tunnel).toMatchObject({ id: bought.body.tunnel.id, status: 'deleted' });
  await until('the delivery recorded as delivered', async () => (await t.raw.query('select delivered_at from webhook_delivery where id = $1', [id])).rows[0].delivered_at);
  expect((await t.raw.query('select attempts, last_outcome from webhook_delivery where id = $1', [id])).rows[0]).toEqual({ attempts: 2, last_outcome: 'status 200' });
}, 400_000);
