// The checked-in migrations must produce exactly the schema the entities describe: after every
// migration has run, MikroORM finds nothing left to change. A new entity or column without its
// migration (or a migration edited by hand away from the entities) fails here.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { migrationsPending } from '../../server/db/orm.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';

let t: TestDatabase;
beforeAll(async () => {
  // A clone of the template that global-setup migrated with the checked-in migrations.
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

it('the migrations match the entities (no schema drift)', async () => {
  expect(await migrationsPending(t.db.orm)).toBe(0);
  const diff = await t.db.orm.schema.getUpdateSchemaSQL({ wrap: false });
  expect(diff.trim()).toBe('');
});

it('the drift check can fail: a column the entities do not know shows up as a difference', async () => {
  await t.raw.query('alter table server_secret add column stray int');
  try {
    const diff = await t.db.orm.schema.getUpdateSchemaSQL({ wrap: false });
    expect(diff).toMatch(/alter table "server_secret" drop column "stray"/);
  } finally {
    await t.raw.query('alter table server_secret drop column stray');
  }
});
