// What the fleet bench reads of PostgreSQL: rows written, the database's backends, and pgbench's ceiling.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { withDatabase } from '../../test/helpers/postgres.ts';

const PGBENCH = process.env.BENCH_PGBENCH ?? '/usr/lib/postgresql/15/bin/pgbench';

export async function writesOf(admin: pg.Client, db: string): Promise<number> {
  const r = await admin.query<{ w: string }>('select (tup_inserted + tup_updated + tup_deleted)::text as w from pg_stat_database where datname = $1', [db]);
  return Number(r.rows[0]?.w ?? 0);
}
export async function backendPids(admin: pg.Client, db: string): Promise<number[]> {
  const r = await admin.query<{ pid: number }>('select pid from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()', [db]);
  return r.rows.map((x) => x.pid);
}

/** pgbench TPC-B on its own database, 8 clients for 10 s: its rows written per second (3 updates + 1 insert a transaction). */
export async function pgbenchRowsPerSecond(adminUrl: string, admin: pg.Client): Promise<number | null> {
  const db = `tg_bench_fleet_pgb_${randomBytes(4).toString('hex')}`;
  await admin.query(`create database ${db}`);
  const url = withDatabase(adminUrl, db);
  try {
    const run = (args: string[]) =>
      new Promise<string>((resolve, reject) => {
        const p = spawn(PGBENCH, args, { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        p.stdout.on('data', (d: Buffer) => (out += d));
        p.stderr.on('data', (d: Buffer) => (out += d));
        p.once('error', reject);
        p.once('exit', (c) => (c === 0 ? resolve(out) : reject(new Error(`pgbench ${args[0]} exited ${c}: ${out.slice(-2000)}`))));
      });
    await run(['-i', '-q', '-s', '10', url]);
    const out = await run(['-c', '8', '-j', '2', '-M', 'prepared', '-T', '10', '-n', url]);
    const tps = /tps = ([\d.]+)/.exec(out);
    return tps ? Number(tps[1]) * 4 : null;
  } catch (e) {
    console.error(`pgbench ceiling not measured: ${(e as Error).message}`);
    return null;
  } finally {
    await admin.query(`drop database if exists ${db} with (force)`);
  }
}

