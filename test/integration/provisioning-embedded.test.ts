// Embedded mode (no DATABASE_URL): the same pg-boss queue and worker on PGlite, through pg-boss's own
// PGlite adapter, drive the real agent process (namespace, veth stand-in for GRE). A job queued while
// the agent is down survives a gateway restart and completes after it.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { bootEmbeddedGateway } from '../helpers/embedded-gateway.ts';
import { seedUser } from '../helpers/fixtures.ts';
import { call } from '../helpers/gateway.ts';
import { TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-embedded-prov-'));
let edge: TestEdge | undefined;
afterAll(async () => {
  await edge?.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

/** Short edge waits: with the agent down, a provision answers 202 after 3 s and a job attempt gives up after 4 s. */
const boot = () => bootEmbeddedGateway(dataDir, { config: { edgeWaitMs: 3000, edgeJobTimeoutMs: 4000 }, worker: true });

it.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('provisions through pg-boss on PGlite, and a job queued before a restart completes after it', async () => {
  const first = await boot();
  edge = await TestEdge.create(first.db, first.secrets, '203.0.113.48/28');
  await edge.start();
  const user = await seedUser(first.db);
  const buy = async (url: string) => (await call(url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'embedded', origin_ip: '8.8.4.4' } })).body.tunnel;
  const t1 = await buy(first.url);
  const statusAt = async (url: string, id: string): Promise<string> => (await call(url, 'GET', `/api/dedicated/${id}`, { token: user.readKey })).body.tunnel.status;
  // 200 when the agent answered within the gateway's wait, else 202 and the job finishes after it.
  const p1 = await call(first.url, 'POST', `/api/dedicated/${t1.id}/provision`, { token: user.writeKey });
  expect(await settle(p1, 'provisioned', () => statusAt(first.url, t1.id))).toBe('provisioned');
  expect(edge.links()).toContain(t1.tunnel_name);

  await edge.kill();
  const t2 = await buy(first.url);
  const p2 = await call(first.url, 'POST', `/api/dedicated/${t2.id}/provision`, { token: user.writeKey });
  expect([p2.status, p2.body.tunnel.status]).toEqual([202, 'provisioning']);
  await first.close();

  await edge.start();
  const second = await boot();
  try {
    // The job kept failing while the agent was down, so its next try may be up to a minute of backoff away
    // (server/provisioning/queue.ts: retryDelayMax), and PGlite boots slowly on a loaded host: bounds, not expectations.
    await until('the job queued before the restart to finish after it', async () => (await statusAt(second.url, t2.id)) === 'provisioned', 240_000).catch(async (e: Error) => {
      // Say where the job stood, so a failure here can be told apart from a slow backoff.
      const jobs = await second.db.query(`select name, state, retry_count, start_after, started_on from pgboss.job where data->>'tunnelId' = ?`, [t2.id]);
      throw new Error(`${e.message}; its jobs: ${JSON.stringify(jobs)}`);
    });
    expect(edge.links()).toContain(t2.tunnel_name);
    // Provisioned, not activated: the edge holds its link and no DNAT yet (docs/CONTRACTS.md "Dataplane").
    expect(edge.mapElements()).not.toContain(t2.protected_ip);
  } finally {
    await second.close();
  }
}, 400_000);
