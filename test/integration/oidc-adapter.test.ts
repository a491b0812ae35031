// The oidc-provider adapter on PostgreSQL (server/oidc/adapter.ts): the atomic consume under real
// concurrency through the real token endpoint, and the adapter's own contract (find, consume,
// destroy, revokeByGrantId, purge of expired rows) checked through a plain pg pool.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errors } from 'oidc-provider';
import { consumePending, postgresAdapter, purgeExpired } from '../../server/oidc/adapter.ts';
import { requestScope, type RequestScope } from '../../server/oidc/request-scope.ts';
import { TTL } from '../../server/oidc/provider.ts';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { exchange, newClient, newUser, signIn, token } from '../helpers/oidc-login.ts';

let gw: RunningGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => {
  await gw?.close();
});

describe('consume is atomic', () => {
  it('one authorization code redeemed 10 times at once succeeds exactly once', async () => {
    const c = await newClient(gw.testDb.db);
    const u = await newUser(gw.testDb.db);
    const { code, verifier } = await signIn(gw.url, c, u);
    const results = await Promise.all(Array.from({ length: 10 }, () => exchange(gw.url, c, code, verifier)));
    const ok = results.filter((r) => r.status === 200);
    expect(ok).toHaveLength(1);
    for (const r of results.filter((x) => x.status !== 200)) {
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('invalid_grant');
    }
    // (A redemption that arrives after the winner's finds the code used and, per RFC 6749 4.1.2,
    // revokes what it issued; so the winner's tokens may already be gone. That is intended.)
  });

  it('one refresh token redeemed 10 times at once succeeds exactly once', async () => {
    const c = await newClient(gw.testDb.db);
    const u = await newUser(gw.testDb.db);
    const { code, verifier } = await signIn(gw.url, c, u);
    const first = await exchange(gw.url, c, code, verifier);
    expect(first.status).toBe(200);
    const rt = first.body.refresh_token!;
    const results = await Promise.all(Array.from({ length: 10 }, () => token(gw.url, c, { grant_type: 'refresh_token', refresh_token: rt })));
    const ok = results.filter((r) => r.status === 200);
    expect(ok).toHaveLength(1);
    expect(ok[0]!.body.refresh_token).toMatch(/^rt_/);
    expect(ok[0]!.body.refresh_token).not.toBe(rt);
    for (const r of results.filter((x) => x.status !== 200)) expect(r.body.error).toBe('invalid_grant');
  });
});

