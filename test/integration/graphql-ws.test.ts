// GraphQL over WebSocket under the same limits as HTTP, against the real gateway on
// real PostgreSQL. The client speaks graphql-transport-ws by hand over the `ws` library, so every
// frame and close code is visible.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { closeCode, connect, DEADLINE_MS, issueAccessToken, open, Socket } from '../helpers/graphql-ws-client.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { revokeApiKey } from '../../server/auth/api-keys.ts';
import type { Config } from '../../server/config.ts';
import { setRate } from '../../server/domain/settings.ts';

const ME = 'query { me { accountId } }';

// The request gate's rate limits run on a stopped clock (nothing refills while a test runs), so each
// limit's answer is exact whatever the host's speed.
async function withGateway(config: Partial<Config>, body: (gw: RunningGateway) => Promise<void>): Promise<void> {
  const stopped = Date.now();
  const gw = await startGateway({ config, clock: () => stopped });
  try {
    await body(gw);
  } finally {
    await gw.close();
  }
}

describe('GraphQL over WebSocket: limits', () => {
  it('a message over BODY_LIMIT_BYTES is refused by the socket (1009) before it is parsed or authenticated', async () => {
    await withGateway({ bodyLimitBytes: 4096 }, async (gw) => {
      const u = await seedUser(gw.testDb.db);
      const s = await connect(gw);
      // A valid credential, padded past the limit: refused for its size alone.
      expect(await s.init(`Bearer ${u.readKey}`, { padding: 'x'.repeat(8192) })).toBe(1009);
      // Under the limit the same credential is accepted.
      const t = await connect(gw);
      expect(await t.init(`Bearer ${u.readKey}`, { padding: 'x'.repeat(1024) })).toBe('ack');
      t.ws.close();
    });
  });

  it('caps open connections per client address (429 at the upgrade) and frees the slot on close', async () => {
    await withGateway({ wsConnectionsPerAddress: 3 }, async (gw) => {
      const held = [await connect(gw), await connect(gw), await connect(gw)];
      expect(await open(gw)).toBe(429);
      held[0]!.ws.close();
      await held[0]!.closed;
      // The server counts the slot free once the TCP connection is gone: poll with a deadline.
      let again: Socket | number = 429;
      for (const until = Date.now() + DEADLINE_MS; again === 429 && Date.now() < until; ) {
        again = await open(gw);
        if (again === 429) await new Promise((r) => setTimeout(r, 50));
      }
      expect(again).toBeInstanceOf(Socket);
      for (const s of [...held.slice(1), again as Socket]) s.ws.close();
    });
  });

  it('every operation spends the credential\'s budget, the same bucket as its HTTP calls', async () => {
    await withGateway({ rateLimitPerMinute: 1, rateLimitBurst: 4 }, async (gw) => {
      const u = await seedUser(gw.testDb.db);
      const s = await connect(gw);
      expect(await s.init(`Bearer ${u.readKey}`)).toBe('ack'); // 1 of 4
      const results: Array<'data' | string> = [];
      for (let i = 0; i < 4; i++) {
        const id = `op${i}`;
        s.send({ type: 'subscribe', id, payload: { query: ME } });
        const f = await s.next((x) => x.id === id && (x.type === 'next' || x.type === 'error'));
        if (f?.type === 'next') results.push('data');
        else results.push(((f?.payload as Array<{ extensions?: { code?: string } }>)[0]?.extensions?.code) ?? 'none');
      }
      // connection_init spent one of the 4, so three operations fit and the fourth is refused.
      expect(results).toEqual(['data', 'data', 'data', 'rate_limited']);
      // The same key over HTTP finds its bucket empty too.
      const http = await call(gw.url, 'GET', '/api/dedicated', { token: u.readKey });
      expect(http.status).toBe(429);
      // Another key is unaffected.
      const v = await seedUser(gw.testDb.db);
      expect((await call(gw.url, 'GET', '/api/dedicated', { token: v.readKey })).status).toBe(200);
      s.ws.close();
    });
  });

  it('failed socket logins spend the address\'s failure budget like failed HTTP authentications', async () => {
    await withGateway({ rateLimitPerMinute: 60, rateLimitBurst: 40 }, async (gw) => {
      const codes: Array<number | 'ack'> = [];
      for (let i = 0; i < 25; i++) {
        const s = await connect(gw);
        codes.push(await s.init(`Bearer svc_${randomBytes(16).toString('hex')}_${randomBytes(32).toString('base64url')}`));
      }
      // The failure budget is 20 (one more every 3 s, but the clock stands still): refused as 4403 until it
      // is spent, then 4429.
      expect(codes).toEqual([...Array<number>(20).fill(4403), ...Array<number>(5).fill(4429)]);
      // The budget is the address's, whatever the transport: a made-up key over HTTP now waits too.
      const http = await call(gw.url, 'GET', '/api/dedicated', { token: `svc_${randomBytes(16).toString('hex')}_${randomBytes(32).toString('base64url')}` });
      expect(http.status).toBe(429);
    });
  });
});

