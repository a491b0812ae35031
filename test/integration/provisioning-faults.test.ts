// Faults during provisioning, with the real gateway, queue, worker, agent process and kernel namespace
// (veth stand-in for GRE): the agent killed in the middle of a job, the SSH connection cut in the
// middle of a job, and PostgreSQL restarted under load (a private cluster: the shared one serves the
// other test files). Every tunnel must end in the right state, with one charge each and no leaked IP.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../server/config.ts';
import { openDatabase } from '../../server/services.ts';
import { buyTunnel, tunnelStatus, type Bought } from '../helpers/queue.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, TestEdge, type AgentCall } from '../helpers/edge.ts';
import { canRunPrivatePostgres, startPrivatePostgres, type PrivatePostgres } from '../helpers/private-postgres.ts';
import type { TestDatabase } from '../helpers/db.ts';
import { isRoot } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';

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

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('faults: agent killed and SSH cut mid-job', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  const buy = (name: string) => buyTunnel(gw.url, user.writeKey, name);
  const status = (id: string) => tunnelStatus(gw.testDb.raw, id);
  /** A dataplane call that carries tunnel `id` (its own job, or a reconcile listing it). */
  const carries = (id: string, ...ops: AgentCall['call'][]) => (c: AgentCall) => c.ids.includes(id) && (ops.length === 0 || ops.includes(c.call));

  beforeAll(async () => {
    // The agent stops every dataplane call until the test releases it (edge.holding picks which stay held).
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 2000, edgeJobTimeoutMs: 30_000, edgeRetryLimit: 30 }, pool: '203.0.113.16/28', startAgent: false }));
    await edge.start({ hold: 'after' });
    user = await seedUser(gw.testDb.db);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    await edge?.close();
  });

  it('the agent killed after it applied a tunnel but before it answered: the job is retried once it is back, and the tunnel ends provisioned', async () => {
    const t = await buy('killed');
    // Held after the kernel applied it, before the answer: the worst moment, the edge has it and the gateway does not know.
    edge.holding = carries(t.id);
    const from = edge.calls.length;
    const p = call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    const cut = await edge.waitForCall(carries(t.id), from);
    expect(edge.links()).toContain(t.tunnel_name); // the kernel has it: held after the apply
    await edge.kill();
    edge.holding = () => false;
    // Nothing can answer for it while the agent is down: the wait ends in 202, by state.
    expect((await p).status).toBe(202);
    expect(await status(t.id)).toBe('provisioning');
    const afterKill = edge.calls.length;
    await edge.start({ hold: 'after' });
    await until('provisioned', async () => (await status(t.id)) === 'provisioned');
    // A retry really happened: the new agent process got a call carrying this tunnel after the one that was cut.
    const retried = edge.calls.slice(afterKill).filter(carries(t.id));
    expect(retried.length).toBeGreaterThanOrEqual(1);
    expect(retried[0]!.run).toBe(cut.run! + 1);
    await expectConsistent(gw.testDb.raw, user.accountId, [t], edge, 'provisioned');

    // A delete cut the same way (the kernel no longer has it, the gateway was not told) ends deleted with the IP back.
    edge.holding = carries(t.id, 'remove');
    const fromD = edge.calls.length;
    const d = call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: user.writeKey });
    const cutD = await edge.waitForCall(carries(t.id, 'remove'), fromD);
    expect(edge.links()).not.toContain(t.tunnel_name);
    await edge.kill();
    edge.holding = () => false;
    expect((await d).status).toBe(202);
    const afterKillD = edge.calls.length;
    await edge.start({ hold: 'after' });
    await until('deleted', async () => (await status(t.id)) === 'deleted');
    // The remove was sent again to the new agent process (a reconcile would not list a deleting tunnel).
    const retriedD = edge.calls.slice(afterKillD).filter(carries(t.id, 'remove'));
    expect(retriedD.length).toBeGreaterThanOrEqual(1);
    expect(retriedD[0]!.run).toBe(cutD.run! + 1);
    await expectConsistent(gw.testDb.raw, user.accountId, [t], edge, 'deleted');
  }, 180_000);

  it('the SSH connection dropped while the agent works: retried on a new connection, applied, no duplicate state', async () => {
    const t = await buy('cut');
    // Held before the kernel: the connection is cut while the job is inside the agent, then the held call
    // goes on (the agent applies it, answering into a closed channel) while the gateway retries on a new connection.
    await edge.kill();
    await edge.start({ hold: 'before' });
    edge.holding = carries(t.id);
    const from = edge.calls.length;
    const p = call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    const first = await edge.waitForCall(carries(t.id), from);
    edge.holding = () => false;
    gw.services.provisioning.connections!.disconnect(edge.nodeId);
    edge.release(first);
    const res = await p;
    // Whether the retry finished inside the wait or not, the answer is honest about it.
    expect(await settle(res, 'provisioned', () => status(t.id))).toBe('provisioned');
    await expectConsistent(gw.testDb.raw, user.accountId, [t], edge, 'provisioned');
    // The job reached the agent again after the cut (a reconcile on the new connection, the apply, or both).
    expect(edge.calls.slice(from).filter(carries(t.id)).length).toBeGreaterThanOrEqual(2);
    // Exactly one link for it, however many times it was applied, and no DNAT: it is not activated.
    expect(edge.links().filter((l) => l === t.tunnel_name)).toHaveLength(1);
    expect(edge.mapElements().filter((e) => e === t.protected_ip)).toHaveLength(0);
  }, 180_000);
});

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('faults: an edge that stays down', () => {
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

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)') || skipUnless(canRunPrivatePostgres, 'a private PostgreSQL cluster (root, PostgreSQL server binaries, the postgres user)'))('faults: PostgreSQL restarted under load', () => {
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

  /** Every request that failed for a transient reason and was sent again (the proof that the restart cut something). */
  let retries = 0;
  /** A client that retries what failed for a transient reason, as an integration would (same Idempotency-Key). */
  async function retrying(method: string, path: string, body?: unknown, headers?: Record<string, string>) {
    for (let i = 0; ; i++) {
      try {
        const r = await call(gw.url, method, path, { token: user.writeKey, body, headers });
        if (r.status < 500) return r;
      } catch {
        // connection trouble: retry
      }
      retries++;
      if (i > 100) throw new Error(`${method} ${path} kept failing`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  /**
   * Holds the rows `lockSql` selects FOR UPDATE on a connection of its own, then sends the requests `send`
   * makes, so the ones that change those rows stop inside their transactions (taken before any request is
   * sent, the lock cannot be missed by a quick one); once PostgreSQL shows at least `atLeast` sessions waiting
   * on it, restarts the cluster under them (which also ends the holder). In flight is observed, never assumed.
   */
  async function restartUnder<T>(lockSql: string, params: unknown[], atLeast: number, send: () => Promise<T>[]): Promise<T[]> {
    const holder = new pg.Client({ connectionString: gw.testDb.url });
    holder.on('error', () => {}); // the restart ends it
    await holder.connect();
    await holder.query('begin');
    await holder.query(lockSql, params);
    const { rows } = await holder.query<{ pid: number }>('select pg_backend_pid() as pid');
    const sent = send();
    await until(`${atLeast} requests waiting inside their transactions`, async () => {
      const w = await gw.testDb.raw.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and $1::int = any(pg_blocking_pids(pid))`,
        [rows[0]!.pid],
      );
      return w.rows[0]!.n >= atLeast;
    });
    await cluster.restart();
    await holder.end().catch(() => {});
    return Promise.all(sent);
  }

  it('purchases, provisions and deletes cut by a restart mid-transaction each happen exactly once', async () => {
    const N = 10;
    // Purchases lock the account row first: with it held, they stop inside their transactions.
    let before = retries;
    const buys = await restartUnder('select 1 from account where id = $1 for update', [user.accountId], 1, () =>
      Array.from({ length: N }, (_, i) => retrying('POST', '/api/dedicated', { name: `load-${i}`, origin_ip: '8.8.4.4' }, { 'idempotency-key': `load-${i}` })),
    );
    const bought = buys.map((r) => {
      expect(r.status).toBe(201);
      return r.body.tunnel as Bought;
    });
    expect(new Set(bought.map((t) => t.id)).size).toBe(N);
    expect(retries - before, 'a purchase cut by the restart was sent again').toBeGreaterThan(0);

    // Provisions change the tunnel rows: held, they stop on them.
    before = retries;
    const provisions = await restartUnder('select 1 from tunnel where account_id = $1 for update', [user.accountId], 1, () =>
      bought.map((t) => retrying('POST', `/api/dedicated/${t.id}/provision`)),
    );
    for (const r of provisions) {
      // 409 only when an earlier attempt already got it provisioned.
      if (r.status === 409) expect(r.body.error_description).toMatch(/provisioned/);
      else expect([200, 202]).toContain(r.status);
    }
    expect(retries - before, 'a provision cut by the restart was sent again').toBeGreaterThan(0);
    const status = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]?.status;
    for (const t of bought) await until(`${t.id} provisioned`, async () => (await status(t.id)) === 'provisioned');
    await expectConsistent(gw.testDb.raw, user.accountId, bought, edge, 'provisioned');

    // The provision jobs end just after their tunnels moved (the worker then records the applied spec under
    // the tunnel's row lock): one still running would be the session found waiting below, and the restart
    // would cut it instead of a delete. So wait until they ended, and until every delete waits.
    await until('the provision jobs ended', async () => {
      const live = await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data->>'tunnelId' = any($1::text[]) and state < 'completed'`, [bought.map((t) => t.id)]);
      return live.rows[0]!.n === 0;
    });
    before = retries;
    const deletes = await restartUnder('select 1 from tunnel where account_id = $1 for update', [user.accountId], 1, () =>
      bought.map((t) => retrying('DELETE', `/api/dedicated/${t.id}`)),
    );
    for (const r of deletes) expect([200, 202, 409]).toContain(r.status);
    expect(retries - before, 'a delete cut by the restart was sent again').toBeGreaterThan(0);
    for (const t of bought) await until(`${t.id} deleted`, async () => (await status(t.id)) === 'deleted');
    await expectConsistent(gw.testDb.raw, user.accountId, bought, edge, 'deleted');
    expect(edge.mapElements().filter((e) => bought.some((t) => t.protected_ip === e))).toEqual([]);
  }, 400_000);
});
