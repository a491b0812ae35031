// Two findings of the security review on webhooks (docs/SECURITY.md "Webhooks"), on the real gateway and
// real PostgreSQL:
// - a URL whose normalised form (percent-encoded) is longer than the column was a 500: now 400
//   invalid_request, over REST and GraphQL alike;
// - webhooks could be aimed at our own edges: an edge whose SSH host is a DNS name was not in the set of
//   our addresses, and the admin SSH ports (ADMIN_SSH_PORT, each edge's ssh_port) were not refused.
// Names under .test exist in no DNS; the delivery's injected resolver (the one the guard uses too) maps
// them to public addresses, which the guard refuses before any connection is tried.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addNode } from '../../server/domain/nodes.ts';
import { WebhookService } from '../../server/webhooks/service.ts';
import { checkTarget, edgeSshAddresses, systemResolver, type Resolver } from '../../server/webhooks/ssrf.ts';
import { createLogger } from '../../common/log.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { until } from '../helpers/wait.ts';

/** An edge's SSH host given as a name, and the public address the resolver gives it. */
const EDGE_NAME = 'edge-ssh.test';
const EDGE_ADDRESS = '93.184.216.34';
/** A webhook host that resolves to the edge's address (someone's DNS record aimed at our edge). */
const AIMED = 'hooks.aimed.test';
/** A webhook host that resolves to an address of nobody here. */
const ELSEWHERE = 'hooks.elsewhere.test';
/** A webhook host the resolver maps to loopback (the port test: refused for its port first). */
const LATE = 'hooks.late.test';
/** The ssh_port of the edge seeded here, not the default one. */
const EDGE_SSH_PORT = 52022;

const resolved: string[] = [];
const resolve: Resolver = async (host) => {
  resolved.push(host);
  if (host === EDGE_NAME || host === AIMED) return [EDGE_ADDRESS];
  if (host === ELSEWHERE) return ['93.184.216.35'];
  if (host === LATE) return ['127.0.0.1'];
  return systemResolver(host);
};

let strict: RunningGateway;
let user: SeededUser;

beforeAll(async () => {
  // Production rules (ALLOW_PRIVATE_WEBHOOKS off), ADMIN_SSH_PORT at its default 52222.
  strict = await startGateway({ config: { allowPrivateWebhooks: false } });
  await seedNode(strict.testDb.db, '198.18.0.0/28');
  await addNode(strict.testDb.db, { name: 'edge-named', publicIp: '192.0.2.2', sshHost: EDGE_NAME, sshPort: EDGE_SSH_PORT, pool: '198.18.0.16/28' });
  // An edge whose SSH host is `localhost`: a name the system resolver answers.
  await addNode(strict.testDb.db, { name: 'edge-localhost', publicIp: '192.0.2.3', sshHost: 'localhost', pool: '198.18.0.32/28' });
  user = await seedUser(strict.testDb.db);
  strict.services.webhooks.startDelivery(createLogger('silent'), { pollMs: 20, backoffBaseMs: 1, resolve });
}, 120_000);

afterAll(async () => {
  await strict?.close();
});

async function register(body: unknown) {
  const r = await call(strict.url, 'POST', '/api/webhooks', { token: user.writeKey, body });
  expectMatchesOpenApi('post', '/api/webhooks', r.status, r.body, r.headers);
  return r;
}

const gql = async (query: string, variables?: Record<string, unknown>) => {
  const r = await call(strict.url, 'POST', '/graphql', { token: user.writeKey, body: { query, variables } });
  return { status: r.status, body: r.body as { data?: any; errors?: { message: string; extensions?: { code?: string; status?: number } }[] } };
};
const CREATE = 'mutation($i: CreateWebhookInput!) { createWebhook(input: $i) { webhook { url } } }';

describe('a URL longer than the column once normalised', () => {
  // 2,000 é are 2,000 characters sent and 12,000 once percent-encoded (%C3%A9 each).
  const long = `https://hooks.example.com/${'é'.repeat(2000)}`;

  it('REST: 400 invalid_request with the documented body, not a 500', async () => {
    const r = await register({ url: long });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'invalid_request', error_description: expect.stringMatching(/url is longer than 2048 characters once normalised/) });
  });

  it('GraphQL createWebhook: invalid_request, status 400, no server_error', async () => {
    const r = await gql(CREATE, { i: { url: long } });
    expect(r.status).toBeLessThan(500);
    expect(r.body.errors?.[0]?.extensions).toMatchObject({ code: 'invalid_request', status: 400 });
    expect(r.body.errors?.[0]?.message).toMatch(/url is longer than 2048 characters once normalised/);
  });

  it('a URL whose normalised form fits is stored normalised', async () => {
    // 337 é: 26 + 337 * 6 = 2048 characters once encoded, exactly the column.
    const fits = `https://hooks.example.com/${'é'.repeat(337)}`;
    const r = await register({ url: fits });
    expect(r.status).toBe(201);
    expect(r.body.webhook.url).toHaveLength(2048);
    expect(r.body.webhook.url).toBe(new URL(fits).href);
    expect((await register({ url: `${fits}a` })).status).toBe(400);
    await call(strict.url, 'DELETE', `/api/webhooks/${r.body.webhook.id}`, { token: user.writeKey });
  });
});

