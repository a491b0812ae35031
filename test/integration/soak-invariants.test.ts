// The soak's invariants (soak/invariants.ts) on real PostgreSQL: each holds on a consistent state made by
// the real gateway (purchases, a delete), then each rule is broken on purpose, by hand in SQL, and its check
// must fail naming what broke. The edge comparison runs on observations written here: a stand-in for the
// kernel's, since what it guards is the comparison (the soak itself reads real namespaces).
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../common/log.ts';
import { EdgeQueue } from '../../server/provisioning/queue.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import {
  answeredPurchasesExist,
  chargesMatchTunnels,
  compareEdge,
  edgesMatchDatabase,
  freedIpsReturned,
  ledgerSumsToBalance,
  movingTunnelsHaveJobs,
  protectedIpHeldOnce,
  queueNoDoubleRun,
  queueNothingStuck,
  webhooksDelivered,
  type CheckResult,
} from '../../soak/invariants.ts';
import type { EdgeObservation, SoakEdge } from '../../soak/edges.ts';

let gw: RunningGateway;
let alice: SeededUser;
let nodeId: string;
/** A live (pending) tunnel and a deleted one, by id. */
let live: { id: string; protected_ip: string; tunnel_name: string };
let gone: { id: string; protected_ip: string; tunnel_name: string };

const q = <R extends Record<string, unknown>>(text: string, values?: unknown[]) => gw.testDb.raw.query<R>(text, values);
const db = { query: q };

function fails(r: CheckResult, pattern: RegExp): void {
  expect(r.ok, r.name).toBe(false);
  expect(r.found.join('\n')).toMatch(pattern);
}

beforeAll(async () => {
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  nodeId = (await seedNode(gw.testDb.db, '198.18.0.0/28')).node_id;
  alice = await seedUser(gw.testDb.db, { balanceUsd: '100.00' });
  const buy = async () => {
    const r = await call(gw.url, 'POST', '/api/dedicated', { token: alice.writeKey, body: { origin_ip: '8.8.4.4' } });
    expect(r.status, JSON.stringify(r.body)).toBe(201);
    return r.body.tunnel as { id: string; protected_ip: string; tunnel_name: string };
  };
  live = await buy();
  gone = await buy();
  expect((await call(gw.url, 'DELETE', `/api/dedicated/${gone.id}`, { token: alice.writeKey })).status).toBe(200);
  // The queue's schema, as a gateway with a worker makes it.
  const queue = await EdgeQueue.open(gw.testDb.db, { retryLimit: 1, expireInSeconds: 30 }, createLogger('silent'));
  await queue.stop();
}, 120_000);

afterAll(async () => {
  await gw?.close();
});

// Each test breaks one rule inside a transaction it rolls back, so the next starts from the consistent state.
let tx: { query: typeof q; rollback: () => Promise<void> } | null = null;
async function broken(): Promise<typeof db> {
  const c = await gw.testDb.raw.connect();
  await c.query('begin');
  tx = {
    query: ((text: string, values?: unknown[]) => c.query(text, values)) as typeof q,
    rollback: async () => {
      await c.query('rollback');
      c.release();
    },
  };
  return { query: tx.query };
}
beforeEach(async () => {
  await tx?.rollback();
  tx = null;
});
afterAll(async () => {
  await tx?.rollback();
});

describe('money', () => {
  it('ledger sums to balance: holds, then fails for a balance changed without a ledger row', async () => {
    expect(await ledgerSumsToBalance(db)).toMatchObject({ ok: true, looked: expect.any(Number) });
    const t = await broken();
    await t.query('update account set balance_usd = balance_usd + 1 where id = $1', [alice.accountId]);
    fails(await ledgerSumsToBalance(t), new RegExp(`account ${alice.accountId}`));
  });

  it('one charge per tunnel: holds, then fails for a charge with no tunnel and for a tunnel charged twice', async () => {
    expect((await chargesMatchTunnels(db)).ok).toBe(true);
    const t = await broken();
    await t.query(`insert into ledger_entry (account_id, amount_usd, balance_after, kind, tunnel_id) values ($1, -1, 0, 'purchase', $2)`, [alice.accountId, randomUUID()]);
    fails(await chargesMatchTunnels(t), /with no matching tunnel/);
    await t.query(
      `insert into ledger_entry (account_id, amount_usd, balance_after, kind, tunnel_id) select account_id, amount_usd, balance_after, kind, tunnel_id from ledger_entry where tunnel_id = $1`,
      [live.id],
    );
    fails(await chargesMatchTunnels(t), new RegExp(`tunnel ${live.id}: charged 2 times`));
  });

  it('every 201 purchase exists: fails for an id the database does not have', async () => {
    expect((await answeredPurchasesExist(db, new Set([live.id, gone.id]))).ok).toBe(true);
    const ghost = randomUUID();
    fails(await answeredPurchasesExist(db, new Set([live.id, ghost])), new RegExp(ghost));
  });
});

