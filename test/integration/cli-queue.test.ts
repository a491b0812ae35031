// The admin CLI's queue commands of docs/CONTRACTS.md "Admin CLI", run as operators run them (the read commands are
// cli-read.test.ts): the real `server/cli/admin.ts` in a child process against a real PostgreSQL database, checked
// by stdout JSON, exit status and pg-boss's job table; then, with a real agent (root), `tunnel repair` re-applies
// a provisioned tunnel the edge lost and `node reconcile` sends the node its desired set, each through the queue;
// and at the end against a running gateway on the embedded database through its admin socket.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../server/config.ts';
import { openDatabase } from '../../server/services.ts';
import { cliFailed, runAdminCli } from '../helpers/admin-cli.ts';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { provisionTunnel } from '../helpers/queue.ts';
import { env, items, nodeA, nodeB, ok, t, tunnels, useCliWorld } from './cli-world.ts';

describe('queue commands against PostgreSQL', () => {
  useCliWorld();

  it('node reconcile queues one reconcile job in pg-boss (a repeat names the same live job); unknown ids are not_found', async () => {
    const r = ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeA]));
    expect(Object.keys(r).sort()).toEqual(['job_id', 'queued']);
    expect(r.queued).toBe(true);
    const { rows } = await t.raw.query(`select name, state::text, data from pgboss.job where id = $1`, [r.job_id]);
    expect(rows).toEqual([{ name: 'edge-job', state: 'created', data: { kind: 'reconcile', nodeId: nodeA, reason: 'operator' } }]);
    // One live job per node reconcile: the repeat answers the queued one and adds nothing.
    expect(ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeA.toUpperCase()]))).toEqual(r);
    const n = await t.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data @> $1::jsonb`, [JSON.stringify({ kind: 'reconcile', nodeId: nodeA })]);
    expect(n.rows[0]!.n).toBe(1);

    cliFailed(await runAdminCli(env, ['node', 'reconcile', '--id', randomUUID()]), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['node', 'reconcile', '--id', 'edge-a']), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['node', 'reconcile']), 2, 'usage_error');
  }, 120_000);

  it('tunnel repair queues a repair job for the tunnel (one live job per tunnel); nothing to repair is invalid_state', async () => {
    const r = ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-3']!]));
    expect(Object.keys(r).sort()).toEqual(['job_id', 'queued']);
    expect(r.queued).toBe(true);
    const { rows } = await t.raw.query(`select name, state::text, data, singleton_key from pgboss.job where id = $1`, [r.job_id]);
    expect(rows).toEqual([{ name: 'edge-job', state: 'created', data: { tunnelId: tunnels['ann-3'], nodeId: nodeB, repair: true }, singleton_key: nodeB }]);
    expect(ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-3']!]))).toEqual(r);
    const n = await t.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data->>'tunnelId' = $1`, [tunnels['ann-3']]);
    expect(n.rows[0]!.n).toBe(1);
    // A provisioned tunnel too.
    const p = ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-4']!]));
    expect(p.job_id).not.toBe(r.job_id);

    const before = (await t.raw.query<{ n: number }>('select count(*)::int as n from pgboss.job')).rows[0]!.n;
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['ann-2']!]), 1, 'invalid_state'); // pending: never on an edge
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', tunnels['bob-1']!]), 1, 'invalid_state'); // deleted
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', randomUUID()]), 1, 'not_found');
    cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', 'not-a-uuid']), 1, 'not_found');
    expect((await t.raw.query<{ n: number }>('select count(*)::int as n from pgboss.job')).rows[0]!.n).toBe(before);
  }, 120_000);
});

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('queue commands drive a real agent through the gateway worker', () => {
  let gw: RunningGateway;
  let edge: TestEdge;

  beforeAll(async () => {
    // The periodic reconcile is an hour away and the connection stays up: only the commands repair here.
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 5000, edgeJobTimeoutMs: 5000, edgeReconcileSeconds: 3600 }, pool: '203.0.113.96/28' }));
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  it('tunnel repair re-applies a provisioned tunnel the edge lost; node reconcile restores the node', async () => {
    const user = await seedUser(gw.testDb.db);
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'repair', origin_ip: '8.8.4.4' } });
    const tun = bought.body.tunnel as { id: string; protected_ip: string; tunnel_name: string };
    // 200 or 202 (how fast the first SSH handshake is depends on the host), then provisioned.
    await provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, tun.id);
    expect(edge.count('apply', tun.id)).toBe(1);
    const env = { DATABASE_URL: gw.testDb.url };
    // Provisioned, not activated: the edge holds the link and its isolation, and no DNAT (docs/CONTRACTS.md
    // "Dataplane"); lost are the link and the tunnel's counter-map element, and a repair must bring back those
    // and no DNAT.
    const counterElements = () => edge.netns.run('nft', 'list', 'map', 'ip', 'tunnelgate', 'tunnel_counters');
    const lose = () => {
      edge.netns.run('ip', 'link', 'del', 'dev', tun.tunnel_name);
      edge.netns.run('nft', 'delete', 'element', 'ip', 'tunnelgate', 'tunnel_counters', `{ ${tun.protected_ip} }`);
      expect(edge.links()).not.toContain(tun.tunnel_name);
      expect(counterElements()).not.toContain(tun.protected_ip);
    };
    const restored = async () => {
      await until('link and element restored', async () => edge.links().includes(tun.tunnel_name) && counterElements().includes(tun.protected_ip), 30_000);
      expect(edge.mapElements()).not.toContain(tun.protected_ip);
    };
    const jobState = async (id: unknown) => (await gw.testDb.raw.query<{ state: string }>('select state::text from pgboss.job where id = $1', [id])).rows[0]?.state;

    lose();
    const r = ok(await runAdminCli(env, ['tunnel', 'repair', '--id', tun.id]));
    await restored();
    await until('repair job completed', async () => (await jobState(r.job_id)) === 'completed');
    expect(edge.count('apply', tun.id)).toBe(2);
    // Re-applied as it stands: the status did not move.
    expect((await gw.testDb.raw.query('select status from tunnel where id = $1', [tun.id])).rows[0].status).toBe('provisioned');

    lose();
    const reconciles = edge.calls.filter((c) => c.call === 'reconcile').length;
    const n = ok(await runAdminCli(env, ['node', 'reconcile', '--id', edge.nodeId]));
    await restored();
    await until('reconcile job completed', async () => (await jobState(n.job_id)) === 'completed');
    expect(edge.calls.filter((c) => c.call === 'reconcile').length).toBe(reconciles + 1);
    expect(edge.count('apply', tun.id)).toBe(2);
  }, 120_000);
});

