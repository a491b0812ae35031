// `client rotate-secret` run as operators run it (the real admin CLI, another process) against a
// running gateway's database: everything issued to the client before is dead at once, everywhere.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { jwtVerify } from 'jose';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { exchange, newClient, newUser, signIn, token, type Client } from '../helpers/oidc-login.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function rotate(databaseUrl: string, clientId: string): Promise<{ client_id: string; client_secret: string }> {
  return new Promise((resolve, reject) => {
    execFile(
      path.join(ROOT, 'node_modules/.bin/node'),
      ['--import', './loader/register.mjs', 'server/cli/admin.ts', 'client', 'rotate-secret', '--client-id', clientId],
      { cwd: ROOT, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', DATABASE_URL: databaseUrl }, timeout: 100_000 },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(stdout))),
    );
  });
}

/** A JSON response body, loosely typed for assertions. */
const body = async (r: Response) => (await r.json()) as Record<string, any>;
const bearer = (t: string) => ({ authorization: `Bearer ${t}` });

let gw: RunningGateway;
beforeAll(async () => {
  gw = await startGateway();
});
afterAll(async () => {
  await gw?.close();
});

it('rotate-secret invalidates every token, code, grant and session of the client at once', async () => {
  const db = gw.testDb.db;
  const c = await newClient(db);
  const other = await newClient(db);
  const u = await newUser(db);

  // Before: live tokens, a pending (not yet exchanged) code, and another client's tokens.
  const first = await signIn(gw.url, c, u);
  const tokens = await exchange(gw.url, c, first.code, first.verifier);
  expect(tokens.status).toBe(200);
  const pending = await signIn(gw.url, c, u, first.jar);
  const otherSignIn = await signIn(gw.url, other, u, first.jar);
  const otherTokens = await exchange(gw.url, other, otherSignIn.code, otherSignIn.verifier);
  expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(tokens.body.access_token!) })).status).toBe(200);
  expect((await fetch(`${gw.url}/oauth/userinfo`, { headers: bearer(tokens.body.access_token!) })).status).toBe(200);
  const me = await fetch(`${gw.url}/graphql`, {
    method: 'POST',
    headers: { ...bearer(tokens.body.access_token!), 'content-type': 'application/json' },
    body: JSON.stringify({ query: '{ me { accountId } }' }),
  });
  expect((await body(me)).data.me.accountId).toBe(u.accountId);

  const rotated = await rotate(gw.testDb.url, c.id);
  expect(rotated.client_id).toBe(c.id);
  expect(Buffer.from(rotated.client_secret, 'base64url').length).toBeGreaterThanOrEqual(32);
  const fresh: Client = { ...c, secret: rotated.client_secret };

  // The old access token: 401 at the API, at GraphQL and at userinfo.
  const api = await fetch(`${gw.url}/api/dedicated`, { headers: bearer(tokens.body.access_token!) });
  expect(api.status).toBe(401);
  expect((await body(api)).error).toBe('invalid_token');
  const gql = await fetch(`${gw.url}/graphql`, {
    method: 'POST',
    headers: { ...bearer(tokens.body.access_token!), 'content-type': 'application/json' },
    body: JSON.stringify({ query: '{ me { accountId } }' }),
  });
  expect(gql.status).toBe(401);
  const ui = await fetch(`${gw.url}/oauth/userinfo`, { headers: bearer(tokens.body.access_token!) });
  expect(ui.status).toBe(401);
  expect((await body(ui)).error).toBe('invalid_token');

  // The old refresh token and the pending code: invalid_grant, even with the new secret.
  const refresh = await token(gw.url, fresh, { grant_type: 'refresh_token', refresh_token: tokens.body.refresh_token! });
  expect([refresh.status, refresh.body.error]).toEqual([400, 'invalid_grant']);
  const code = await exchange(gw.url, fresh, pending.code, pending.verifier);
  expect([code.status, code.body.error]).toEqual([400, 'invalid_grant']);

  // The old secret: invalid_client.
  const oldSecret = await token(gw.url, c, { grant_type: 'refresh_token', refresh_token: tokens.body.refresh_token! });
  expect([oldSecret.status, oldSecret.body.error]).toEqual([401, 'invalid_client']);

  // Nothing of the client is left in storage; the other client is untouched.
  const { rows } = await gw.testDb.raw.query(`select kind from oidc_payload where client_id = $1`, [c.id]);
  expect(rows).toEqual([]);
  const sessions = await gw.testDb.raw.query(`select 1 from oidc_payload where kind = 'Session' and payload->'authorizations' ? $1`, [c.id]);
  expect(sessions.rows).toEqual([]);
  expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(otherTokens.body.access_token!) })).status).toBe(200);
  expect((await token(gw.url, other, { grant_type: 'refresh_token', refresh_token: otherTokens.body.refresh_token! })).status).toBe(200);

  // The same browser signs in again with the new secret: consent is asked again, and it all works.
  const again = await signIn(gw.url, fresh, u, first.jar);
  const renewed = await exchange(gw.url, fresh, again.code, again.verifier);
  expect(renewed.status).toBe(200);
  const { payload } = await jwtVerify(renewed.body.id_token!, Buffer.from(fresh.secret), { issuer: gw.url, audience: c.id });
  expect(payload.sub).toBe(u.id);
  await expect(jwtVerify(renewed.body.id_token!, Buffer.from(c.secret), { issuer: gw.url, audience: c.id })).rejects.toThrow();
  expect((await fetch(`${gw.url}/api/dedicated`, { headers: bearer(renewed.body.access_token!) })).status).toBe(200);
  // Starts the admin CLI (TypeScript through the loader) in another process: slow on a busy machine.
}, 120_000);
