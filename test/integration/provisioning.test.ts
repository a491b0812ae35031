// Provisioning end to end on the host: the real gateway (REST, the pg-boss queue on the test
// PostgreSQL, the worker) drives the real agent process over real SSH with its host key pinned; the
// agent's dataplane is the production one in a fresh network namespace, with the veth stand-in for GRE
// (this kernel has no GRE; the VM test covers real GRE). Kernel state is read back with `ip -j` and
// `nft -j`; the database with a plain pg pool.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSecrets, type ServerSecrets } from '../../server/secrets.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe.skipIf(!isRoot)('provisioning through the real agent (namespace, veth stand-in)', () => {
  let gw: RunningGateway;
  let secrets: ServerSecrets;
  let edge: TestEdge;
  let user: SeededUser;

  const buy = async (name: string) => {
    const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name, origin_ip: '8.8.4.4' } });
    expect(r.status).toBe(201);
    return r.body.tunnel as { id: string; protected_ip: string; tunnel_name: string; status: string };
  };
  const ipOwner = async (ip: string) => (await gw.testDb.raw.query<{ tunnel_id: string | null }>('select tunnel_id from protected_ip where ip = $1', [ip])).rows[0]!.tunnel_id;
  const status = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;

  beforeAll(async () => {
    gw = await startGateway({ config: { edgeWaitMs: 3000, edgeJobTimeoutMs: 5000, edgeRetryLimit: 20 } });
    secrets = (await loadSecrets(gw.testDb.db, {})).secrets;
    await gw.services.provisioning.start(secrets, { worker: true });
    edge = await TestEdge.create(gw.testDb.db, secrets, '203.0.113.0/28');
    await edge.start();
    user = await seedUser(gw.testDb.db);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  it('buy -> provision (200, link and map element in the kernel) -> activate 409 without origin -> delete (200, gone, IP back)', async () => {
    const t = await buy('first');
    expect(t.status).toBe('pending');

    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(p.status).toBe(200);
    expect(p.body.tunnel.status).toBe('provisioned');
    expect(edge.links()).toContain(t.tunnel_name);
    expect(edge.mapElements()).toContain(t.protected_ip);
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
    expect(edge.count('probe', t.id)).toBe(1);
    expect(await status(t.id)).toBe('provisioned');

    const d = await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey });
    expect(d.status).toBe(200);
    expect(d.body.tunnel.status).toBe('deleted');
    expect(edge.links()).not.toContain(t.tunnel_name);
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    expect(await ipOwner(t.protected_ip)).toBeNull();
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
    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(p.status).toBe(202);
    expect(p.body.tunnel.status).toBe('provisioning');
    expect(edge.links()).not.toContain(t.tunnel_name);

    await edge.start();
    await until('provisioned', async () => (await status(t.id)) === 'provisioned');
    expect(edge.links()).toContain(t.tunnel_name);
    expect(edge.mapElements()).toContain(t.protected_ip);
    // The node came back: its first contact was a full reconcile carrying this tunnel.
    const firstAfterRestart = edge.calls.find((c) => c.ids.includes(t.id));
    expect(firstAfterRestart?.call).toBe('reconcile');
  }, 90_000);
});
