// Migrations, beyond "fresh database, no drift": (1) an upgrade from the very first migration
// with data in it (the rows survive, the gateway serves them, the constraints still refuse what they
// refused, and the result has no drift); (2) two replicas starting at once on one empty database both
// come up, each migration applied once; (3) the drift check on the embedded database (PGlite) too.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, expect, inject, it } from 'vitest';
import { Database } from '../../server/db/database.ts';
import { migrate, migrationsPending, openOrm, type Orm } from '../../server/db/orm.ts';
import { migrationsList } from '../../server/db/migrations/index.ts';
import { hashPassword } from '../../server/auth/passwords.ts';
import { dropDatabase, withDatabase } from '../helpers/postgres.ts';
import { fakeHostKey } from '../helpers/fixtures.ts';
import { call, startGateway } from '../helpers/gateway.ts';

const adminUrl = inject('adminDatabaseUrl');
const created: string[] = [];
const cleanups: (() => Promise<unknown>)[] = [];

afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  for (const name of created) await dropDatabase(admin, name);
  await admin.end();
});

/** A new, empty database (not the migrated template). */
async function emptyDatabase(tag: string): Promise<string> {
  const name = `tg_mig_${tag}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  created.push(name);
  return name;
}

/** Raises the error PostgreSQL gave `sql`, or null when it succeeded. */
async function refusal(raw: pg.Pool, sql: string, args: unknown[]): Promise<{ code?: string; constraint?: string } | null> {
  try {
    await raw.query(sql, args);
    return null;
  } catch (e) {
    return e as { code?: string; constraint?: string };
  }
}

it('an upgrade from the first migration keeps accounts, users, keys, nodes, tunnels and money; constraints hold; no drift', async () => {
  const name = await emptyDatabase('upgrade');
  const url = withDatabase(adminUrl, name);
  const orm = await openOrm({ databaseUrl: url, dataDir: '' });
  cleanups.push(() => orm.close());
  const first = migrationsList[0]!.name;
  await orm.migrator.up({ to: first });
  const raw = new pg.Pool({ connectionString: url, max: 2 });
  cleanups.push(() => raw.end());

  // Data as the first release wrote it.
  const account = randomUUID();
  const user = randomUUID();
  const node = randomUUID();
  const tunnel = randomUUID();
  const keyId = randomUUID();
  const secret = randomBytes(32).toString('base64url');
  const svcKey = `svc_${keyId.replace(/-/g, '')}_${secret}`;
  const passwordHash = await hashPassword('an old password, still good');
  await raw.query(`insert into account (id, balance_usd) values ($1, 12.34)`, [account]);
  await raw.query(`insert into app_user (id, account_id, email, name, password_hash, role) values ($1, $2, 'old@example.test', 'Old User', $3, 'owner')`, [user, account, passwordHash]);
  await raw.query(`insert into api_key (id, account_id, user_id, secret_hash, permission) values ($1, $2, $3, $4, 'write')`, [
    keyId,
    account,
    user,
    createHash('sha256').update(secret).digest('hex'),
  ]);
  await raw.query(`insert into edge_node (id, name, public_ip, ssh_host, host_key) values ($1, 'old-edge', '192.0.2.1', '127.0.0.1', $2)`, [node, fakeHostKey()]);
  for (const k of [0, 1, 2, 3]) await raw.query(`insert into protected_ip (ip, node_id, inner_index) values ($1, $2, $3)`, [`198.18.90.${k}`, node, k]);
  await raw.query(
    `insert into tunnel (id, account_id, node_id, name, protected_ip, origin_ip, tunnel_name, inner_index, status, charged_usd, charged_rub)
     values ($1, $2, $3, 'legacy web', '198.18.90.0', '8.8.4.4', 'tg-legacy0001', 0, 'active', 1.11, 100)`,
    [tunnel, account, node],
  );
  await raw.query(`update protected_ip set tunnel_id = $1 where ip = '198.18.90.0'`, [tunnel]);
  await raw.query(`insert into ledger_entry (account_id, amount_usd, balance_after, kind) values ($1, 13.45, 13.45, 'topup'), ($1, -1.11, 12.34, 'purchase')`, [account]);
  await raw.query(`insert into promocode (code, percent, max_uses) values ('OLD10', 10, 5)`);
  await raw.query(`insert into idempotency_record (account_id, key, request_hash, status_code, body) values ($1, 'order-1', $2, 201, '{"tunnel":{}}')`, [account, 'a'.repeat(64)]);
  await raw.query(`update setting set value = '95' where key = 'usd_rub_rate'`);

  const applied = await migrate(orm);
  expect(applied).toEqual(migrationsList.slice(1).map((m) => m.name));
  expect(await migrationsPending(orm)).toBe(0);
  expect((await orm.schema.getUpdateSchemaSQL({ wrap: false })).trim()).toBe('');

  // The rows, read back raw.
  const one = async (sql: string, args: unknown[] = []) => (await raw.query(sql, args)).rows[0] as Record<string, unknown>;
  expect(await one(`select balance_usd::text as b from account where id = $1`, [account])).toEqual({ b: '12.34' });
  expect(await one(`select email, name, password_hash, role, length(avatar_key) as k from app_user where id = $1`, [user])).toEqual({
    email: 'old@example.test',
    name: 'Old User',
    password_hash: passwordHash,
    role: 'owner',
    k: 32,
  });
  expect(await one(`select status, protected_ip, origin_ip, tunnel_name, inner_index, charged_usd::text as usd from tunnel where id = $1`, [tunnel])).toEqual({
    status: 'active',
    protected_ip: '198.18.90.0',
    origin_ip: '8.8.4.4',
    tunnel_name: 'tg-legacy0001',
    inner_index: 0,
    usd: '1.11',
  });
  expect((await raw.query(`select amount_usd::text as a, balance_after::text as b from ledger_entry order by id`)).rows).toEqual([
    { a: '13.45', b: '13.45' },
    { a: '-1.11', b: '12.34' },
  ]);
  expect(await one(`select count(*)::int as n, count(*) filter (where tunnel_id is not null)::int as used from protected_ip where node_id = $1`, [node])).toEqual({ n: 4, used: 1 });
  expect(await one(`select percent, max_uses, uses from promocode where code = 'OLD10'`)).toEqual({ percent: 10, max_uses: 5, uses: 0 });
  expect(await one(`select status_code from idempotency_record where key = 'order-1'`)).toEqual({ status_code: 201 });

  // The gateway serves them: the old key authenticates, the tunnel and the rate are there.
  const testDb = { url, name, db: new Database(orm), raw, drop: async () => {} };
  const gw = await startGateway({ testDb });
  try {
    const got = await call(gw.url, 'GET', `/api/dedicated/${tunnel}`, { token: svcKey });
    expect(got.status).toBe(200);
    expect(got.body.tunnel).toMatchObject({ id: tunnel, status: 'active', protected_ip: '198.18.90.0', origin_ip: '8.8.4.4', name: 'legacy web' });
    // Tunnel settings: an existing tunnel has the defaults, what its edge does already.
    expect(got.body.tunnel).toMatchObject({ ports: '*', protocol: 'both', protection: { syn_proxy: false, source_pps_limit: null, drop_fragments: false } });
    expect((await call(gw.url, 'GET', '/api/dedicated/pricing')).body.usd_rub_rate).toBe(95);
  } finally {
    await gw.close();
  }

  // The guard rails still refuse: a negative balance, a second live tunnel on the same protected IP.
  expect(await refusal(raw, `update account set balance_usd = -0.01 where id = $1`, [account])).toMatchObject({ code: '23514', constraint: 'account_balance_usd_check' });
  expect(
    await refusal(
      raw,
      `insert into tunnel (id, account_id, node_id, protected_ip, origin_ip, tunnel_name, inner_index, status, charged_usd, charged_rub)
       values ($1, $2, $3, '198.18.90.0', '8.8.8.8', 'tg-legacy0002', 1, 'pending', 1.11, 100)`,
      [randomUUID(), account, node],
    ),
  ).toMatchObject({ code: '23505', constraint: 'tunnel_live_ip_uniq' });
  // The settings' guard rails (docs/CONTRACTS.md "Tunnel settings").
  expect(await refusal(raw, `update tunnel set ports = '80,' where id = $1`, [tunnel])).toMatchObject({ code: '23514', constraint: 'tunnel_ports_check' });
  expect(await refusal(raw, `update tunnel set protocol = 'icmp' where id = $1`, [tunnel])).toMatchObject({ code: '23514', constraint: 'tunnel_protocol_check' });
  expect(await refusal(raw, `update tunnel set source_pps_limit = 9 where id = $1`, [tunnel])).toMatchObject({ code: '23514', constraint: 'tunnel_source_pps_limit_check' });
  expect(await refusal(raw, `update tunnel set ports = '22,80-81', protocol = 'udp', source_pps_limit = 10 where id = $1`, [tunnel])).toBeNull();
});

it('an upgrade across the move of the check time to traffic.seen keeps each health_checked_at, and the next round advances it', async () => {
  const name = await emptyDatabase('checked');
  const url = withDatabase(adminUrl, name);
  const orm = await openOrm({ databaseUrl: url, dataDir: '' });
  cleanups.push(() => orm.close());
  await orm.migrator.up({ to: 'Migration20261127100000_health_traffic' });
  const raw = new pg.Pool({ connectionString: url, max: 2 });
  cleanups.push(() => raw.end());
  // Two tunnels as the collector left them before the move: one checked (its counters baseline in
  // traffic.seen, its check time on the tunnel row), one never checked.
  const account = randomUUID();
  const node = randomUUID();
  const [checked, never] = [randomUUID(), randomUUID()];
  const keyId = randomUUID();
  const secret = randomBytes(32).toString('base64url');
  await raw.query(`insert into account (id, balance_usd) values ($1, 0)`, [account]);
  const user = randomUUID();
  await raw.query(`insert into app_user (id, account_id, email, name, password_hash, role) values ($1, $2, 'checked@example.test', 'C', $3, 'owner')`, [user, account, await hashPassword('a long enough password')]);
  await raw.query(`insert into api_key (id, account_id, user_id, secret_hash, permission) values ($1, $2, $3, $4, 'read')`, [keyId, account, user, createHash('sha256').update(secret).digest('hex')]);
  await raw.query(`insert into edge_node (id, name, public_ip, ssh_host, host_key) values ($1, 'edge', '192.0.2.1', '127.0.0.1', $2)`, [node, fakeHostKey()]);
  for (const [k, id] of [checked, never].entries()) {
    await raw.query(`insert into protected_ip (ip, node_id, position, inner_index, tunnel_id) values ($1, $2, $3, $3, $4)`, [`198.18.91.${k}`, node, k, id]);
    await raw.query(
      `insert into tunnel (id, account_id, node_id, protected_ip, origin_ip, tunnel_name, inner_index, gre_key, status, charged_usd, charged_rub)
       values ($1, $2, $3, $4, '8.8.4.4', $5, $6, $7, 'active', 1.11, 100)`,
      [id, account, node, `198.18.91.${k}`, `tg-checked${k}00`, k, k + 1],
    );
  }
  await raw.query(`update tunnel set health = 'up', health_checked_at = '2026-11-27T10:00:00.123Z' where id = $1`, [checked]);
  await raw.query(`insert into traffic.seen (tunnel_id, packets_in, bytes_in, packets_out, bytes_out, dropped, seen_at) values ($1, 5, 500, 5, 500, '{0,0,0,0,0}', now())`, [checked]);

  expect(await migrate(orm)).toEqual(migrationsList.slice(migrationsList.findIndex((m) => m.name === 'Migration20261127100000_health_traffic') + 1).map((m) => m.name));
  expect((await orm.schema.getUpdateSchemaSQL({ wrap: false })).trim()).toBe('');
  const gw = await startGateway({ testDb: { url, name, db: new Database(orm), raw, drop: async () => {} } });
  try {
    const key = `svc_${keyId.replace(/-/g, '')}_${secret}`;
    const shown = async (id: string) => (await call(gw.url, 'GET', `/api/dedicated/${id}`, { token: key })).body.tunnel as { health: string; health_checked_at: string | null };
    expect(await shown(checked)).toMatchObject({ health: 'up', health_checked_at: '2026-11-27T10:00:00.123Z' });
    expect(await shown(never)).toMatchObject({ health: 'unknown', health_checked_at: null });
    // The next round: a report without a check time keeps the old one, a check moves it.
    const counters = { packets_in: 6, bytes_in: 600, packets_out: 6, bytes_out: 600, dropped: { not_allowed: 0, rate_limited: 0, spoofed: 0, invalid: 0, fragment: 0 } };
    const report = (checkedAt: string | null) => ({ agent: { version: '0.1.0', uptime_s: 1, tunnels: 2 }, tunnels: [checked, never].map((id) => ({ id, health: 'up' as const, checked_at: checkedAt, counters })) });
    await gw.services.health.ingest.ingestStatus(node, report(null), new Date());
    expect(await shown(checked)).toMatchObject({ health: 'up', health_checked_at: '2026-11-27T10:00:00.123Z' });
    expect(await shown(never)).toMatchObject({ health: 'up', health_checked_at: null });
    await gw.services.health.ingest.ingestStatus(node, report('2026-11-28T10:00:00.456Z'), new Date());
    for (const id of [checked, never]) expect(await shown(id)).toMatchObject({ health: 'up', health_checked_at: '2026-11-28T10:00:00.456Z' });
  } finally {
    await gw.close();
  }
}, 120_000);

it('two replicas migrating one empty database at once: both succeed, each migration applied once', async () => {
  const name = await emptyDatabase('race');
  const url = withDatabase(adminUrl, name);
  const a = await openOrm({ databaseUrl: url, dataDir: '' });
  const b = await openOrm({ databaseUrl: url, dataDir: '' });
  cleanups.push(() => a.close(), () => b.close());
  const results = await Promise.allSettled([migrate(a), migrate(b)]);
  expect(results.map((r) => (r.status === 'rejected' ? String((r.reason as Error).message) : 'ok'))).toEqual(['ok', 'ok']);
  // Between them, every migration ran exactly once.
  const ran = results.flatMap((r) => (r.status === 'fulfilled' ? r.value : []));
  expect(ran.sort()).toEqual(migrationsList.map((m) => m.name).sort());
  const raw = new pg.Client({ connectionString: url });
  await raw.connect();
  cleanups.push(() => raw.end());
  const { rows } = await raw.query<{ name: string; n: number }>(`select name, count(*)::int as n from mikro_orm_migrations group by name order by name`);
  expect(rows).toEqual(migrationsList.map((m) => ({ name: m.name, n: 1 })).sort((x, y) => x.name.localeCompare(y.name)));
  for (const orm of [a, b]) {
    expect(await migrationsPending(orm)).toBe(0);
    expect((await orm.schema.getUpdateSchemaSQL({ wrap: false })).trim()).toBe('');
  }
});

it('the embedded database (PGlite): migrations match the entities, and the check can fail', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-pglite-drift-'));
  cleanups.push(async () => fs.rmSync(dir, { recursive: true, force: true }));
  const orm = await openOrm({ databaseUrl: null, dataDir: dir });
  cleanups.push(() => orm.close());
  await migrate(orm);
  expect(await migrationsPending(orm)).toBe(0);
  expect((await orm.schema.getUpdateSchemaSQL({ wrap: false })).trim()).toBe('');
  await orm.em.getConnection().execute('alter table server_secret add column stray int');
  expect(await orm.schema.getUpdateSchemaSQL({ wrap: false })).toMatch(/alter table "server_secret" drop column "stray"/);
}, 120_000);
