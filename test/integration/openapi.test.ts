// schema/openapi.yaml against the real gateway on real PostgreSQL: its responses match the document, status by
// status, including the error bodies and the WWW-Authenticate / Retry-After headers. The document's own checks
// (valid OpenAPI 3.1, paths exactly the router's) are openapi-document.test.ts.
import fs from 'node:fs';
import { randomUUID } from 'node:crypto';
import YAML from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addBalance } from '../../server/domain/accounts.ts';
import { createPromocode } from '../../server/domain/promocodes.ts';
import { setRate } from '../../server/domain/settings.ts';
import { VERSION } from '../../server/version.ts';
import { seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import type { RunningGateway } from '../helpers/gateway.ts';
import { OPENAPI_FILE, expectMatchesOpenApi, expectMatchesSchema } from '../helpers/openapi.ts';

/** A real request; the response body is parsed JSON for JSON responses, text otherwise. */
async function req(gw: RunningGateway, method: string, path: string, opts: { token?: string; json?: unknown; raw?: string | Uint8Array; headers?: Record<string, string> } = {}) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body: string | Uint8Array | undefined = opts.raw;
  if (opts.json !== undefined) {
    body = JSON.stringify(opts.json);
    headers['content-type'] ??= 'application/json';
  }
  const res = await fetch(gw.url + path, { method, headers, body });
  const text = await res.text();
  const json = /^application\/json/i.test(res.headers.get('content-type') ?? '') ? (JSON.parse(text) as any) : undefined;
  return { status: res.status, headers: res.headers, body: json, text };
}

/** Calls and validates against the document; returns the response for further assertions. */
async function checked(
  gw: RunningGateway,
  method: string,
  template: string,
  path: string,
  expectedStatus: number,
  opts: Parameters<typeof req>[3] = {},
) {
  const res = await req(gw, method, path, opts);
  expect(res.status, `${method} ${path}: ${res.text.slice(0, 300)}`).toBe(expectedStatus);
  expectMatchesOpenApi(method, template, res.status, res.body !== undefined ? res.body : res.text, res.headers);
  return res;
}

