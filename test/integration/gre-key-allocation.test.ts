// GRE key allocation under concurrent purchases, on real PostgreSQL with a real connection
// pool: many buyers of tunnels to one origin, all landing on one node. Whatever the interleaving, no two
// live tunnels of the node share (origin_ip, gre_key), every purchase is charged exactly once, and the
// ledger matches. The key source is the TunnelService's seam: here it is made to collide on purpose, with
// every concurrent purchase drawing the same key at the same moment, so the unique index fires and the
// purchase's one retry is what saves them.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Principal } from '../../server/auth/principal.ts';
import { loadConfig } from '../../server/config.ts';
import { randomGreKey, type GreKeySource } from '../../server/domain/gre-keys.ts';
import { setRate } from '../../server/domain/settings.ts';
import { TunnelService } from '../../server/domain/tunnels/index.ts';
import { buildServices, type Services } from '../../server/services.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { DEFAULT_SETTINGS } from '../../server/domain/tunnels/settings.ts';

const ORIGIN = '8.8.4.4';
let t: TestDatabase;
let services: Services;
let nodeId: string;

beforeAll(async () => {
  t = await createTestDatabase({ poolMax: 24 });
  services = buildServices({ ...loadConfig({}), logLevel: 'silent' }, t.db);
  // One node, 62 IPs: every purchase lands on it.
  nodeId = (await seedNode(t.db, '198.18.20.0/26')).node_id;
  await setRate(t.db, '100'); // price 1.00 USD
});
afterAll(async () => {
  await services?.provisioning.stop();
  await t?.drop();
});

function tunnelsWith(greKeys: GreKeySource): TunnelService {
  return new TunnelService(t.db, services.pricing, { adminSshPort: 52222, allowPrivateOrigins: false, greKeys }, services.provisioning);
}

/**
 * A key source whose first n draws wait until all n are waiting (every caller has read the keys in use and
 * not yet written), then all get 7. Later draws (the retries) are random.
 */
function colliding(n: number): { source: GreKeySource; draws(): number } {
  let draws = 0;
  let release!: () => void;
  const barrier = new Promise<void>((r) => (release = r));
  const source: GreKeySource = async () => {
    if (++draws > n) return randomGreKey();
    if (draws === n) release();
    await barrier;
    return 7;
  };
  return { source, draws: () => draws };
}

/** Buyers with 10.00 USD each; one account each, since purchases of one account run one at a time (its row lock). */
async function buyers(n: number): Promise<Principal[]> {
  return Promise.all(
    Array.from({ length: n }, async () => {
      const u = await seedUser(t.db, { balanceUsd: '10.00' });
      return { accountId: u.accountId, userId: u.userId, permission: 'write', credential: { kind: 'api_key', id: randomUUID() } } satisfies Principal;
    }),
  );
}

/** The invariants, read with plain SQL beside the code under test. */
async function expectConsistent(accounts: Principal[], perAccount: number): Promise<void> {
  const { rows: clashes } = await t.raw.query(
    `select node_id, origin_ip, gre_key, count(*)::int as n from tunnel where status <> 'deleted'
      group by node_id, origin_ip, gre_key having count(*) > 1 or gre_key is null`,
  );
  expect(clashes).toEqual([]);
  const { rows } = await t.raw.query(
    `select a.id, a.balance_usd::text as balance,
            (select coalesce(sum(amount_usd), 0)::numeric(14,2)::text from ledger_entry l where l.account_id = a.id) as ledger,
            (select count(*)::int from ledger_entry l where l.account_id = a.id and l.kind = 'purchase') as purchases,
            (select count(*)::int from tunnel x where x.account_id = a.id) as tunnels,
            (select count(*)::int from tunnel x join ledger_entry l on l.tunnel_id = x.id and l.amount_usd = -x.charged_usd
              where x.account_id = a.id) as matched
       from account a where a.id = any($1)`,
    [accounts.map((a) => a.accountId)],
  );
  expect(rows).toHaveLength(accounts.length);
  const spent = (10 - perAccount).toFixed(2);
  for (const r of rows) {
    // Top-up 10.00 minus one 1.00 charge per tunnel, and one ledger row per tunnel, naming it.
    expect(r).toEqual({ id: r.id, balance: spent, ledger: spent, purchases: perAccount, tunnels: perAccount, matched: perAccount });
  }
}

it('36 concurrent purchases to one origin on one node: each charged once, each its own key', async () => {
  const accounts = await buyers(12);
  const svc = tunnelsWith(randomGreKey);
  const results = await Promise.all(accounts.flatMap((p) => [0, 1, 2].map((i) => svc.purchase(p, { name: `c${i}`, originIp: ORIGIN, promocode: null, settings: DEFAULT_SETTINGS }, null))));
  expect(results.every((r) => !r.replayed)).toBe(true);
  const { rows } = await t.raw.query<{ node_id: string; gre_key: string | null }>('select node_id, gre_key::text as gre_key from tunnel where id = any($1)', [
    results.map((r) => r.purchase.tunnel.id),
  ]);
  expect(new Set(rows.map((r) => r.node_id))).toEqual(new Set([nodeId]));
  expect(new Set(rows.map((r) => r.gre_key)).size).toBe(36);
  await expectConsistent(accounts, 3);
});

