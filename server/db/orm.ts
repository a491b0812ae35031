// Opens the database: PostgreSQL when a URL is given, the embedded PGlite cluster under DATA_DIR
// otherwise. Both go through MikroORM with the same entities and migrations.
import pg from 'pg';
import path from 'node:path';
import { MikroORM as PgORM } from '@mikro-orm/postgresql';
import { MikroORM as PgliteORM, PgliteDriver } from '@mikro-orm/pglite';
import { Migrator } from '@mikro-orm/migrations';
import type { MikroORM } from '@mikro-orm/core';
import { createPostgreSqlTypeParsers, type AbstractSqlDriver, type EntityManager } from '@mikro-orm/sql';
import { entities } from './entities.ts';
import { prepareDataDir } from '../data-dir.ts';
import { migrationsList } from './migrations/index.ts';
import './release-on-failed-rollback.ts';
import { parseDatabaseUrl, pgConfig } from './multi-host.ts';

/** Both drivers are PostgreSQL-flavoured SQL drivers; code above this module sees only that. */
export type Orm = MikroORM<AbstractSqlDriver>;
export type Em = EntityManager;

export interface OpenOptions {
  databaseUrl: string | null;
  dataDir: string;
  /** Pool size for PostgreSQL; PGlite has a single session anyway. */
  poolMax?: number;
  debug?: boolean;
}

const common = {
  entities,
  extensions: [Migrator],
  migrations: { migrationsList, tableName: 'mikro_orm_migrations', snapshot: false, silent: true },
  // Entities are plain schemas; nothing to discover from the file system.
  discovery: { warnWhenNoEntities: true },
  // Traffic points are managed with PostgreSQL's own tools (partitions created and dropped by
  // server/health/storage.ts, migration Migration20261127100000_health_traffic), not as entities.
  schemaGenerator: { ignoreSchema: ['traffic'] },
  allowGlobalContext: false,
};

// Types. Rows read through the ORM (Database.query), its hot paths (hot, hotRows) and its transactions
// must carry the same JavaScript values on both databases, or code tested on one breaks on the other.
// MikroORM keeps dates, times and intervals as PostgreSQL's text on both drivers. The rest as `pg` parses
// it by default on PostgreSQL: numeric and int8 as text (exact; a bigint can pass 2^53), int4 as number,
// bool, json and jsonb parsed. PGlite's own default parses int8 as a number: overridden below so that a
// count or a bigint column is text there too (and int8[] a string[], as pg gives).
const INT8 = 20;
const text = (s: string) => s;

/** PGlite's parsers on top of MikroORM's: int8 as text, like `pg`. */
const PGLITE_PARSERS: Record<number, (s: string) => unknown> = { [INT8]: text };

/**
 * The type parsers of Database's own PostgreSQL pool (hot reads): MikroORM's (times as text), so hot()
 * returns what query() does.
 */
export const HOT_POOL_TYPES = (() => {
  const types = new pg.TypeOverrides();
  // text[] (oid 1009, not among pg's named builtins): pg's parser of an array into its elements' text.
  const textArray = pg.types.getTypeParser(1009 as Parameters<typeof pg.types.getTypeParser>[0], 'text') as (s: string) => string[];
  for (const [oid, parser] of Object.entries(createPostgreSqlTypeParsers(textArray))) types.setTypeParser(Number(oid), parser);
  return types;
})();

/** The DATABASE_URL each PostgreSQL ORM was opened with, all its hosts included. */
const DATABASE_URLS = new WeakMap<object, string>();

/** The DATABASE_URL `orm` was opened with (several hosts, maybe), or null on the embedded database. */
export function databaseUrlOf(orm: Orm): string | null {
  return DATABASE_URLS.get(orm) ?? null;
}

export async function openOrm(opts: OpenOptions): Promise<Orm> {
  if (opts.databaseUrl) {
    // MikroORM reads one host from its URL: a multi-host DATABASE_URL reaches it as its first host, and
    // the pool's sockets go to whichever host is the primary (multi-host.ts).
    const { stream } = pgConfig(opts.databaseUrl);
    const orm = await PgORM.init({
      ...common,
      clientUrl: parseDatabaseUrl(opts.databaseUrl).singleHostUrl,
      ...(stream ? { driverOptions: { stream } } : {}),
      // A mistyped DATABASE_URL must fail loudly, not create and migrate a new empty database.
      ensureDatabase: false,
      pool: { min: 0, max: opts.poolMax ?? 20 },
      debug: opts.debug ?? false,
    });
    DATABASE_URLS.set(orm, opts.databaseUrl);
    return orm as unknown as Orm;
  }
  // PGlite wants its parent directory to exist; the cluster itself lives in DATA_DIR/pg. Private to
  // this user (server/data-dir.ts).
  prepareDataDir(opts.dataDir);
  const orm = await PgliteORM.init({
    ...common,
    dbName: path.join(opts.dataDir, 'pg'),
    // Merged over MikroORM's own parsers by its PGlite connection (see "Types" above).
    driverOptions: { parsers: PGLITE_PARSERS },
    debug: opts.debug ?? false,
  });
  return orm as unknown as Orm;
}

/**
 * Session advisory-lock key held while migrating (any constant; "tgmigrat" in ASCII): replicas starting
 * together on one PostgreSQL migrate one after the other. Without it, two of them both saw every
 * migration pending and the second failed on `create table` (test/integration/migrations-upgrade.test.ts).
 */
const MIGRATION_LOCK_KEY = '8387793130475381108';

/** Applies every checked-in migration that has not run yet. Returns their names. */
export async function migrate(orm: Orm): Promise<string[]> {
  // PGlite is one process's own database: nobody to race with.
  if (orm.driver instanceof PgliteDriver) return (await orm.migrator.up()).map((m) => m.name);
  const url = databaseUrlOf(orm) ?? (orm.config.get('clientUrl') as string);
  // A connection of its own, outside the ORM's pool: the lock is the session's, and the migrator runs
  // its transactions on pool connections meanwhile. The one that waited finds nothing pending.
  const lock = new pg.Client(pgConfig(url));
  await lock.connect();
  try {
    await lock.query('select pg_advisory_lock($1::bigint)', [MIGRATION_LOCK_KEY]);
    return (await orm.migrator.up()).map((m) => m.name);
  } finally {
    // Ending the session releases the lock whatever happened above.
    await lock.end();
  }
}

/** True when every checked-in migration has been applied (for /readyz). */
export async function migrationsPending(orm: Orm): Promise<number> {
  return (await orm.migrator.getPending()).length;
}