describe('real responses match openapi.yaml', () => {
  let gw: RunningGateway;
  let lean: RunningGateway;
  let a: SeededUser;
  let poor: SeededUser;
  let other: SeededUser;
  const ID = '/api/dedicated/{id}';

  beforeAll(async () => {
    const { startGateway } = await import('../helpers/gateway.ts');
    [gw, lean] = await Promise.all([startGateway(), startGateway({ config: { rateLimitPerMinute: 1, rateLimitBurst: 2 } })]);
    // 100 RUB at 160 RUB/USD is 0.625 USD: the half-up rule makes it 0.63.
    await setRate(gw.testDb.db, '160');
    await seedNode(gw.testDb.db, '198.18.0.0/28'); // 14 usable protected IPs
    [a, poor, other] = await Promise.all([
      seedUser(gw.testDb.db, { balanceUsd: '100.00' }),
      seedUser(gw.testDb.db, { balanceUsd: '0.50' }),
      seedUser(gw.testDb.db, { balanceUsd: '100.00' }),
    ]);
    await createPromocode(gw.testDb.db, { code: 'HALF', percent: 50 });
  });

  afterAll(async () => {
    await Promise.all([gw?.close(), lean?.close()]);
  });

  const balance = async (u: SeededUser) =>
    (await gw.testDb.raw.query<{ b: string }>('select balance_usd::text as b from account where id = $1', [u.accountId])).rows[0]!.b;

  const buy = async (u: SeededUser, body: Record<string, unknown> = {}) =>
    (await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: u.writeKey, json: { origin_ip: '8.8.8.8', ...body } })).body;

  it('GET /api/openapi.json serves the YAML document', async () => {
    const res = await checked(gw, 'GET', '/api/openapi.json', '/api/openapi.json', 200);
    expect(res.body).toEqual(YAML.parse(fs.readFileSync(OPENAPI_FILE, 'utf8')));
  });

  it('GET /healthz, /readyz, /metrics', async () => {
    expect((await checked(gw, 'GET', '/healthz', '/healthz', 200)).body).toEqual({ status: 'ok', version: VERSION });
    expect((await checked(gw, 'GET', '/readyz', '/readyz', 200)).body.status).toBe('ready');
    expect((await checked(gw, 'GET', '/metrics', '/metrics', 200)).text).toMatch(/# TYPE /);
  });

  it('GET /api/dedicated/pricing: 200, rounded half up, no auth needed (a token is ignored)', async () => {
    const res = await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200);
    expect(res.body).toEqual({
      price: 100, currency: 'RUB', price_usd: 0.63, usd_rub_rate: 160, billing: 'one_time',
      includes: ['dedicated_public_ip', 'full_tcp_udp_nat', 'gre_tunnel'], admin_ssh_port: 52222,
      availability: { total: 14, available: 14, in_stock: true },
    });
    await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200, { token: 'garbage' });
  });

  it('POST /api/dedicated: 201 with every field, balance_after = previous balance - charged_usd', async () => {
    const before = await balance(a);
    const r = await buy(a, { name: ' web ', origin_ip: '8.8.4.4' });
    expect(r.tunnel).toMatchObject({ name: 'web', origin_ip: '8.8.4.4', status: 'pending', ports: '*', protocol: 'both', admin_ssh_port: 52222 });
    expect(before).toBe('100.00');
    expect(r).toMatchObject({ charged: 100, charged_usd: 0.63, currency: 'RUB', balance_after: 99.37 });
    expect(r.next_steps).toEqual({ setup: `/api/dedicated/${r.tunnel.id}/setup`, provision: `/api/dedicated/${r.tunnel.id}/provision` });
    expect(await balance(a)).toBe('99.37');
    // A promocode: 50 RUB at 160 is 0.3125 USD -> 0.31.
    const p = await buy(a, { promocode: 'half' });
    expect(p).toMatchObject({ charged: 50, charged_usd: 0.31, balance_after: 99.06 });
    expect((await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200)).body.availability).toEqual({ total: 14, available: 12, in_stock: true });
  });

  it('POST /api/dedicated with Idempotency-Key: the same body replays the first status and body', async () => {
    const key = randomUUID();
    const body = { origin_ip: '9.9.9.9', name: 'idem' };
    const first = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: a.writeKey, json: body, headers: { 'idempotency-key': key } });
    const after = await balance(a);
    const again = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: a.writeKey, json: body, headers: { 'idempotency-key': key } });
    expect(again.body).toEqual(first.body);
    expect(await balance(a)).toBe(after);
    // Only the replay carries Idempotent-Replayed (a documented header, checked against its schema).
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    // A refusal is not kept: once its cause is gone, the same key buys.
    const u = await seedUser(gw.testDb.db, { balanceUsd: '0.10' });
    const k2 = randomUUID();
    await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 402, { token: u.writeKey, json: body, headers: { 'idempotency-key': k2 } });
    await addBalance(gw.testDb.db, u.email, '5.00');
    const bought = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: u.writeKey, json: body, headers: { 'idempotency-key': k2 } });
    expect(bought.headers.get('idempotent-replayed')).toBeNull();
    // A malformed key.
    const bad = await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 400, { token: a.writeKey, json: body, headers: { 'idempotency-key': 'k'.repeat(256) } });
    expect(bad.body.error).toBe('invalid_request');
  });

  it('POST /api/dedicated with a reused Idempotency-Key and another body: 422 invalid_request (docs/CONTRACTS.md "REST shapes")', async () => {
    const key = randomUUID();
    await checked(gw, 'POST', '/api/dedicated', '/api/dedicated', 201, { token: other.writeKey, json: { origin_ip: '9.9.9.9' }, headers: { 'idempotency-key': key } });
    const before = await balance(other);
    const res = await req(gw, 'POST', '/api/dedicated', { token: other.writeKey, json: { origin_ip: '1.1.1.1' }, headers: { 'idempotency-key': key } });
    expect(res.body?.error).toBe('invalid_request');
    expect(await balance(other)).toBe(before);
    expect(res.status, `expected 422 for a reused Idempotency-Key, got ${res.status}: ${res.text}`).toBe(422);
    expectMatchesOpenApi('POST', '/api/dedicated', res.status, res.body, res.headers);
  });

  it('POST /api/dedicated: 400, 401, 402, 403, 413, 415 bodies', async () => {
    const P = '/api/dedicated';
    const post = (status: number, opts: Parameters<typeof req>[3]) => checked(gw, 'POST', P, P, status, opts);
    const w = a.writeKey;
    const code = async (status: number, opts: Parameters<typeof req>[3]) => (await post(status, opts)).body.error;
    expect(await code(400, { token: w, raw: '{"origin_ip": ', headers: { 'content-type': 'application/json' } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: [] })).toBe('invalid_request');
    expect(await code(400, { token: w })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { origin_ip: '8.8.8.8', color: 'red' } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { name: 'no ip' } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { origin_ip: 8 } })).toBe('invalid_request');
    expect(await code(400, { token: w, json: { origin_ip: '10.0.0.1' } })).toBe('invalid_origin_ip');
    expect(await code(400, { token: w, json: { origin_ip: '8.8.8' } })).toBe('invalid_origin_ip');
    expect(await code(400, { token: w, json: { origin_ip: '8.8.8.8', promocode: 'NOSUCHCODE' } })).toBe('invalid_promocode');
    // 401, with the Bearer challenge (checked by the validator), for no, malformed and unknown credentials.
    expect(await code(401, {})).toBe('invalid_token');
    expect(await code(401, { headers: { authorization: 'Basic dXNlcjpwdw==' }, json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    expect(await code(401, { token: 'svc_garbage', json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    expect(await code(401, { token: `svc_${'0'.repeat(32)}_${'A'.repeat(43)}`, json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    expect(await code(401, { token: 'eyJhbGciOiJIUzI1NiJ9.e30.x', json: { origin_ip: '8.8.8.8' } })).toBe('invalid_token');
    // 403: read permission.
    expect(await code(403, { token: a.readKey, json: { origin_ip: '8.8.8.8' } })).toBe('insufficient_scope');
    // 402: 0.50 USD < 0.63 USD; nothing debited.
    expect(await code(402, { token: poor.writeKey, json: { origin_ip: '8.8.8.8' } })).toBe('insufficient_balance');
    expect(await balance(poor)).toBe('0.50');
    // 413, 415.
    const big = JSON.stringify({ origin_ip: '8.8.8.8', name: 'x'.repeat(70 * 1024) });
    expect(await code(413, { token: w, raw: big, headers: { 'content-type': 'application/json' } })).toBe('invalid_request');
    expect(await code(415, { token: w, raw: 'origin_ip=8.8.8.8', headers: { 'content-type': 'application/x-www-form-urlencoded' } })).toBe('invalid_request');
    expect(await code(415, { token: w, raw: '{"origin_ip":"8.8.8.8"}', headers: { 'content-type': 'text/plain' } })).toBe('invalid_request');
  });

  it('GET /api/dedicated: newest first, cursor pages, deleted left out, 400 and 401', async () => {
    const L = '/api/dedicated';
    const all = (await checked(gw, 'GET', L, L, 200, { token: a.readKey })).body;
    expect(all.next_cursor).toBeNull();
    expect(all.tunnels.length).toBeGreaterThanOrEqual(3);
    const times = all.tunnels.map((t: any) => t.created_at);
    expect([...times].sort().reverse()).toEqual(times);
    // Page by page with limit=1 yields the same list.
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const q: string = `?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
      const page: any = (await checked(gw, 'GET', L, L + q, 200, { token: a.writeKey })).body;
      expect(page.tunnels.length).toBe(1);
      seen.push(page.tunnels[0].id);
      cursor = page.next_cursor;
    } while (cursor);
    expect(seen).toEqual(all.tunnels.map((t: any) => t.id));
    for (const q of ['?limit=0', '?limit=101', '?limit=abc', '?limit=1&limit=2', '?cursor=bm9wZQ', '?page=2']) {
      expect((await checked(gw, 'GET', L, L + q, 400, { token: a.readKey })).body.error, q).toBe('invalid_request');
    }
    await checked(gw, 'GET', L, L, 401, {});
    await checked(gw, 'GET', L, L, 401, { token: 'not-a-key' });
    // Another account sees none of these.
    expect((await checked(gw, 'GET', L, L, 200, { token: poor.readKey })).body).toEqual({ tunnels: [], next_cursor: null });
  });

  it('GET /api/dedicated/{id} and /setup: 200, 401, 404 (unknown, not a UUID, another account)', async () => {
    const t = (await buy(a)).tunnel;
    expect((await checked(gw, 'GET', ID, `/api/dedicated/${t.id}`, 200, { token: a.readKey })).body).toEqual({ tunnel: t });
    const setup = (await checked(gw, 'GET', `${ID}/setup`, `/api/dedicated/${t.id}/setup`, 200, { token: a.readKey })).body;
    expect(setup.tunnel_id).toBe(t.id);
    expect(setup.scripts.origin).toContain(t.tunnel_name);
    // Each script as plain text, the same bytes as in the JSON, for `curl ... | sudo bash`.
    for (const [file, field] of [['origin.sh', 'origin'], ['systemd_origin.service', 'systemd_origin']] as const) {
      const text = await checked(gw, 'GET', `${ID}/setup/${file}`, `/api/dedicated/${t.id}/setup/${file}`, 200, { token: a.readKey });
      expect(text.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      expect(text.text).toBe(setup.scripts[field]);
    }
    expect((await req(gw, 'GET', `/api/dedicated/${t.id}/setup/origin.sh`, { token: a.readKey })).text).toMatch(/^#!\/usr\/bin\/env bash\n/);
    const pathsToCheck = [[ID, ''], [`${ID}/setup`, '/setup'], [`${ID}/setup/origin.sh`, '/setup/origin.sh'], [`${ID}/setup/systemd_origin.service`, '/setup/systemd_origin.service']] as const;
    for (const [tmpl, suffix] of pathsToCheck) {
      await checked(gw, 'GET', tmpl, `/api/dedicated/${t.id}${suffix}`, 401, {});
      for (const id of [randomUUID(), 'not-a-uuid', t.id]) {
        const token = id === t.id ? other.readKey : a.readKey;
        expect((await checked(gw, 'GET', tmpl, `/api/dedicated/${id}${suffix}`, 404, { token })).body.error).toBe('not_found');
      }
    }
  });

  it('POST provision / activate with no agent answering: activate 409, provision 202, delete 202; 400, 401, 403, 404, 413, 415', async () => {
    const t = (await buy(a)).tunnel;
    for (const op of ['provision', 'activate']) {
      const tmpl = `${ID}/${op}`;
      const path = `/api/dedicated/${t.id}/${op}`;
      expect((await checked(gw, 'POST', tmpl, path, 400, { token: a.writeKey, json: { force: true } })).body.error).toBe('invalid_request');
      expect((await checked(gw, 'POST', tmpl, path, 400, { token: a.writeKey, raw: '{', headers: { 'content-type': 'application/json' } })).body.error).toBe('invalid_request');
      await checked(gw, 'POST', tmpl, path, 401, {});
      expect((await checked(gw, 'POST', tmpl, path, 403, { token: a.readKey })).body.error).toBe('insufficient_scope');
      await checked(gw, 'POST', tmpl, `/api/dedicated/${randomUUID()}/${op}`, 404, { token: a.writeKey });
      await checked(gw, 'POST', tmpl, path, 404, { token: other.writeKey });
      await checked(gw, 'POST', tmpl, path, 413, { token: a.writeKey, raw: `{"a":"${'x'.repeat(70 * 1024)}"}`, headers: { 'content-type': 'application/json' } });
      await checked(gw, 'POST', tmpl, path, 415, { token: a.writeKey, raw: 'go', headers: { 'content-type': 'text/plain' } });
    }
    // Nothing changed so far.
    expect((await checked(gw, 'GET', ID, `/api/dedicated/${t.id}`, 200, { token: a.readKey })).body.tunnel.status).toBe('pending');
    const activate = `/api/dedicated/${t.id}/activate`;
    expect((await checked(gw, 'POST', `${ID}/activate`, activate, 409, { token: a.writeKey, json: {} })).body.error).toBe('invalid_state');
    // This gateway runs no worker, so the agent never answers: 202 with the documented shape.
    const p = await checked(gw, 'POST', `${ID}/provision`, `/api/dedicated/${t.id}/provision`, 202, { token: a.writeKey });
    expect(p.body.tunnel.status).toBe('provisioning');
    expect((await checked(gw, 'POST', `${ID}/activate`, activate, 409, { token: a.writeKey })).body.error).toBe('invalid_state');
    const d = await checked(gw, 'DELETE', ID, `/api/dedicated/${t.id}`, 202, { token: a.writeKey });
    expect(d.body.tunnel.status).toBe('deleting');
  });

  it('DELETE /api/dedicated/{id}: 200 deleted at once (IP back in the pool, no refund), then 409; 400, 401, 403, 404, 413, 415', async () => {
    const t = (await buy(a)).tunnel;
    const path = `/api/dedicated/${t.id}`;
    const free = async () => (await checked(gw, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200)).body.availability.available;
    const availableBefore = await free();
    const balanceBefore = await balance(a);
    await checked(gw, 'DELETE', ID, path, 401, {});
    expect((await checked(gw, 'DELETE', ID, path, 403, { token: a.readKey })).body.error).toBe('insufficient_scope');
    await checked(gw, 'DELETE', ID, path, 404, { token: other.writeKey });
    await checked(gw, 'DELETE', ID, `/api/dedicated/${randomUUID()}`, 404, { token: a.writeKey });
    await checked(gw, 'DELETE', ID, path, 400, { token: a.writeKey, json: { reason: 'x' } });
    await checked(gw, 'DELETE', ID, path, 413, { token: a.writeKey, raw: `{"a":"${'x'.repeat(70 * 1024)}"}`, headers: { 'content-type': 'application/json' } });
    await checked(gw, 'DELETE', ID, path, 415, { token: a.writeKey, raw: 'x', headers: { 'content-type': 'text/plain' } });
    const del = (await checked(gw, 'DELETE', ID, path, 200, { token: a.writeKey })).body;
    expect(del.tunnel).toMatchObject({ id: t.id, status: 'deleted', protected_ip: t.protected_ip });
    expect(await free()).toBe(availableBefore + 1);
    expect(await balance(a)).toBe(balanceBefore);
    expect((await checked(gw, 'DELETE', ID, path, 409, { token: a.writeKey })).body.error).toBe('invalid_state');
    // A deleted tunnel is still readable, has no setup, and is left out of the list.
    expect((await checked(gw, 'GET', ID, path, 200, { token: a.readKey })).body.tunnel.status).toBe('deleted');
    expect((await checked(gw, 'GET', `${ID}/setup`, `${path}/setup`, 409, { token: a.readKey })).body.error).toBe('invalid_state');
    expect((await checked(gw, 'GET', `${ID}/setup/origin.sh`, `${path}/setup/origin.sh`, 409, { token: a.readKey })).body.error).toBe('invalid_state');
    const list = (await checked(gw, 'GET', '/api/dedicated', '/api/dedicated?limit=100', 200, { token: a.readKey })).body;
    expect(list.tunnels.map((x: any) => x.id)).not.toContain(t.id);
  });

  it('PATCH /api/dedicated/{id}: 200 (pending stores, normalised), 202 (on the edge, no agent answering), 400, 401, 403, 404, 409, 413, 415', async () => {
    const t = (await buy(a)).tunnel;
    const path = `/api/dedicated/${t.id}`;
    const patched = await checked(gw, 'PATCH', ID, path, 200, { token: a.writeKey, json: { ports: '443,80,81', protection: { source_pps_limit: 500 } } });
    expect(patched.body.tunnel).toMatchObject({ status: 'pending', ports: '80-81,443', protocol: 'both', protection: { syn_proxy: false, source_pps_limit: 500, drop_fragments: false } });
    expect((await checked(gw, 'PATCH', ID, path, 400, { token: a.writeKey, json: { colour: 'red' } })).body.error).toBe('invalid_request');
    expect((await checked(gw, 'PATCH', ID, path, 400, { token: a.writeKey, json: { origin_ip: '10.0.0.1' } })).body.error).toBe('invalid_origin_ip');
    expect((await checked(gw, 'PATCH', ID, path, 400, { token: a.writeKey })).body.error).toBe('invalid_request');
    await checked(gw, 'PATCH', ID, path, 401, { json: {} });
    expect((await checked(gw, 'PATCH', ID, path, 403, { token: a.readKey, json: { name: 'x' } })).body.error).toBe('insufficient_scope');
    await checked(gw, 'PATCH', ID, path, 404, { token: other.writeKey, json: { name: 'x' } });
    await checked(gw, 'PATCH', ID, `/api/dedicated/${randomUUID()}`, 404, { token: a.writeKey, json: { name: 'x' } });
    await checked(gw, 'PATCH', ID, path, 413, { token: a.writeKey, raw: `{"name":"${'x'.repeat(70 * 1024)}"}`, headers: { 'content-type': 'application/json' } });
    await checked(gw, 'PATCH', ID, path, 415, { token: a.writeKey, raw: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    // On the edge (provisioning; this gateway runs no worker, so the agent never answers): 202, stored.
    expect((await checked(gw, 'POST', `${ID}/provision`, `${path}/provision`, 202, { token: a.writeKey })).body.tunnel.status).toBe('provisioning');
    const waiting = await checked(gw, 'PATCH', ID, path, 202, { token: a.writeKey, json: { protocol: 'udp' } });
    expect(waiting.body.tunnel).toMatchObject({ status: 'provisioning', protocol: 'udp', ports: '80-81,443' });
    await checked(gw, 'DELETE', ID, path, 202, { token: a.writeKey });
    expect((await checked(gw, 'PATCH', ID, path, 409, { token: a.writeKey, json: { name: 'late' } })).body.error).toBe('invalid_state');
  });

  it('paths and methods outside the document answer with the Error body', async () => {
    const nf = await req(gw, 'GET', '/api/nothing-here', { token: a.readKey });
    expect(nf.status).toBe(404);
    expectMatchesSchema('Error', nf.body);
    expect(nf.body.error).toBe('not_found');
    const wrong = await req(gw, 'PUT', '/api/dedicated', { token: a.writeKey, json: {} });
    expect(wrong.status).toBe(405);
    expectMatchesSchema('InvalidRequestError', wrong.body);
    expect(wrong.headers.get('allow')).toMatch(/POST/);
  });

  it('409 out_of_stock when no protected IP is free; nothing is debited', async () => {
    const u = await seedUser(lean.testDb.db, { balanceUsd: '10.00' });
    const pricing = (await checked(lean, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200)).body;
    expect(pricing.availability).toEqual({ total: 0, available: 0, in_stock: false });
    const res = await checked(lean, 'POST', '/api/dedicated', '/api/dedicated', 409, { token: u.writeKey, json: { origin_ip: '8.8.8.8' } });
    expect(res.body.error).toBe('out_of_stock');
    const { rows } = await lean.testDb.raw.query<{ b: string }>('select balance_usd::text as b from account where id = $1', [u.accountId]);
    expect(rows[0]!.b).toBe('10.00');
  });

  it('429 rate_limited with Retry-After, per credential and for anonymous callers; pricing is not limited', async () => {
    const u = await seedUser(lean.testDb.db);
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 200, { token: u.readKey });
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 200, { token: u.readKey });
    for (const [m, tmpl, path] of [
      ['GET', '/api/dedicated', '/api/dedicated'],
      ['POST', '/api/dedicated', '/api/dedicated'],
      ['GET', ID, `/api/dedicated/${randomUUID()}`],
      ['GET', `${ID}/setup`, `/api/dedicated/${randomUUID()}/setup`],
      ['POST', `${ID}/provision`, `/api/dedicated/${randomUUID()}/provision`],
      ['POST', `${ID}/activate`, `/api/dedicated/${randomUUID()}/activate`],
      ['DELETE', ID, `/api/dedicated/${randomUUID()}`],
    ] as const) {
      const res = await checked(lean, m, tmpl, path, 429, { token: u.readKey });
      expect(res.body.error).toBe('rate_limited');
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    }
    // The other credential of the same account has its own budget.
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 200, { token: u.writeKey });
    // Anonymous callers are limited by address: 401, 401, then 429.
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 401, {});
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 401, {});
    await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 429, {});
    for (let i = 0; i < 5; i++) await checked(lean, 'GET', '/api/dedicated/pricing', '/api/dedicated/pricing', 200);
    await checked(lean, 'GET', '/api/openapi.json', '/api/openapi.json', 200);
  });

  it('500 server_error quotes the request id and leaks no internals; /readyz 503 when migrations are pending', async () => {
    const u = await seedUser(lean.testDb.db);
    await lean.testDb.raw.query('alter table tunnel rename to tunnel_moved_by_test');
    try {
      const res = await checked(lean, 'GET', '/api/dedicated', '/api/dedicated', 500, { token: u.readKey, headers: { 'x-request-id': 'openapi-test-500' } });
      expect(res.headers.get('x-request-id')).toBe('openapi-test-500');
      expect(res.body.error_description).toContain('openapi-test-500');
      expect(res.text).not.toMatch(/tunnel_moved_by_test|relation|select/i);
    } finally {
      await lean.testDb.raw.query('alter table tunnel_moved_by_test rename to tunnel');
    }
    await lean.testDb.raw.query('create table mikro_orm_migrations_saved as select * from mikro_orm_migrations; delete from mikro_orm_migrations');
    try {
      const res = await checked(lean, 'GET', '/readyz', '/readyz', 503);
      expect(res.body).toMatchObject({ status: 'not_ready' });
    } finally {
      await lean.testDb.raw.query('insert into mikro_orm_migrations select * from mikro_orm_migrations_saved; drop table mikro_orm_migrations_saved');
    }
    expect((await checked(lean, 'GET', '/readyz', '/readyz', 200)).body.status).toBe('ready');
  });
});
