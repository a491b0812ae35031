// The issuer mounted below a path (ISSUER_URL = <gateway>/auth): every endpoint, page and redirect
// carries the path, and nothing of the issuer answers outside it.
import 'reflect-metadata';
import http from 'node:http';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { loadConfig } from '../../server/config.ts';
import { createGateway, type Gateway } from '../../server/http/app.ts';
import { createLogger } from '../../common/log.ts';
import { buildServices } from '../../server/services.ts';
import { createTestDatabase, type TestDatabase } from '../helpers/db.ts';
import { exchange, newClient, newUser, signIn } from '../helpers/oidc-login.ts';

let testDb: TestDatabase;
let server: http.Server;
let gateway: Gateway;
let base: string;
let issuer: string;
/** A panel build (server/http/panel.ts), to see that the issuer's whole path stays the issuer's. */
let panelDir: string;
const APP = '<!DOCTYPE html><div id="app"></div>';

beforeAll(async () => {
  testDb = await createTestDatabase();
  server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  issuer = `${base}/auth`;
  panelDir = mkdtempSync(join(tmpdir(), 'oidc-mount-panel-'));
  mkdirSync(join(panelDir, 'assets'));
  writeFileSync(join(panelDir, 'index.html'), APP);
  const config = { ...loadConfig({}), logLevel: 'silent' as const, issuerUrl: issuer, publicUrl: base, panelDir };
  gateway = await createGateway(buildServices(config, testDb.db), createLogger('silent'), server);
  server.on('request', gateway.app.callback());
});
afterAll(async () => {
  server?.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await gateway?.stop();
  await testDb?.drop();
  if (panelDir) rmSync(panelDir, { recursive: true, force: true });
});

it('serves discovery, the pages and the token endpoint under the issuer path', async () => {
  const d = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as Record<string, string>;
  expect(d.issuer).toBe(issuer);
  expect(d.token_endpoint).toBe(`${issuer}/oauth/token`);
  expect(d.authorization_endpoint).toBe(`${issuer}/oauth/authorize`);
  expect((await fetch(`${base}/.well-known/openid-configuration`)).status).toBe(404);
  expect((await fetch(`${base}/oauth/jwks`)).status).toBe(404);
  expect(await (await fetch(`${issuer}/oauth/jwks`)).json()).toEqual({ keys: [] });

  const c = await newClient(testDb.db);
  const u = await newUser(testDb.db);
  const s = await signIn(issuer, c, u);
  expect(s.callback.searchParams.get('iss')).toBe(issuer);
  const t = await exchange(issuer, c, s.code, s.verifier);
  expect(t.status).toBe(200);
  const info = await fetch(`${issuer}/oauth/userinfo`, { headers: { authorization: `Bearer ${t.body.access_token}` } });
  expect(((await info.json()) as { sub: string }).sub).toBe(u.id);
  expect((await fetch(`${base}/api/dedicated`, { headers: { authorization: `Bearer ${t.body.access_token}` } })).status).toBe(200);
});

it('a browser gets the panel outside the issuer path and never inside it', async () => {
  const browser = { accept: 'text/html,*/*;q=0.8' };
  for (const path of ['/auth', '/auth/', '/auth/whatever', '/auth/oauth/whatever', '/auth/interaction']) {
    const res = await fetch(`${base}${path}`, { headers: browser });
    expect(res.status, path).toBe(404);
    expect(await res.text(), path).not.toContain('<div id="app">');
  }
  // At the root those names are no longer the issuer's: they are the panel's to route.
  for (const path of ['/oauth/whatever', '/interaction/x']) {
    const res = await fetch(`${base}${path}`, { headers: browser });
    expect(res.status, path).toBe(200);
    expect(await res.text(), path).toBe(APP);
  }
});
