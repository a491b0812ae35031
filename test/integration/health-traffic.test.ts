// Health and traffic on the gateway's side (docs/CONTRACTS.md "Health and
// traffic"), through the ingest seam (server/health/ingest.ts) that the collector feeds with a node's
// `status` answer, against the real gateway and PostgreSQL: counters into exact deltas (first sighting,
// restart, idle minutes), minute points and the hourly rollup, partitions dropped at retention, the
// traffic API's shapes and errors (validated against schema/openapi.yaml), a health change reaching the
// graphql-ws subscription and the webhook outbox once, and a node that does not answer (a real SSH
// connection to a closed port) turning its tunnels unknown with the metric saying so, polled once per
// round by two replicas together.
import { createClient } from 'graphql-ws';
import net from 'node:net';
import WebSocket from 'ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi, expectMatchesSchema } from '../helpers/openapi.ts';
import { until } from '../helpers/wait.ts';
import { setRate } from '../../server/domain/settings.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { createLogger } from '../../common/log.ts';
import { DROP_REASONS, type DropReason, type Health, type StatusResult, type TunnelCounters } from '../../common/tunnel-status.ts';
import { HOUR_MS, MINUTE_MS } from '../../server/health/storage.ts';
import { Collector } from '../../server/health/collector.ts';
import { KeyedLocks } from '../../server/provisioning/locks.ts';
import { showNode } from '../../server/domain/nodes.ts';

const TRAFFIC = '/api/dedicated/{id}/traffic';
const zeroDrops = (): Record<DropReason, number> => Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>;

function counters(c: Partial<Omit<TunnelCounters, 'dropped'>> & { dropped?: Partial<Record<DropReason, number>> }): TunnelCounters {
  return { packets_in: 0, bytes_in: 0, packets_out: 0, bytes_out: 0, ...c, dropped: { ...zeroDrops(), ...c.dropped } };
}

function status(tunnels: { id: string; c: TunnelCounters; health?: Health; checkedAt?: string | null }[]): StatusResult {
  return {
    agent: { version: '0.1.0', uptime_s: 10, tunnels: tunnels.length },
    tunnels: tunnels.map((t) => ({ id: t.id, health: t.health ?? 'up', checked_at: t.checkedAt === undefined ? new Date().toISOString() : t.checkedAt, counters: t.c })),
  };
}

const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

let gw: RunningGateway;
let user: SeededUser;
let other: SeededUser;
let nodeId: string;

async function buy(u: SeededUser, state = 'active'): Promise<string> {
  const r = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(r.status).toBe(201);
  const id = r.body.tunnel.id as string;
  // Put on the edge without an agent: the ingest seam is what is under test here.
  await gw.testDb.raw.query('update tunnel set status = $1 where id = $2', [state, id]);
  return id;
}

async function traffic(id: string, q: Record<string, string>, token = user.readKey) {
  const r = await call(gw.url, 'GET', `/api/dedicated/${id}/traffic?${new URLSearchParams(q).toString()}`, { token });
  expectMatchesOpenApi('get', TRAFFIC, r.status, r.body, r.headers);
  return r;
}

beforeAll(async () => {
  gw = await startGateway({ config: { allowPrivateWebhooks: true, edgeJobTimeoutMs: 3000 } });
  nodeId = (await seedNode(gw.testDb.db, '198.18.9.0/27')).node_id;
  await setRate(gw.testDb.db, '90');
  user = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
  other = await seedUser(gw.testDb.db);
}, 60_000);

afterAll(async () => {
  await gw?.close();
});

