// Origin changes are limited (docs/CONTRACTS.md "Tunnel settings", docs/SECURITY.md): at most 10 changes of a
// tunnel's origin_ip in any hour, beyond that 429 rate_limited with Retry-After, over REST PATCH and GraphQL
// updateTunnel alike (one domain service), counted in PostgreSQL under the tunnel's row lock so that parallel
// changes cannot get past it together. The gateway's clock is injected: the test moves time itself, and nothing
// here depends on how long a request took. Tunnels stay pending (no edge): the limit is the domain's, whatever
// the status.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';

// Each test starts two hours after the previous one's T0: the clock only goes forward (the request gate shares it).
let T0 = Date.parse('2026-11-29T10:00:00.000Z');
const HOUR_S = 3600;

let gw: RunningGateway;
let user: SeededUser;
let now = T0;

beforeAll(async () => {
  gw = await startGateway({ clock: () => now });
  await seedNode(gw.testDb.db, '198.18.7.0/26');
  user = await seedUser(gw.testDb.db);
});

afterAll(async () => {
  await gw?.close();
});

async function buy(): Promise<{ id: string }> {
  const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(r.status, r.text).toBe(201);
  return r.body.tunnel as { id: string };
}

async function patch(id: string, body: unknown) {
  const r = await call(gw.url, 'PATCH', `/api/dedicated/${id}`, { token: user.writeKey, body });
  expectMatchesOpenApi('patch', '/api/dedicated/{id}', r.status, r.body, r.headers);
  return r;
}

const origin = (i: number): string => `9.9.${Math.floor(i / 250)}.${(i % 250) + 1}`;
const storedOrigin = async (id: string): Promise<string> => (await gw.testDb.raw.query<{ origin_ip: string }>('select origin_ip from tunnel where id = $1', [id])).rows[0]!.origin_ip;
const changesRecorded = async (id: string): Promise<number> => (await gw.testDb.raw.query<{ n: number }>('select count(*)::int as n from tunnel_origin_change where tunnel_id = $1', [id])).rows[0]!.n;

describe('origin changes are limited to 10 per tunnel per hour', () => {
  it('the 11th change within the hour is 429 rate_limited with Retry-After until the oldest leaves the window; nothing is stored; other changes still pass', async () => {
    now = T0;
    const t = await buy();
    // Ten changes, one a minute.
    for (let i = 0; i < 10; i++) {
      now = T0 + i * 60_000;
      const r = await patch(t.id, { origin_ip: origin(i) });
      expect(r.status, r.text).toBe(200);
    }
    now = T0 + 10 * 60_000;
    const refused = await patch(t.id, { origin_ip: origin(10) });
    expect(refused.status).toBe(429);
    expect(refused.body).toEqual({ error: 'rate_limited', error_description: expect.stringMatching(/origin_ip changed 10 times within the last hour/) });
    // The oldest change (T0) leaves the window at T0 + 1 h: 50 minutes from now.
    expect(refused.headers.get('retry-after')).toBe(String(HOUR_S - 600));
    expect(await storedOrigin(t.id)).toBe(origin(9));
    // Setting the origin it already has changes nothing, so it counts nothing and is not refused; other fields pass.
    expect((await patch(t.id, { origin_ip: origin(9), ports: '443' })).status).toBe(200);
    // Another tunnel of the same account has its own ten.
    const other = await buy();
    expect((await patch(other.id, { origin_ip: origin(50) })).status).toBe(200);

    // One second before the hour is over: still refused, 1 s to wait.
    now = T0 + HOUR_S * 1000 - 1000;
    const almost = await patch(t.id, { origin_ip: origin(10) });
    expect([almost.status, almost.headers.get('retry-after')]).toEqual([429, '1']);
    // An hour after the first change it has left the window: one more passes, and the next waits for the second (T0 + 1 min).
    now = T0 + HOUR_S * 1000;
    expect((await patch(t.id, { origin_ip: origin(10) })).status).toBe(200);
    const next = await patch(t.id, { origin_ip: origin(11) });
    expect([next.status, next.headers.get('retry-after')]).toEqual([429, '60']);
    expect(await storedOrigin(t.id)).toBe(origin(10));
    // What left the window is deleted as changes come: at most an hour of them per tunnel.
    expect(await changesRecorded(t.id)).toBe(10);
  });

  it('GraphQL updateTunnel is the same service: rate_limited with extensions.retry_after', async () => {
    now = T0 += 2 * HOUR_S * 1000;
    const t = await buy();
    const update = (originIp: string) =>
      call(gw.url, 'POST', '/graphql', {
        token: user.writeKey,
        body: { query: 'mutation U($id: ID!, $input: UpdateTunnelInput!) { updateTunnel(id: $id, input: $input) { originIp } }', variables: { id: t.id, input: { originIp } } },
      });
    for (let i = 0; i < 5; i++) expect((await update(origin(100 + i))).body.data.updateTunnel.originIp).toBe(origin(100 + i));
    for (let i = 5; i < 10; i++) expect((await patch(t.id, { origin_ip: origin(100 + i) })).status).toBe(200);
    now = T0 + 30_000;
    const r = await update(origin(120));
    expect(r.body.data).toBeNull();
    expect(r.body.errors).toEqual([expect.objectContaining({ message: expect.stringMatching(/origin_ip changed 10 times/), extensions: { code: 'rate_limited', status: 429, retry_after: HOUR_S - 30 } })]);
    expect(await storedOrigin(t.id)).toBe(origin(109));
  });

  it('20 changes in parallel: exactly 10 pass, 10 are 429 with Retry-After, and the stored origin is one that passed', async () => {
    now = T0 += 2 * HOUR_S * 1000;
    const t = await buy();
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => call(gw.url, 'PATCH', `/api/dedicated/${t.id}`, { token: user.writeKey, body: { origin_ip: origin(200 + i) } })));
    const passed = answers.filter((r) => r.status === 200);
    const refused = answers.filter((r) => r.status === 429);
    expect(passed).toHaveLength(10);
    expect(refused).toHaveLength(10);
    for (const r of refused) {
      expect(r.body.error).toBe('rate_limited');
      expect(r.headers.get('retry-after')).toBe(String(HOUR_S));
    }
    expect(passed.map((r) => r.body.tunnel.origin_ip)).toContain(await storedOrigin(t.id));
    expect(await changesRecorded(t.id)).toBe(10);
  });
});
