// A tunnel's health history (docs/CONTRACTS.md "Health and traffic"), against the real gateway and
// PostgreSQL: the collection round's ingest seam (server/health/ingest.ts) writes one row per change in
// the transaction of the change (a round that fails leaves neither the change, its webhook event nor its
// row), at the agent's check time for up/down and the round's for unknown, never before the change it
// follows; GET /api/dedicated/{id}/health-changes (validated against schema/openapi.yaml) and GraphQL
// `Tunnel.healthChanges` read them in range order, capped, with the traffic API's rules; the upkeep
// trims them at 90 days.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { setRate } from '../../server/domain/settings.ts';
import { DROP_REASONS, type DropReason, type Health, type StatusResult } from '../../common/tunnel-status.ts';
import { HOUR_MS, MINUTE_MS } from '../../server/health/storage.ts';
import { StatusIngest } from '../../server/health/ingest.ts';
import { QUERY_LIMITS } from '../../server/graphql/limits.ts';

const PATH = '/api/dedicated/{id}/health-changes';
const DAY_MS = 24 * HOUR_MS;
const zeroDrops = (): Record<DropReason, number> => Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>;

/** One node's status answer: each tunnel with its health and the agent's check time (null: not checked yet). */
function status(tunnels: { id: string; health: Health; checkedAt: string | null }[]): StatusResult {
  return {
    agent: { version: '0.1.0', uptime_s: 10, tunnels: tunnels.length },
    tunnels: tunnels.map((t) => ({ id: t.id, health: t.health, checked_at: t.checkedAt, counters: { packets_in: 0, bytes_in: 0, packets_out: 0, bytes_out: 0, dropped: zeroDrops() } })),
  };
}

let gw: RunningGateway;
let user: SeededUser;
let other: SeededUser;

/** A tunnel of `u`, active on a node of its own (so another test's rounds never touch it). */
async function tunnelOnOwnNode(u: SeededUser, cidr: string): Promise<{ id: string; node: string }> {
  const node = (await seedNode(gw.testDb.db, cidr)).node_id;
  const r = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(r.status).toBe(201);
  const id = r.body.tunnel.id as string;
  // On the edge without an agent: the ingest seam is what is under test here.
  await gw.testDb.raw.query(`update tunnel set status = 'active', node_id = $1 where id = $2`, [node, id]);
  return { id, node };
}

async function changes(id: string, q: Record<string, string> | string, token = user.readKey) {
  const query = typeof q === 'string' ? q : new URLSearchParams(q).toString();
  const r = await call(gw.url, 'GET', `/api/dedicated/${id}/health-changes?${query}`, { token });
  expectMatchesOpenApi('get', PATH, r.status, r.body, r.headers);
  return r;
}

const GQL = `query($id: ID!, $from: DateTimeISO, $to: DateTimeISO) { tunnel(id: $id) { id healthChanges(from: $from, to: $to) { at previous health } } }`;
const gql = (id: string, from: string | null, to: string | null, token = user.readKey) =>
  call(gw.url, 'POST', '/graphql', { token, body: { query: GQL, variables: { id, from, to } } });

const rowsOf = async (id: string) =>
  (await gw.testDb.raw.query(`select previous, health from traffic.tunnel_health_change where tunnel_id = $1 order by at, seq`, [id])).rows as { previous: string; health: string }[];

beforeAll(async () => {
  gw = await startGateway({ config: { allowPrivateWebhooks: true } });
  await setRate(gw.testDb.db, '90');
  user = await seedUser(gw.testDb.db, { balanceUsd: '1000.00' });
  other = await seedUser(gw.testDb.db);
}, 60_000);

afterAll(async () => {
  await gw?.close();
});