describe('counters into traffic points', () => {
  it('first sighting is a baseline, a decrease is a restart (never negative), idle minutes store nothing, sums are exact', async () => {
    const id = await buy(user);
    const ingest = gw.services.health.ingest;
    const t0 = Math.floor((Date.now() - 30 * MINUTE_MS) / MINUTE_MS) * MINUTE_MS;
    const round = (ms: number, c: TunnelCounters) => ingest.ingestStatus(nodeId, status([{ id, c }]), new Date(t0 + ms));
    // Minute 0: a first sighting with big counters (carried before we knew) then +100 packets, +100,000 bytes in ...
    expect((await round(5_000, counters({ packets_in: 1000, bytes_in: 1_000_000, packets_out: 10, bytes_out: 500, dropped: { not_allowed: 7 } }))).carried).toBe(0);
    await round(35_000, counters({ packets_in: 1100, bytes_in: 1_100_000, packets_out: 15, bytes_out: 900, dropped: { not_allowed: 9 } }));
    // Minute 1: +50 packets; then the agent restarted: every counter from zero again (delta = the new value).
    await round(65_000, counters({ packets_in: 1150, bytes_in: 1_150_000, packets_out: 20, bytes_out: 1000, dropped: { not_allowed: 9 } }));
    await round(95_000, counters({ packets_in: 30, bytes_in: 3000, packets_out: 0, bytes_out: 0, dropped: { spoofed: 4 } }));
    // Minute 2: nothing moved.
    expect((await round(125_000, counters({ packets_in: 30, bytes_in: 3000, dropped: { spoofed: 4 } }))).carried).toBe(0);
    // Minute 3: still nothing (the round that completes minute 2).
    expect((await round(185_000, counters({ packets_in: 30, bytes_in: 3000, dropped: { spoofed: 4 } }))).carried).toBe(0);

    const r = await traffic(id, { from: iso(t0), to: iso(t0 + 3 * MINUTE_MS), step: '1m' });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      tunnel_id: id,
      step: '1m',
      points: [
        { t: iso(t0), packets_in: 100, bytes_in: 100_000, packets_out: 5, bytes_out: 400, dropped: { ...zeroDrops(), not_allowed: 2 } },
        { t: iso(t0 + MINUTE_MS), packets_in: 80, bytes_in: 53_000, packets_out: 5, bytes_out: 100, dropped: { ...zeroDrops(), spoofed: 4 } },
        { t: iso(t0 + 2 * MINUTE_MS), packets_in: 0, bytes_in: 0, packets_out: 0, bytes_out: 0, dropped: zeroDrops() },
      ],
    });
    // The idle minute is a point of zeros in the answer, not a row.
    const rows = await gw.testDb.raw.query('select count(*)::int as n from traffic.minute where tunnel_id = $1', [id]);
    expect(rows.rows[0].n).toBe(2);
  });

  it('N packets and B bytes sent over many rounds appear exactly, whatever the round boundaries', async () => {
    const id = await buy(user);
    const t0 = Math.floor((Date.now() - 20 * MINUTE_MS) / MINUTE_MS) * MINUTE_MS;
    let p = 5_000_000_000; // past 2^32: counters are 64-bit on the agent
    let b = 9_000_000_000_000;
    let sentP = 0;
    let sentB = 0;
    await gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({ packets_out: p, bytes_out: b }) }]), new Date(t0));
    for (let i = 1; i <= 20; i++) {
      const dp = 1000 + i * 37;
      const db = dp * 1400 + i;
      p += dp;
      b += db;
      sentP += dp;
      sentB += db;
      await gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({ packets_out: p, bytes_out: b }) }]), new Date(t0 + i * 29_000));
    }
    const r = await traffic(id, { from: iso(t0), to: iso(t0 + 11 * MINUTE_MS), step: '1m' });
    const points = r.body.points as { packets_out: number; bytes_out: number }[];
    expect(points.reduce((s, x) => s + x.packets_out, 0)).toBe(sentP);
    expect(points.reduce((s, x) => s + x.bytes_out, 0)).toBe(sentB);
  });

  it('hours are their minutes summed: the rollup, and a round that arrives after its hour was rolled up', async () => {
    const id = await buy(user);
    const store = gw.services.health.store;
    const h0 = Math.floor((Date.now() - 5 * HOUR_MS) / HOUR_MS) * HOUR_MS;
    // Roll up from h0 on (the migration started the rollup at its own hour).
    await gw.testDb.raw.query('update traffic.rollup set done_through = $1', [new Date(h0)]);
    const ingest = (ms: number, pi: number) => gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({ packets_in: pi, bytes_in: pi * 100 }) }]), new Date(h0 + ms));
    await ingest(60_000, 1000); // baseline
    await ingest(10 * MINUTE_MS, 1500); // +500 in h0
    await ingest(50 * MINUTE_MS, 1700); // +200 in h0
    await ingest(HOUR_MS + 5 * MINUTE_MS, 2000); // +300 in h0+1
    const through = await store.rollup(new Date());
    expect(through.getTime()).toBeGreaterThanOrEqual(h0 + 2 * HOUR_MS);
    const hours = await gw.testDb.raw.query('select t, packets_in::int as p from traffic.hour where tunnel_id = $1 order by t', [id]);
    expect(hours.rows.map((r: { t: Date; p: number }) => [r.t.getTime(), r.p])).toEqual([
      [h0, 700],
      [h0 + HOUR_MS, 300],
    ]);
    // Late: a round of h0 stored after h0 was rolled up still counts in h0.
    await ingest(55 * MINUTE_MS, 2040);
    const r = await traffic(id, { from: iso(h0), to: iso(h0 + 2 * HOUR_MS), step: '1h' });
    expect(r.status).toBe(200);
    expect(r.body.points.map((x: { t: string; packets_in: number; bytes_in: number }) => [x.t, x.packets_in, x.bytes_in])).toEqual([
      [iso(h0), 740, 74_000],
      [iso(h0 + HOUR_MS), 300, 30_000],
    ]);
    const minutes = await traffic(id, { from: iso(h0), to: iso(h0 + 2 * HOUR_MS), step: '1m' });
    expect(minutes.body.points).toHaveLength(120);
    expect(minutes.body.points.reduce((s: number, x: { packets_in: number }) => s + x.packets_in, 0)).toBe(1040);
  });

  it('partitions past retention are dropped whole; those still in retention and ahead stay', async () => {
    const store = gw.services.health.store;
    const now = new Date();
    const old = new Date(now.getTime() - 4 * 24 * HOUR_MS);
    // 150 days back: its whole month ends at least 119 days ago, past the 90-day retention whatever today's date.
    const oldHour = new Date(now.getTime() - 150 * 24 * HOUR_MS);
    await store.ensurePartition('minute', old);
    await store.ensurePartition('hour', oldHour);
    const id = await buy(user);
    await gw.testDb.raw.query('insert into traffic.minute (tunnel_id, t, packets_in, bytes_in, packets_out, bytes_out) values ($1, $2, 1, 1, 1, 1)', [id, old]);
    const parts = async () =>
      (await gw.testDb.raw.query(`select c.relname from pg_inherits i join pg_class c on c.oid = i.inhrelid join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'traffic' order by 1`)).rows.map(
        (r: { relname: string }) => r.relname,
      );
    const name = (prefix: string, d: Date, day: boolean) => `${prefix}_${d.toISOString().slice(0, day ? 10 : 7).replaceAll('-', '')}`;
    expect(await parts()).toEqual(expect.arrayContaining([name('minute', old, true), name('hour', oldHour, false)]));
    // A deleted tunnel's baseline goes with the upkeep too.
    const gone = await buy(user);
    await gw.services.health.ingest.ingestStatus(nodeId, status([{ id: gone, c: counters({}) }]), now);
    await gw.testDb.raw.query(`update tunnel set status = 'deleted' where id = $1`, [gone]);
    const { dropped } = await store.maintain(now);
    expect((await gw.testDb.raw.query('select 1 from traffic.seen where tunnel_id = $1', [gone])).rows).toHaveLength(0);
    expect(dropped).toEqual(expect.arrayContaining([name('minute', old, true), name('hour', oldHour, false)]));
    const left = await parts();
    expect(left).not.toContain(name('minute', old, true));
    expect(left).not.toContain(name('hour', oldHour, false));
    // Today, the next two days, this month and the next exist.
    for (let d = 0; d < 3; d++) expect(left).toContain(name('minute', new Date(now.getTime() + d * 24 * HOUR_MS), true));
    expect(left).toContain(name('hour', now, false));
    const yesterday = new Date(now.getTime() - 24 * HOUR_MS);
    if (left.includes(name('minute', yesterday, true))) expect(left).toContain(name('minute', yesterday, true));
  });
});

