// The tunnel read paths on both databases the gateway runs on: PostgreSQL and the embedded PGlite (the
// default of `npm start`). The two drivers differ under the SQL (row modes, how int8, timestamps and jsonb
// come back), and a difference once made the embedded list a 500 while every PostgreSQL test passed. So
// the same data and the same assertions run on each: REST list (paged by cursor past a page), get, setup,
// traffic and health history; GraphQL `tunnels` (paged) and `tunnel` with its traffic and health history;
// and the operator's ledger read (the admin CLI's `ledger`, server/domain/admin-read.ts). Tunnels carry settings, health from the ingest
// seam, a check time and traffic points with counts past 2^32.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listLedger } from '../../server/domain/admin-read.ts';
import { MINUTE_MS } from '../../server/health/storage.ts';
import { DROP_REASONS, type DropReason, type Health, type StatusResult, type TunnelCounters } from '../../common/tunnel-status.ts';
import { BOTH_DATABASES, type Backend } from '../helpers/both-databases.ts';
import { call } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';

const zeroDrops = (): Record<DropReason, number> => Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>;
const counters = (c: Partial<Omit<TunnelCounters, 'dropped'>> & { dropped?: Partial<Record<DropReason, number>> } = {}): TunnelCounters => ({
  packets_in: 0,
  bytes_in: 0,
  packets_out: 0,
  bytes_out: 0,
  ...c,
  dropped: { ...zeroDrops(), ...c.dropped },
});
const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** What each tunnel is bought with, in purchase order; its index is its place in `ids`. */
const PURCHASES = [
  { name: 'plain', origin_ip: '8.8.4.4' },
  { name: 'web', origin_ip: '8.8.8.8', ports: '443,80,81', protocol: 'tcp', protection: { syn_proxy: true, source_pps_limit: 500, drop_fragments: true } },
  { name: 'game', origin_ip: '1.1.1.1', ports: '27015', protocol: 'udp', protection: { source_pps_limit: 10 } },
  { origin_ip: '9.9.9.9' },
  { name: 'five', origin_ip: '8.8.4.4', protection: { drop_fragments: true } },
  { name: 'six', origin_ip: '8.8.4.4' },
  { name: 'gone', origin_ip: '8.8.4.4' },
];

