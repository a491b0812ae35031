// Live subscriptions over graphql-ws against the real gateway on real PostgreSQL: a completed
// subscription lets go of its status-bus listeners at once even on an idle tunnel (nothing ever wakes
// its wait), the caps per socket and per credential (server/graphql/subscriptions.ts), and the
// credential re-check closing a socket whose credential lost its permission (server/graphql/index.ts).
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { closeCode, connect, issueAccessToken, type Socket } from '../helpers/graphql-ws-client.ts';
import { setRate } from '../../server/domain/settings.ts';
import { until } from '../helpers/wait.ts';

const WATCH = 'subscription S($id: ID!) { tunnelStatus(id: $id) { id status } }';
const ME = 'query { me { accountId } }';

let gw: RunningGateway;

beforeAll(async () => {
  // Re-checks often, so a lost permission shows within the test; budgets wide, so a thousand operations fit.
  gw = await startGateway({ config: { wsAuthRecheckMs: 200, rateLimitPerMinute: 1_000_000, rateLimitBurst: 1_000_000 } });
  await seedNode(gw.testDb.db, '198.18.9.0/28');
  await setRate(gw.testDb.db, '90');
}, 120_000);

afterAll(async () => gw?.close());

const listeners = () => gw.services.provisioning.bus.listenerCount();

async function tunnelOf(u: SeededUser): Promise<string> {
  const res = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
  expect(res.status).toBe(201);
  return res.body.tunnel.id as string;
}

async function authed(authorization: string): Promise<Socket> {
  const s = await connect(gw);
  expect(await s.init(authorization)).toBe('ack');
  return s;
}

interface Answer {
  /** `data`: the tunnel now (the subscription runs); `refused`: the subscription did not start. */
  type: 'data' | 'refused';
  code?: string;
  message?: string;
}

/**
 * Starts a tunnelStatus subscription and reads its first answer. A refusal at subscribe time (a resolver
 * error: not_found, the caps) comes as graphql-ws sends it: a `next` whose payload has `errors` and no
 * data, then `complete`; an `error` frame would be a refusal before execution (validation).
 */
async function subscribe(s: Socket, id: string, tunnelId: string): Promise<Answer> {
  s.send({ type: 'subscribe', id, payload: { query: WATCH, variables: { id: tunnelId } } });
  const f = await s.next((x) => x.id === id && (x.type === 'next' || x.type === 'error'));
  if (!f) throw new Error(`socket closed before subscription ${id} answered`);
  const errors = (f.type === 'error' ? f.payload : (f.payload as { errors?: unknown }).errors) as Array<{ message: string; extensions?: { code?: string } }> | undefined;
  if (!errors?.length) return { type: 'data' };
  return { type: 'refused', code: errors[0]!.extensions?.code, message: errors[0]!.message };
}

describe('completing subscriptions', () => {
  it('1,000 subscriptions on an idle tunnel, each completed after its first answer, leave no bus listener behind', async () => {
    const u = await seedUser(gw.testDb.db);
    const tunnel = await tunnelOf(u);
    const baseline = listeners();
    const sockets = await Promise.all([0, 1, 2, 3].map(() => authed(`Bearer ${u.readKey}`)));
    let started = 0;
    for (let round = 0; round < 25; round++) {
      await Promise.all(
        sockets.map(async (s, k) => {
          const ids = Array.from({ length: 10 }, (_, i) => `r${round}s${k}n${i}`);
          const first = await Promise.all(ids.map((id) => subscribe(s, id, tunnel)));
          expect(first.map((f) => f.type)).toEqual(ids.map(() => 'data'));
          started += ids.length;
          return ids;
        }),
      ).then((idsPerSocket) => {
        // Every one of the 40 is now parked in its wait for a change that never comes: it holds listeners.
        expect(listeners()).toBeGreaterThanOrEqual(baseline + 40);
        idsPerSocket.forEach((ids, k) => ids.forEach((id) => sockets[k]!.send({ type: 'complete', id })));
      });
    }
    expect(started).toBe(1000);
    await until('every completed subscription to let go of its listeners', () => listeners() === baseline);
    // The sockets are still usable: completion freed every slot of the caps too.
    for (const s of sockets) expect((await subscribe(s, 'after', tunnel)).type).toBe('data');
    for (const s of sockets) s.ws.close();
    await Promise.all(sockets.map((s) => s.closed));
    await until('closed sockets to let go of their subscriptions', () => listeners() === baseline);
  });
});

