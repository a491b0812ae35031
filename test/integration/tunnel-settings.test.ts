// Tunnel settings (docs/CONTRACTS.md "Tunnel settings") against the real gateway on real
// PostgreSQL, over REST (fetch) and GraphQL: ports/protocol/protection at purchase and with PATCH
// /api/dedicated/{id} / updateTunnel, normalisation, every refusal, accounts, statuses, the
// Idempotency-Key digest, and concurrent changes under the row lock. This gateway runs no worker:
// what reaches an edge is test/integration/tunnel-settings-edge.test.ts's.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { until } from '../helpers/wait.ts';
import { edgeTunnel } from '../../server/provisioning/edge-state.ts';

const DEFAULT_PROTECTION = { syn_proxy: false, source_pps_limit: null, drop_fragments: false, max_flows: 65_536, alert_pps: null };

let gw: RunningGateway;
let a: SeededUser;
let b: SeededUser;

beforeAll(async () => {
  gw = await startGateway();
  await seedNode(gw.testDb.db, '198.18.1.0/26');
  [a, b] = await Promise.all([seedUser(gw.testDb.db), seedUser(gw.testDb.db)]);
});

afterAll(async () => {
  await gw?.close();
});

type Tunnel = { id: string; name: string | null; origin_ip: string; ports: string; protocol: string; protection: typeof DEFAULT_PROTECTION; status: string; updated_at: string };

async function buy(body: Record<string, unknown> = {}, u = a, key?: string): Promise<Tunnel> {
  const r = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4', ...body }, headers: key ? { 'idempotency-key': key } : {} });
  expect(r.status, r.text).toBe(201);
  expectMatchesOpenApi('post', '/api/dedicated', r.status, r.body, r.headers);
  return r.body.tunnel as Tunnel;
}

async function patch(id: string, body: unknown, token = a.writeKey) {
  const r = await call(gw.url, 'PATCH', `/api/dedicated/${id}`, { token, body });
  expectMatchesOpenApi('patch', '/api/dedicated/{id}', r.status, r.body, r.headers);
  return r;
}

/** The stored row, read past the code under test. */
async function row(id: string) {
  const { rows } = await gw.testDb.raw.query(
    `select name, origin_ip, gre_key::text as gre_key, ports, protocol, syn_proxy, source_pps_limit, drop_fragments, max_flows, alert_pps, spec_revision, origin_revision, updated_at, status
       from tunnel where id = $1`,
    [id],
  );
  return rows[0] as Record<string, unknown>;
}

/** Edge jobs queued for a tunnel (pg-boss's table; none when the queue was never opened). */
async function jobsFor(id: string): Promise<number> {
  const { rows } = await gw.testDb.raw.query<{ t: string | null }>(`select to_regclass('pgboss.job')::text as t`);
  if (!rows[0]!.t) return 0;
  return (await gw.testDb.raw.query<{ n: number }>(`select count(*)::int as n from pgboss.job where data->>'tunnelId' = $1`, [id])).rows[0]!.n;
}

async function gql(query: string, variables: Record<string, unknown>, token = a.writeKey) {
  const r = await call(gw.url, 'POST', '/graphql', { token, body: { query, variables } });
  return r.body as { data?: Record<string, any> | null; errors?: { message: string; extensions?: { code?: string } }[] };
}

