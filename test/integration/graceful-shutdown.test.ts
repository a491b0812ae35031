// Graceful shutdown: docs/OPERATOR.md "Operations" promises that on SIGTERM/SIGINT /readyz turns 503,
// the listener closes, in-flight requests finish (DRAIN_TIMEOUT_MS, 10 s by default, at most), then the
// database closes. Checked on the real gateway process. Requests are held in flight by PostgreSQL table
// locks this test takes (never by a timer): a request is "in flight" once pg_stat_activity shows its
// query waiting on our lock, and it finishes when we release it.
import http from 'node:http';
import net from 'node:net';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { GATEWAY_START_DEADLINE_MS, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { until } from '../helpers/wait.ts';

let t: TestDatabase;
let gw: GatewayProcess | null = null;
const lockers: pg.Client[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
});
afterEach(async () => {
  gw?.kill('SIGKILL');
  gw = null;
  for (const c of lockers.splice(0)) await c.end().catch(() => {});
});
afterAll(async () => t?.drop());

/** Opens a transaction holding `table` in ACCESS EXCLUSIVE mode: every query reading it waits. */
async function lockTable(table: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: t.url });
  await c.connect();
  lockers.push(c);
  await c.query('begin');
  await c.query(`lock table ${table} in access exclusive mode`);
  return c;
}

/** Polls PostgreSQL (a condition, with only a safety bound) until `n` queries matching `like` wait on a lock. */
async function waitForBlocked(like: string, n = 1): Promise<void> {
  await until(`${n} queries like ${like} waiting on a lock`, async () => {
    const { rows } = await t.raw.query<{ n: string }>(
      `select count(*) as n from pg_stat_activity where datname = $1 and wait_event_type = 'Lock' and query like $2`,
      [t.name, like],
    );
    return Number(rows[0]!.n) >= n;
  });
}

interface Answer {
  status: number;
  body: Record<string, unknown>;
}

/** GET over a given agent (one keep-alive socket per agent, so two calls share a connection). */
function get(url: string, agent: http.Agent): Promise<Answer> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent }, (res) => {
        let text = '';
        res.on('data', (d: Buffer) => (text += String(d)));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as Record<string, unknown> }));
      })
      .on('error', reject);
  });
}

/** Whether a fresh TCP connection to the gateway's port is accepted. */
function connects(url: string): Promise<boolean> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = net.connect(Number(u.port), u.hostname);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

it('SIGTERM: /readyz 503 while draining, no new connections, the in-flight request finishes 200, the process exits 0', async () => {
  gw = await startGatewayProcess({ DATABASE_URL: t.url });
  const ka = () => new http.Agent({ keepAlive: true, maxSockets: 1 });
  const inFlight = ka();
  const probe = ka();
  expect((await get(`${gw.url}/readyz`, probe)).status).toBe(200);

  // Request A (pricing reads `setting`) and request B (/readyz reads the migrations table) wait on our locks.
  const settingLock = await lockTable('setting');
  const migrationsLock = await lockTable('mikro_orm_migrations');
  const a = get(`${gw.url}/api/dedicated/pricing`, inFlight);
  const b = get(`${gw.url}/readyz`, probe);
  await waitForBlocked('%usd_rub_rate%');
  await waitForBlocked('%mikro_orm_migrations%');

  gw.kill('SIGTERM');
  await gw.waitForLog((l) => l.msg === 'shutting down');
  // B was admitted before the signal and answers after it: not ready. Its connection stays open
  // (busy at the signal), so a second /readyz on it shows the drain while A is still held.
  await migrationsLock.query('rollback');
  const first = await b;
  expect(first).toMatchObject({ status: 503, body: { status: 'not_ready', draining: true } });
  const second = await get(`${gw.url}/readyz`, probe);
  expect(second).toMatchObject({ status: 503, body: { status: 'not_ready', draining: true } });
  // The listener is closed: a new connection is refused while A is still in flight.
  expect(await connects(gw.url)).toBe(false);
  expect(gw.lines.some((l) => l.includes('"msg":"stopped"'))).toBe(false);

  await settingLock.query('rollback');
  const done = await a;
  expect(done.status).toBe(200);
  expect(done.body).toMatchObject({ currency: 'RUB', price: 100 });
  expect(await gw.exited).toBe(0);
  // The database closed after the request finished, and the process said so.
  expect(gw.lines.some((l) => l.includes('"msg":"stopped"'))).toBe(true);
  inFlight.destroy();
  probe.destroy();
}, GATEWAY_START_DEADLINE_MS + 60_000);

it('the drain is capped: a request held past DRAIN_TIMEOUT_MS is cut and the process still exits', async () => {
  gw = await startGatewayProcess({ DATABASE_URL: t.url, DRAIN_TIMEOUT_MS: '500' });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  await lockTable('setting');
  const held = get(`${gw.url}/api/dedicated/pricing`, agent).then(
    (r) => ({ answered: r.status }),
    (e: Error) => ({ cut: e.message }),
  );
  await waitForBlocked('%usd_rub_rate%');
  gw.kill('SIGINT');
  // The lock is never released while the process lives: only the cap can end the drain.
  await gw.waitForLog((l) => l.msg === 'drain timeout; closing remaining connections');
  expect(await held).toHaveProperty('cut');
  expect(await gw.exited).toBe(0);
  agent.destroy();
}, GATEWAY_START_DEADLINE_MS + 60_000);
