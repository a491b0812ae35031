// The status-change webhook on the real purchase -> provision -> delete path: the real
// gateway and its worker drive the real agent over SSH (the provisioning tests' rig: a network namespace
// with the veth stand-in for GRE), and every status move the worker or the buyer makes reaches a real
// receiver, signed (verified with `standardwebhooks`), carrying the tunnel as it was after that move
// (origin_ip included: the webhook is registered by the account's own key with include_origin).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { verified, WebhookReceiver } from '../helpers/webhook-receiver.ts';

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('tunnel.status_changed on purchase -> provision -> delete through the real agent', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  let receiver: WebhookReceiver;

  beforeAll(async () => {
    receiver = await WebhookReceiver.start();
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 30_000, edgeJobTimeoutMs: 30_000, edgeRetryLimit: 20, allowPrivateWebhooks: true }, pool: '203.0.113.0/29' }));
    gw.services.webhooks.startDelivery(createLogger('silent'), { pollMs: 50 });
    user = await seedUser(gw.testDb.db);
  }, 120_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
    await receiver?.close();
  });

  it('one signed event per status move, each with the tunnel after that move', async () => {
    const { body: hook } = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: receiver.url('/lifecycle'), events: ['tunnel.status_changed'], include_origin: true } });
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    const id = bought.body.tunnel.id as string;
    const status = async () => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]?.status;
    expect(await settle(await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: user.writeKey }), 'provisioned', status)).toBe('provisioned');
    expect(await settle(await call(gw.url, 'DELETE', `/api/dedicated/${id}`, { token: user.writeKey }), 'deleted', status)).toBe('deleted');

    // Deliveries are not ordered (several go at once); each move is one event, so compare as sets.
    const moves = ['provisioning', 'provisioned', 'deleting', 'deleted'];
    const events = await until('four status events', () => receiver.to('/lifecycle').length >= 4 && receiver.to('/lifecycle'));
    const seen = events.map((d) => verified(hook.secret, d));
    expect(seen.map((e) => e.data.tunnel.status).sort()).toEqual([...moves].sort());
    for (const e of seen) {
      expect(e.type).toBe('tunnel.status_changed');
      expect(e.data.tunnel).toMatchObject({ id, protected_ip: bought.body.tunnel.protected_ip, origin_ip: '8.8.4.4' });
    }
    expect(new Set(events.map((d) => d.headers['webhook-id'])).size).toBe(4);
    const final = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey });
    expect(seen.find((e) => e.data.tunnel.status === 'deleted')!.data.tunnel).toEqual(final.body.tunnel);
  }, 240_000);
});