describe('protected IPs', () => {
  it('held once: fails when the pool row and the live tunnel disagree', async () => {
    expect((await protectedIpHeldOnce(db)).ok).toBe(true);
    const t = await broken();
    await t.query('update protected_ip set tunnel_id = null where ip = $1', [live.protected_ip]);
    fails(await protectedIpHeldOnce(t), new RegExp(`${live.protected_ip.replace(/\./g, '\\.')}: pool row says free`));
  });

  it('freed IPs back in the pool: fails for a deleted tunnel that still holds its IP', async () => {
    expect((await freedIpsReturned(db)).ok).toBe(true);
    const t = await broken();
    await t.query(`update tunnel set status = 'deleted' where id = $1`, [live.id]);
    fails(await freedIpsReturned(t), new RegExp(`held by deleted tunnel ${live.id}`));
  });
});

describe('queue', () => {
  const job = (t: typeof db, data: object, state: string, extra = '') =>
    t.query(`insert into pgboss.job (name, data, state${extra ? ', start_after' : ''}) values ('edge-job', $1::jsonb, $2::pgboss.job_state${extra ? `, ${extra}` : ''})`, [
      JSON.stringify(data),
      state,
    ]);

  it('no job run twice: fails for two live jobs of one tunnel, and for two jobs of one tunnel that ran overlapping', async () => {
    expect((await queueNoDoubleRun(db)).ok).toBe(true);
    const t = await broken();
    await job(t, { tunnelId: live.id, nodeId }, 'created');
    expect((await queueNoDoubleRun(t)).ok).toBe(true);
    await job(t, { tunnelId: live.id, nodeId }, 'retry');
    fails(await queueNoDoubleRun(t), new RegExp(`${live.id}: 2 live jobs`));
  });

  it('no job run twice: fails for two completed jobs of one tunnel whose runs overlapped', async () => {
    const t = await broken();
    const done = (start: string, end: string) =>
      t.query(`insert into pgboss.job (name, data, state, started_on, completed_on) values ('edge-job', $1::jsonb, 'completed', now() - $2::interval, now() - $3::interval)`, [
        JSON.stringify({ tunnelId: gone.id, nodeId }),
        start,
        end,
      ]);
    await done('60 s', '50 s');
    await done('40 s', '30 s');
    expect((await queueNoDoubleRun(t)).ok).toBe(true);
    await done('55 s', '20 s');
    fails(await queueNoDoubleRun(t), new RegExp(`tunnel ${gone.id}: jobs .* overlapping`));
  });

  it('nothing stuck: fails for a job due long ago that no worker took', async () => {
    expect((await queueNothingStuck(db)).ok).toBe(true);
    const t = await broken();
    await job(t, { tunnelId: live.id, nodeId }, 'created', `now() - interval '10 minutes'`);
    fails(await queueNothingStuck(t), /created, \d+ s past its due time/);
  });

  it('moving tunnels have a job: fails for a tunnel left provisioning with none', async () => {
    const t = await broken();
    const cutoff = new Date(Date.now() + 60_000);
    expect((await movingTunnelsHaveJobs(t, cutoff)).ok).toBe(true);
    await t.query(`update tunnel set status = 'provisioning' where id = $1`, [live.id]);
    fails(await movingTunnelsHaveJobs(t, cutoff), new RegExp(`tunnel ${live.id} provisioning`));
    await job(t, { tunnelId: live.id, nodeId }, 'created');
    expect((await movingTunnelsHaveJobs(t, cutoff)).ok).toBe(true);
  });
});

