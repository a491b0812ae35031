// Health changes pushed on the events stream, as the fleet simulator found them breaking (docs/SCALE.md "What
// breaks first"), against the real gateway and PostgreSQL: a node's pushed changes are written in one transaction
// per batch (server/health/push-batch.ts), each real change still with one history row, one `tunnel.health_changed`
// and its tunnelStatus publication, and a tunnel that flaps within a batch keeps every change in order; two
// replicas pushing the same changes write each once, and a push never waits on a tunnel row another transaction
// holds (the other replica's write, a round): it leaves that row to the holder. The outbox is capped once per batch,
// not once per event, and the cap does not scan the whole outbox; it still keeps 1,000 pending per webhook.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { PoolClient } from 'pg';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { until } from '../helpers/wait.ts';
import { StatusIngest } from '../../server/health/ingest.ts';
import { TrafficStore } from '../../server/health/storage.ts';
import { CAP_PENDING_SQL, MAX_PENDING_PER_WEBHOOK } from '../../server/webhooks/events.ts';
import type { Database, Sql } from '../../server/db/database.ts';
import type { Health } from '../../common/tunnel-status.ts';

let gw: RunningGateway;
let user: SeededUser;
let webhookId: string;
let nodeId: string;
const tunnels: string[] = [];
let next = 0;

/** `n` tunnels of the node not used by another test, active and 'up'. */
async function take(n: number): Promise<string[]> {
  const ids = tunnels.slice(next, next + n);
  next += n;
  expect(ids.length).toBe(n);
  return ids;
}