describe('queue and read commands through a running gateway on the embedded database (admin socket)', () => {
  it('node reconcile queues on the gateway\'s own queue (one live job), and on the database directly once the gateway stopped', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-cli-read-'));
    const env = { DATA_DIR: dir };
    let gateway: GatewayProcess | undefined;
    try {
      // The edge worker's jobs for an unreachable node keep retrying (it stays live) while this runs.
      gateway = await startGatewayProcess({ DATABASE_URL: '', DATA_DIR: dir, LOG_LEVEL: 'info', EDGE_WORKER: 'true' });
      // A node on a closed local port: its jobs fail to connect and wait to retry, so they stay live.
      const node = ok(await runAdminCli(env, ['node', 'add', '--name', 'edge-e', '--public-ip', '192.0.2.20', '--ssh-host', '127.0.0.1', '--ssh-port', '9', '--pool', '198.18.9.0/30', '--host-key', `SHA256:${'B'.repeat(43)}`]));
      const nodeId = node.node_id as string;
      ok(await runAdminCli(env, ['user', 'create', '--email', 'e@example.test', '--name', 'E', '--password', '-', '--balance-usd', '3'], 'long enough pw\n'));
      expect(items(ok(await runAdminCli(env, ['user', 'list']))).map((u) => u.email)).toEqual(['e@example.test']);

      const r = ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeId]));
      expect(r).toMatchObject({ queued: true, job_id: expect.any(String) });
      // Its attempts fail to connect and wait to retry (EDGE_RETRY_LIMIT 10): still live, so a repeat
      // through the gateway's queue names the same job.
      expect(ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeId]))).toEqual(r);
      cliFailed(await runAdminCli(env, ['node', 'reconcile', '--id', randomUUID()]), 1, 'not_found');
      cliFailed(await runAdminCli(env, ['tunnel', 'repair', '--id', randomUUID()]), 1, 'not_found');

      gateway.kill('SIGTERM');
      expect(await gateway.exited).toBe(0);
      // No gateway now: the CLI opens the embedded database and its queue itself, and finds the live job.
      expect(ok(await runAdminCli(env, ['node', 'reconcile', '--id', nodeId]))).toEqual(r);
      // Open its database and find the operator's job in its queue.
      const db = await openDatabase(loadConfig({ DATA_DIR: dir }));
      try {
        const rows = await db.query<{ data: unknown }>(`select data from pgboss.job where id = ?::uuid`, [r.job_id]);
        expect(rows).toEqual([{ data: { kind: 'reconcile', nodeId, reason: 'operator' } }]);
      } finally {
        await db.close();
      }
    } finally {
      gateway?.kill('SIGKILL');
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
