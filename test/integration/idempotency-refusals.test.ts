// An Idempotency-Key remembers purchases, never refusals (server/domain/tunnels/purchase.ts, schema/openapi.yaml
// "Idempotency"): a refusal changed nothing and may succeed later, so once its cause is gone the same request
// with the same key buys, and only then do retries replay, marked `Idempotent-Replayed: true`. On both
// databases, since the purchase's transaction takes a different path on each (database.ts hotTransaction).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addBalance } from '../../server/domain/accounts.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { setRate } from '../../server/domain/settings.ts';
import { BOTH_DATABASES, type Backend } from '../helpers/both-databases.ts';
import { call } from '../helpers/gateway.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';

describe.each(BOTH_DATABASES)('Idempotency-Key and refusals on %s', (_name, boot) => {
  let b: Backend;
  beforeAll(async () => {
    b = await boot();
    await setRate(b.db, '90');
  }, 120_000);
  afterAll(async () => {
    await b?.close();
  });

  const buy = async (u: SeededUser, key: string, body: Record<string, unknown> = { name: 'idem', origin_ip: '8.8.4.4' }) => {
    const r = await call(b.url, 'POST', '/api/dedicated', { token: u.writeKey, body, headers: { 'idempotency-key': key } });
    expectMatchesOpenApi('post', '/api/dedicated', r.status, r.body, r.headers);
    return { status: r.status, error: r.body?.error as string | undefined, replayed: r.headers.get('idempotent-replayed'), body: r.body };
  };
  const balance = async (u: SeededUser) => (await b.db.query<{ b: string }>('select balance_usd::text as b from account where id = ?', [u.accountId]))[0]!.b;
  const records = async (u: SeededUser) => (await b.db.query<{ key: string; status_code: number }>('select key, status_code from idempotency_record where account_id = ? order by key', [u.accountId]));

  // First in the file: no node exists yet, so nothing is in stock.
  it('409 out_of_stock is not kept: once stock is added the same key buys, then replays that purchase', async () => {
    const u = await seedUser(b.db, { balanceUsd: '10.00' });
    const refused = await buy(u, 'order-1');
    expect([refused.status, refused.error, refused.replayed]).toEqual([409, 'out_of_stock', null]);
    expect(await records(u)).toEqual([]);
    await seedNode(b.db, '198.18.30.0/28');
    const bought = await buy(u, 'order-1');
    expect([bought.status, bought.replayed]).toEqual([201, null]);
    const replay = await buy(u, 'order-1');
    expect([replay.status, replay.replayed]).toEqual([201, 'true']);
    expect(replay.body).toEqual(bought.body);
    expect(await balance(u)).toBe('8.89');
    expect(await records(u)).toEqual([{ key: 'order-1', status_code: 201 }]);
  });

  it('402 insufficient_balance is not kept: after a top-up the same key buys, then replays', async () => {
    const u = await seedUser(b.db, { balanceUsd: '0.50' });
    const refused = await buy(u, 'order-2');
    expect([refused.status, refused.error, refused.replayed]).toEqual([402, 'insufficient_balance', null]);
    // Refused again while nothing changed: a refusal, not a replay of one.
    expect([(await buy(u, 'order-2')).status, (await buy(u, 'order-2')).replayed]).toEqual([402, null]);
    await addBalance(b.db, u.email, '5.00');
    const bought = await buy(u, 'order-2');
    expect([bought.status, bought.replayed, bought.body.balance_after]).toEqual([201, null, 4.39]);
    const replay = await buy(u, 'order-2');
    expect([replay.status, replay.replayed]).toEqual([201, 'true']);
    expect(replay.body).toEqual(bought.body);
    expect(await balance(u)).toBe('4.39');
    // The purchase, once kept, binds the key to its body.
    const other = await buy(u, 'order-2', { name: 'another', origin_ip: '8.8.4.4' });
    expect([other.status, other.error]).toEqual([422, 'invalid_request']);
  });

  it('400 invalid_promocode is not kept: once the code exists the same key buys at its price', async () => {
    const u = await seedUser(b.db, { balanceUsd: '10.00' });
    const body = { origin_ip: '8.8.4.4', promocode: 'later50' };
    const refused = await buy(u, 'order-3', body);
    expect([refused.status, refused.error]).toEqual([400, 'invalid_promocode']);
    await createPromocode(b.db, { code: 'LATER50', percent: 50 });
    const bought = await buy(u, 'order-3', body);
    expect([bought.status, bought.replayed, bought.body.charged]).toEqual([201, null, 50]);
    expect((await buy(u, 'order-3', body)).replayed).toBe('true');
  });

  it('a 400 for the input does not use up the key: the same key then buys with a corrected body', async () => {
    const u = await seedUser(b.db, { balanceUsd: '10.00' });
    const refused = await buy(u, 'order-4', { origin_ip: '10.0.0.1' });
    expect([refused.status, refused.error]).toEqual([400, 'invalid_origin_ip']);
    const bought = await buy(u, 'order-4', { origin_ip: '8.8.4.4' });
    expect([bought.status, bought.replayed]).toEqual([201, null]);
  });

  it('a refusal an earlier version kept is dropped when its key comes again', async () => {
    const u = await seedUser(b.db, { balanceUsd: '10.00' });
    await b.db.query(`insert into idempotency_record (account_id, key, request_hash, status_code, body) values (?, 'order-5', ?, 409, ?::jsonb)`, [
      u.accountId,
      'f'.repeat(64),
      JSON.stringify({ error: 'out_of_stock', error_description: 'No protected IP is free right now; nothing was charged.' }),
    ]);
    const bought = await buy(u, 'order-5');
    expect([bought.status, bought.replayed]).toEqual([201, null]);
    expect((await buy(u, 'order-5')).replayed).toBe('true');
    expect(await records(u)).toEqual([{ key: 'order-5', status_code: 201 }]);
  });

  it('concurrent twins of a refused request: all refused, nothing kept; after a top-up, twins buy once', async () => {
    const u = await seedUser(b.db, { balanceUsd: '1.00' });
    const refused = await Promise.all(Array.from({ length: 4 }, () => buy(u, 'order-6')));
    expect(refused.map((r) => [r.status, r.replayed])).toEqual(Array.from({ length: 4 }, () => [402, null]));
    expect(await records(u)).toEqual([]);
    await addBalance(b.db, u.email, '1.00');
    const twins = await Promise.all(Array.from({ length: 4 }, () => buy(u, 'order-6')));
    expect(twins.map((r) => r.status)).toEqual([201, 201, 201, 201]);
    expect(new Set(twins.map((r) => r.body.tunnel.id)).size).toBe(1);
    expect(twins.filter((r) => r.replayed === null)).toHaveLength(1);
    expect(await balance(u)).toBe('0.89');
  });
});
