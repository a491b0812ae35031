// Finds or starts PostgreSQL once per test run and prepares a template database with every
// migration applied; each test file then clones it (CREATE DATABASE ... TEMPLATE), which is fast and
// keeps files independent. TEST_DATABASE_URL (a role allowed to CREATE DATABASE) skips the discovery.
import { randomBytes } from 'node:crypto';
import type { TestProject } from 'vitest/node';
import pg from 'pg';
import { migrate, openOrm } from '../../server/db/orm.ts';
import { ensureLocalPostgres, withDatabase } from './postgres.ts';

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

export { withDatabase };

declare module 'vitest' {
  export interface ProvidedContext {
    adminDatabaseUrl: string;
    templateDatabase: string;
  }
}
