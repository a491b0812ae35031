// Two replicas migrating at once, as operators meet it: two gateway processes (`npm start`'s
// command) started together on one empty PostgreSQL database. Both must come up ready, each migration
// applied once, and both must agree on the generated secrets (docs/CONTRACTS.md "Starting it": generated once, so every
// replica agrees): each logs the id of the job-signing key it loaded, and the two ids are one.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, expect, inject, it } from 'vitest';
import { migrationsList } from '../../server/db/migrations/index.ts';
import { dropDatabase, withDatabase } from '../helpers/postgres.ts';
import { GATEWAY_START_DEADLINE_MS, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';

const adminUrl = inject('adminDatabaseUrl');
const name = `tg_replicas_${randomBytes(4).toString('hex')}`;
const gateways: GatewayProcess[] = [];

afterAll(async () => {
  for (const g of gateways) g.kill('SIGKILL');
  await Promise.all(gateways.map((g) => g.exited));
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await dropDatabase(admin, name);
  await admin.end();
});

it('two gateways started at once on an empty database both become ready, migrations applied once, secrets shared', async () => {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${name}`);
  await admin.end();
  const url = withDatabase(adminUrl, name);

  const started = await Promise.allSettled([0, 1].map(() => startGatewayProcess({ DATABASE_URL: url })));
  for (const s of started) if (s.status === 'fulfilled') gateways.push(s.value);
  expect(started.map((s) => (s.status === 'rejected' ? String((s.reason as Error).message).slice(0, 400) : 'listening'))).toEqual(['listening', 'listening']);
  for (const g of gateways) {
    const ready = await fetch(`${g.url}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toMatchObject({ status: 'ready', migrations_pending: 0 });
  }

  const kids = await Promise.all(gateways.map((g) => g.waitForLog((l) => l.msg === 'provisioning ready').then((l) => l.job_key)));
  expect(typeof kids[0]).toBe('string');
  expect(kids[1]).toBe(kids[0]);

  const raw = new pg.Client({ connectionString: url });
  await raw.connect();
  try {
    const { rows } = await raw.query<{ name: string; n: number }>(`select name, count(*)::int as n from mikro_orm_migrations group by name order by name`);
    expect(rows).toEqual(migrationsList.map((m) => ({ name: m.name, n: 1 })).sort((x, y) => x.name.localeCompare(y.name)));
    // One value per secret, whichever replica generated it.
    const secrets = await raw.query<{ name: string }>(`select name from server_secret where name not like 'env_fingerprint.%' order by name`);
    expect(new Set(secrets.rows.map((r) => r.name)).size).toBe(secrets.rows.length);
    expect(secrets.rows.length).toBeGreaterThanOrEqual(5);
  } finally {
    await raw.end();
  }
}, 2 * GATEWAY_START_DEADLINE_MS);