it('a key drawn by concurrent purchases at once: one keeps it, the others retry once and get their own; an Idempotency-Key still replays, uncharged', async () => {
  await t.raw.query(`update tunnel set status = 'deleted'`);
  await t.raw.query('update protected_ip set tunnel_id = null');
  const n = 10;
  const accounts = await buyers(n);
  const keys = colliding(n);
  const svc = tunnelsWith(keys.source);
  const results = await Promise.allSettled(accounts.map((p, i) => svc.purchase(p, { name: `k${i}`, originIp: ORIGIN, promocode: null, settings: DEFAULT_SETTINGS }, `order-${i}`)));
  const failed = results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason));
  expect(failed).toEqual([]);
  // n first draws, then one retry for each of the n - 1 that lost the race for 7.
  expect(keys.draws()).toBe(2 * n - 1);
  const bought = results.map((r) => (r as PromiseFulfilledResult<Awaited<ReturnType<TunnelService['purchase']>>>).value.purchase);
  const { rows } = await t.raw.query<{ gre_key: string }>(`select gre_key::text as gre_key from tunnel where status <> 'deleted' order by gre_key`);
  expect(rows).toHaveLength(n);
  expect(rows.filter((r) => r.gre_key === '7')).toHaveLength(1);
  await expectConsistent(accounts, 1);

  // The same keys again: the first outcome, not a second purchase.
  const replays = await Promise.all(accounts.map((p, i) => svc.purchase(p, { name: `k${i}`, originIp: ORIGIN, promocode: null, settings: DEFAULT_SETTINGS }, `order-${i}`)));
  // As the API sends them (JSON): the in-process views also carry the GraphQL-only settingsApplied symbol.
  const wire = (x: unknown) => JSON.parse(JSON.stringify(x)) as unknown;
  expect(wire(replays.map((r) => r.purchase))).toEqual(wire(bought));
  expect(replays.every((r) => r.replayed)).toBe(true);
  expect(keys.draws()).toBe(2 * n - 1);
  await expectConsistent(accounts, 1);
});

it('the setup script and the edge job carry the tunnel key, with the MTU a keyed GRE header leaves', async () => {
  const [p] = await buyers(1);
  const { purchase: body } = await tunnelsWith(() => 0x01020304).purchase(p!, { name: null, originIp: ORIGIN, promocode: null, settings: DEFAULT_SETTINGS }, null);
  const setup = await services.tunnels.setup(p!, body.tunnel.id);
  expect(setup.scripts.origin).toContain("\nreadonly GRE_KEY='16909060'\n");
  expect(setup.scripts.origin).toContain("\nreadonly GRE_KEY_DOTTED='1.2.3.4'\n");
  expect(setup.scripts.origin).toContain("\nreadonly TUNNEL_MTU='1472'\n");
  const { edgeTunnel } = await import('../../server/provisioning/edge-state.ts');
  const edge = await edgeTunnel(t.db, body.tunnel.id);
  expect(edge!.spec).toMatchObject({ gre_key: 0x01020304, mtu: 1472, origin_ip: ORIGIN });
});

it('moving tunnels onto one origin (PATCH origin_ip): a key free for the new pair, concurrent moves that draw the same key retry once', async () => {
  const NEW_ORIGIN = '9.9.9.9';
  const n = 5;
  const accounts = await buyers(n);
  const ids: string[] = [];
  for (const p of accounts) ids.push((await services.tunnels.purchase(p, { name: null, originIp: '1.1.1.1', promocode: null, settings: DEFAULT_SETTINGS }, null)).purchase.tunnel.id);
  const keys = colliding(n);
  const svc = tunnelsWith(keys.source);
  const results = await Promise.allSettled(accounts.map((p, i) => svc.update(p, ids[i]!, { originIp: NEW_ORIGIN })));
  expect(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason))).toEqual([]);
  // n first draws, then one retry for each of the n - 1 whose transaction the unique index refused.
  expect(keys.draws()).toBe(2 * n - 1);
  const { rows } = await t.raw.query<{ gre_key: string }>(`select gre_key::text as gre_key from tunnel where origin_ip = $1 and status <> 'deleted'`, [NEW_ORIGIN]);
  expect(rows).toHaveLength(n);
  expect(new Set(rows.map((r) => r.gre_key)).size).toBe(n);
  expect(rows.filter((r) => r.gre_key === '7')).toHaveLength(1);
});
