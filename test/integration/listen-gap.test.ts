// Credentials change at once everywhere: a replica whose LISTEN connection drops may have missed notices, and must say so to whoever
// relies on them. Real PostgreSQL; the listener is killed with pg_terminate_backend, and its replacement
// is held back by a gate (Database's injectable retry delay) for as long as each test needs, so the gap
// is a state the test controls, never a race against a timer.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelProbe } from '../../server/provisioning/probes.ts';
import type { Principal } from '../../server/auth/principal.ts';
import { Database, LISTENER_APPLICATION_NAME } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { KeyedLocks } from '../../server/provisioning/locks.ts';
import { ProbeCoordinator } from '../../server/provisioning/probes.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { until } from '../helpers/wait.ts';

/** A gate: replacement listener connections wait on `wait` until `open()`; `close()` makes a new one. */
class Gate {
  private release: () => void = () => {};
  private current = this.make();
  private make(): Promise<void> {
    return new Promise<void>((r) => (this.release = r));
  }
  readonly wait = (): Promise<void> => this.current;
  open(): void {
    this.release();
  }
  close(): void {
    this.current = this.make();
  }
}

let t: TestDatabase;
const dbs: Database[] = [];
/** Another Database on the same test database, whose LISTEN replacement waits on `gate`. */
async function gatedDatabase(gate: Gate): Promise<Database> {
  const db = new Database(await openOrm({ databaseUrl: t.url, dataDir: '' }), { listenRetryDelay: gate.wait });
  dbs.push(db);
  return db;
}
const kill = (pids: number[]) => t.raw.query('select pg_terminate_backend(pid) from unnest($1::int[]) as pid', [pids]);

beforeAll(async () => {
  t = await createTestDatabase();
}, 60_000);
afterAll(async () => {
  for (const db of dbs) await db.close();
  await t?.drop();
});

describe('Database.listen after its connection is killed', () => {
  it('calls onMissed when the connection is lost and again once re-listening; notices resume, those sent in the gap are gone', async () => {
    const gate = new Gate();
    const db = await gatedDatabase(gate);
    const other = await gatedDatabase(new Gate());
    const got: string[] = [];
    let missed = 0;
    await db.listen('tg_gap_test', (p) => got.push(p), () => missed++);
    const [pid] = db.listenerPids();
    expect(pid).toBeTypeOf('number');
    // Named, so an operator (and this test) can tell listeners apart in pg_stat_activity.
    const named = await t.raw.query('select application_name from pg_stat_activity where pid = $1', [pid]);
    expect(named.rows[0].application_name).toBe(LISTENER_APPLICATION_NAME);
    await other.notify('tg_gap_test', 'before');
    await until('the first notice', () => got.includes('before'));
    expect(missed).toBe(0);

    await kill([pid!]);
    await until('the loss to be noticed', () => missed === 1 && db.listenerPids().length === 0);
    await other.notify('tg_gap_test', 'in the gap');
    gate.open();
    await until('the replacement to listen', () => db.listenerPids().length === 1);
    expect(missed).toBe(2);
    expect(db.listenerPids()[0]).not.toBe(pid);
    await other.notify('tg_gap_test', 'after');
    await until('a notice after the gap', () => got.includes('after'));
    // Why subscribers must be told: PostgreSQL does not keep notices for a listener that was not there.
    expect(got).toEqual(['before', 'after']);
  });
});

describe('subscribers that rely on notices', () => {
  let gw: RunningGateway;
  let gatedDb: Database;
  const gate = new Gate();
  beforeAll(async () => {
    gatedDb = await gatedDatabase(gate);
    gw = await startGateway({ testDb: { ...t, db: gatedDb, drop: async () => {} } });
  }, 60_000);
  // The gate stays shut: the file's afterAll closes gatedDb, and a closed Database never reconnects.
  afterAll(async () => {
    await gw?.close();
  });

  it('a tunnel watch (graphql-ws tunnelStatus) re-reads the tunnel when its replica may have missed a status notice', async () => {
    await seedNode(gatedDb, '198.18.7.0/28');
    const user = await seedUser(gatedDb);
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'watched', origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    const id = bought.body.tunnel.id as string;
    const principal: Principal = { accountId: user.accountId, userId: user.userId, permission: 'read', credential: { kind: 'api_key', id: 'test' } };
    const watch = gw.services.tunnels.watch(principal, id);
    expect((await watch.next()).value?.status).toBe('pending');
    const next = watch.next();
    await until('the status bus to listen', () => gatedDb.listenerPids().length > 0);

    // A status change whose notice this replica never hears (as one sent while its listener was down).
    await t.raw.query(`update tunnel set status = 'provisioning' where id = $1`, [id]);
    await kill(gatedDb.listenerPids());

    const seen = await next;
    expect(seen.value?.status).toBe('provisioning');
    await watch.return(undefined);
  });

  it('an activate waiting for another replica\'s probe answer tries again instead of waiting out its timeout', async () => {
    const locks = () => new KeyedLocks(t.url, { maxConnections: 2, application: 'tg-listen-gap-test' });
    const [locksA, locksB] = [locks(), locks()];
    const probeGate = new Gate();
    const dbA = await gatedDatabase(new Gate());
    const dbB = await gatedDatabase(probeGate);
    // B would wait 10 minutes for a notice: only the missed-notice signal can end its wait in this test.
    const a = new ProbeCoordinator(dbA, locksA, 600_000);
    const b = new ProbeCoordinator(dbB, locksB, 600_000);
    const id = '00000000-0000-4000-8000-00000000e014';
    let releaseA: (r: TunnelProbe) => void = () => {};
    let aProbing = false;
    const fromA = a.probe(id, () => {
      aProbing = true;
      return new Promise<TunnelProbe>((r) => (releaseA = r));
    });
    await until('replica A to hold the probe', () => aProbing);
    let bProbed = false;
    const fromB = b.probe(id, async () => {
      bProbed = true;
      return { reachable: false, originRevision: 0 };
    });
    await until('replica B to listen for the answer', () => dbB.listenerPids().length === 1);

    // B goes deaf; A answers meanwhile, and its notice is lost to B.
    await kill(dbB.listenerPids());
    await until('B to notice', () => dbB.listenerPids().length === 0);
    releaseA({ reachable: true, rtt_ms: 1, originRevision: 0 });
    expect(await fromA).toEqual({ reachable: true, rtt_ms: 1, originRevision: 0 });
    probeGate.open();

    // B finds the lock free (A's probe is over) and probes itself.
    expect(await fromB).toEqual({ reachable: false, originRevision: 0 });
    expect(bProbed).toBe(true);
    await locksA.close();
    await locksB.close();
  });
});