describe('recording', () => {
  it('each change is one row at the agent check time (up, down) or the round time (unknown), in order; REST and GraphQL read the same', async () => {
    const { id, node } = await tunnelOnOwnNode(user, '198.18.20.0/29');
    const ingest = gw.services.health.ingest;
    const t0 = Date.now() - 30 * MINUTE_MS;
    const t = (s: number) => new Date(t0 + s * 1000);
    // up, seen by the agent's check 3 s before the round.
    expect((await ingest.ingestStatus(node, status([{ id, health: 'up', checkedAt: t(27).toISOString() }]), t(30))).healthChanged).toEqual([id]);
    // Still up, checked again: no change, no row.
    await ingest.ingestStatus(node, status([{ id, health: 'up', checkedAt: t(57).toISOString() }]), t(60));
    // down.
    await ingest.ingestStatus(node, status([{ id, health: 'down', checkedAt: t(88).toISOString() }]), t(90));
    // The agent no longer has it: unknown, at the round's time (the agent never checked that).
    await ingest.ingestStatus(node, status([]), t(120));
    // Back up, but reported without a check time: the round's time.
    await ingest.ingestStatus(node, status([{ id, health: 'up', checkedAt: null }]), t(150));
    // The node does not answer: unknown at that round's time.
    expect(await ingest.markUnknown(node, t(180))).toEqual([id]);
    // It answers again with the check it made before it went silent: the change cannot precede the
    // unknown it follows, so it takes that one's time.
    await ingest.ingestStatus(node, status([{ id, health: 'up', checkedAt: t(170).toISOString() }]), t(210));

    const expected = [
      { at: t(27).toISOString(), previous: 'unknown', health: 'up' },
      { at: t(88).toISOString(), previous: 'up', health: 'down' },
      { at: t(120).toISOString(), previous: 'down', health: 'unknown' },
      { at: t(150).toISOString(), previous: 'unknown', health: 'up' },
      { at: t(180).toISOString(), previous: 'up', health: 'unknown' },
      { at: t(180).toISOString(), previous: 'unknown', health: 'up' },
    ];
    const r = await changes(id, { from: t(0).toISOString(), to: t(300).toISOString() });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ tunnel_id: id, changes: expected });
    // Each one follows the last: a chart can draw the spans between them.
    for (let i = 1; i < expected.length; i++) expect(expected[i]!.previous).toBe(expected[i - 1]!.health);
    // The range is [from, to): the first change is on `from`, the third on `to`.
    const part = await changes(id, { from: t(27).toISOString(), to: t(120).toISOString() });
    expect(part.body.changes).toEqual(expected.slice(0, 2));

    const g = await gql(id, t(0).toISOString(), t(300).toISOString());
    expect(g.body.errors).toBeUndefined();
    expect(g.body.data.tunnel).toEqual({ id, healthChanges: expected.map((c) => ({ at: c.at, previous: c.previous.toUpperCase(), health: c.health.toUpperCase() })) });

    // Defaults: to now, from a day before: all six are in the last day.
    expect((await changes(id, {})).body.changes).toEqual(expected);
    expect((await gql(id, null, null)).body.data.tunnel.healthChanges).toHaveLength(expected.length);

    // Deleted, the history stays readable (as its traffic does) until it ages out.
    await gw.testDb.raw.query(`update tunnel set status = 'deleted' where id = $1`, [id]);
    await gw.services.health.store.maintain(new Date());
    expect((await changes(id, {})).body.changes).toEqual(expected);
  });

  it('a round whose transaction fails leaves no row, no change and no webhook event; the same round retried records it once', async () => {
    const { id, node } = await tunnelOnOwnNode(user, '198.18.20.8/29');
    const hook = await call(gw.url, 'POST', '/api/webhooks', { token: user.writeKey, body: { url: 'http://127.0.0.1:9/hook', events: ['tunnel.health_changed'] } });
    expect(hook.status).toBe(201);
    const events = async () =>
      (await gw.testDb.raw.query(`select 1 from webhook_delivery where event_type = 'tunnel.health_changed' and body::jsonb #>> '{data,tunnel,id}' = $1`, [id])).rows.length;
    const real = gw.services.provisioning.events;
    // The event sink is the last write of the round's transaction: it writes its event, then fails.
    const failing = new StatusIngest(gw.testDb.db, gw.services.health.store, {
      healthChangedAll: async (sql, tunnelIds) => {
        await real.healthChangedAll(sql, tunnelIds);
        throw new Error('the database went away mid-round');
      },
    }, gw.services.provisioning.bus);
    const answer = status([{ id, health: 'up', checkedAt: new Date(Date.now() - 1000).toISOString() }]);
    await expect(failing.ingestStatus(node, answer, new Date())).rejects.toThrow(/went away/);
    expect(await rowsOf(id)).toEqual([]);
    expect(await events()).toBe(0);
    expect((await gw.testDb.raw.query('select health from tunnel where id = $1', [id])).rows[0].health).toBe('unknown');

    // The next round goes through: the change, its event and its row together.
    await gw.services.health.ingest.ingestStatus(node, answer, new Date());
    expect(await rowsOf(id)).toEqual([{ previous: 'unknown', health: 'up' }]);
    expect(await events()).toBe(1);
    // markUnknown fails the same way: nothing of it stays either.
    await expect(failing.markUnknown(node)).rejects.toThrow(/went away/);
    expect(await rowsOf(id)).toEqual([{ previous: 'unknown', health: 'up' }]);
    expect(await events()).toBe(1);
    expect((await gw.testDb.raw.query('select health from tunnel where id = $1', [id])).rows[0].health).toBe('up');
  });
});

