// The embedded default: with no DATABASE_URL the gateway runs on PGlite under DATA_DIR, migrated on
// start. A smoke run of the purchase path on it, data surviving a restart, and `npm start`'s entry
// point started as a real process that drains on SIGTERM.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { createClient, rotateClientSecret } from '../../server/domain/clients.ts';
import { runAdminCli } from '../helpers/admin-cli.ts';
import { bootEmbeddedGateway } from '../helpers/embedded-gateway.ts';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.ts';
import { seedNode, seedUser } from '../helpers/fixtures.ts';
import { call } from '../helpers/gateway.ts';

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-embedded-'));
afterAll(() => fs.rmSync(dataDir, { recursive: true, force: true }));

const boot = () => bootEmbeddedGateway(dataDir);

it('buys a tunnel on PGlite and keeps it across a restart', async () => {
  const first = await boot();
  await seedNode(first.db, '198.18.9.0/30');
  const user = await seedUser(first.db, { balanceUsd: '5.00' });
  const bought = await call(first.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'embedded', origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'k1' } });
  expect(bought.status).toBe(201);
  expect(bought.body.charged_usd).toBe(1.11);
  expect(bought.body.balance_after).toBe(3.89);
  const replay = await call(first.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'embedded', origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': 'k1' } });
  expect(replay.body).toEqual(bought.body);
  await first.close();

  const second = await boot();
  try {
    const got = await call(second.url, 'GET', `/api/dedicated/${bought.body.tunnel.id}`, { token: user.readKey });
    expect(got.status).toBe(200);
    expect(got.body.tunnel.status).toBe('pending');
    // A settings change on PGlite: stored under the row lock, normalised, and kept.
    const patched = await call(second.url, 'PATCH', `/api/dedicated/${bought.body.tunnel.id}`, { token: user.writeKey, body: { origin_ip: '9.9.9.9', ports: '443,80,81', protection: { syn_proxy: true } } });
    expect([patched.status, patched.body.tunnel.ports, patched.body.tunnel.origin_ip, patched.body.tunnel.protection.syn_proxy]).toEqual([200, '80-81,443', '9.9.9.9', true]);
    const pricing = await call(second.url, 'GET', '/api/dedicated/pricing');
    expect(pricing.body.availability).toEqual({ total: 2, available: 1, in_stock: true });
    // The issuer authenticates clients from their row on PGlite too, before and after a rotation.
    const { secretEncryptionKey } = second.secrets;
    const client = await createClient(second.db, secretEncryptionKey, { name: 'Embedded app', redirectUris: ['http://127.0.0.1:9/cb'] });
    const authenticate = async (secret: string) => {
      const form = { grant_type: 'refresh_token', refresh_token: 'rt_made-up', client_id: client.client_id, client_secret: secret };
      const r = await fetch(`${second.url}/oauth/token`, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams(form).toString() });
      return [r.status, ((await r.json()) as { error: string }).error];
    };
    expect(await authenticate(client.client_secret)).toEqual([400, 'invalid_grant']);
    const rotated = await rotateClientSecret(second.db, secretEncryptionKey, client.client_id);
    expect(await authenticate(rotated.client_secret)).toEqual([400, 'invalid_grant']);
    expect(await authenticate(client.client_secret)).toEqual([401, 'invalid_client']);
  } finally {
    await second.close();
  }
  // Two PGlite boots (migrations on the first): slow on a busy machine.
}, 90_000);

it('`npm start` entry point: embedded database, /readyz, graceful SIGTERM', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-start-'));
  // The edge worker as `npm start` runs it (on by default).
  const env = { DATABASE_URL: '', DATA_DIR: dir };
  let gateway: GatewayProcess | undefined;
  try {
    const gw = (gateway = await startGatewayProcess({ ...env, LOG_LEVEL: 'info', EDGE_WORKER: 'true' }));
    const url = gw.url;
    const ready = await call(url, 'GET', '/readyz');
    expect(ready.status).toBe(200);
    expect((await call(url, 'GET', '/api/dedicated/pricing')).body.currency).toBe('RUB');

    // The admin CLI works while the gateway holds the embedded database: it hands its command over.
    const admin = (...args: string[]) => runAdminCli(env, args);
    const adminWithStdin = (stdin: string, ...args: string[]) => runAdminCli(env, args, stdin);
    // With a pinned host key: purchases take IPs only from nodes that have one.
    const node = await admin('node', 'add', '--name', 'edge-1', '--public-ip', '192.0.2.1', '--ssh-host', '192.0.2.1', '--pool', '198.18.7.0/30', '--host-key', `SHA256:${'E'.repeat(43)}`);
    expect(node.code, node.stderr).toBe(0);
    expect(node.json).toMatchObject({ pool_size: 2, gateway_ssh_public_key: expect.stringMatching(/^ssh-ed25519 /) });
    // The password from standard input, forwarded to the gateway: no warning from either process.
    const user = await adminWithStdin('long enough pw\n', 'user', 'create', '--email', 'e@example.test', '--name', 'E', '--password', '-', '--balance-usd', '3');
    expect([user.code, user.stderr]).toEqual([0, '']);
    // A password as an argument still works, warned about once (by the CLI, not again by the gateway).
    const argvUser = await admin('user', 'create', '--email', 'argv@example.test', '--name', 'A', '--password', 'long enough pw');
    expect([argvUser.code, argvUser.stderr]).toEqual([0, 'warning: --password on the command line is visible in ps and shell history; use --password - and pipe it\n']);
    expect(Object.keys(argvUser.json).sort()).toEqual(['account_id', 'user_id']);
    const key = await admin('apikey', 'create', '--email', 'e@example.test', '--permission', 'write');
    expect(key.code).toBe(0);
    const refused = await admin('user', 'create', '--email', 'not-an-email', '--name', 'E', '--password', 'long enough pw');
    expect(refused.code).toBe(1);
    expect(refused.json.error).toBe('invalid_request');
    const bought = await call(url, 'POST', '/api/dedicated', { token: key.json.key, body: { origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    expect(bought.body.balance_after).toBe(1.89);
    // A second gateway on the same data directory refuses to start instead of corrupting it.
    await expect(startGatewayProcess({ ...env, LOG_LEVEL: 'silent' })).rejects.toThrow(/exited \(1\) before listening: [^]*another gateway is already running/);
    // Every log line is one JSON object.
    for (const line of `${gw.lines.join('\n')}\n${gw.stderr()}`.trim().split('\n')) expect(() => JSON.parse(line), line).not.toThrow();
    gw.kill('SIGTERM');
    await gw.waitForLog((l) => l.msg === 'stopped');
    expect(await gw.exited).toBe(0);
    expect(fs.existsSync(path.join(dir, 'pg'))).toBe(true);
  } finally {
    gateway?.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
  // A bound for a loaded 2-core host (PGlite's first boot, five CLI processes, two gateways), not a timing assertion.
}, 180_000);
