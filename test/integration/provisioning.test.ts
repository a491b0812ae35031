// Provisioning end to end on the host: the real gateway (REST, the pg-boss queue on the test
// PostgreSQL, the worker) drives the real agent process over real SSH with its host key pinned; the
// agent's dataplane is the production one in a fresh network namespace, with the veth stand-in for GRE
// (this kernel has no GRE; the VM test covers real GRE). Kernel state is read back with `ip -j` and
// `nft -j`; the database with a plain pg pool.
import { createClient, type Client } from 'graphql-ws';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServerSecrets } from '../../server/secrets.ts';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { buyTunnel, tunnelStatus } from '../helpers/queue.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, TestEdge } from '../helpers/edge.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { standinPeerName } from '../../agent/dataplane/index.ts';
import { innerSubnet, parseCidr } from '../../server/domain/ip.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('provisioning through the real agent (namespace, veth stand-in)', () => {
  let gw: RunningGateway;
  let secrets: ServerSecrets;
  let edge: TestEdge;
  let user: SeededUser;

  const buy = (name: string) => buyTunnel(gw.url, user.writeKey, name);
  const ipOwner = async (ip: string) => (await gw.testDb.raw.query<{ tunnel_id: string | null }>('select tunnel_id from protected_ip where ip = $1', [ip])).rows[0]!.tunnel_id;
  const status = (id: string) => tunnelStatus(gw.testDb.raw, id);

  beforeAll(async () => {
    // The longest wait the gateway allows (60 s) for the one test that demands the 200 path, and a generous
    // job timeout: the first SSH handshake and the agent's probe share two cores with other tests.
    ({ gw, secrets, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeJobTimeoutMs: 30_000, edgeRetryLimit: 20 }, pool: '203.0.113.0/28' }));
    user = await seedUser(gw.testDb.db);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  // The one test that demands 200 (the agent answered within the wait, here 60 s); the others take 200 or 202.
  it('buy -> provision (200, the link in the kernel, no DNAT before activation) -> activate 409 without origin -> delete (200, gone, IP back)', async () => {
    const t = await buy('first');
    expect(t.status).toBe('pending');

    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(p.status).toBe(200);
    expect(p.body.tunnel.status).toBe('provisioned');
    expectMatchesOpenApi('post', '/api/dedicated/{id}/provision', p.status, p.body, p.headers);
    expect(edge.links()).toContain(t.tunnel_name);
    // The edge forwards nothing to an origin that has not answered the activate probe (docs/CONTRACTS.md "Dataplane").
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    expect(edge.count('apply', t.id)).toBe(1);

    // Provisioning again is refused: it is provisioned.
    const again = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(again.status).toBe(409);
    expect(again.body.error).toBe('invalid_state');

    // Nobody runs the origin script: the probe gets no answer.
    const a = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });
    expect(a.body.error_description).toMatch(/origin script/);
    expect(a.status).toBe(409);
    expect(a.body.error).toBe('invalid_state');
    expectMatchesOpenApi('post', '/api/dedicated/{id}/activate', a.status, a.body, a.headers);
    expect(edge.count('probe', t.id)).toBe(1);
    expect(await status(t.id)).toBe('provisioned');

    const d = await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey });
    expect(d.status).toBe(200);
    expect(d.body.tunnel.status).toBe('deleted');
    expectMatchesOpenApi('delete', '/api/dedicated/{id}', d.status, d.body, d.headers);
    expect(edge.links()).not.toContain(t.tunnel_name);
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    expect(await ipOwner(t.protected_ip)).toBeNull();
  }, 60_000);

  it('once the origin answers through the tunnel, activate is 200 active (the agent probed it) and the edge forwards to it; again is 409', async () => {
    const t = await buy('with-origin');
    expect(await settle(await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey }), 'provisioned', () => status(t.id))).toBe('provisioned');
    const { rows } = await gw.testDb.raw.query<{ inner_index: number; inner_pool: string }>(
      'select t.inner_index, n.inner_pool from tunnel t join edge_node n on n.id = t.node_id where t.id = $1',
      [t.id],
    );
    const inner = innerSubnet(parseCidr(rows[0]!.inner_pool), rows[0]!.inner_index);
    const originInnerIp = inner.originInner.split('/')[0]!;
    // The origin: the stand-in's far end becomes its tunnel link, set up as the origin script does
    // (inner address, replies from the inner address routed into the tunnel), point-to-point like GRE.
    const origin = new TestNetns();
    try {
      const peer = standinPeerName(t.tunnel_name);
      const mac = (edge.netns.ipJson<{ address: string }[]>('link', 'show', 'dev', t.tunnel_name)[0]!).address;
      edge.netns.run('ip', 'link', 'set', 'dev', t.tunnel_name, 'arp', 'off');
      edge.netns.run('ip', 'link', 'set', 'dev', peer, 'address', mac, 'arp', 'off', 'netns', origin.name);
      origin.run('ip', 'link', 'set', 'lo', 'up');
      origin.run('ip', 'link', 'set', 'dev', peer, 'name', t.tunnel_name);
      origin.run('ip', 'link', 'set', 'dev', t.tunnel_name, 'mtu', '1476', 'up');
      origin.run('ip', 'addr', 'replace', inner.originInner, 'dev', t.tunnel_name);
      origin.run('ip', 'route', 'replace', 'default', 'dev', t.tunnel_name, 'table', '100');
      origin.run('ip', 'rule', 'add', 'from', originInnerIp, 'lookup', '100');
      await edge.netns.waitForPing(originInnerIp);

      expect(edge.mapElements()).not.toContain(t.protected_ip);
      const a = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });
      expect(a.status).toBe(200);
      expect(a.body.tunnel.status).toBe('active');
      expectMatchesOpenApi('post', '/api/dedicated/{id}/activate', a.status, a.body, a.headers);
      expect(await status(t.id)).toBe('active');
      // The 200 came once the agent applied the tunnel with forwarding on: its DNAT is in the kernel.
      expect(edge.mapElements()).toContain(t.protected_ip);
      const again = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });
      expect([again.status, again.body.error]).toEqual([409, 'invalid_state']);
      const d = await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey });
      expect(await settle(d, 'deleted', () => status(t.id))).toBe('deleted');
      expect(edge.links()).not.toContain(t.tunnel_name);
    } finally {
      origin.delete();
    }
  }, 60_000);

  it('a tunnel left provisioning with no job (a crash between commit and enqueue) is queued by the sweeper', async () => {
    const t = await buy('orphan');
    await gw.testDb.raw.query(`update tunnel set status = 'provisioning' where id = $1`, [t.id]);
    expect(await gw.services.provisioning.sweep(0)).toBeGreaterThanOrEqual(1);
    // Its job is live now: a second sweep does not queue it again.
    const again = await gw.services.provisioning.sweep(0);
    await until('provisioned', async () => (await status(t.id)) === 'provisioned');
    expect(again).toBe(0);
    expect(edge.count('apply', t.id)).toBe(1);
    expect(edge.links()).toContain(t.tunnel_name);
  }, 60_000);

  it('activate before provision is 409; a read key cannot provision', async () => {
    const t = await buy('early');
    const a = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });
    expect(a.status).toBe(409);
    expect(a.body.error).toBe('invalid_state');
    const r = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.readKey });
    expect(r.status).toBe(403);
    expect(await status(t.id)).toBe('pending');
  });

  it('an unreachable agent gives 202 provisioning, and the job completes once the agent is back', async () => {
    await edge.kill();
    const t = await buy('while-down');
    // Through an API-only replica (no worker) that waits 500 ms: with the agent down no answer can come,
    // so its 202 follows from state, not from a race; the rig's worker does the job.
    const impatient = await startGateway({ testDb: gw.testDb, config: { edgeWaitMs: 500 } });
    let p: Awaited<ReturnType<typeof call>>;
    try {
      p = await call(impatient.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    } finally {
      await impatient.close();
    }
    expect(p.status).toBe(202);
    expect(p.body.tunnel.status).toBe('provisioning');
    expectMatchesOpenApi('post', '/api/dedicated/{id}/provision', p.status, p.body, p.headers);
    expect(edge.links()).not.toContain(t.tunnel_name);

    await edge.start();
    await until('provisioned', async () => (await status(t.id)) === 'provisioned');
    expect(edge.links()).toContain(t.tunnel_name);
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    // The node came back: its first contact was a full reconcile carrying this tunnel.
    const firstAfterRestart = edge.calls.find((c) => c.ids.includes(t.id));
    expect(firstAfterRestart?.call).toBe('reconcile');
  }, 90_000);

  it('a graphql-ws subscription streams provisioning -> provisioned (then deleting -> deleted); a bad credential is refused', async () => {
    const t = await buy('watched');
    const ws = (token: string): Client =>
      createClient({ url: gw.url.replace('http', 'ws') + '/graphql', webSocketImpl: WebSocket, connectionParams: { Authorization: `Bearer ${token}` }, retryAttempts: 0, lazy: true });
    const client = ws(user.readKey);
    const seen: string[] = [];
    let first!: () => void;
    const subscribed = new Promise<void>((r) => (first = r));
    const done = new Promise<void>((resolve, reject) => {
      client.subscribe<{ tunnelStatus: { id: string; status: string } }>(
        { query: 'subscription S($id: ID!) { tunnelStatus(id: $id) { id status } }', variables: { id: t.id } },
        {
          next: (m) => {
            if (m.errors) return reject(new Error(JSON.stringify(m.errors)));
            seen.push(m.data!.tunnelStatus.status);
            first();
          },
          error: reject,
          complete: resolve,
        },
      );
    });
    await subscribed;
    expect(await settle(await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey }), 'provisioned', () => status(t.id))).toBe('provisioned');
    expect(await settle(await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey }), 'deleted', () => status(t.id))).toBe('deleted');
    // The stream ends by itself once the tunnel is deleted.
    await done;
    expect(seen).toEqual(['PENDING', 'PROVISIONING', 'PROVISIONED', 'DELETING', 'DELETED']);
    await client.dispose();

    // Another account's tunnel is not_found; a garbage credential never gets a connection.
    const stranger = await seedUser(gw.testDb.db);
    const other = ws(stranger.readKey);
    const refused = await new Promise<unknown>((resolve) => {
      other.subscribe({ query: 'subscription S($id: ID!) { tunnelStatus(id: $id) { id } }', variables: { id: t.id } }, { next: resolve, error: resolve, complete: () => resolve('complete') });
    });
    expect(JSON.stringify(refused)).toMatch(/not_found/);
    await other.dispose();
    const bad = ws('svc_garbage');
    const closed = await new Promise<unknown>((resolve) => {
      bad.subscribe({ query: 'subscription S($id: ID!) { tunnelStatus(id: $id) { id } }', variables: { id: t.id } }, { next: resolve, error: resolve, complete: () => resolve('complete') });
    });
    expect((closed as { code?: number }).code).toBe(4403);
    await bad.dispose();
  }, 60_000);

  it('two gateway replicas with a worker each, on one database, never apply one job twice', async () => {
    // A second gateway process's worth: its own pools on the same database, its own queue worker and SSH connections.
    const db2 = new Database(await openOrm({ databaseUrl: gw.testDb.url, dataDir: '' }));
    const gw2 = await startGateway({ testDb: { ...gw.testDb, db: db2 }, config: { edgeWaitMs: 10_000, edgeJobTimeoutMs: 8000, edgeRetryLimit: 20 } });
    try {
      await gw2.services.provisioning.start(secrets, { worker: true });
      const bought: Awaited<ReturnType<typeof buy>>[] = [];
      for (let i = 0; i < 8; i++) bought.push(await buy(`replica-${i}`));
      const applyBefore = edge.calls.filter((c) => c.call === 'apply').length;
      // Every tunnel is provisioned through both gateways at once.
      const answers = await Promise.all(
        bought.flatMap((t) => [gw, gw2].map((g) => call(g.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey }))),
      );
      for (const a of answers) {
        if (a.status === 409) expect(a.body.error_description).toMatch(/provisioned/);
        else expect([200, 202]).toContain(a.status);
      }
      await until('all provisioned', async () => {
        for (const t of bought) if ((await status(t.id)) !== 'provisioned') return false;
        return true;
      });
      for (const t of bought) {
        expect(edge.count('apply', t.id), t.id).toBe(1);
        expect(edge.links()).toContain(t.tunnel_name);
      }
      expect(edge.calls.filter((c) => c.call === 'apply').length - applyBefore).toBe(bought.length);
    } finally {
      await gw2.close();
      await db2.close();
    }
  }, 90_000);
});
