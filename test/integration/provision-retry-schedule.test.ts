// docs/CONFIGURATION.md EDGE_RETRY_LIMIT: an edge job that fails is retried with a backoff of 1 s doubling, at
// most 60 s apart, and a provision whose retries are spent ends `failed`. The queue (pg-boss) computes each
// retry's start as now + min(60, d) with d drawn between half and all of 2^n seconds (n = the attempt that
// failed), so the gap between two failed attempts is at least 2^n / 2 seconds. Lower bounds on elapsed time
// hold on any host, however slow, so they are what this test asserts; the settings the queue computes from
// are read from its own job rows.
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { setRate } from '../../server/domain/settings.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { edgeJobsFor, tunnelStatus } from '../helpers/queue.ts';
import { until } from '../helpers/wait.ts';

const RETRIES = 3;

describe('the provision retry schedule', () => {
  let gw: RunningGateway;
  const lines: string[] = [];
  beforeAll(async () => {
    gw = await startGateway({ log: createLogger('info', {}, (l) => lines.push(l)), config: { edgeRetryLimit: RETRIES, edgeJobTimeoutMs: 2000 } });
    await gw.services.provisioning.start((await loadSecrets(gw.testDb.db, {})).secrets, { worker: true });
  }, 60_000);
  afterAll(async () => gw?.close());

  it(`a job failing on an unreachable edge is retried ${RETRIES} times, each gap at least half of 2^n s, then the tunnel is failed`, async () => {
    // A port nobody listens on: every attempt's SSH connection is refused (a network error, so retried).
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const node = await seedNode(gw.testDb.db, '198.18.11.0/29');
    await gw.testDb.raw.query('update edge_node set ssh_port = $1 where id = $2', [port, node.node_id]);
    await setRate(gw.testDb.db, '90');
    const u = await seedUser(gw.testDb.db);
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    const id = bought.body.tunnel.id as string;
    expect([200, 202]).toContain((await call(gw.url, 'POST', `/api/dedicated/${id}/provision`, { token: u.writeKey })).status);

    await until('the provision failed', async () => (await tunnelStatus(gw.testDb.raw, id)) === 'failed', 120_000);
    const failures = lines
      .map((l) => JSON.parse(l) as { msg?: string; tunnel_id?: string; attempt?: number; last?: boolean; time?: string })
      .filter((l) => l.msg === 'edge job failed' && l.tunnel_id === id);
    expect(failures.map((f) => [f.attempt, f.last])).toEqual([...Array.from({ length: RETRIES }, (_, i) => [i + 1, false]), [RETRIES + 1, true]]);
    const at = failures.map((f) => Date.parse(f.time!));
    for (let n = 1; n <= RETRIES; n++) {
      // Attempt n failed at at[n-1]; attempt n+1 started no sooner than 2^n / 2 s later, and failed after it started.
      expect(at[n]! - at[n - 1]!, `gap after attempt ${n}`).toBeGreaterThanOrEqual((2 ** n / 2) * 1000 - 5);
    }
    // What the queue computes from, on the job itself: 1 s, doubling, at most 60 s.
    const [job] = await edgeJobsFor(gw.testDb.raw, id);
    const { rows } = await gw.testDb.raw.query('select retry_limit, retry_delay, retry_backoff, retry_delay_max from pgboss.job where id = $1', [job!.id]);
    expect(rows[0]).toEqual({ retry_limit: RETRIES, retry_delay: 1, retry_backoff: true, retry_delay_max: 60 });
  }, 180_000);
});