describe('GET /api/dedicated/{id}/traffic', () => {
  it('defaults: step 1m, the last hour (60 or 61 points, oldest first)', async () => {
    const id = await buy(user);
    const r = await traffic(id, {});
    expect(r.status).toBe(200);
    expect(r.body.step).toBe('1m');
    expect(r.body.points.length).toBeGreaterThanOrEqual(60);
    expect(r.body.points.length).toBeLessThanOrEqual(61);
    const ts = r.body.points.map((p: { t: string }) => Date.parse(p.t));
    expect([...ts].sort((a, b) => a - b)).toEqual(ts);
  });

  it('400 invalid_request outside retention, over 10,000 points, for a bad step, time or parameter; 404 for another account; 401 without a credential', async () => {
    const id = await buy(user);
    const now = Date.now();
    const bad: Record<string, string>[] = [
      { step: '1m', from: iso(now - 49 * HOUR_MS) },
      { step: '1h', from: iso(now - 91 * 24 * HOUR_MS) },
      { step: '1m', from: iso(now - HOUR_MS), to: iso(now + 200 * HOUR_MS) },
      { step: '5m' },
      { from: 'yesterday' },
      { from: iso(now), to: iso(now - MINUTE_MS) },
      { since: iso(now) },
    ];
    for (const q of bad) {
      const r = await traffic(id, q);
      expect(r.status, JSON.stringify(q)).toBe(400);
      expect(r.body.error).toBe('invalid_request');
    }
    const theirs = await traffic(id, {}, other.readKey);
    expect(theirs.status).toBe(404);
    expect(theirs.body.error).toBe('not_found');
    const anon = await call(gw.url, 'GET', `/api/dedicated/${id}/traffic`);
    expect(anon.status).toBe(401);
  });

  it('GraphQL Tunnel.traffic shows the same points', async () => {
    const id = await buy(user);
    const t0 = Math.floor((Date.now() - 10 * MINUTE_MS) / MINUTE_MS) * MINUTE_MS;
    await gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({ bytes_in: 10 }) }]), new Date(t0));
    await gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({ bytes_in: 510, dropped: { rate_limited: 3 } }) }]), new Date(t0 + 30_000));
    const q = `query($id: ID!, $from: DateTimeISO, $to: DateTimeISO) { tunnel(id: $id) { health traffic(from: $from, to: $to, step: "1m") { tunnelId step points { t bytesIn dropped { rateLimited } } } } }`;
    const r = await call(gw.url, 'POST', '/graphql', { token: user.readKey, body: { query: q, variables: { id, from: iso(t0), to: iso(t0 + MINUTE_MS) } } });
    expect(r.body.errors).toBeUndefined();
    expect(r.body.data.tunnel.traffic).toEqual({ tunnelId: id, step: '1m', points: [{ t: new Date(t0).toISOString(), bytesIn: 500, dropped: { rateLimited: 3 } }] });
  });
});