describe('adapter contract', () => {
  const Adapter = () => postgresAdapter({ db: gw.testDb.db, clients: { find: async () => undefined } });

  it('stores, finds, consumes once, destroys', async () => {
    const A = Adapter();
    const codes = new A('AuthorizationCode');
    await codes.upsert('code-1', { grantId: 'g-1', clientId: 'cl_x', exp: Math.floor(Date.now() / 1000) + 60 }, 60);
    expect((await codes.find('code-1'))?.grantId).toBe('g-1');
    expect((await codes.find('code-1'))?.consumed).toBeUndefined();
    await codes.consume('code-1');
    expect(typeof (await codes.find('code-1'))?.consumed).toBe('number');
    await expect(codes.consume('code-1')).rejects.toBeInstanceOf(errors.InvalidGrant);
    // Another model with the same id is another row.
    expect(await new A('RefreshToken').find('code-1')).toBeUndefined();
    await codes.destroy('code-1');
    expect(await codes.find('code-1')).toBeUndefined();
  });

  it('in a request, consume is done with the refresh-token insert, once; a loser stores nothing', async () => {
    const A = Adapter();
    const codes = new A('AuthorizationCode');
    const rts = new A('RefreshToken');
    await codes.upsert('code-2', { grantId: 'g-5' }, 60);
    const redeem = (rtId: string) => {
      const scope: RequestScope = {};
      return requestScope.run(scope, async () => {
        await codes.consume('code-2');
        // Deferred: nothing written yet.
        expect((await codes.find('code-2'))?.consumed).toBeUndefined();
        await rts.upsert(rtId, { grantId: 'g-5', clientId: 'cl_x' }, 60);
        return scope;
      });
    };
    const [a, b] = await Promise.allSettled([redeem('rt-win-1'), redeem('rt-win-2')]);
    const won = [a, b].filter((r) => r.status === 'fulfilled');
    expect(won).toHaveLength(1);
    const lost = [a, b].find((r) => r.status === 'rejected') as PromiseRejectedResult;
    expect(lost.reason).toBeInstanceOf(errors.InvalidGrant);
    expect(typeof (await codes.find('code-2'))?.consumed).toBe('number');
    const stored = [await rts.find('rt-win-1'), await rts.find('rt-win-2')].filter(Boolean);
    expect(stored).toHaveLength(1);
  });

  it('redemptions coalesced into one batch: each code wins once, every winner stores its refresh token', async () => {
    const A = Adapter();
    const codes = new A('AuthorizationCode');
    const rts = new A('RefreshToken');
    await codes.upsert('code-b1', { grantId: 'g-b' }, 60);
    await codes.upsert('code-b2', { grantId: 'g-b' }, 60);
    await codes.upsert('code-b3', { grantId: 'g-b' }, 60);
    // 15 at once: one statement is in flight at a time, so most of these leave together in one batch,
    // several of them for the same code.
    const attempts = Array.from({ length: 15 }, (_, i) => ({ code: `code-b${(i % 3) + 1}`, rt: `rt-b-${i}` }));
    const redeem = (code: string, rtId: string) =>
      requestScope.run({} as RequestScope, async () => {
        await codes.consume(code);
        await rts.upsert(rtId, { grantId: 'g-b', clientId: 'cl_x' }, 60);
      });
    const results = await Promise.allSettled(attempts.map((a) => redeem(a.code, a.rt)));
    for (const code of ['code-b1', 'code-b2', 'code-b3']) {
      const mine = attempts.map((a, i) => ({ ...a, r: results[i]! })).filter((a) => a.code === code);
      const won = mine.filter((a) => a.r.status === 'fulfilled');
      expect(won).toHaveLength(1);
      for (const lost of mine.filter((a) => a.r.status === 'rejected')) expect((lost.r as PromiseRejectedResult).reason).toBeInstanceOf(errors.InvalidGrant);
      const stored = await Promise.all(mine.map((a) => rts.find(a.rt)));
      expect(stored.filter(Boolean)).toHaveLength(1);
      expect(await rts.find(won[0]!.rt)).toBeDefined();
    }
  });

  it('what a request left pending is consumed when it ends; a second time it is invalid_grant', async () => {
    const A = Adapter();
    const codes = new A('AuthorizationCode');
    await codes.upsert('code-3', { grantId: 'g-6' }, 60);
    const scopes: RequestScope[] = [{}, {}];
    for (const scope of scopes) await requestScope.run(scope, () => codes.consume('code-3'));
    expect(scopes.every((x) => x.pendingConsume?.id === 'code-3')).toBe(true);
    expect(await consumePending(gw.testDb.db, scopes[0]!)).toBeNull();
    expect(await consumePending(gw.testDb.db, scopes[1]!)).toBeInstanceOf(errors.InvalidGrant);
    expect(await consumePending(gw.testDb.db, {})).toBeNull();
  });

  it('revokeByGrantId removes that grant\'s rows of that model only', async () => {
    const A = Adapter();
    const rts = new A('RefreshToken');
    const grants = new A('Grant');
    await rts.upsert('rt-a', { grantId: 'g-2', clientId: 'cl_x' }, 60);
    await rts.upsert('rt-b', { grantId: 'g-3', clientId: 'cl_x' }, 60);
    await grants.upsert('g-2', { clientId: 'cl_x', accountId: 'a' }, 60);
    await rts.revokeByGrantId('g-2');
    expect(await rts.find('rt-a')).toBeUndefined();
    expect(await rts.find('rt-b')).toBeDefined();
    expect(await grants.find('g-2')).toBeDefined();
    await grants.destroy('g-2');
    expect(await grants.find('g-2')).toBeUndefined();
  });

  it('findByUid finds sessions by uid', async () => {
    const A = Adapter();
    const sessions = new A('Session');
    await sessions.upsert('sess-1', { uid: 'uid-1', accountId: 'a' }, 60);
    expect((await sessions.findByUid('uid-1'))?.accountId).toBe('a');
    expect(await sessions.findByUid('uid-2')).toBeUndefined();
  });

  it('purge deletes expired rows and keeps live ones (consumed refresh tokens stay until they expire)', async () => {
    const A = Adapter();
    const rts = new A('RefreshToken');
    await rts.upsert('rt-live', { grantId: 'g-4' }, 3600);
    await rts.consume('rt-live');
    await rts.upsert('rt-dead', { grantId: 'g-4' }, 3600);
    await gw.testDb.raw.query(`update oidc_payload set expires_at = now() - interval '1 second' where id = 'rt-dead'`);
    const deleted = await purgeExpired(gw.testDb.db);
    expect(deleted).toBeGreaterThanOrEqual(1);
    expect(await rts.find('rt-dead')).toBeUndefined();
    expect(await rts.find('rt-live')).toBeDefined();
  });

  it('grants outlive refresh tokens, which outlive codes', () => {
    expect(TTL.Grant).toBeGreaterThan(TTL.RefreshToken);
    expect(TTL.RefreshToken).toBeGreaterThan(TTL.AuthorizationCode);
    expect(TTL.AuthorizationCode).toBe(300);
  });

  it('a stored grant row expires later than the refresh token issued with it', async () => {
    const c = await newClient(gw.testDb.db);
    const u = await newUser(gw.testDb.db);
    const { code, verifier } = await signIn(gw.url, c, u);
    expect((await exchange(gw.url, c, code, verifier)).status).toBe(200);
    const { rows } = await gw.testDb.raw.query(
      `select kind, expires_at from oidc_payload where client_id = $1 and kind in ('Grant', 'RefreshToken')`,
      [c.id],
    );
    const at = (k: string) => new Date(rows.find((r) => r.kind === k).expires_at).getTime();
    expect(at('Grant')).toBeGreaterThan(at('RefreshToken'));
  });

  it('a refresh token rotated near the end of its grant expires before the grant', async () => {
    const c = await newClient(gw.testDb.db);
    const u = await newUser(gw.testDb.db);
    const { code, verifier } = await signIn(gw.url, c, u);
    const first = await exchange(gw.url, c, code, verifier);
    // The grant has 100 s left (as if signed in 30 days ago).
    await gw.testDb.raw.query(
      `update oidc_payload set payload = jsonb_set(payload, '{exp}', to_jsonb(extract(epoch from now())::int + 100)),
              expires_at = to_timestamp(extract(epoch from now())::int + 100)
        where kind = 'Grant' and client_id = $1`,
      [c.id],
    );
    const next = await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: first.body.refresh_token! });
    expect(next.status).toBe(200);
    const { rows } = await gw.testDb.raw.query(
      `select (select expires_at from oidc_payload where kind = 'RefreshToken' and id = $2) as rt,
              (select expires_at from oidc_payload where kind = 'Grant' and client_id = $1) as grant`,
      [c.id, next.body.refresh_token],
    );
    expect(new Date(rows[0].rt).getTime()).toBeLessThan(new Date(rows[0].grant).getTime());
    expect(new Date(rows[0].grant).getTime() - new Date(rows[0].rt).getTime()).toBeLessThan(10_000);
  });
});