describe('GraphQL over WebSocket: live credentials', () => {
  let gw: RunningGateway;
  let tunnelOf: (u: SeededUser) => Promise<string>;
  // The gateway's clock runs `ahead` ms in front of the real one: a test moves it past a token's expiry
  // instead of waiting for it.
  let ahead = 0;
  beforeAll(async () => {
    gw = await startGateway({ config: { wsAuthRecheckMs: 200 }, clock: () => Date.now() + ahead });
    await seedNode(gw.testDb.db, '198.18.5.0/28');
    await setRate(gw.testDb.db, '90');
    tunnelOf = async (u) => {
      const res = await call(gw.url, 'POST', '/api/dedicated', { token: u.writeKey, body: { origin_ip: '8.8.4.4' } });
      expect(res.status).toBe(201);
      return res.body.tunnel.id as string;
    };
  });
  afterAll(async () => gw?.close());

  /** A socket with a running tunnelStatus subscription under `authorization`. */
  async function subscribed(authorization: string, tunnelId: string): Promise<Socket> {
    const s = await connect(gw);
    expect(await s.init(authorization)).toBe('ack');
    s.send({ type: 'subscribe', id: 'watch', payload: { query: 'subscription S($id: ID!) { tunnelStatus(id: $id) { id status } }', variables: { id: tunnelId } } });
    // The subscription is running once a plain query on the same socket has been answered after it.
    s.send({ type: 'subscribe', id: 'probe', payload: { query: ME } });
    expect((await s.next((f) => f.id === 'probe'))?.type).toBe('next');
    expect(s.frames.some((f) => f.id === 'watch' && f.type === 'error')).toBe(false);
    return s;
  }

  it('a running subscription is closed with 4403 soon after its svc_ key is revoked; other keys\' stay open', async () => {
    const u = await seedUser(gw.testDb.db);
    const v = await seedUser(gw.testDb.db);
    const s = await subscribed(`Bearer ${u.readKey}`, await tunnelOf(u));
    const control = await subscribed(`Bearer ${v.readKey}`, await tunnelOf(v));
    const id = (await gw.testDb.raw.query('select id from api_key where account_id = $1 and permission = $2', [u.accountId, 'read'])).rows[0].id;
    expect(await revokeApiKey(gw.testDb.db, id)).toBe(true);
    expect(await closeCode(s)).toBe(4403);
    // The re-checks that closed it passed over the valid key's socket too, which still answers.
    expect(control.ws.readyState).toBe(WebSocket.OPEN);
    control.send({ type: 'subscribe', id: 'after', payload: { query: ME } });
    expect((await control.next((f) => f.id === 'after'))?.type).toBe('next');
    control.ws.close();
  });

  const accessToken = (u: SeededUser, expiresInS: number) => issueAccessToken(gw, u, expiresInS);

  it('a subscription under an access token is closed with 4403 once the token expires', async () => {
    const u = await seedUser(gw.testDb.db);
    const { token } = await accessToken(u, 60);
    const s = await subscribed(`Bearer ${token}`, await tunnelOf(u));
    ahead = 120_000; // the token's 60 s are over, for the gateway
    try {
      expect(await closeCode(s)).toBe(4403);
    } finally {
      ahead = 0;
    }
  });

  it('... and once its grant is revoked', async () => {
    const u = await seedUser(gw.testDb.db);
    const { token, grantId } = await accessToken(u, 600);
    const s = await subscribed(`Bearer ${token}`, await tunnelOf(u));
    await gw.testDb.raw.query(`delete from oidc_payload where kind = 'Grant' and id = $1`, [grantId]);
    expect(await closeCode(s)).toBe(4403);
  });
});