describe('the tunnel object and the purchase', () => {
  it('every tunnel shows ports, protocol and protection; the defaults when none were asked for', async () => {
    const t = await buy();
    expect(t).toMatchObject({ ports: '*', protocol: 'both', protection: DEFAULT_PROTECTION });
    const got = await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: a.readKey });
    expect(got.body.tunnel).toMatchObject({ ports: '*', protocol: 'both', protection: DEFAULT_PROTECTION });
    const list = await call(gw.url, 'GET', '/api/dedicated?limit=100', { token: a.readKey });
    expectMatchesOpenApi('get', '/api/dedicated', list.status, list.body, list.headers);
    expect(list.body.tunnels.find((x: Tunnel) => x.id === t.id)).toMatchObject({ ports: '*', protocol: 'both', protection: DEFAULT_PROTECTION });
  });

  it('settings at purchase are stored normalised and shown the same by GET, the list and GraphQL', async () => {
    const t = await buy({ ports: '443, 80,81', protocol: 'tcp', protection: { syn_proxy: true, source_pps_limit: 2000 } });
    const want = { ports: '80-81,443', protocol: 'tcp', protection: { syn_proxy: true, source_pps_limit: 2000, drop_fragments: false } };
    expect(t).toMatchObject(want);
    expect(await row(t.id)).toMatchObject({ ports: '80-81,443', protocol: 'tcp', syn_proxy: true, source_pps_limit: 2000, drop_fragments: false });
    expect((await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: a.readKey })).body.tunnel).toMatchObject(want);
    const list = await call(gw.url, 'GET', '/api/dedicated?limit=100', { token: a.readKey });
    expect(list.body.tunnels.find((x: Tunnel) => x.id === t.id)).toMatchObject(want);
    const g = await gql(`query($id: ID!) { tunnel(id: $id) { ports protocol protection { synProxy sourcePpsLimit dropFragments } } }`, { id: t.id });
    expect(g.data?.tunnel).toEqual({ ports: '80-81,443', protocol: 'tcp', protection: { synProxy: true, sourcePpsLimit: 2000, dropFragments: false } });
  });

  it('a purchase refused for its settings is 400 invalid_request naming the field, and charges nothing', async () => {
    const balance = async () => (await gw.testDb.raw.query(`select balance_usd::text as b from account where id = $1`, [a.accountId])).rows[0]!.b as string;
    const before = await balance();
    for (const [body, field] of [
      [{ ports: '0' }, /ports/],
      [{ protocol: 'icmp' }, /protocol/],
      [{ protection: { source_pps_limit: 9 } }, /source_pps_limit/],
      [{ protection: { max_flows: 500 } }, /protection\.max_flows/],
      [{ protection: { alert_pps: 0 } }, /protection\.alert_pps/],
      [{ protection: { colour: 'red' } }, /protection has an unknown field "colour"/],
      [{ extra: 1 }, /"extra"/],
    ] as const) {
      const r = await call(gw.url, 'POST', '/api/dedicated', { token: a.writeKey, body: { origin_ip: '8.8.4.4', ...body } });
      expect([r.status, r.body.error], JSON.stringify(body)).toEqual([400, 'invalid_request']);
      expect(r.body.error_description).toMatch(field);
    }
    expect(await balance()).toBe(before);
  });

  it('Idempotency-Key: the settings are part of the request, compared as they take effect', async () => {
    const key = `settings-${randomUUID()}`;
    const first = await buy({ ports: '443,80,81', protection: { drop_fragments: true } }, a, key);
    // The same settings written otherwise: a replay of the first purchase.
    const replay = await buy({ ports: '80-81,443', protection: { drop_fragments: true, syn_proxy: false } }, a, key);
    expect(replay.id).toBe(first.id);
    // Other settings under the same key: 422.
    const other = await call(gw.url, 'POST', '/api/dedicated', { token: a.writeKey, body: { origin_ip: '8.8.4.4', ports: '80' }, headers: { 'idempotency-key': key } });
    expect([other.status, other.body.error]).toEqual([422, 'invalid_request']);
    // Default settings, sent or not, are the same request as one from before settings existed.
    const plain = `plain-${randomUUID()}`;
    const p1 = await buy({}, a, plain);
    const p2 = await buy({ ports: '*', protocol: 'both', protection: DEFAULT_PROTECTION }, a, plain);
    expect(p2.id).toBe(p1.id);
  });
});

