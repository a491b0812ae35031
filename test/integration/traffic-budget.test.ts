// The traffic budget (server/graphql/traffic-budget.ts, server/health/index.ts trafficRange) on the real
// gateway and real PostgreSQL: `to` at most one step after now, and at most 10,000 traffic points per
// operation, counted across aliased fields and multiplied by the tunnels page they run under, over HTTP
// and over graphql-ws. A refusal must read nothing: every statement the gateway's Database sends is
// recorded, and a refused operation sends none about tunnels or traffic, while an allowed one does.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { connect } from '../helpers/graphql-ws-client.ts';
import { setRate } from '../../server/domain/settings.ts';

let gw: RunningGateway;
let u: SeededUser;
let tunnelId: string;
/** SQL text of every statement sent through the gateway's Database while recording. */
const statements: string[] = [];

const MIN = 60_000;
const HOUR = 60 * MIN;
const iso = (ms: number) => new Date(ms).toISOString();

beforeAll(async () => {
  gw = await startGateway();
  await seedNode(gw.testDb.db, '198.18.11.0/28');
  await setRate(gw.testDb.db, '90');
  u = await seedUser(gw.testDb.db);
  const bought = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(bought.status).toBe(201);
  tunnelId = bought.body.tunnel.id;
  const db = gw.services.db;
  for (const m of ['query', 'hot', 'prepared', 'hotRows'] as const) {
    const real = (db[m] as (...a: unknown[]) => unknown).bind(db);
    vi.spyOn(db, m).mockImplementation(((...args: unknown[]) => {
      statements.push(String(m === 'query' ? args[0] : args[1]));
      return real(...args);
    }) as never);
  }
}, 120_000);

afterAll(async () => {
  vi.restoreAllMocks();
  await gw?.close();
});

/** Statements about tunnels or traffic sent while `run` ran. */
async function tunnelReads<T>(run: () => Promise<T>): Promise<{ result: T; reads: string[] }> {
  statements.length = 0;
  const result = await run();
  return { result, reads: statements.filter((s) => /\btunnel\b|traffic\./i.test(s)) };
}

const gql = (query: string, variables?: Record<string, unknown>) => call(gw.url, 'POST', '/graphql', { token: u.readKey, body: { query, variables } });

