// Finds or starts PostgreSQL once per test run and prepares a template database with every
// migration applied; each test file then clones it (CREATE DATABASE ... TEMPLATE), which is fast and
// keeps files independent. TEST_DATABASE_URL (a role allowed to CREATE DATABASE) skips the discovery.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { migrate, openOrm } from '../../server/db/orm.ts';

const ROLE = 'tunnelgate_test';

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Starts the Debian cluster if it is down and makes a password role for the tests. */
function ensureLocalPostgres(): string {
  try {
    const clusters = sh('pg_lsclusters', ['--no-header']).trim().split('\n').filter(Boolean);
    for (const line of clusters) {
      const [version, name, , status] = line.split(/\s+/);
      if (status !== 'online') sh('pg_ctlcluster', [version!, name!, 'start']);
    }
  } catch (e) {
    throw new Error(`PostgreSQL is not reachable: set TEST_DATABASE_URL, or install postgresql (pg_lsclusters failed: ${(e as Error).message})`);
  }
  const password = process.env.TEST_DATABASE_PASSWORD ?? 'tunnelgate-test-only';
  const psql = (sqlText: string) => sh('runuser', ['-u', 'postgres', '--', 'psql', '-v', 'ON_ERROR_STOP=1', '-qtAc', sqlText]);
  const exists = psql(`select 1 from pg_roles where rolname = '${ROLE}'`).trim() === '1';
  psql(`${exists ? 'alter' : 'create'} role ${ROLE} login createdb password '${password}'`);
  const port = sh('pg_lsclusters', ['--no-header']).trim().split(/\s+/)[2] ?? '5432';
  return `postgresql://${ROLE}:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`;
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const adminUrl = process.env.TEST_DATABASE_URL ?? ensureLocalPostgres();
  const template = `tg_template_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`create database ${template}`);
  const templateUrl = withDatabase(adminUrl, template);
  const orm = await openOrm({ databaseUrl: templateUrl, dataDir: '' });
  await migrate(orm);
  await orm.close();
  project.provide('adminDatabaseUrl', adminUrl);
  project.provide('templateDatabase', template);
  return async () => {
    // Drop the template and every per-file clone of this run.
    const { rows } = await admin.query<{ datname: string }>(`select datname from pg_database where datname like $1`, [`${template}%`]);
    for (const { datname } of rows.sort((a, b) => b.datname.length - a.datname.length)) {
      await admin.query(`drop database if exists ${datname} with (force)`);
    }
    await admin.end();
  };
}

export function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    templateDatabase: string;
  }
}