describe('PATCH /api/dedicated/{id}', () => {
  it('a pending tunnel stores the change (200, normalised) and nothing is queued for an edge', async () => {
    const t = await buy();
    const r = await patch(t.id, { name: 'renamed', ports: '443,80,81', protocol: 'udp', protection: { source_pps_limit: 500 } });
    expect(r.status).toBe(200);
    expect(r.body.tunnel).toMatchObject({ status: 'pending', name: 'renamed', ports: '80-81,443', protocol: 'udp', protection: { syn_proxy: false, source_pps_limit: 500, drop_fragments: false } });
    expect(await row(t.id)).toMatchObject({ name: 'renamed', ports: '80-81,443', protocol: 'udp', source_pps_limit: 500, spec_revision: 1 });
    expect(await jobsFor(t.id)).toBe(0);
  });

  it('the edge job carries the stored settings as the wire policy (tunnelSpecOf via edge-state.ts), none when default', async () => {
    const t = await buy();
    expect((await edgeTunnel(gw.testDb.db, t.id))!.spec.policy).toBeUndefined();
    await patch(t.id, { ports: '443,80,81', protocol: 'tcp', protection: { syn_proxy: true, source_pps_limit: 50 } });
    expect((await edgeTunnel(gw.testDb.db, t.id))!.spec.policy).toEqual({ ports: [[80, 81], [443, 443]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 50, drop_fragments: false });
    await patch(t.id, { ports: '*', protocol: 'both', protection: { syn_proxy: false, source_pps_limit: null } });
    expect((await edgeTunnel(gw.testDb.db, t.id))!.spec.policy).toBeUndefined();
    // max_flows and alert_pps travel in the policy (optional keys; enforcement of max_flows is the dataplane's, later).
    await patch(t.id, { protection: { max_flows: 3_000, alert_pps: 700 } });
    expect((await edgeTunnel(gw.testDb.db, t.id))!.spec.policy).toEqual({ ports: '*', protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false, max_flows: 3_000, alert_pps: 700 });
    await patch(t.id, { protection: { max_flows: 65_536, alert_pps: null } });
    expect((await edgeTunnel(gw.testDb.db, t.id))!.spec.policy).toBeUndefined();
  });

  it('each key of protection is merged into the stored ones; null lifts the rate limit; name null clears the label', async () => {
    const t = await buy({ name: 'label', protection: { syn_proxy: true } });
    const attack = { max_flows: 65_536, alert_pps: null };
    expect((await patch(t.id, { protection: { source_pps_limit: 100 } })).body.tunnel.protection).toEqual({ syn_proxy: true, source_pps_limit: 100, drop_fragments: false, ...attack });
    expect((await patch(t.id, { protection: { drop_fragments: true } })).body.tunnel.protection).toEqual({ syn_proxy: true, source_pps_limit: 100, drop_fragments: true, ...attack });
    expect((await patch(t.id, { protection: { source_pps_limit: null } })).body.tunnel.protection).toEqual({ syn_proxy: true, source_pps_limit: null, drop_fragments: true, ...attack });
    // The attack settings (docs/CONTRACTS.md "Attacks") merge the same way; alert_pps null is the automatic threshold again.
    expect((await patch(t.id, { protection: { max_flows: 2_000, alert_pps: 50_000 } })).body.tunnel.protection).toEqual({ syn_proxy: true, source_pps_limit: null, drop_fragments: true, max_flows: 2_000, alert_pps: 50_000 });
    expect(await row(t.id)).toMatchObject({ max_flows: 2_000, alert_pps: 50_000 });
    expect((await patch(t.id, { protection: { alert_pps: null } })).body.tunnel.protection).toEqual({ syn_proxy: true, source_pps_limit: null, drop_fragments: true, max_flows: 2_000, alert_pps: null });
    expect((await patch(t.id, { ports: '1-65535' })).body.tunnel.ports).toBe('*');
    const cleared = await patch(t.id, { name: null });
    expect(cleared.body.tunnel.name).toBeNull();
  });

  it('a change that changes nothing is 200, writes nothing and queues nothing; a name alone never reaches the spec', async () => {
    const t = await buy({ ports: '22,80' });
    const before = await row(t.id);
    for (const body of [{}, { ports: '80,22' }, { ports: '22, 80', protocol: 'both', protection: {} }, { origin_ip: '8.8.4.4', protection: { syn_proxy: false } }]) {
      const r = await patch(t.id, body);
      expect(r.status, JSON.stringify(body)).toBe(200);
      expect(r.body.tunnel.updated_at).toBe(t.updated_at);
    }
    expect(await row(t.id)).toEqual(before);
    await patch(t.id, { name: 'only a label' });
    expect(await row(t.id)).toMatchObject({ name: 'only a label', spec_revision: before.spec_revision });
    expect(await jobsFor(t.id)).toBe(0);
  });

  it('every malformed field is 400 invalid_request naming it; nothing is stored', async () => {
    const t = await buy();
    const before = await row(t.id);
    const tooMany = Array.from({ length: 33 }, (_, i) => String(1000 + 2 * i)).join(',');
    const cases: [unknown, RegExp][] = [
      [{ ports: tooMany }, /ports may hold at most 32/],
      [{ ports: '0' }, /ports: "0" is not a port/],
      [{ ports: '65536' }, /ports: "65536" is not a port/],
      [{ ports: '80-79' }, /ports: "80-79"/],
      [{ ports: '' }, /ports/],
      [{ ports: 443 }, /ports must be a string/],
      [{ protocol: 'sctp' }, /protocol must be "both", "tcp" or "udp"/],
      [{ protection: { source_pps_limit: 9 } }, /protection\.source_pps_limit must be null or an integer from 10 to 1000000/],
      [{ protection: { source_pps_limit: 1_000_001 } }, /protection\.source_pps_limit/],
      [{ protection: { source_pps_limit: 10.5 } }, /protection\.source_pps_limit/],
      [{ protection: { syn_proxy: 'yes' } }, /protection\.syn_proxy must be a boolean/],
      [{ protection: { drop_fragments: null } }, /protection\.drop_fragments must be a boolean/],
      [{ protection: { max_flows: 999 } }, /protection\.max_flows must be an integer from 1000 to 1000000/],
      [{ protection: { max_flows: 1_000_001 } }, /protection\.max_flows/],
      [{ protection: { max_flows: null } }, /protection\.max_flows/],
      [{ protection: { max_flows: '65536' } }, /protection\.max_flows/],
      [{ protection: { max_flows: 5000.5 } }, /protection\.max_flows/],
      [{ protection: { alert_pps: 99 } }, /protection\.alert_pps must be null or an integer from 100 to 100000000/],
      [{ protection: { alert_pps: 100_000_001 } }, /protection\.alert_pps/],
      [{ protection: { alert_pps: 'auto' } }, /protection\.alert_pps/],
      [{ protection: { alert_pps: 1e3 + 0.5 } }, /protection\.alert_pps/],
      [{ protection: { ports: '*' } }, /protection has an unknown field "ports"/],
      [{ protection: [] }, /protection must be an object/],
      [{ protection: null }, /protection must be an object/],
      [{ name: 'x'.repeat(101) }, /name must be at most 100/],
      [{ origin_ip: null }, /origin_ip/],
      [{ colour: 'red' }, /Unknown field: "colour"/],
      [{ promocode: 'HALF' }, /Unknown field: "promocode"/],
      [[], /JSON object/],
    ];
    for (const [body, why] of cases) {
      const r = await patch(t.id, body);
      expect([r.status, r.body.error], JSON.stringify(body)).toEqual([400, 'invalid_request']);
      expect(r.body.error_description, JSON.stringify(body)).toMatch(why);
    }
    // Exactly 32 items and the edges of the ranges are fine.
    const thirtyTwo = Array.from({ length: 32 }, (_, i) => String(1000 + 2 * i)).join(',');
    expect((await patch(t.id, { ports: thirtyTwo })).body.tunnel.ports).toBe(thirtyTwo);
    expect((await patch(t.id, { ports: '1,65535', protection: { source_pps_limit: 10 } })).status).toBe(200);
    expect((await patch(t.id, { protection: { source_pps_limit: 1_000_000 } })).status).toBe(200);
    expect((await patch(t.id, { protection: { max_flows: 1_000, alert_pps: 100 } })).status).toBe(200);
    expect((await patch(t.id, { protection: { max_flows: 1_000_000, alert_pps: 100_000_000 } })).status).toBe(200);
    // A refusal left nothing behind: only the accepted changes moved the revision.
    expect((await row(t.id)).spec_revision).toBe((before.spec_revision as number) + 5);
  });

  it('origin_ip is checked exactly as at purchase: 400 invalid_origin_ip, and one of our own addresses is refused', async () => {
    const t = await buy();
    for (const origin_ip of ['8.8.8', '10.0.0.1', '127.0.0.1', '224.0.0.1', '08.8.8.8']) {
      const r = await patch(t.id, { origin_ip });
      expect([r.status, r.body.error], origin_ip).toEqual([400, 'invalid_origin_ip']);
    }
    // A protected IP of a pool in public space (the test pools are benchmarking space, refused before this).
    await seedNode(gw.testDb.db, '45.10.20.0/29');
    const ours = await patch(t.id, { origin_ip: '45.10.20.2' });
    expect([ours.status, ours.body.error]).toEqual([400, 'invalid_origin_ip']);
    expect(ours.body.error_description).toMatch(/protected IP of ours/);
    expect((await row(t.id)).origin_ip).toBe('8.8.4.4');
  });

  it('a new origin gets a GRE key free for the new (node, origin) pair, and the setup script uses the new origin', async () => {
    const there = await buy({ name: 'already at the new origin' }, a);
    await buy({ origin_ip: '9.9.9.9' });
    const t = await buy();
    const keyThere = (await row(there.id)).gre_key;
    const r = await patch(t.id, { origin_ip: '9.9.9.9' });
    expect(r.status).toBe(200);
    expect(r.body.tunnel.origin_ip).toBe('9.9.9.9');
    const after = await row(t.id);
    expect(after).toMatchObject({ origin_ip: '9.9.9.9', origin_revision: after.spec_revision });
    const keysAtNewOrigin = (await gw.testDb.raw.query(`select gre_key::text as k from tunnel where origin_ip = '9.9.9.9' and status <> 'deleted'`)).rows.map((x) => x.k);
    expect(new Set(keysAtNewOrigin).size).toBe(keysAtNewOrigin.length);
    expect(keyThere).not.toBeNull();
    const setup = await call(gw.url, 'GET', `/api/dedicated/${t.id}/setup`, { token: a.readKey });
    expect(setup.body.scripts.origin).toContain("ORIGIN_IP='9.9.9.9'");
    expect(setup.body.scripts.origin).toContain(`GRE_KEY='${after.gre_key}'`);
  });

  it("another account's tunnel is 404, as is an unknown id; a read key is 403; nothing changes", async () => {
    const t = await buy();
    expect((await patch(t.id, { name: 'mine now' }, b.writeKey)).status).toBe(404);
    expect((await patch(randomUUID(), { name: 'x' })).status).toBe(404);
    expect((await patch('not-a-uuid', { name: 'x' })).status).toBe(404);
    expect((await patch(t.id, { name: 'x' }, a.readKey)).body.error).toBe('insufficient_scope');
    expect((await row(t.id)).name).toBeNull();
  });

  it('deleted and deleting tunnels are 409 invalid_state', async () => {
    const t = await buy();
    expect((await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: a.writeKey })).body.tunnel.status).toBe('deleted');
    const r = await patch(t.id, { ports: '80' });
    expect([r.status, r.body.error]).toEqual([409, 'invalid_state']);
    const d = await buy();
    await gw.testDb.raw.query(`update tunnel set status = 'deleting' where id = $1`, [d.id]);
    expect((await patch(d.id, { name: 'x' })).status).toBe(409);
  });

  it('a failed tunnel stores the change (200) without sending anything; the next provision carries it', async () => {
    const t = await buy();
    await gw.testDb.raw.query(`update tunnel set status = 'failed' where id = $1`, [t.id]);
    const r = await patch(t.id, { ports: '25565' });
    expect([r.status, r.body.tunnel.status, r.body.tunnel.ports]).toEqual([200, 'failed', '25565']);
    expect(await jobsFor(t.id)).toBe(0);
  });

  it('concurrent changes of different fields all survive (row lock); the last committed wins a field both set', async () => {
    const t = await buy();
    const changes = [
      { name: 'concurrent' },
      { ports: '22' },
      { protocol: 'tcp' },
      { protection: { syn_proxy: true } },
      { protection: { source_pps_limit: 777 } },
      { protection: { drop_fragments: true } },
      { origin_ip: '1.0.0.1' },
    ];
    // Hold the row so every PATCH is in flight at once, then let them go together.
    const holder = await gw.testDb.raw.connect();
    try {
      await holder.query('begin');
      await holder.query('select 1 from tunnel where id = $1 for update', [t.id]);
      const all = Promise.all(changes.map((c) => patch(t.id, c)));
      await until('every PATCH waiting on the row', async () => {
        const { rows } = await gw.testDb.raw.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
        );
        return rows[0]!.n === changes.length;
      });
      await holder.query('commit');
      for (const r of await all) expect(r.status).toBe(200);
    } finally {
      holder.release();
    }
    const got = (await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: a.readKey })).body.tunnel;
    expect(got).toMatchObject({ name: 'concurrent', origin_ip: '1.0.0.1', ports: '22', protocol: 'tcp', protection: { syn_proxy: true, source_pps_limit: 777, drop_fragments: true } });
    // Each spec change counted once.
    expect((await row(t.id)).spec_revision).toBe(changes.length - 1);

    // One field set by two: the one committed last is stored.
    const second = await patch(t.id, { ports: '80' });
    const third = await patch(t.id, { ports: '443' });
    expect([second.status, third.status]).toEqual([200, 200]);
    expect((await row(t.id)).ports).toBe('443');
  });
});