describe('health', () => {
  it('a change fires the tunnelStatus subscription and writes exactly one tunnel.health_changed event; a tunnel the agent did not report is unknown', async () => {
    const id = await buy(user);
    const silent = await buy(user);
    await gw.testDb.raw.query(`update tunnel set health = 'up' where id = $1`, [silent]);
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: 'http://127.0.0.1:9/hook', events: ['tunnel.health_changed'] } });
    expect(hook.status).toBe(201);
    const events = async (tunnelId: string) =>
      (await gw.testDb.raw.query(`select body from webhook_delivery where event_type = 'tunnel.health_changed' and body::jsonb #>> '{data,tunnel,id}' = $1 order by created_at`, [tunnelId])).rows.map(
        (r: { body: string }) => JSON.parse(r.body) as { type: string; data: { tunnel: Record<string, unknown> } },
      );

    const client = createClient({ url: `${gw.url.replace('http', 'ws')}/graphql`, webSocketImpl: WebSocket, connectionParams: { Authorization: `Bearer ${user.readKey}` }, retryAttempts: 0 });
    const seen: { status: string; health: string; healthCheckedAt: string | null }[] = [];
    const sub = client.iterate<{ tunnelStatus: { status: string; health: string; healthCheckedAt: string | null } }>({ query: `subscription($id: ID!) { tunnelStatus(id: $id) { status health healthCheckedAt } }`, variables: { id } });
    const reading = (async () => {
      for await (const m of sub) seen.push(m.data!.tunnelStatus);
    })();
    try {
      await until('the first subscription event', () => seen.length >= 1);
      expect(seen[0]).toMatchObject({ status: 'ACTIVE', health: 'UNKNOWN', healthCheckedAt: null });

      const checked = new Date(Date.now() - 5000).toISOString();
      const out = await gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({}), health: 'up', checkedAt: checked }]), new Date());
      // Tunnels of earlier tests on this node were not in this answer either: they change to unknown too.
      expect(out.healthChanged).toContain(id);
      await until('the health event on the subscription', () => seen.length >= 2);
      expect(seen[1]).toMatchObject({ status: 'ACTIVE', health: 'UP', healthCheckedAt: checked });
      const first = await events(id);
      expect(first).toHaveLength(1);
      expect(first[0]!.data.tunnel).toMatchObject({ id, health: 'up', health_checked_at: checked });
      // Without include_origin the event's tunnel leaves origin_ip out (docs/CONTRACTS.md "Webhooks").
      expect(first[0]!.data.tunnel).not.toHaveProperty('origin_ip');
      expectMatchesSchema('EventTunnel', first[0]!.data.tunnel);
      // The silent tunnel was not in the answer: the agent does not have it, so we do not know.
      const s = await call(gw.url, 'GET', `/api/dedicated/${silent}`, { token: user.readKey });
      expect(s.body.tunnel.health).toBe('unknown');
      expect(await events(silent)).toHaveLength(1);

      // Still up, checked again: the check time moves, no event.
      const again = new Date().toISOString();
      expect((await gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({}), health: 'up', checkedAt: again }]), new Date())).healthChanged).not.toContain(id);
      expect(await events(id)).toHaveLength(1);
      const got = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey });
      expectMatchesOpenApi('get', '/api/dedicated/{id}', got.status, got.body, got.headers);
      expect(got.body.tunnel).toMatchObject({ health: 'up', health_checked_at: again });

      await gw.services.health.ingest.ingestStatus(nodeId, status([{ id, c: counters({}), health: 'down' }]), new Date());
      await until('the down event on the subscription', () => seen.length >= 3);
      expect(seen[2]!.health).toBe('DOWN');
      expect((await events(id)).map((e) => e.data.tunnel.health)).toEqual(['up', 'down']);
      // Off the edge, health is unknown whatever was last stored.
      await gw.testDb.raw.query(`update tunnel set status = 'failed' where id = $1`, [id]);
      expect((await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey })).body.tunnel.health).toBe('unknown');
    } finally {
      await sub.return?.();
      await client.dispose();
      await reading.catch(() => {});
    }
  });

  it('a round that leaves health unchanged does not rewrite the tunnel row, yet health_checked_at advances (and survives the cleanup of a deleted tunnel)', async () => {
    const id = await buy(user);
    const ingest = gw.services.health.ingest;
    // xmin: the transaction that wrote the row's current version; a rewrite of the row changes it.
    const xmin = async () => (await gw.testDb.raw.query<{ x: string }>('select xmin::text as x from tunnel where id = $1', [id])).rows[0]!.x;
    const shown = async () => {
      const one = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey });
      expectMatchesOpenApi('get', '/api/dedicated/{id}', one.status, one.body, one.headers);
      const list = await call(gw.url, 'GET', '/api/dedicated?limit=100', { token: user.readKey });
      const inList = (list.body.tunnels as { id: string; health: string; health_checked_at: string | null }[]).find((t) => t.id === id)!;
      const gql = await call(gw.url, 'POST', '/graphql', { token: user.readKey, body: { query: `query($id: ID!) { tunnel(id: $id) { health healthCheckedAt } }`, variables: { id } } });
      // The three read paths (rows.ts, the list's own query, GraphQL) agree.
      expect({ health: inList.health, health_checked_at: inList.health_checked_at }).toEqual({ health: one.body.tunnel.health, health_checked_at: one.body.tunnel.health_checked_at });
      expect(gql.body.data.tunnel).toEqual({ health: String(one.body.tunnel.health).toUpperCase(), healthCheckedAt: one.body.tunnel.health_checked_at });
      return one.body.tunnel as { health: string; health_checked_at: string | null };
    };
    const t0 = Date.now() - 10 * MINUTE_MS;
    const at = (s: number) => new Date(t0 + s * 1000).toISOString();
    const round = (checkedAt: string | null, health: Health = 'up') => ingest.ingestStatus(nodeId, status([{ id, c: counters({}), health, checkedAt }]), new Date());

    expect((await round(at(1))).healthChanged).toContain(id);
    expect(await shown()).toEqual(expect.objectContaining({ health: 'up', health_checked_at: at(1) }));
    const afterChange = await xmin();
    await round(at(31));
    expect(await shown()).toEqual(expect.objectContaining({ health: 'up', health_checked_at: at(31) }));
    await round(at(61));
    expect(await shown()).toEqual(expect.objectContaining({ health: 'up', health_checked_at: at(61) }));
    expect(await xmin()).toBe(afterChange);
    // A report without a check time (the agent has not checked it since it restarted) keeps the last one.
    await round(null);
    expect((await shown()).health_checked_at).toBe(at(61));
    expect(await xmin()).toBe(afterChange);
    // A change of health writes the row again.
    await round(at(91), 'down');
    expect(await shown()).toEqual(expect.objectContaining({ health: 'down', health_checked_at: at(91) }));
    expect(await xmin()).not.toBe(afterChange);

    // Deleted: the upkeep drops its traffic.seen row, its last check time stays what the API showed.
    await gw.testDb.raw.query(`update tunnel set status = 'deleted' where id = $1`, [id]);
    await gw.services.health.store.maintain(new Date());
    expect((await gw.testDb.raw.query('select 1 from traffic.seen where tunnel_id = $1', [id])).rows).toHaveLength(0);
    const gone = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey });
    expect(gone.body.tunnel).toMatchObject({ status: 'deleted', health: 'unknown', health_checked_at: at(91) });
  });

  it('a malformed status answer stores nothing', async () => {
    const id = await buy(user);
    const bad = status([{ id, c: counters({ packets_in: -5 }) }]);
    await expect(gw.services.health.ingest.ingestStatus(nodeId, bad, new Date())).rejects.toThrow(/packets_in/);
    const seen = await gw.testDb.raw.query('select 1 from traffic.seen where tunnel_id = $1', [id]);
    expect(seen.rows).toHaveLength(0);
  });

  it('a stuck operation the agent reports (agent.stuck) shows on the node view until a round without it', async () => {
    // The collector over the real database; the agent's answers are the test's (its SSH side: health-collect-edge).
    let answer: StatusResult = status([]);
    const locks = new KeyedLocks(null, { maxConnections: 1, application: 'test' });
    const collector = new Collector({
      db: gw.testDb.db,
      ingest: gw.services.health.ingest,
      store: gw.services.health.store,
      locks,
      log: createLogger('silent'),
      nodes: async () => [{ id: nodeId, host: '127.0.0.1', port: 1, hostKeyFingerprint: 'SHA256:test' }],
      status: async () => answer,
      intervalSeconds: 3600,
      concurrency: 1,
    });
    try {
      const stuck = { op: 'reconcile', step: 'nftables commit (nftables commit (812 messages))', since: '2026-11-28T16:06:21.000Z' };
      answer = { ...status([]), agent: { version: '0.1.0', uptime_s: 10, tunnels: 0, stuck } };
      expect((await collector.round({ force: true })).nodes[nodeId]).toBe('answered');
      expect((await showNode(gw.testDb.db, nodeId)).stuck).toEqual(stuck);
      answer = status([]);
      await collector.round({ force: true });
      expect((await showNode(gw.testDb.db, nodeId)).stuck).toBeNull();
    } finally {
      await collector.stop();
      await locks.close();
      await gw.testDb.raw.query('delete from traffic.node_poll where node_id = $1', [nodeId]);
    }
  });
});