describe('webhooks', () => {
  it('every event delivered: fails until the receiver has the delivery, and only for deliveries before the cutoff', async () => {
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: alice.writeKey, body: { url: 'http://127.0.0.1:9/hook' } });
    expect(hook.status).toBe(201);
    const webhookId = hook.body.webhook.id as string;
    const t = await broken();
    const id = `msg_${randomUUID().replace(/-/g, '')}`;
    await t.query(`insert into webhook_delivery (id, webhook_id, event_type, body, next_attempt_at) values ($1, $2, 'tunnel.status_changed', '{}', now())`, [id, webhookId]);
    const none = () => new Set<string>();
    expect((await webhooksDelivered(t, none, new Date(Date.now() - 3_600_000))).ok).toBe(true);
    const after = new Date(Date.now() + 60_000);
    fails(await webhooksDelivered(t, none, after), new RegExp(`${id} to webhook ${webhookId} not received`));
    expect((await webhooksDelivered(t, (w) => new Set(w === webhookId ? [id] : []), after)).ok).toBe(true);
  });
});

describe('edge state', () => {
  const row = (t: { id: string; protected_ip: string; tunnel_name: string }, status: string, applied = 1, spec = 1) => ({
    id: t.id,
    tunnel_name: t.tunnel_name,
    protected_ip: t.protected_ip,
    status,
    applied_revision: applied,
    spec_revision: spec,
  });
  const rows = (...r: ReturnType<typeof row>[]) => new Map(r.map((x) => [x.id, x]));
  const seen = (o: Partial<EdgeObservation>): EdgeObservation => ({ links: [], counterKeys: [], dnatKeys: [], rules: 5, ...o });
  const a = { id: 'a', protected_ip: '198.18.0.1', tunnel_name: 'tg-a' };
  const b = { id: 'b', protected_ip: '198.18.0.2', tunnel_name: 'tg-b' };

  it('holds when the kernel has exactly the settled tunnels', () => {
    const want = rows(row(a, 'provisioned'), row(b, 'deleted'));
    expect(compareEdge(want, seen({ links: ['tg-a'], counterKeys: ['198.18.0.1'] }), want)).toEqual({ found: [], compared: 2 });
  });

  it('fails for a missing link, a missing counter element, a deleted tunnel still linked, a stray link, a flushed table', () => {
    const want = rows(row(a, 'provisioned'), row(b, 'deleted'));
    expect(compareEdge(want, seen({ counterKeys: ['198.18.0.1'] }), want).found).toEqual(['provisioned tunnel a: link tg-a missing']);
    expect(compareEdge(want, seen({ links: ['tg-a'] }), want).found).toEqual(['provisioned tunnel a: counter element 198.18.0.1 missing']);
    expect(compareEdge(want, seen({ links: ['tg-a', 'tg-b'], counterKeys: ['198.18.0.1'] }), want).found).toEqual(['deleted tunnel b: link tg-b still on the edge']);
    expect(compareEdge(want, seen({ links: ['tg-a', 'tg-zz'], counterKeys: ['198.18.0.1'] }), want).found).toEqual(['link tg-zz belongs to no tunnel']);
    expect(compareEdge(want, seen({ links: ['tg-a'], counterKeys: ['198.18.0.1'], rules: 0 }), want).found).toEqual(['the agent table has no rules']);
  });

  it('leaves out tunnels on their way (provisioning, a settings change not applied, a row that changed between the reads)', () => {
    const before = rows(row(a, 'provisioning'), row(b, 'provisioned', 1, 2));
    expect(compareEdge(before, seen({}), before)).toEqual({ found: [], compared: 0 });
    const moved = rows(row(a, 'provisioned'));
    expect(compareEdge(moved, seen({}), rows(row(a, 'deleting')))).toEqual({ found: [], compared: 0 });
  });

  it('edgesMatchDatabase reads the database around the observation: fails for a pending tunnel whose link the edge holds', async () => {
    const standin = (o: EdgeObservation): SoakEdge => ({ nodeId, label: 'stand-in edge', observe: () => o, close: async () => {} });
    expect((await edgesMatchDatabase(db, [standin(seen({}))])).ok).toBe(true);
    fails(await edgesMatchDatabase(db, [standin(seen({ links: [live.tunnel_name] }))]), new RegExp(`stand-in edge: pending tunnel ${live.id}: link ${live.tunnel_name} still on the edge`));
    // An edge with nothing to read is not compared.
    expect((await edgesMatchDatabase(db, [{ nodeId, label: 'no kernel', observe: () => null, close: async () => {} }])).looked).toBe(0);
  });
});