describe('traffic budget over HTTP', () => {
  it('allowed: one traffic field within the rules reads the tunnel and its points (the recorder sees reads)', async () => {
    const { result, reads } = await tunnelReads(() => gql('query T($id: ID!) { tunnel(id: $id) { traffic(step: "1m") { step points { t } } } }', { id: tunnelId }));
    expect(result.body.errors).toBeUndefined();
    expect(result.body.data.tunnel.traffic.step).toBe('1m');
    expect(reads.length).toBeGreaterThan(0);
  });

  it('20 aliased traffic fields of 10,000 points each are refused before any read', async () => {
    const now = Date.now();
    const fields = Array.from({ length: 20 }, (_, i) => `t${i}: traffic(step: "1m", from: "${iso(now - 47 * HOUR)}", to: "${iso(now - 47 * HOUR + 10_000 * MIN)}") { step }`).join(' ');
    const { result, reads } = await tunnelReads(() => gql(`query T($id: ID!) { tunnel(id: $id) { ${fields} } }`, { id: tunnelId }));
    expect(result.status).toBe(400);
    expect(result.body.data).toBeUndefined();
    expect(result.body.errors[0].extensions.code).toBe('invalid_request');
    // Each is over the `to` rule alone (10,000 minutes reach days past now).
    expect(result.body.errors[0].message).toMatch(/to is in the future/);
    expect(reads).toEqual([]);
  });

  it('20 aliased fields each within the rules but 40,000 points together are refused before any read', async () => {
    const now = Date.now();
    const fields = Array.from({ length: 20 }, (_, i) => `t${i}: traffic(step: "1m", from: $from) { step }`).join(' ');
    const { result, reads } = await tunnelReads(() =>
      gql(`query T($id: ID!, $from: DateTimeISO) { tunnel(id: $id) { ${fields} } }`, { id: tunnelId, from: iso(now - 2000 * MIN) }),
    );
    expect(result.status).toBe(400);
    expect(result.body.errors[0].extensions.code).toBe('invalid_request');
    expect(result.body.errors[0].message).toMatch(/asks for 40\d{3} traffic points.*at most 10000/);
    expect(reads).toEqual([]);
    // Four of them (about 8,000 points) are allowed: the budget is the sum, not a per-field cap.
    const five = Array.from({ length: 4 }, (_, i) => `t${i}: traffic(step: "1m", from: $from) { step }`).join(' ');
    const ok = await gql(`query T($id: ID!, $from: DateTimeISO) { tunnel(id: $id) { ${five} } }`, { id: tunnelId, from: iso(now - 2000 * MIN) });
    expect(ok.body.errors).toBeUndefined();
  });

  it('tunnels(limit: 100) { tunnels { traffic } } over a long range is refused before any read, literal or variable limit', async () => {
    const now = Date.now();
    for (const [query, variables] of [
      [`{ tunnels(limit: 100) { tunnels { traffic(step: "1h", from: "${iso(now - 80 * 24 * HOUR)}") { step } } } }`, {}],
      ['query L($n: Int!, $from: DateTimeISO) { tunnels(limit: $n) { tunnels { id traffic(step: "1h", from: $from) { step } } } }', { n: 100, from: iso(now - 80 * 24 * HOUR) }],
      // The default page (20) of a day of minutes: 20 x 1,441.
      ['fragment F on Tunnel { traffic(step: "1m", from: $from) { step } } query L($from: DateTimeISO) { tunnels { tunnels { ...F } } }', { from: iso(now - 24 * HOUR) }],
    ] as const) {
      const { result, reads } = await tunnelReads(() => gql(query, variables));
      expect(result.status, query).toBe(400);
      expect(result.body.errors[0].extensions.code).toBe('invalid_request');
      expect(result.body.errors[0].message).toMatch(/traffic points/);
      expect(reads, query).toEqual([]);
    }
  });
});

describe('traffic rules shared with REST', () => {
  it('`to` more than one step after now is invalid_request, before the tunnel is read', async () => {
    const now = Date.now();
    const { result, reads } = await tunnelReads(() => call(gw.url, 'GET', `/api/dedicated/${tunnelId}/traffic?step=1h&to=${encodeURIComponent(iso(now + 3 * HOUR))}`, { token: u.readKey }));
    expect(result.status).toBe(400);
    expect(result.body.error).toBe('invalid_request');
    expect(result.body.error_description).toMatch(/to is in the future/);
    expect(reads).toEqual([]);
    const within = await call(gw.url, 'GET', `/api/dedicated/${tunnelId}/traffic?step=1h&to=${encodeURIComponent(iso(now + 30 * MIN))}`, { token: u.readKey });
    expect(within.status).toBe(200);
  });
});

describe('traffic budget over graphql-ws', () => {
  it('the same operation is refused on a socket, before any read', async () => {
    const s = await connect(gw);
    expect(await s.init(`Bearer ${u.readKey}`)).toBe('ack');
    const now = Date.now();
    const fields = Array.from({ length: 20 }, (_, i) => `t${i}: traffic(step: "1m", from: "${iso(now - 2000 * MIN)}") { step }`).join(' ');
    const { result: frame, reads } = await tunnelReads(async () => {
      s.send({ type: 'subscribe', id: 'q', payload: { query: `query T($id: ID!) { tunnel(id: $id) { ${fields} } }`, variables: { id: tunnelId } } });
      return s.next((f) => f.id === 'q' && (f.type === 'next' || f.type === 'error'));
    });
    const errors = (frame?.payload as { errors?: Array<{ extensions?: { code?: string } }> }).errors;
    expect(errors?.[0]?.extensions?.code).toBe('invalid_request');
    expect(reads).toEqual([]);
    s.ws.close();
  });
});
