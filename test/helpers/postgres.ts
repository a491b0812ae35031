// Finds the local PostgreSQL for tests and benchmarks: starts the Debian cluster if it is down and
// makes a password role that may create databases.
import { execFileSync } from 'node:child_process';

const ROLE = 'tunnelgate_test';

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Starts the Debian cluster if it is down and makes a password role for the tests. */
export function ensureLocalPostgres(): string {
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

export function withDatabase(url: string, db: string): string {
  const u = new URL(url);
  u.pathname = `/${db}`;
  return u.toString();
}

/** What `dropDatabase` needs of a client: pg's Client or Pool. */
interface Queryable {
  query(text: string): Promise<unknown>;
}

/**
 * DROP DATABASE ... WITH (FORCE), retried: FORCE refuses to end a session it may not signal, such as an
 * autovacuum worker (no role) busy on the database, common after the job queue's churn. It is gone a
 * moment later, so try again.
 */
export async function dropDatabase(admin: Queryable, name: string): Promise<void> {
  // A pool closed just before may still have connections on their way out: terminating those (WITH FORCE)
  // reaches their client as an 'error' nothing listens to any more, which vitest reports as an unhandled
  // error and fails the run. So first wait (bounded) until the database has no sessions left.
  for (let i = 0; i < 100; i++) {
    // `name` is a test's own generated identifier (it is interpolated into the DROP below as well).
    const res = (await admin.query(`select count(*)::int as n from pg_stat_activity where datname = '${name}'`)) as { rows: { n: number }[] };
    if (res.rows[0]!.n === 0) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  for (let attempt = 0; ; attempt++) {
    try {
      await admin.query(`drop database if exists ${name} with (force)`);
      return;
    } catch (e) {
      if (attempt > 50 || !/pg_signal_backend/.test((e as Error).message)) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