describe('webhooks aimed at our own edges', () => {
  it('an edge whose SSH host is a name that resolves (localhost) has its address among ours', async () => {
    const ours = await edgeSshAddresses(strict.testDb.db, systemResolver);
    expect(ours.get('127.0.0.1')).toBe('localhost');
  });

  it("a URL whose name resolves to a DNS-named edge's address is refused by the guard deliveries run; another public address is not", async () => {
    resolved.length = 0;
    const aimed = await checkTarget(strict.testDb.db, new URL(`https://${AIMED}/hook`), { allowPrivate: false, resolve, adminSshPort: 52222 });
    expect(aimed).toEqual({ ok: false, reason: `${AIMED} resolves to ${EDGE_ADDRESS} is an edge router's address (its SSH host ${EDGE_NAME})` });
    // The edge's name went through the same resolver as the URL's.
    expect(resolved).toEqual(expect.arrayContaining([AIMED, EDGE_NAME]));
    const elsewhere = await checkTarget(strict.testDb.db, new URL(`https://${ELSEWHERE}/hook`), { allowPrivate: false, resolve, adminSshPort: 52222 });
    expect(elsewhere).toEqual({ ok: true, address: '93.184.216.35' });
  });

  it('registration refuses the admin SSH port and every edge ssh_port, over REST and GraphQL, and in the lab setting', async () => {
    for (const [url, why] of [
      ['https://hooks.example.com:52222/x', /url: port 52222 is our admin SSH port/],
      [`https://hooks.example.com:${EDGE_SSH_PORT}/x`, new RegExp(`url: port ${EDGE_SSH_PORT} is an edge router's SSH port`)],
    ] as const) {
      const r = await register({ url });
      expect({ url, status: r.status, error: r.body.error }).toEqual({ url, status: 400, error: 'invalid_request' });
      expect(r.body.error_description).toMatch(why);
      const g = await gql(CREATE, { i: { url } });
      expect(g.body.errors?.[0]?.extensions).toMatchObject({ code: 'invalid_request', status: 400 });
      expect(g.body.errors?.[0]?.message).toMatch(why);
    }
    // ALLOW_PRIVATE_WEBHOOKS lets loopback in, never the admin SSH port.
    const lab = new WebhookService(strict.testDb.db, { allowPrivate: true, adminSshPort: 52222, encryptionKey: async () => Buffer.alloc(32) });
    await expect(lab.createFor(user.accountId, { url: 'http://127.0.0.1:52222/x', events: ['tunnel.status_changed'], includeOrigin: false })).rejects.toThrow(/port 52222 is our admin SSH port/);
    expect((await register({ url: 'https://hooks.example.com:8443/x' })).status).toBe(201);
  });

  it('a delivery to a port that became an edge ssh_port after registration is refused when sent, no connection made', async () => {
    let connections = 0;
    const trap = net.createServer((s) => {
      connections++;
      s.destroy();
    });
    await new Promise<void>((r) => trap.listen(0, '127.0.0.1', r));
    const port = (trap.address() as net.AddressInfo).port;
    try {
      const r = await register({ url: `https://${LATE}:${port}/hook`, events: ['tunnel.status_changed'] });
      expect(r.status).toBe(201);
      await addNode(strict.testDb.db, { name: 'edge-late', publicIp: '192.0.2.4', sshHost: '192.0.2.4', sshPort: port, pool: '198.18.0.48/28' });
      const bought = await call(strict.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
      expect(bought.status).toBe(201);
      expect((await call(strict.url, 'DELETE', `/api/dedicated/${bought.body.tunnel.id}`, { token: user.writeKey })).status).toBe(200);
      const row = await until('the delivery refused', async () => {
        const rows = (await strict.testDb.raw.query(`select d.attempts, d.last_outcome, d.delivered_at from webhook_delivery d join webhook w on w.id = d.webhook_id where w.id = $1`, [r.body.webhook.id])).rows;
        return rows[0]?.last_outcome ? rows[0] : false;
      });
      expect(row.last_outcome).toBe(`refused: port ${port} is an edge router's SSH port`);
      expect(row.delivered_at).toBeNull();
      expect(connections).toBe(0);
    } finally {
      await new Promise<void>((r) => trap.close(() => r()));
    }
  });
});
