// docs/NODES.md's rules (which nodes sell, inner subnets, our own addresses) through the real surfaces: the admin CLI in a child process, REST and GraphQL
// over real HTTP, against real PostgreSQL. Item 6's traffic test (two edges, one origin) is
// test/integration/two-edges-one-origin.test.ts.
//  5. purchases and pricing take IPs only from sellable nodes with a pinned host key; `node update`.
//  6. inner subnets are unique across nodes: one origin on two nodes gets two different inner addresses.
//  7. origin_ip may not be one of our own addresses; node add refuses pools holding such addresses.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addNode } from '../../server/domain/nodes.ts';
import { setRate } from '../../server/domain/settings.ts';
import { adminCli, cliFailed, cliOk, expectCliRefusals, type CliRefusal } from '../helpers/admin-cli.ts';
import { fakeHostKey, seedNode, seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';

const balance = async (gw: RunningGateway, accountId: string) =>
  (await gw.testDb.raw.query<{ balance_usd: string }>('select balance_usd from account where id = $1', [accountId])).rows[0]!.balance_usd;
const tunnelCount = async (gw: RunningGateway, accountId: string) =>
  (await gw.testDb.raw.query<{ n: number }>('select count(*)::int as n from tunnel where account_id = $1', [accountId])).rows[0]!.n;
const pricing = async (gw: RunningGateway) => {
  // Another process (the CLI) changed the nodes: this process's 1 s stock cache cannot know.
  gw.services.pricing.invalidate();
  return (await call(gw.url, 'GET', '/api/dedicated/pricing')).body.availability as { total: number; available: number; in_stock: boolean };
};
const buy = (gw: RunningGateway, token: string, originIp: string) => call(gw.url, 'POST', '/api/dedicated', { token, body: { origin_ip: originIp } });

describe('which nodes sell: only sellable nodes with a pinned host key sell (node update)', () => {
  let gw: RunningGateway;
  let user: SeededUser;
  beforeAll(async () => {
    gw = await startGateway();
    await setRate(gw.testDb.db, '100'); // 1.00 USD
    user = await seedUser(gw.testDb.db, { balanceUsd: '10.00' });
  });
  afterAll(async () => gw?.close());

  it('a node without a host key sells nothing; node update --host-key makes it sell; --sellable false stops it, true resumes', async () => {
    const added = cliOk(await adminCli(gw.testDb.url, ['node', 'add', '--name', 'edge-nokey', '--public-ip', '192.0.2.40', '--ssh-host', '192.0.2.41', '--pool', '198.18.40.0/30']));
    const id = added.node_id as string;
    expect(added.pool_size).toBe(2);

    // Never contacted, so never sold: no stock, and a purchase is 409 out_of_stock with nothing debited.
    expect(await pricing(gw)).toEqual({ total: 0, available: 0, in_stock: false });
    const refused = await buy(gw, user.writeKey, '8.8.4.4');
    expect([refused.status, refused.body.error]).toEqual([409, 'out_of_stock']);
    expectMatchesOpenApi('post', '/api/dedicated', refused.status, refused.body, refused.headers);
    expect(await balance(gw, user.accountId)).toBe('10.00');
    expect(await tunnelCount(gw, user.accountId)).toBe(0);
    expect(cliOk(await adminCli(gw.testDb.url, ['node', 'show', '--id', id]))).toMatchObject({ node_id: id, host_key: null, sellable: true, selling: false, pool: '198.18.40.0/30', pool_size: 2, free: 2 });

    const key = fakeHostKey();
    expect(cliOk(await adminCli(gw.testDb.url, ['node', 'update', '--id', id, '--host-key', key]))).toEqual({ node_id: id, sellable: true, host_key: key });
    expect(await pricing(gw)).toEqual({ total: 2, available: 2, in_stock: true });
    const sold = await buy(gw, user.writeKey, '8.8.4.4');
    expect(sold.status).toBe(201);
    expect(sold.body.tunnel.protected_ip).toMatch(/^198\.18\.40\.[12]$/);
    expect(await balance(gw, user.accountId)).toBe('9.00');

    expect(cliOk(await adminCli(gw.testDb.url, ['node', 'update', '--id', id, '--sellable', 'false']))).toEqual({ node_id: id, sellable: false, host_key: key });
    expect(await pricing(gw)).toEqual({ total: 0, available: 0, in_stock: false });
    const stopped = await buy(gw, user.writeKey, '8.8.4.4');
    expect([stopped.status, stopped.body.error]).toEqual([409, 'out_of_stock']);
    expect(await balance(gw, user.accountId)).toBe('9.00');
    expect(await tunnelCount(gw, user.accountId)).toBe(1);
    const list = cliOk(await adminCli(gw.testDb.url, ['node', 'list']));
    expect(list).toEqual({
      items: [
        {
          node_id: id, name: 'edge-nokey', public_ip: '192.0.2.40', ssh_host: '192.0.2.41', ssh_port: 52222, host_key: key, sellable: false,
          // No agent ever reported on its tunnel links: not known (null), which does not stop sales by itself.
          selling: false, can_carry_tunnels: null, tunnel_links: null, pool: '198.18.40.0/30', pool_size: 2, free: 1, created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
          // The one tunnel sold, in whatever state its provisioning reached (cli-read.test.ts checks the counts).
          tunnels: expect.any(Object), health: expect.any(Object), last_poll: null, stuck: null,
        },
      ],
      next_cursor: null,
    });

    expect(cliOk(await adminCli(gw.testDb.url, ['node', 'update', '--id', id, '--sellable', 'true']))).toEqual({ node_id: id, sellable: true, host_key: key });
    expect((await buy(gw, user.writeKey, '8.8.4.4')).status).toBe(201);
    expect(await pricing(gw)).toEqual({ total: 2, available: 0, in_stock: false });
  }, 240_000);

  it('node list pages with a cursor', async () => {
    for (const i of [1, 2]) await seedNode(gw.testDb.db, `198.18.4${i}.0/30`, `edge-page-${i}`);
    const first = cliOk(await adminCli(gw.testDb.url, ['node', 'list', '--limit', '2']));
    expect(first.items.map((n: { name: string }) => n.name)).toEqual(['edge-nokey', 'edge-page-1']);
    expect(first.next_cursor).toEqual(expect.any(String));
    const second = cliOk(await adminCli(gw.testDb.url, ['node', 'list', '--limit', '2', '--cursor', first.next_cursor]));
    expect(second).toMatchObject({ items: [{ name: 'edge-page-2', selling: true }], next_cursor: null });
  }, 120_000);

  it('node update and node show refuse bad input with an error JSON and a non-zero exit, and change nothing', async () => {
    const { node_id: id } = await seedNode(gw.testDb.db, '198.18.43.0/30', 'edge-bad-input');
    const before = (await gw.testDb.raw.query('select * from edge_node order by id')).rows;
    const cases: CliRefusal[] = [
      [['node', 'update', '--id', 'not-a-uuid', '--sellable', 'false'], 1, 'invalid_request', /UUID/],
      [['node', 'update', '--id', randomUUID(), '--sellable', 'false'], 1, 'not_found', /no edge node/],
      [['node', 'update', '--id', id, '--host-key', 'SHA256:short'], 1, 'invalid_request', /fingerprint/],
      [['node', 'update', '--id', id, '--host-key', 'md5:aa:bb', '--sellable', 'false'], 1, 'invalid_request', /fingerprint/],
      [['node', 'update', '--id', id, '--sellable', 'maybe'], 2, 'usage_error', /--sellable must be one of true, false/],
      [['node', 'update', '--id', id], 2, 'usage_error', /give --host-key, --sellable or both/],
      [['node', 'update', '--sellable', 'false'], 2, 'usage_error', /--id is required/],
      [['node', 'show', '--id', randomUUID()], 1, 'not_found', /no edge node/],
      [['node', 'list', '--cursor', 'garbage'], 1, 'invalid_request', /cursor/],
      [['node', 'list', '--limit', '0'], 2, 'usage_error', /--limit must be between 1 and 500/],
    ];
    await expectCliRefusals(gw.testDb.url, cases);
    expect((await gw.testDb.raw.query('select * from edge_node order by id')).rows).toEqual(before);
  }, 240_000);
});

describe('inner subnets are unique across nodes', () => {
  let gw: RunningGateway;
  let users: SeededUser[];
  beforeAll(async () => {
    gw = await startGateway();
    await setRate(gw.testDb.db, '100');
    // Three nodes: each one's pool positions 0, 1, ... were each node's inner /30 numbers before.
    await seedNode(gw.testDb.db, '198.18.60.0/29');
    await seedNode(gw.testDb.db, '198.18.61.0/29');
    await seedNode(gw.testDb.db, '198.18.62.0/29');
    users = [await seedUser(gw.testDb.db, { balanceUsd: '50.00' }), await seedUser(gw.testDb.db, { balanceUsd: '50.00' })];
  });
  afterAll(async () => gw?.close());

  /** The origin's inner address as the tunnel's own setup script would configure it. */
  const originInner = async (token: string, id: string) => {
    const r = await call(gw.url, 'GET', `/api/dedicated/${id}/setup`, { token });
    expect(r.status).toBe(200);
    return /^readonly ORIGIN_INNER='([0-9./]+)'$/m.exec(r.body.scripts.origin)![1]!;
  };

  it('two tunnels to one origin on two nodes get different inner subnets', async () => {
    const a = await buy(gw, users[0]!.writeKey, '9.9.9.9');
    const b = await buy(gw, users[0]!.writeKey, '9.9.9.9');
    expect([a.status, b.status]).toEqual([201, 201]);
    // Purchases spread over the nodes (lowest pool position first): these two are on two nodes.
    expect(a.body.tunnel.protected_ip.split('.')[2]).not.toBe(b.body.tunnel.protected_ip.split('.')[2]);
    const [ia, ib] = [await originInner(users[0]!.writeKey, a.body.tunnel.id), await originInner(users[0]!.writeKey, b.body.tunnel.id)];
    expect(ia).toMatch(/^100\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d+\.\d+\/30$/);
    expect(ib).not.toBe(ia);
  });

  it('under 24 concurrent purchases from two accounts, every live tunnel has its own inner subnet', async () => {
    const results = await Promise.all(
      Array.from({ length: 24 }, (_, i) => buy(gw, users[i % 2]!.writeKey, '9.9.9.9')),
    );
    // 18 IPs in all, 2 sold above: 16 succeed, the rest find no stock.
    const created = results.filter((r) => r.status === 201);
    expect(created).toHaveLength(16);
    expect(results.filter((r) => r.status !== 201).every((r) => r.status === 409 && r.body.error === 'out_of_stock')).toBe(true);
    const { rows } = await gw.testDb.raw.query<{ id: string; account_id: string; node_id: string }>(`select id, account_id, node_id from tunnel where status <> 'deleted'`);
    expect(rows).toHaveLength(18);
    expect(new Set(rows.map((r) => r.node_id)).size).toBe(3);
    const token = (accountId: string) => users.find((u) => u.accountId === accountId)!.readKey;
    const inners = await Promise.all(rows.map((r) => originInner(token(r.account_id), r.id)));
    expect(new Set(inners).size).toBe(18);
  });

  it('the database itself refuses a second IP with an inner number already in use', async () => {
    const { rows } = await gw.testDb.raw.query<{ inner_index: number; node_id: string }>('select inner_index, node_id from protected_ip order by inner_index limit 1');
    await expect(
      gw.testDb.raw.query('insert into protected_ip (ip, node_id, position, inner_index) values ($1, $2, 999, $3)', ['198.18.99.1', rows[0]!.node_id, rows[0]!.inner_index]),
    ).rejects.toThrow(/protected_ip_inner_index_unique/);
  });
});

describe('our own addresses: origin_ip may not be one of our own addresses', () => {
  let gw: RunningGateway;
  let user: SeededUser;
  // Public-looking addresses, so only the "ours" rule can refuse them (the gateway refuses non-public origins anyway).
  const EDGE = { publicIp: '45.90.1.1', sshHost: '45.90.1.2', pool: '45.90.2.0/29' };
  beforeAll(async () => {
    gw = await startGateway();
    await setRate(gw.testDb.db, '100');
    await addNode(gw.testDb.db, { name: 'edge-public', ...EDGE, hostKey: fakeHostKey() });
    user = await seedUser(gw.testDb.db, { balanceUsd: '10.00' });
  });
  afterAll(async () => gw?.close());

  const GQL_BUY = 'mutation B($input: PurchaseTunnelInput!) { purchaseTunnel(input: $input) { tunnel { id } } }';

  it('400 invalid_origin_ip over REST and GraphQL for a protected IP (sold or not) and an edge public or SSH address; nothing is charged', async () => {
    const first = await buy(gw, user.writeKey, '8.8.4.4');
    expect(first.status).toBe(201);
    const sold = first.body.tunnel.protected_ip as string;
    const unsold = ['45.90.2.1', '45.90.2.2', '45.90.2.3', '45.90.2.4', '45.90.2.5', '45.90.2.6'].find((ip) => ip !== sold)!;
    const before = await balance(gw, user.accountId);
    for (const [ip, what] of [
      [sold, /protected IP/],
      [unsold, /protected IP/],
      [EDGE.publicIp, /edge router/],
      [EDGE.sshHost, /edge router/],
    ] as const) {
      const rest = await buy(gw, user.writeKey, ip);
      expect([ip, rest.status, rest.body.error]).toEqual([ip, 400, 'invalid_origin_ip']);
      expect(rest.body.error_description).toMatch(what);
      expectMatchesOpenApi('post', '/api/dedicated', rest.status, rest.body, rest.headers);
      // With an Idempotency-Key too: refused, and the key is not burnt on the refusal.
      const keyed = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: ip }, headers: { 'idempotency-key': `k-${ip}` } });
      expect([keyed.status, keyed.body.error]).toEqual([400, 'invalid_origin_ip']);
      const gql = await call(gw.url, 'POST', '/graphql', { token: user.writeKey, body: { query: GQL_BUY, variables: { input: { originIp: ip } } } });
      expect(gql.body.errors?.[0]?.extensions).toEqual({ code: 'invalid_origin_ip', status: 400 });
    }
    expect(await balance(gw, user.accountId)).toBe(before);
    expect(await tunnelCount(gw, user.accountId)).toBe(1);
    // The refused key was not stored: used again with a good origin, it buys (not 422 "another body").
    const retried = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { origin_ip: '8.8.4.4' }, headers: { 'idempotency-key': `k-${EDGE.publicIp}` } });
    expect(retried.status).toBe(201);
  });

  it('GET /setup of a tunnel stored with one of our addresses (or a broken inner number) is 409 invalid_state, never 500', async () => {
    const t = (await buy(gw, user.writeKey, '8.8.4.4')).body.tunnel as { id: string };
    expect((await call(gw.url, 'GET', `/api/dedicated/${t.id}/setup`, { token: user.readKey })).status).toBe(200);
    for (const [column, value] of [['origin_ip', EDGE.publicIp], ['origin_ip', '45.90.2.6'], ['inner_index', String(2 ** 20 + 7)]] as const) {
      const saved = (await gw.testDb.raw.query(`select ${column}::text as v from tunnel where id = $1`, [t.id])).rows[0].v;
      await gw.testDb.raw.query(`update tunnel set ${column} = $1 where id = $2`, [value, t.id]);
      try {
        const r = await call(gw.url, 'GET', `/api/dedicated/${t.id}/setup`, { token: user.readKey });
        expect([column, r.status, r.body.error]).toEqual([column, 409, 'invalid_state']);
        expectMatchesOpenApi('get', '/api/dedicated/{id}/setup', r.status, r.body, r.headers);
      } finally {
        await gw.testDb.raw.query(`update tunnel set ${column} = $1 where id = $2`, [saved, t.id]);
      }
    }
  });

  it("node add refuses a pool holding its own or another node's address, overlapping another pool, or holding a live origin", async () => {
    const origin = (await buy(gw, user.writeKey, '8.8.4.4')).body.tunnel as { origin_ip: string };
    expect(origin.origin_ip).toBe('8.8.4.4');
    const before = (await gw.testDb.raw.query('select (select count(*)::int from edge_node) as nodes, (select count(*)::int from protected_ip) as ips')).rows[0];
    const add = (name: string, publicIp: string, sshHost: string, pool: string) =>
      adminCli(gw.testDb.url, ['node', 'add', '--name', name, '--public-ip', publicIp, '--ssh-host', sshHost, '--pool', pool]);
    const cases: Array<[Promise<Awaited<ReturnType<typeof add>>>, RegExp]> = [
      [add('own-public', '45.91.0.1', '45.91.9.9', '45.91.0.0/29'), /contains the node's own address \(its public IP 45\.91\.0\.1\)/],
      [add('own-ssh', '45.91.9.9', '45.91.0.2', '45.91.0.0/29'), /contains the node's own address \(its SSH host 45\.91\.0\.2\)/],
      // Only the pool's broadcast address overlaps: no protected IP in common, the ranges still do.
      [add('overlap-range', '45.91.9.9', '45.91.9.8', '45.90.2.7/32'), /overlaps node edge-public's pool 45\.90\.2\.0\/29/],
      [add('overlap-wide', '45.91.9.9', '45.91.9.8', '45.90.0.0/16'), /overlaps node edge-public's pool/],
      [add('other-public', '45.91.9.9', '45.91.9.8', '45.90.1.0/30'), /contains node edge-public's address \(its public IP 45\.90\.1\.1\)/],
      [add('addr-protected', '45.90.2.3', '45.91.9.8', '45.92.0.0/30'), /45\.90\.2\.3 is a protected IP of another node's pool/],
      [add('live-origin', '45.91.9.9', '45.91.9.8', '8.8.4.4/30'), /contains 8\.8\.4\.4, the origin of a live tunnel/],
    ];
    for (const [run, description] of cases) cliFailed(await run, 1, 'invalid_request', description);
    expect((await gw.testDb.raw.query('select (select count(*)::int from edge_node) as nodes, (select count(*)::int from protected_ip) as ips')).rows[0]).toEqual(before);
  }, 240_000);
});