describe('GraphQL updateTunnel and purchaseTunnel', () => {
  const TUNNEL = 'id name originIp ports protocol status settingsApplied protection { synProxy sourcePpsLimit dropFragments }';
  const UPDATE = `mutation($id: ID!, $input: UpdateTunnelInput!) { updateTunnel(id: $id, input: $input) { ${TUNNEL} } }`;

  it('purchase with settings, then updateTunnel over the same service: merged, normalised, and REST shows the same', async () => {
    const bought = await gql(`mutation($input: PurchaseTunnelInput!) { purchaseTunnel(input: $input) { tunnel { ${TUNNEL} } } }`, {
      input: { originIp: '8.8.4.4', ports: '443,80,81', protocol: 'udp', protection: { dropFragments: true } },
    });
    const t = bought.data!.purchaseTunnel.tunnel;
    expect(t).toMatchObject({ ports: '80-81,443', protocol: 'udp', protection: { synProxy: false, sourcePpsLimit: null, dropFragments: true } });
    const u = await gql(UPDATE, { id: t.id, input: { name: 'via graphql', ports: '25565-25575,22', protection: { sourcePpsLimit: 300 } } });
    expect(u.errors).toBeUndefined();
    // A pending tunnel is on no edge: nothing to apply, so its settings count as applied (PATCH answers 200).
    expect(u.data!.updateTunnel).toMatchObject({ name: 'via graphql', ports: '22,25565-25575', protocol: 'udp', status: 'PENDING', settingsApplied: true, protection: { synProxy: false, sourcePpsLimit: 300, dropFragments: true } });
    // null for the rate limit lifts it; fields left out keep their values.
    const lifted = await gql(UPDATE, { id: t.id, input: { protection: { sourcePpsLimit: null } } });
    expect(lifted.data!.updateTunnel.protection).toEqual({ synProxy: false, sourcePpsLimit: null, dropFragments: true });
    expect(lifted.data!.updateTunnel.name).toBe('via graphql');
    const rest = (await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: a.readKey })).body.tunnel;
    expect(rest).toMatchObject({ name: 'via graphql', ports: '22,25565-25575', protocol: 'udp', protection: { syn_proxy: false, source_pps_limit: null, drop_fragments: true } });
  });

  it('maxFlows and alertPps (docs/CONTRACTS.md "Attacks"): at purchase and in updateTunnel; null alertPps is automatic; REST shows the same', async () => {
    const ATTACK = 'id protection { maxFlows alertPps }';
    const bought = await gql(`mutation($input: PurchaseTunnelInput!) { purchaseTunnel(input: $input) { tunnel { ${ATTACK} } } }`, {
      input: { originIp: '8.8.4.4', protection: { maxFlows: 5_000, alertPps: 20_000 } },
    });
    expect(bought.errors).toBeUndefined();
    const t = bought.data!.purchaseTunnel.tunnel;
    expect(t.protection).toEqual({ maxFlows: 5_000, alertPps: 20_000 });
    const upd = (input: Record<string, unknown>) => gql(`mutation($id: ID!, $input: UpdateTunnelInput!) { updateTunnel(id: $id, input: $input) { ${ATTACK} } }`, { id: t.id, input });
    expect((await upd({ protection: { alertPps: null } })).data!.updateTunnel.protection).toEqual({ maxFlows: 5_000, alertPps: null });
    // maxFlows has no null: left out (or null) keeps it.
    expect((await upd({ protection: { maxFlows: null, alertPps: 300 } })).data!.updateTunnel.protection).toEqual({ maxFlows: 5_000, alertPps: 300 });
    expect((await call(gw.url, 'GET', `/api/dedicated/${t.id}`, { token: a.readKey })).body.tunnel.protection).toMatchObject({ max_flows: 5_000, alert_pps: 300 });
    for (const protection of [{ maxFlows: 999 }, { maxFlows: 1_000_001 }, { alertPps: 99 }, { alertPps: 100_000_001 }]) {
      const r = await upd({ protection });
      expect(r.errors?.[0]?.extensions?.code, JSON.stringify(protection)).toBe('invalid_request');
      expect(r.errors?.[0]?.message, JSON.stringify(protection)).toMatch(/protection\.(max_flows|alert_pps)/);
    }
  });

  it('refusals carry the REST codes: invalid_request, invalid_origin_ip, not_found, invalid_state, insufficient_scope', async () => {
    const t = await buy();
    const code = async (input: Record<string, unknown>, id = t.id, token = a.writeKey) => (await gql(UPDATE, { id, input }, token)).errors?.[0]?.extensions?.code;
    expect(await code({ ports: '0' })).toBe('invalid_request');
    expect(await code({ protocol: 'icmp' })).toBe('invalid_request');
    expect(await code({ protection: { sourcePpsLimit: 9 } })).toBe('invalid_request');
    expect(await code({ originIp: '10.1.2.3' })).toBe('invalid_origin_ip');
    expect(await code({ name: 'x' }, t.id, b.writeKey)).toBe('not_found');
    expect(await code({ name: 'x' }, t.id, a.readKey)).toBe('insufficient_scope');
    // An unknown input field is refused by GraphQL itself, before the service.
    expect(await code({ colour: 'red' })).toBe('BAD_USER_INPUT');
    await call(gw.url, 'DELETE', `/api/dedicated/${t.id}`, { token: a.writeKey });
    expect(await code({ name: 'x' })).toBe('invalid_state');
    expect((await row(t.id)).name).toBeNull();
  });
});