/** Status jobs a gateway sent, from its /metrics. */
async function statusJobs(g: RunningGateway): Promise<number> {
  const text = (await call(g.url, 'GET', '/metrics')).text;
  return [...text.matchAll(/^tunnelgate_edge_job_duration_seconds_count\{op="status",[^}]*\} (\d+)$/gm)].reduce((n, x) => n + Number(x[1]), 0);
}

describe('a node that does not answer', () => {
  it('its tunnels become unknown (one event each), /metrics says it is unreachable and counts the failed status job', async () => {
    // A port nobody listens on: the collector's real SSH connection is refused.
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const dead = (await seedNode(gw.testDb.db, '198.18.10.0/29')).node_id;
    // Only this node is polled: the other one has no pinned key from here on (not contactable).
    await gw.testDb.raw.query('update edge_node set host_key = null where id <> $1', [dead]);
    await gw.testDb.raw.query('update edge_node set ssh_port = $1 where id = $2', [port, dead]);
    const id = await buy(user);
    await gw.testDb.raw.query('update tunnel set node_id = $1 where id = $2', [dead, id]);
    await gw.services.health.ingest.ingestStatus(dead, status([{ id, c: counters({}), health: 'up' }]), new Date());
    expect((await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey })).body.tunnel.health).toBe('up');

    const secrets = (await loadSecrets(gw.testDb.db, {})).secrets;
    await gw.services.provisioning.start(secrets, { worker: false });
    gw.services.health.startCollector(createLogger('silent'), { intervalSeconds: 3600 });
    const round = await gw.services.health.collectNow();
    expect(round?.nodes[dead]).toBe('unreachable');
    const got = await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: user.readKey });
    expect(got.body.tunnel.health).toBe('unknown');
    const rows = await gw.testDb.raw.query(`select body::jsonb #>> '{data,tunnel,health}' as h from webhook_delivery where event_type = 'tunnel.health_changed' and body::jsonb #>> '{data,tunnel,id}' = $1`, [id]);
    // The webhook of the health test takes health events: up (the ingest above), then unknown.
    expect(rows.rows.map((r: { h: string }) => r.h)).toEqual(['up', 'unknown']);
    const m = await call(gw.url, 'GET', '/metrics');
    expect(m.text).toContain(`tunnelgate_edge_node_reachable{node_id="${dead}"} 0`);
    expect(m.text).toMatch(/tunnelgate_tunnels\{status="active",health="unknown"\} [1-9]/);
    expect(m.text).toMatch(/tunnelgate_edge_job_duration_seconds_count\{op="status",outcome="connect_failed"\} [1-9]/);
    expect(m.text).toMatch(/tunnelgate_edge_queue_depth|# TYPE tunnelgate_edge_queue_depth gauge/);

    // One replica per node per round: two replicas' rounds at once poll the node once between them,
    // and a round within half an interval of the last poll leaves the node alone.
    await gw.services.health.stopCollector();
    await gw.testDb.raw.query('delete from traffic.node_poll');
    const replica = await startGateway({ testDb: gw.testDb, config: { edgeJobTimeoutMs: 3000 } });
    try {
      await replica.services.provisioning.start(secrets, { worker: false });
      const before = await statusJobs(gw);
      const a = gw.services.health.startCollector(createLogger('silent'), { intervalSeconds: 3600 });
      const b = replica.services.health.startCollector(createLogger('silent'), { intervalSeconds: 3600 });
      // startCollector runs a round at once, so four rounds race here: whichever comes first polls, the rest skip.
      const [ra, rb] = await Promise.all([a.round(), b.round()]);
      expect([ra.nodes[dead], rb.nodes[dead]].filter((x) => x !== 'skipped').length).toBeLessThanOrEqual(1);
      // Status jobs sent, by each replica's /metrics: one between the two replicas' four rounds.
      await gw.services.health.stopCollector();
      await replica.services.health.stopCollector();
      expect((await statusJobs(gw)) + (await statusJobs(replica)) - before).toBe(1);
    } finally {
      await replica.close();
    }
  }, 60_000);
});