/** The database, its transactions counted (each is one commit, one WAL flush). */
function counted(db: Database): { db: Database; transactions: () => number } {
  let n = 0;
  const proxy = new Proxy(db, {
    get(target, prop, receiver) {
      if (prop === 'transaction') {
        return (fn: Parameters<Database['transaction']>[0]) => {
          n++;
          return target.transaction(fn);
        };
      }
      const v: unknown = Reflect.get(target, prop, receiver);
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { db: proxy, transactions: () => n };
}

/** A replica's ingest on the test database (its own batcher), publishing to `published` and the real bus. */
/** Statements that cap the outbox, counted over every replica() below. */
let caps = 0;

function replica(db: Database, published: { id: string; health?: Health }[], windowMs = 60_000, maxBatch = 500): StatusIngest {
  const bus = {
    publish: async (id: string, status: Parameters<RunningGateway['services']['provisioning']['bus']['publish']>[1], health?: Health) => {
      published.push({ id, health });
      await gw.services.provisioning.bus.publish(id, status, health);
    },
  };
  const real = gw.services.provisioning.events;
  const events = {
    healthChangedAll: (sql: Pick<Sql, 'query'>, ids: readonly string[]) =>
      real.healthChangedAll(
        {
          query: (text: string, params?: unknown[]) => {
            if (text === CAP_PENDING_SQL) caps++;
            return sql.query(text, params);
          },
        } as Pick<Sql, 'query'>,
        ids,
      ),
  };
  return new StatusIngest(db, new TrafficStore(db), events, bus, undefined, undefined, { windowMs, maxBatch });
}

const history = async (id: string) =>
  (await gw.testDb.raw.query('select previous, health, at from traffic.tunnel_health_change where tunnel_id = $1 order by at, seq', [id])).rows;
const outbox = async (id: string) =>
  (await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from webhook_delivery where event_type = 'tunnel.health_changed' and body::jsonb #>> '{data,tunnel,id}' = $1`, [id])).rows[0]!.n;
const healthOf = async (id: string) => (await gw.testDb.raw.query('select health from tunnel where id = $1', [id])).rows[0].health as Health;

beforeAll(async () => {
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  user = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
  nodeId = (await seedNode(gw.testDb.db, '198.18.90.0/26')).node_id;
  const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: 'https://hooks.example.com/push' } });
  expect(hook.status).toBe(201);
  webhookId = hook.body.webhook.id as string;
  for (let i = 0; i < 36; i++) {
    const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
    expect(r.status).toBe(201);
    tunnels.push(r.body.tunnel.id as string);
  }
  await gw.testDb.raw.query(`update tunnel set status = 'active', node_id = $1, health = 'up' where id = any($2::uuid[])`, [nodeId, tunnels]);
}, 180_000);

afterAll(async () => {
  await gw?.close();
});

describe('pushed health changes', () => {
  it("a node's pushed changes are one transaction, each change with its history row, its event and its publication", async () => {
    const ids = await take(20);
    const c = counted(gw.testDb.db);
    const published: { id: string; health?: Health }[] = [];
    const ingest = replica(c.db, published, 60_000, ids.length);
    const checkedAt = new Date(Date.now() - 2000);
    caps = 0;
    // Handed over one after another without waiting, as the events stream does; the 20th fills the batch.
    const results = await Promise.all(ids.map((id) => ingest.pushHealth(nodeId, id, 'down', checkedAt)));
    expect(results).toEqual(ids.map(() => true));
    expect(c.transactions()).toBe(1);
    // The outbox capped once for the batch, not once per event.
    expect(caps).toBe(1);
    for (const id of ids) {
      expect(await healthOf(id)).toBe('down');
      expect(await history(id)).toEqual([{ previous: 'up', health: 'down', at: checkedAt }]);
      expect(await outbox(id)).toBe(1);
    }
    expect(published.map((p) => p.id).sort()).toEqual([...ids].sort());
    expect(published.every((p) => p.health === 'down')).toBe(true);

    // The same changes again (another replica's stream, the pull): nothing more.
    expect(await Promise.all(ids.map((id) => ingest.pushHealth(nodeId, id, 'down', checkedAt)))).toEqual(ids.map(() => false));
    for (const id of ids) expect(await outbox(id)).toBe(1);
  });

  it('a tunnel that flaps within the window keeps each change, in order; another node cannot move it', async () => {
    const [id] = await take(1);
    const published: { id: string; health?: Health }[] = [];
    const ingest = replica(gw.testDb.db, published);
    const t0 = Date.now() - 3000;
    const flaps = [
      ingest.pushHealth(nodeId, id!, 'down', new Date(t0)),
      ingest.pushHealth(nodeId, id!, 'up', new Date(t0 + 1000)),
      ingest.pushHealth(nodeId, id!, 'down', new Date(t0 + 2000)),
    ];
    const elsewhere = (await seedNode(gw.testDb.db, '198.18.91.0/28')).node_id;
    const foreign = ingest.pushHealth(elsewhere, id!, 'up', new Date(t0 + 2500));
    await ingest.drainPushes();
    expect(await Promise.all(flaps)).toEqual([true, true, true]);
    expect(await foreign).toBe(false);
    expect(await history(id!)).toEqual([
      { previous: 'up', health: 'down', at: new Date(t0) },
      { previous: 'down', health: 'up', at: new Date(t0 + 1000) },
      { previous: 'up', health: 'down', at: new Date(t0 + 2000) },
    ]);
    expect(await outbox(id!)).toBe(3);
    expect(published.map((p) => p.health)).toEqual(['down', 'up', 'down']);
  });

  it('two replicas pushing the same changes write each once: one history row and one outbox row per change', async () => {
    const ids = await take(10);
    const published: { id: string; health?: Health }[] = [];
    const a = replica(gw.testDb.db, published, 60_000, ids.length);
    const b = replica(gw.testDb.db, published, 60_000, ids.length);
    const checkedAt = new Date(Date.now() - 1000);
    const [ra, rb] = await Promise.all([
      Promise.all(ids.map((id) => a.pushHealth(nodeId, id, 'down', checkedAt))),
      Promise.all(ids.map((id) => b.pushHealth(nodeId, id, 'down', checkedAt))),
    ]);
    // Each change written by exactly one of them.
    expect(ids.map((_, i) => Number(ra[i]) + Number(rb[i]))).toEqual(ids.map(() => 1));
    for (const id of ids) {
      expect(await history(id)).toEqual([{ previous: 'up', health: 'down', at: checkedAt }]);
      expect(await outbox(id)).toBe(1);
    }
    expect(published.length).toBe(ids.length);
  });

  it('a push does not wait on a tunnel row another transaction holds: it leaves that row and writes the rest', async () => {
    const [held, free] = await take(2);
    const ingest = replica(gw.testDb.db, [], 60_000, 2);
    const holder: PoolClient = await gw.testDb.raw.connect();
    try {
      // The other replica (or a round) in the middle of writing this tunnel.
      await holder.query('begin');
      await holder.query('select 1 from tunnel where id = $1 for update', [held]);
      const pushed = Promise.all([ingest.pushHealth(nodeId, held!, 'down', new Date()), ingest.pushHealth(nodeId, free!, 'down', new Date())]);
      // Whichever comes first: the push's answer, or a backend of this database waiting on a lock.
      const waited = until('a backend waiting on a row lock', async () => {
        const { rows } = await gw.testDb.raw.query(`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`);
        return rows.length > 0 ? ('waited on the lock' as const) : null;
      });
      const first = await Promise.race([pushed, waited]);
      expect(first).toEqual([false, true]);
      expect(await healthOf(held!)).toBe('up');
      expect(await healthOf(free!)).toBe('down');
      expect(await history(held!)).toEqual([]);
      expect(await outbox(held!)).toBe(0);
    } finally {
      await holder.query('rollback');
      holder.release();
    }
    // Its holder gone, the same change (the next push, or the pull) is written.
    const again = ingest.pushHealth(nodeId, held!, 'down', new Date());
    await ingest.drainPushes();
    expect(await again).toBe(true);
  });
});

describe('outbox cap', () => {
  it(`finds what to give up without scanning the whole outbox, and keeps ${MAX_PENDING_PER_WEBHOOK} pending`, async () => {
    // A backlog past the cap, as a start of the fleet leaves it, beside many deliveries long given up.
    await gw.testDb.raw.query(
      `insert into webhook_delivery (id, webhook_id, event_type, body, next_attempt_at, created_at, given_up_at)
       select 'msg_old_' || g, $1, 'tunnel.health_changed', '{}', now(), now() - interval '1 day', now() from generate_series(1, 20000) g`,
      [webhookId],
    );
    await gw.testDb.raw.query(
      `insert into webhook_delivery (id, webhook_id, event_type, body, next_attempt_at, created_at)
       select 'msg_backlog_' || g, $1, 'tunnel.health_changed', '{}', now(), now() - make_interval(secs => g) from generate_series(1, 1500) g`,
      [webhookId],
    );
    await gw.testDb.raw.query('analyze webhook_delivery');
    const params = ['not sent: test', JSON.stringify([webhookId]), MAX_PENDING_PER_WEBHOOK, MAX_PENDING_PER_WEBHOOK];
    const [plan] = await gw.testDb.db.query<{ 'QUERY PLAN': unknown }>(`explain (format json) ${CAP_PENDING_SQL}`, params);
    const text = JSON.stringify(plan!['QUERY PLAN']);
    // No scan of the whole outbox (the 20,000 given up included) to find those rows again: the update takes them
    // by primary key, and the pending ones come from the webhook's pending index.
    expect(text).not.toContain('"Node Type":"Seq Scan"');
    expect(text).toContain('webhook_delivery_pkey');

    // The rule holds: one more event leaves the newest 1,000 waiting, the oldest given up.
    const [id] = await take(1);
    await gw.testDb.db.transaction((sql) => gw.services.provisioning.events.healthChangedAll(sql, [id!]));
    const { rows } = await gw.testDb.raw.query<{ waiting: number; oldest_given_up: boolean; newest_waiting: boolean }>(
      // In flight (the gateway's sender trying the endpoint) is neither counted nor touched by the cap.
    `select count(*) filter (where delivered_at is null and given_up_at is null and (lease_until is null or lease_until <= now()))::int as waiting,
              bool_and(given_up_at is not null) filter (where id in ('msg_backlog_1500', 'msg_backlog_1000')) as oldest_given_up,
              bool_and(given_up_at is null) filter (where id = 'msg_backlog_1') as newest_waiting
         from webhook_delivery where webhook_id = $1`,
      [webhookId],
    );
    expect(rows[0]).toEqual({ waiting: MAX_PENDING_PER_WEBHOOK, oldest_given_up: true, newest_waiting: true });
  });
});
