// Credentials change at once everywhere: a rotated OAuth client secret and a revoked `svc_` key take effect at once on every gateway
// replica, whatever the state of NOTIFY delivery. Two real gateways on one PostgreSQL database (each
// with its own ORM and pools, as two processes would have), the credentials changed through a third
// connection as the admin CLI changes them (the same domain functions, another Database), and the
// second replica deaf: its LISTEN connections are killed with pg_terminate_backend before the tests and
// held down (the reconnect waits on a gate this file opens only at the end), so no notice can reach it.
//
// The CLI itself is not run here on purpose: starting it takes seconds on a busy machine, longer than
// the 5-second cache this replaced, and a slow start would let a stale cache pass the test.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApiKey, revokeApiKey } from '../../server/auth/api-keys.ts';
import { Database } from '../../server/db/database.ts';
import { openOrm } from '../../server/db/orm.ts';
import { rotateClientSecret } from '../../server/domain/clients.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { newClient, newUser, token, type Client } from '../helpers/oidc-login.ts';
import { until } from '../helpers/wait.ts';

let gw1: RunningGateway;
let gw2: RunningGateway;
let db2: Database;
/** The operator's side: the admin CLI's own connection to the database. */
let admin: Database;
/** Opened at the end: until then replica 2 cannot replace a lost LISTEN connection. */
let openGate: () => void = () => {};
const gate = new Promise<void>((r) => (openGate = r));

beforeAll(async () => {
  gw1 = await startGateway();
  db2 = new Database(await openOrm({ databaseUrl: gw1.testDb.url, dataDir: '' }), { listenRetryDelay: () => gate });
  gw2 = await startGateway({ testDb: { ...gw1.testDb, db: db2 } });
  admin = new Database(await openOrm({ databaseUrl: gw1.testDb.url, dataDir: '' }));
  // Whatever replica 2 listens to (the status bus at least, started here so there is a connection to
  // kill), it hears nothing from here on.
  await gw2.services.provisioning.bus.start();
  const pids = db2.listenerPids();
  expect(pids.length).toBeGreaterThan(0);
  await gw1.testDb.raw.query('select pg_terminate_backend(pid) from unnest($1::int[]) as pid', [pids]);
  await until('replica 2 to notice its LISTEN connections are gone', () => db2.listenerPids().length === 0);
  const { rows } = await gw1.testDb.raw.query('select count(*)::int as n from pg_stat_activity where pid = any($1::int[])', [pids]);
  expect(rows[0].n).toBe(0);
}, 60_000);

afterAll(async () => {
  await gw2?.close();
  await db2?.close();
  // Only now: a closed Database never replaces its listener, so nothing reconnects to a dropped database.
  openGate();
  await admin?.close();
  await gw1?.close();
});

/** Replica 2 is still deaf: no LISTEN connection (the gate holds its replacement back). */
const replica2IsDeaf = () => expect(db2.listenerPids()).toEqual([]);

/** A token request whose only meaningful check is client authentication: the refresh token is made up. */
const authenticate = (gw: RunningGateway, c: Client, secret: string) =>
  token(gw.url, c, { grant_type: 'refresh_token', refresh_token: 'rt_not-a-real-token' }, secret).then((r) => [r.status, r.body.error]);
const AUTHENTICATED = [400, 'invalid_grant'];
const REFUSED = [401, 'invalid_client'];

describe('two replicas, the second one deaf to NOTIFY', () => {
  it('right after rotate-secret the new secret authenticates and the old one is invalid_client on both', async () => {
    const c = await newClient(admin);
    // Both replicas have just authenticated the client (any cache they keep is warm).
    for (const gw of [gw1, gw2]) expect(await authenticate(gw, c, c.secret)).toEqual(AUTHENTICATED);
    replica2IsDeaf();

    const { secretEncryptionKey } = (await loadSecrets(admin, {})).secrets;
    const rotated = await rotateClientSecret(admin, secretEncryptionKey, c.id);

    for (const [name, gw] of [['replica 1', gw1], ['replica 2 (deaf)', gw2]] as const) {
      expect([name, await authenticate(gw, c, rotated.client_secret)]).toEqual([name, AUTHENTICATED]);
      expect([name, await authenticate(gw, c, c.secret)]).toEqual([name, REFUSED]);
    }
  });

  it('right after apikey revoke the key is 401 invalid_token on both', async () => {
    const u = await newUser(admin);
    const key = await createApiKey(admin, u.accountId, u.id, 'read');
    const kept = await createApiKey(admin, u.accountId, u.id, 'read');
    for (const gw of [gw1, gw2]) expect((await call(gw.url, 'GET', '/api/dedicated', { token: key.key })).status).toBe(200);
    replica2IsDeaf();

    expect(await revokeApiKey(admin, key.id)).toBe(true);

    for (const [name, gw] of [['replica 1', gw1], ['replica 2 (deaf)', gw2]] as const) {
      const r = await call(gw.url, 'GET', '/api/dedicated', { token: key.key });
      expect([name, r.status, r.body?.error]).toEqual([name, 401, 'invalid_token']);
      // The account's other key is untouched.
      expect([name, (await call(gw.url, 'GET', '/api/dedicated', { token: kept.key })).status]).toEqual([name, 200]);
    }
  });

  it('concurrent authentications of many keys and clients (batched into shared statements) each get their own answer', async () => {
    const u = await newUser(admin);
    const keys = await Promise.all(Array.from({ length: 12 }, () => createApiKey(admin, u.accountId, u.id, 'read')));
    const revoked = keys.filter((_, i) => i % 3 === 0);
    for (const k of revoked) await revokeApiKey(admin, k.id);
    const clients = await Promise.all(Array.from({ length: 6 }, () => newClient(admin)));
    const answers = await Promise.all(
      [gw1, gw2].flatMap((gw) => [
        ...keys.map(async (k) => ['key', k.id, (await call(gw.url, 'GET', '/api/dedicated', { token: k.key })).status]),
        ...clients.map(async (c, i) => ['client', c.id, ...(await authenticate(gw, c, i % 2 ? c.secret : clients[(i + 1) % clients.length]!.secret))]),
      ]),
    );
    const expected = [gw1, gw2].flatMap(() => [
      ...keys.map((k) => ['key', k.id, revoked.includes(k) ? 401 : 200]),
      ...clients.map((c, i) => ['client', c.id, ...(i % 2 ? AUTHENTICATED : REFUSED)]),
    ]);
    expect(answers).toEqual(expected);
  });
});