describe.each(BOTH_DATABASES)('tunnel reads on %s', (_name, boot) => {
  let b: Backend;
  let user: SeededUser;
  let other: SeededUser;
  let otherTunnel: string;
  /** Purchase order; the list shows them newest first, without the deleted one (the last). */
  const ids: string[] = [];
  let shown: string[];
  /** The minute of the traffic points (two minutes of them), well inside retention. */
  let t0: number;
  const checkedAt = new Date(Date.now() - 30_000).toISOString();

  beforeAll(async () => {
    b = await boot();
    const nodeId = (await seedNode(b.db, '198.18.20.0/27')).node_id;
    user = await seedUser(b.db, { balanceUsd: '100.00' });
    other = await seedUser(b.db, { balanceUsd: '10.00' });
    for (const body of PURCHASES) {
      const r = await call(b.url, 'POST', '/api/dedicated', { token: user.writeKey, body });
      expect(r.status, r.text).toBe(201);
      ids.push(r.body.tunnel.id);
    }
    const o = await call(b.url, 'POST', '/api/dedicated', { token: other.writeKey, body: { origin_ip: '8.8.4.4' } });
    expect(o.status, o.text).toBe(201);
    otherTunnel = o.body.tunnel.id;
    // On the edge without an agent (the reads are under test, not provisioning): three active, one provisioned,
    // the last deleted.
    for (const [i, status] of [[0, 'active'], [1, 'active'], [2, 'active'], [3, 'provisioned'], [6, 'deleted']] as const) {
      await b.db.query('update tunnel set status = ? where id = ?', [status, ids[i]]);
    }
    shown = ids.slice(0, 6).reverse();
    // Health and traffic through the ingest seam, as the collector feeds it: the first sighting is a
    // baseline, then a minute of traffic (bytes past 2^32, an int8 the drivers parse differently), then
    // a minute more, which the next round completes.
    t0 = Math.floor((Date.now() - 20 * MINUTE_MS) / MINUTE_MS) * MINUTE_MS;
    const round = (ms: number, c: TunnelCounters, health: Health = 'up') =>
      b.services.health.ingest.ingestStatus(
        nodeId,
        {
          agent: { version: '0.1.0', uptime_s: 10, tunnels: 2 },
          tunnels: [
            { id: ids[0]!, health, checked_at: checkedAt, counters: c },
            { id: ids[1]!, health: 'down', checked_at: checkedAt, counters: counters() },
          ],
        } satisfies StatusResult,
        new Date(t0 + ms),
      );
    await round(5_000, counters({ packets_in: 1_000, bytes_in: 5_000_000_000 }));
    await round(35_000, counters({ packets_in: 4_001_000, bytes_in: 11_000_000_000, packets_out: 10, bytes_out: 700, dropped: { rate_limited: 3 } }));
    await round(65_000, counters({ packets_in: 4_001_050, bytes_in: 11_000_060_000, packets_out: 12, bytes_out: 900, dropped: { rate_limited: 3, spoofed: 2 } }));
    await round(125_000, counters({ packets_in: 4_001_050, bytes_in: 11_000_060_000, packets_out: 12, bytes_out: 900, dropped: { rate_limited: 3, spoofed: 2 } }));
  }, 120_000);

  afterAll(async () => {
    await b?.close();
  });

  const get = (p: string, token = user.readKey) => call(b.url, 'GET', p, { token });
  const gql = async (query: string, variables?: Record<string, unknown>) => {
    const r = await call(b.url, 'POST', '/graphql', { token: user.readKey, body: { query, variables } });
    expect(r.status, r.text).toBe(200);
    expect(r.body.errors, r.text).toBeUndefined();
    return r.body.data;
  };

  it('parses every type alike through query, hot and hotRows, and keeps repeated column names apart', async () => {
    const text = `select 5000000000::int8 as big, '{1,9007199254740993}'::int8[] as bigs, 7::int4 as small, 1.50::numeric(14,2) as money,
        '{"a": [1, "b"]}'::jsonb as doc, true as yes, '2026-11-28 10:00:01.5+00'::timestamptz at time zone 'UTC' as plain,
        ('2026-11-28 10:00:01.5+00'::timestamptz at time zone 'UTC')::text, ('2026-11-29 00:00:00+00'::timestamptz at time zone 'UTC')::text, ?::text as echo`;
    const expected = { big: '5000000000', bigs: ['1', '9007199254740993'], small: 7, money: '1.50', doc: { a: [1, 'b'] }, yes: true, plain: '2026-11-28 10:00:01.5', echo: 'x' };
    const [viaQuery] = await b.db.query(text, ['x']);
    expect(viaQuery).toMatchObject(expected);
    const [viaHot] = await b.db.hot('test_types_hot', text, ['x']);
    expect(viaHot).toEqual(viaQuery);
    // Array rows: the two unnamed `text` columns stay two, in select order.
    const [row] = await b.db.hotRows('test_types_rows', text, ['x']);
    expect(row).toEqual([...Object.values(expected).slice(0, 7), '2026-11-28 10:00:01.5', '2026-11-29 00:00:00', 'x']);
  });

  it('lists every tunnel newest first, each as GET shows it, with its settings, health and check time', async () => {
    const list = await get('/api/dedicated?limit=100');
    expect(list.status, list.text).toBe(200);
    expectMatchesOpenApi('get', '/api/dedicated', list.status, list.body, list.headers);
    expect(list.body.tunnels.map((t: { id: string }) => t.id)).toEqual(shown);
    expect(list.body.next_cursor).toBeNull();
    for (const t of list.body.tunnels) {
      const one = await get(`/api/dedicated/${t.id}`);
      expect(one.status, one.text).toBe(200);
      expectMatchesOpenApi('get', '/api/dedicated/{id}', one.status, one.body, one.headers);
      // The list and the single read are two statements (and two driver paths): they must agree field for field.
      expect(one.body.tunnel).toEqual(t);
      expect(t.created_at).toMatch(ISO_MS);
      expect(t.updated_at).toMatch(ISO_MS);
    }
    const byId = new Map<string, Record<string, unknown>>(list.body.tunnels.map((t: { id: string }) => [t.id, t]));
    expect(byId.get(ids[0]!)).toMatchObject({
      name: 'plain',
      origin_ip: '8.8.4.4',
      ports: '*',
      protocol: 'both',
      protection: { syn_proxy: false, source_pps_limit: null, drop_fragments: false },
      status: 'active',
      health: 'up',
      health_checked_at: checkedAt,
      edge_ip: '192.0.2.1',
    });
    expect(byId.get(ids[1]!)).toMatchObject({
      name: 'web',
      ports: '80-81,443',
      protocol: 'tcp',
      protection: { syn_proxy: true, source_pps_limit: 500, drop_fragments: true },
      health: 'down',
      health_checked_at: checkedAt,
    });
    expect(byId.get(ids[2]!)).toMatchObject({ name: 'game', ports: '27015', protocol: 'udp', protection: { syn_proxy: false, source_pps_limit: 10, drop_fragments: false }, health: 'unknown', health_checked_at: null });
    // Not on an edge: health shows unknown whatever is stored.
    expect(byId.get(ids[4]!)).toMatchObject({ name: 'five', status: 'pending', health: 'unknown', protection: { drop_fragments: true } });
    expect(byId.get(ids[3]!)).toMatchObject({ name: null, status: 'provisioned' });
    // Times newest first, and the protected IPs are the node's, one each.
    const created = list.body.tunnels.map((t: { created_at: string }) => t.created_at);
    expect([...created].sort().reverse()).toEqual(created);
    expect(new Set(list.body.tunnels.map((t: { protected_ip: string }) => t.protected_ip)).size).toBe(6);
  });

  it('pages by cursor past a page, the pages adding up to the whole list', async () => {
    for (const limit of [1, 2, 4, 5]) {
      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const q: string = `/api/dedicated?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
        const page = await get(q);
        expect(page.status, page.text).toBe(200);
        expectMatchesOpenApi('get', '/api/dedicated', page.status, page.body, page.headers);
        expect(page.body.tunnels.length).toBeLessThanOrEqual(limit);
        seen.push(...page.body.tunnels.map((t: { id: string }) => t.id));
        cursor = page.body.next_cursor;
        pages++;
      } while (cursor !== null && pages < 10);
      expect(seen, `limit ${limit}`).toEqual(shown);
      expect(pages).toBe(Math.ceil(shown.length / limit));
    }
    // The default page holds them all.
    const all = await get('/api/dedicated');
    expect(all.body.tunnels.map((t: { id: string }) => t.id)).toEqual(shown);
  });

  it("keeps accounts apart: another account's tunnel is not found and not listed", async () => {
    const mine = await get('/api/dedicated', other.readKey);
    expect(mine.body.tunnels.map((t: { id: string }) => t.id)).toEqual([otherTunnel]);
    for (const p of [`/api/dedicated/${otherTunnel}`, `/api/dedicated/${otherTunnel}/setup`, `/api/dedicated/${otherTunnel}/traffic`, `/api/dedicated/${otherTunnel}/health-changes`]) {
      const r = await get(p);
      expect([p, r.status, r.body.error]).toEqual([p, 404, 'not_found']);
    }
  });

  it('serves the origin scripts filled with the tunnel', async () => {
    const setup = await get(`/api/dedicated/${ids[1]}/setup`);
    expect(setup.status, setup.text).toBe(200);
    expectMatchesOpenApi('get', '/api/dedicated/{id}/setup', setup.status, setup.body, setup.headers);
    const one = (await get(`/api/dedicated/${ids[1]}`)).body.tunnel;
    expect(setup.body.tunnel_id).toBe(ids[1]);
    expect(setup.body.scripts.origin).toContain(one.tunnel_name);
    expect(setup.body.scripts.origin).toContain('192.0.2.1');
    expect(setup.body.scripts.origin).toContain(one.protected_ip);
    expect(setup.body.scripts.systemd_origin).toContain(one.tunnel_name);
  });

  it('answers traffic points with exact counts past 2^32 (REST)', async () => {
    const r = await get(`/api/dedicated/${ids[0]}/traffic?${new URLSearchParams({ from: iso(t0), to: iso(t0 + 3 * MINUTE_MS), step: '1m' })}`);
    expect(r.status, r.text).toBe(200);
    expectMatchesOpenApi('get', '/api/dedicated/{id}/traffic', r.status, r.body, r.headers);
    expect(r.body).toEqual({
      tunnel_id: ids[0],
      step: '1m',
      points: [
        { t: iso(t0), packets_in: 4_000_000, bytes_in: 6_000_000_000, packets_out: 10, bytes_out: 700, dropped: { ...zeroDrops(), rate_limited: 3 } },
        { t: iso(t0 + MINUTE_MS), packets_in: 50, bytes_in: 60_000, packets_out: 2, bytes_out: 200, dropped: { ...zeroDrops(), spoofed: 2 } },
        { t: iso(t0 + 2 * MINUTE_MS), packets_in: 0, bytes_in: 0, packets_out: 0, bytes_out: 0, dropped: zeroDrops() },
      ],
    });
    const hours = await get(`/api/dedicated/${ids[0]}/traffic?step=1h`);
    expect(hours.status, hours.text).toBe(200);
    const sum = hours.body.points.reduce((s: number, p: { bytes_in: number }) => s + p.bytes_in, 0);
    expect(sum).toBe(6_000_060_000);
  });

  it('answers the health history the ingest recorded, REST and GraphQL alike', async () => {
    // The first round took each tunnel from unknown to what the agent reported, at its check time.
    for (const [i, health] of [[0, 'up'], [1, 'down']] as const) {
      const r = await get(`/api/dedicated/${ids[i]}/health-changes`);
      expect(r.status, r.text).toBe(200);
      expectMatchesOpenApi('get', '/api/dedicated/{id}/health-changes', r.status, r.body, r.headers);
      expect(r.body).toEqual({ tunnel_id: ids[i], changes: [{ at: checkedAt, previous: 'unknown', health }] });
      const data = await gql(`query H($id: ID!) { tunnel(id: $id) { healthChanges { at previous health } } }`, { id: ids[i] });
      expect(data.tunnel.healthChanges).toEqual([{ at: checkedAt, previous: 'UNKNOWN', health: health.toUpperCase() }]);
    }
    expect((await get(`/api/dedicated/${ids[2]}/health-changes`)).body.changes).toEqual([]);
  });

  it('answers GraphQL tunnels (paged) and tunnel with traffic as REST does', async () => {
    const fields = 'id name protectedIp originIp ports protocol protection { synProxy sourcePpsLimit dropFragments } tunnelName status health healthCheckedAt edgeIp createdAt updatedAt';
    const seen: Record<string, unknown>[] = [];
    let cursor: string | null = null;
    do {
      const data: { tunnels: { tunnels: Record<string, unknown>[]; nextCursor: string | null } } = await gql(`query P($c: String) { tunnels(limit: 4, cursor: $c) { tunnels { ${fields} } nextCursor } }`, { c: cursor });
      seen.push(...data.tunnels.tunnels);
      cursor = data.tunnels.nextCursor;
    } while (cursor !== null && seen.length < 20);
    expect(seen.map((t) => t.id)).toEqual(shown);
    const rest = (await get('/api/dedicated?limit=100')).body.tunnels as Record<string, any>[];
    expect(seen).toEqual(
      rest.map((t) => ({
        id: t.id,
        name: t.name,
        protectedIp: t.protected_ip,
        originIp: t.origin_ip,
        ports: t.ports,
        protocol: t.protocol,
        protection: { synProxy: t.protection.syn_proxy, sourcePpsLimit: t.protection.source_pps_limit, dropFragments: t.protection.drop_fragments },
        tunnelName: t.tunnel_name,
        status: t.status.toUpperCase(),
        health: t.health.toUpperCase(),
        healthCheckedAt: t.health_checked_at,
        edgeIp: t.edge_ip,
        createdAt: t.created_at,
        updatedAt: t.updated_at,
      })),
    );
    const one = await gql(`query T($id: ID!, $from: DateTimeISO, $to: DateTimeISO) { tunnel(id: $id) { id health traffic(from: $from, to: $to) { points { t bytesIn packetsIn } } } }`, {
      id: ids[0],
      from: new Date(t0).toISOString(),
      to: new Date(t0 + 2 * MINUTE_MS).toISOString(),
    });
    expect(one.tunnel).toEqual({
      id: ids[0],
      health: 'UP',
      traffic: {
        points: [
          { t: new Date(t0).toISOString(), bytesIn: 6_000_000_000, packetsIn: 4_000_000 },
          { t: new Date(t0 + MINUTE_MS).toISOString(), bytesIn: 60_000, packetsIn: 50 },
        ],
      },
    });
  });

  it("reads an account's ledger page by page (the admin CLI's ledger)", async () => {
    const entries: { kind: string; amount_usd: number; balance_after: number; tunnel_id: string | null; id: string }[] = [];
    let cursor: string | null = null;
    do {
      const page = await listLedger(b.db, user.email, null, { limit: 3, cursor });
      entries.push(...page.items);
      cursor = page.next_cursor;
    } while (cursor !== null && entries.length < 20);
    expect(entries.map((e) => e.kind)).toEqual([...PURCHASES.map(() => 'purchase'), 'topup']);
    expect(entries.map((e) => e.tunnel_id)).toEqual([...[...ids].reverse(), null]);
    expect(entries.at(-1)).toMatchObject({ amount_usd: 100, balance_after: 100 });
    // Exact money: each purchase took the same price, and the balances step down by it.
    const price = entries[entries.length - 2]!.amount_usd;
    expect(price).toBeLessThan(0);
    entries.slice(0, -1).forEach((e, i) => expect(e.balance_after).toBe(Math.round((100 + price * (PURCHASES.length - i)) * 100) / 100));
    for (const e of entries) expect(e.id).toMatch(/^\d+$/);
  });
});