describe('reading', () => {
  it('400 invalid_request outside retention, for a bad range, time or parameter; 404 for another account; 401 without a credential', async () => {
    const { id } = await tunnelOnOwnNode(user, '198.18.20.16/29');
    const now = Date.now();
    const iso = (ms: number) => new Date(ms).toISOString();
    const bad: string[] = [
      new URLSearchParams({ from: iso(now - 91 * DAY_MS) }).toString(),
      new URLSearchParams({ from: iso(now - 100 * DAY_MS), to: iso(now - 95 * DAY_MS) }).toString(),
      new URLSearchParams({ from: iso(now), to: iso(now - MINUTE_MS) }).toString(),
      new URLSearchParams({ from: iso(now), to: iso(now) }).toString(),
      new URLSearchParams({ from: 'yesterday' }).toString(),
      new URLSearchParams({ to: '2026-11-28' }).toString(),
      new URLSearchParams({ step: '1h' }).toString(),
      `from=${encodeURIComponent(iso(now - HOUR_MS))}&from=${encodeURIComponent(iso(now - 2 * HOUR_MS))}`,
    ];
    for (const q of bad) {
      const r = await changes(id, q);
      expect(r.status, q).toBe(400);
      expect(r.body.error, q).toBe('invalid_request');
    }
    // Just inside retention is fine.
    expect((await changes(id, { from: iso(now - 89 * DAY_MS) })).status).toBe(200);

    const theirs = await changes(id, {}, other.readKey);
    expect(theirs.status).toBe(404);
    expect(theirs.body.error).toBe('not_found');
    const anon = await call(gw.url, 'GET', `/api/dedicated/${id}/health-changes`);
    expect(anon.status).toBe(401);

    const old = await gql(id, iso(now - 91 * DAY_MS), null);
    expect(old.body.errors?.[0]?.extensions).toEqual({ code: 'invalid_request', status: 400 });
    const backwards = await gql(id, iso(now), iso(now - MINUTE_MS));
    expect(backwards.body.errors?.[0]?.extensions).toEqual({ code: 'invalid_request', status: 400 });
    const notTheirs = await gql(id, null, null, other.readKey);
    expect(notTheirs.body.errors?.[0]?.extensions).toEqual({ code: 'not_found', status: 404 });
    expect(notTheirs.body.data).toBeNull();
  });

  it('at most 1,000 changes, the oldest of the range; asking again from the last one reads on', async () => {
    const { id } = await tunnelOnOwnNode(user, '198.18.20.24/29');
    const t0 = Math.floor((Date.now() - 2 * DAY_MS) / 1000) * 1000;
    // 1,500 alternating changes a second apart (a flapping tunnel), written as ingest would.
    await gw.testDb.raw.query(
      `insert into traffic.tunnel_health_change (tunnel_id, at, previous, health)
       select $1, to_timestamp($2::double precision / 1000) + make_interval(secs => i), case when i % 2 = 0 then 'unknown' else 'up' end, case when i % 2 = 0 then 'up' else 'unknown' end
         from generate_series(0, 1499) as i`,
      [id, t0],
    );
    const from = new Date(t0).toISOString();
    const first = await changes(id, { from });
    expect(first.status).toBe(200);
    expect(first.body.changes).toHaveLength(1000);
    expect(first.body.changes[0].at).toBe(from);
    expect(first.body.changes[999].at).toBe(new Date(t0 + 999_000).toISOString());
    const rest = await changes(id, { from: first.body.changes[999].at });
    expect(rest.body.changes).toHaveLength(501);
    expect(rest.body.changes[500].at).toBe(new Date(t0 + 1_499_000).toISOString());
    const g = await gql(id, from, null);
    expect(g.body.data.tunnel.healthChanges).toHaveLength(1000);
  });

  it('Tunnel.healthChanges is costed like traffic: under a full page of tunnels twice it is over the limit', async () => {
    // 10 + 100 * (1 + 10 + 1) per page: 1,210, two pages 2,420.
    const page = (alias: string) => `${alias}: tunnels(limit: 100) { tunnels { healthChanges { at } } }`;
    const one = await call(gw.url, 'POST', '/graphql', { token: user.readKey, body: { query: `{ ${page('a')} }` } });
    expect(one.body.errors).toBeUndefined();
    const two = await call(gw.url, 'POST', '/graphql', { token: user.readKey, body: { query: `{ ${page('a')} ${page('b')} }` } });
    expect(two.status).toBe(400);
    expect(two.body.errors[0].extensions).toMatchObject({ code: 'GRAPHQL_VALIDATION_FAILED', limit: 'max_cost', max: QUERY_LIMITS.maxCost });
  });
});

describe('retention', () => {
  it('the upkeep deletes changes older than 90 days and keeps the rest', async () => {
    const { id } = await tunnelOnOwnNode(user, '198.18.20.32/29');
    const now = new Date();
    const at = (days: number) => new Date(now.getTime() - days * DAY_MS);
    for (const [days, previous, health] of [[95, 'unknown', 'up'], [90.5, 'up', 'down'], [89, 'down', 'up'], [1, 'up', 'unknown']] as const) {
      await gw.testDb.raw.query(`insert into traffic.tunnel_health_change (tunnel_id, at, previous, health) values ($1, $2, $3, $4)`, [id, at(days), previous, health]);
    }
    const { healthChangesTrimmed } = await gw.services.health.store.maintain(now);
    expect(healthChangesTrimmed).toBeGreaterThanOrEqual(2);
    expect(await rowsOf(id)).toEqual([
      { previous: 'down', health: 'up' },
      { previous: 'up', health: 'unknown' },
    ]);
    expect((await changes(id, { from: at(89.5).toISOString() })).body.changes.map((c: { at: string }) => c.at)).toEqual([at(89).toISOString(), at(1).toISOString()]);
  });
});
