// Faults during provisioning, with the real gateway, queue, worker, agent process and kernel namespace
// (veth stand-in for GRE): the agent killed in the middle of a job, the SSH connection cut in the
// middle of a job, and PostgreSQL restarted under load (a private cluster: the shared one serves the
// other test files). Every tunnel must end in the right state, with one charge each and no leaked IP.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../server/config.ts';
import { openDatabase } from '../../server/services.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, TestEdge } from '../helpers/edge.ts';
import { canRunPrivatePostgres, startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';
import type { TestDatabase } from '../helpers/db.ts';
import { isRoot } from '../netns/netns.ts';

async function until<T>(what: string, fn: () => Promise<T | null | undefined | false>, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`, { cause: last });
    await new Promise((r) => setTimeout(r, 100));
  }
}

interface Bought {
  id: string;
  protected_ip: string;
  tunnel_name: string;
}

/** The database facts every fault test ends with. */
async function expectConsistent(raw: pg.Pool, accountId: string, tunnels: Bought[], edge: TestEdge, want: 'provisioned' | 'deleted') {
  for (const t of tunnels) {
    const { rows } = await raw.query<{ status: string; charges: number; owner: string | null }>(
      `select t.status, (select count(*)::int from ledger_entry l where l.tunnel_id = t.id) as charges,
              (select tunnel_id::text from protected_ip p where p.ip = t.protected_ip) as owner
         from tunnel t where t.id = $1`,
      [t.id],
    );
    expect(rows[0], t.id).toEqual({ status: want, charges: 1, owner: want === 'deleted' ? null : t.id });
    if (want === 'provisioned') expect(edge.links()).toContain(t.tunnel_name);
    else expect(edge.links()).not.toContain(t.tunnel_name);
  }
  // No IP held by anything but a live tunnel of this account.
  const { rows: leaked } = await raw.query(
    `select p.ip from protected_ip p left join tunnel t on t.id = p.tunnel_id where p.tunnel_id is not null and (t.id is null or t.status = 'deleted')`,
  );
  expect(leaked).toEqual([]);
  const { rows: ledger } = await raw.query<{ n: number }>(`select count(*)::int as n from ledger_entry where account_id = $1 and kind = 'purchase'`, [accountId]);
  const { rows: bought } = await raw.query<{ n: number }>(`select count(*)::int as n from tunnel where account_id = $1`, [accountId]);
  expect(ledger[0]!.n).toBe(bought[0]!.n);
}

describe.skipIf(!isRoot)('faults: agent killed and SSH cut mid-job', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  const buy = async (name: string): Promise<Bought> => {
    const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name, origin_ip: '8.8.4.4' } });
    expect(r.status).toBe(201);
    return r.body.tunnel;
  };
  const status = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;

  beforeAll(async () => {
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 2000, edgeJobTimeoutMs: 4000, edgeRetryLimit: 30 }, pool: '203.0.113.16/28' }));
    user = await seedUser(gw.testDb.db);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  it('the agent killed while it applies a tunnel: the job is retried after the agent is back and the tunnel ends provisioned', async () => {
    const t = await buy('killed');
    // The moment the agent reaches the kernel with this job, it dies (SIGKILL, no drain).
    const killed = (async () => {
      for (;;) {
        await edge.nextCall();
        if (edge.calls.at(-1)!.ids.includes(t.id)) break;
      }
      await edge.kill();
    })();
    const p = call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    await killed;
    expect((await p).status).toBe(202);
    expect(await status(t.id)).toBe('provisioning');
    await edge.start();
    await until('provisioned', async () => (await status(t.id)) === 'provisioned');
    await expectConsistent(gw.testDb.raw, user.accountId, [t], edge, 'provisioned');

    // And a delete cut the same way ends deleted with the IP back.
    const removing = (async () => {
      for (;;) {
        await edge.nextCall();
        const c = edge.calls.at(-1)!;
        if (c.call === 'remove' && c.ids.includes(t.id)) break;
      }
      await edge.kill();
    })();
    const d = call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey });
    await removing;
    expect((await d).status).toBe(202);
    await edge.start();
    await until('deleted', async () => (await status(t.id)) === 'deleted');
    await expectConsistent(gw.testDb.raw, user.accountId, [t], edge, 'deleted');
  }, 120_000);

  it('the SSH connection dropped while the agent works: retried on a new connection, applied, no duplicate state', async () => {
    const t = await buy('cut');
    const cut = (async () => {
      for (;;) {
        await edge.nextCall();
        if (edge.calls.at(-1)!.ids.includes(t.id)) break;
      }
      gw.services.provisioning.connections!.disconnect(edge.nodeId);
    })();
    const p = call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    await cut;
    const res = await p;
    // Whether the retry finished inside the wait or not, the answer is honest about it.
    expect([200, 202]).toContain(res.status);
    await until('provisioned', async () => (await status(t.id)) === 'provisioned');
    await expectConsistent(gw.testDb.raw, user.accountId, [t], edge, 'provisioned');
    // Exactly one link and one map element for it, however many times it was applied.
    expect(edge.links().filter((l) => l === t.tunnel_name)).toHaveLength(1);
    expect(edge.mapElements().filter((e) => e === t.protected_ip)).toHaveLength(1);
  }, 120_000);
});

describe.skipIf(!isRoot)('faults: an edge that stays down', () => {
  it('retries spent: the tunnel ends failed, keeps its IP and its one charge, and provisions again once the agent is up', async () => {
    const { gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 500, edgeJobTimeoutMs: 2000, edgeRetryLimit: 1 }, pool: '203.0.113.64/28', startAgent: false });
    try {
      const user = await seedUser(gw.testDb.db);
      const t = (await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'down', origin_ip: '8.8.4.4' } })).body.tunnel as Bought;
      const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
      expect([p.status, p.body.tunnel.status]).toEqual([202, 'provisioning']);
      const status = async () => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [t.id])).rows[0]!.status;
      await until('failed', async () => (await status()) === 'failed');
      const activate = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });
      expect([activate.status, activate.body.error]).toEqual([409, 'invalid_state']);
      await edge.start();
      const again = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
      // This gateway waits only 500 ms, which a first contact (connect, reconcile, apply) may exceed.
      expect([[200, 'provisioned'], [202, 'provisioning']]).toContainEqual([again.status, again.body.tunnel.status]);
      await until('provisioned again', async () => (await status()) === 'provisioned');
      await expectConsistent(gw.testDb.raw, user.accountId, [t], edge, 'provisioned');
    } finally {
      await gw.close();
      await edge.close();
    }
  }, 120_000);
});

describe.skipIf(!isRoot || !canRunPrivatePostgres)('faults: PostgreSQL restarted under load', () => {
  let cluster: PrivatePostgres;
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;

  beforeAll(async () => {
    cluster = await startPrivatePostgres();
    const admin = new pg.Client({ connectionString: cluster.url });
    await admin.connect();
    await admin.query('create database tg');
    await admin.end();
    const url = cluster.urlFor('tg');
    const db = await openDatabase({ ...loadConfig({ DATABASE_URL: url }) });
    const raw = new pg.Pool({ connectionString: url, max: 4 });
    raw.on('error', () => {});
    const testDb: TestDatabase = {
      url,
      name: 'tg',
      db,
      raw,
      drop: async () => {
        await raw.end();
        await db.close();
      },
    };
    ({ gw, edge } = await startProvisioningRig({ testDb, config: { edgeWaitMs: 2000, edgeJobTimeoutMs: 4000, edgeRetryLimit: 30, edgeJobExpireSeconds: 10 }, pool: '203.0.113.32/28' }));
    user = await seedUser(db, { balanceUsd: '50.00' });
  }, 120_000);

  afterAll(async () => {
    await gw?.close().catch(() => {});
    await gw?.testDb.drop().catch(() => {});
    await edge?.close();
    cluster?.stop();
  });

  /** A client that retries what failed for a transient reason, as an integration would (same Idempotency-Key). */
  async function retrying(method: string, path: string, body?: unknown, headers?: Record<string, string>) {
    for (let i = 0; ; i++) {
      try {
        const r = await call(gw.url, method, path, { token: user.writeKey, body, headers });
        if (r.status < 500) return r;
      } catch {
        // connection trouble: retry
      }
      if (i > 100) throw new Error(`${method} ${path} kept failing`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  it('purchases, provisions and deletes racing a restart each happen exactly once', async () => {
    const N = 10;
    const buys = Array.from({ length: N }, (_, i) => retrying('POST', '/api/dedicated', { name: `load-${i}`, origin_ip: '8.8.4.4' }, { 'idempotency-key': `load-${i}` }));
    await new Promise((r) => setTimeout(r, 20));
    await cluster.restart();
    const bought = (await Promise.all(buys)).map((r) => {
      expect(r.status).toBe(201);
      return r.body.tunnel as Bought;
    });
    expect(new Set(bought.map((t) => t.id)).size).toBe(N);

    const provisions = bought.map((t) => retrying('POST', `/api/dedicated/${t.id}/provision`));
    await new Promise((r) => setTimeout(r, 30));
    await cluster.restart();
    for (const r of await Promise.all(provisions)) {
      // 409 only when an earlier attempt already got it provisioned.
      if (r.status === 409) expect(r.body.error_description).toMatch(/provisioned/);
      else expect([200, 202]).toContain(r.status);
    }
    const status = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]?.status;
    for (const t of bought) await until(`${t.id} provisioned`, async () => (await status(t.id)) === 'provisioned', 120_000);
    await expectConsistent(gw.testDb.raw, user.accountId, bought, edge, 'provisioned');

    const deletes = bought.map((t) => retrying('DELETE', `/api/dedicated/${t.id}`));
    await new Promise((r) => setTimeout(r, 30));
    await cluster.restart();
    for (const r of await Promise.all(deletes)) expect([200, 202, 409]).toContain(r.status);
    for (const t of bought) await until(`${t.id} deleted`, async () => (await status(t.id)) === 'deleted', 120_000);
    await expectConsistent(gw.testDb.raw, user.accountId, bought, edge, 'deleted');
    expect(edge.mapElements().filter((e) => bought.some((t) => t.protected_ip === e))).toEqual([]);
  }, 400_000);
});