describe('caps', () => {
  it('the 11th subscription on one socket and the 51st of one credential are refused with rate_limited; completing one frees a slot', async () => {
    const u = await seedUser(gw.testDb.db);
    const other = await seedUser(gw.testDb.db);
    const tunnel = await tunnelOf(u);
    const sockets: Socket[] = [];
    for (let k = 0; k < 5; k++) {
      const s = await authed(`Bearer ${u.readKey}`);
      sockets.push(s);
      for (let i = 0; i < 10; i++) expect((await subscribe(s, `k${k}n${i}`, tunnel)).type).toBe('data');
    }
    const eleventh = await subscribe(sockets[0]!, 'k0n10', tunnel);
    expect(eleventh.type).toBe('refused');
    expect(eleventh.code).toBe('rate_limited');
    expect(eleventh.message).toMatch(/10 subscriptions .* one WebSocket/);
    // The refused one holds nothing; the socket and its running subscriptions carry on.
    expect(sockets[0]!.ws.readyState).toBe(WebSocket.OPEN);
    sockets[0]!.send({ type: 'subscribe', id: 'probe', payload: { query: ME } });
    expect((await sockets[0]!.next((f) => f.id === 'probe'))?.type).toBe('next');

    // 50 running for this key: a sixth socket of the same key may not start one.
    const sixth = await authed(`Bearer ${u.readKey}`);
    const fiftyFirst = await subscribe(sixth, 'c51', tunnel);
    expect(fiftyFirst.type).toBe('refused');
    expect(fiftyFirst.code).toBe('rate_limited');
    expect(fiftyFirst.message).toMatch(/50 subscriptions .* one credential/);
    // Another credential of the same account is counted apart (its own 50).
    const otherKey = await authed(`Bearer ${u.writeKey}`);
    expect((await subscribe(otherKey, 'w1', tunnel)).type).toBe('data');
    // Another account's key is refused the tunnel itself (not_found), not by the cap.
    const stranger = await authed(`Bearer ${other.readKey}`);
    expect(await subscribe(stranger, 'x1', tunnel)).toMatchObject({ type: 'refused', code: 'not_found' });

    // Completing one of the 50 frees a slot for the credential.
    sockets[1]!.send({ type: 'complete', id: 'k1n0' });
    let n = 0;
    const retried = await until('a slot freed by the completion', async () => {
      const f = await subscribe(sixth, `retry${n++}`, tunnel);
      return f.type === 'data' ? f : null;
    });
    expect(retried.type).toBe('data');
    for (const s of [...sockets, sixth, otherKey, stranger]) s.ws.close();
  });
});

describe('credential re-check', () => {
  async function watching(authorization: string, tunnel: string): Promise<Socket> {
    const s = await authed(authorization);
    expect((await subscribe(s, 'watch', tunnel)).type).toBe('data');
    return s;
  }

  it("closes with 4403 when the token's application loses API access (none), or is lowered to read", async () => {
    for (const lowered of ['none', 'read']) {
      const u = await seedUser(gw.testDb.db);
      const tunnel = await tunnelOf(u);
      const { token, clientId } = await issueAccessToken(gw, u, 600, 'write');
      const s = await watching(`Bearer ${token}`, tunnel);
      await gw.testDb.raw.query('update oauth_client set api_access = $2 where client_id = $1', [clientId, lowered]);
      expect(await closeCode(s), lowered).toBe(4403);
    }
  });

  it("closes with 4403 when the user's role changes from owner to viewer", async () => {
    const u = await seedUser(gw.testDb.db);
    const tunnel = await tunnelOf(u);
    const { token } = await issueAccessToken(gw, u, 600, 'write');
    const s = await watching(`Bearer ${token}`, tunnel);
    const untouched = await seedUser(gw.testDb.db);
    const control = await watching(`Bearer ${(await issueAccessToken(gw, untouched, 600, 'write')).token}`, await tunnelOf(untouched));
    await gw.testDb.raw.query(`update app_user set role = 'viewer' where id = $1`, [u.userId]);
    expect(await closeCode(s)).toBe(4403);
    // The re-checks that closed it passed over the unchanged credential's socket too, which still answers.
    control.send({ type: 'subscribe', id: 'after', payload: { query: ME } });
    expect((await control.next((f) => f.id === 'after'))?.type).toBe('next');
    control.ws.close();
  });

  it('keeps the socket open while the check itself fails (the database away), and checks again after', async () => {
    const u = await seedUser(gw.testDb.db);
    const s = await watching(`Bearer ${u.readKey}`, await tunnelOf(u));
    // A stand-in for an infrastructure failure: the Authenticator's lookup failing as a lost connection does.
    let failed = 0;
    const real = gw.services.auth.authenticate.bind(gw.services.auth);
    const spy = vi.spyOn(gw.services.auth, 'authenticate').mockImplementation(async () => {
      failed++;
      throw new Error('Connection terminated unexpectedly');
    });
    try {
      await until('three failed re-checks', () => failed >= 3);
    } finally {
      spy.mockRestore();
    }
    expect(s.ws.readyState).toBe(WebSocket.OPEN);
    // Checks that succeed again leave it open too.
    let passed = 0;
    const counting = vi.spyOn(gw.services.auth, 'authenticate').mockImplementation(async (a) => {
      const p = await real(a);
      passed++;
      return p;
    });
    try {
      await until('a successful re-check', () => passed >= 2);
    } finally {
      counting.mockRestore();
    }
    s.send({ type: 'subscribe', id: 'after', payload: { query: ME } });
    expect((await s.next((f) => f.id === 'after'))?.type).toBe('next');
    s.ws.close();
  });
});

describe('drain', () => {
  it('closing the gateway ends live subscriptions with 1001 instead of waiting for them', async () => {
    const own = await startGateway();
    try {
      await seedNode(own.testDb.db, '198.18.10.0/28');
      await setRate(own.testDb.db, '90');
      const u = await seedUser(own.testDb.db);
      const bought = await call(own.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
      const s = await connect(own);
      expect(await s.init(`Bearer ${u.readKey}`)).toBe('ack');
      expect((await subscribe(s, 'live', bought.body.tunnel.id)).type).toBe('data');
      // Resolves only once the listener closed, which an open WebSocket used to hold for ever.
      await own.close();
      expect((await s.closed).code).toBe(1001);
      expect(own.services.provisioning.bus.listenerCount()).toBe(0);
    } catch (e) {
      await own.close().catch(() => {});
      throw e;
    }
  });
});
