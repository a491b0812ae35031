// Migration20261125160000_gre_keys on data written before it: where a (node, origin_ip) pair
// repeats among live tunnels, the one on the edge (provisioned or active), else the oldest, keeps no key
// (it is the one the kernel accepted) and the others get distinct random keys; a pair with one tunnel,
// deleted tunnels and other nodes are left alone. Then the database refuses what the kernel would: a
// second unkeyed or a same-keyed live tunnel of one pair.
import { randomUUID } from 'node:crypto';
import { afterAll, expect, inject, it } from 'vitest';
import { databaseAt, type DatabaseAtMigration } from '../helpers/migration-db.ts';

const adminUrl = inject('adminDatabaseUrl');
let db: DatabaseAtMigration | undefined;

afterAll(async () => db?.drop());

it('keys every live tunnel of a repeated (node, origin) pair but the one on the edge or else the oldest, distinctly', async () => {
  // The migration before this one.
  db = await databaseAt(adminUrl, 'tg_migration_gre', 'Migration20261125030000_http');
  const { orm, raw } = db;

  const account = randomUUID();
  await raw.query(`insert into account (id, balance_usd) values ($1, 10)`, [account]);
  const nodes = [randomUUID(), randomUUID()];
  for (const [i, id] of nodes.entries()) {
    await raw.query(`insert into edge_node (id, name, public_ip, ssh_host, ssh_port) values ($1, $2, $3, '127.0.0.1', 52222)`, [id, `legacy-${i}`, `192.0.2.${i + 1}`]);
  }
  let ipCounter = 0;
  // created_at minutes before a fixed instant, so "oldest" is decided by the data, not by insert order.
  const tunnel = async (node: string, origin: string, status: string, minutesAgo: number, id = randomUUID()) => {
    const ip = `198.18.9.${++ipCounter}`;
    await raw.query(
      `insert into tunnel (id, account_id, node_id, protected_ip, origin_ip, tunnel_name, inner_index, status, charged_usd, charged_rub, created_at)
       values ($1, $2, $3, $4, $5, $6, $7, $8, 1, 100, '2026-11-01T00:00:00Z'::timestamptz - make_interval(mins => $9))`,
      [id, account, node, ip, origin, `tg-${id.slice(0, 10)}`, ipCounter, status, minutesAgo],
    );
    return id;
  };
  const [n1, n2] = nodes as [string, string];
  // Pair (n1, 8.8.4.4): five live tunnels, the oldest a deleted one (not live, does not count).
  const deletedOldest = await tunnel(n1, '8.8.4.4', 'deleted', 100);
  const oldest = await tunnel(n1, '8.8.4.4', 'active', 90);
  const repeats = [
    await tunnel(n1, '8.8.4.4', 'failed', 80),
    await tunnel(n1, '8.8.4.4', 'pending', 70),
    await tunnel(n1, '8.8.4.4', 'provisioning', 60),
    await tunnel(n1, '8.8.4.4', 'deleting', 50),
  ];
  // Pair (n1, 1.1.1.1): two created at the same instant; the lower id is the older.
  const [lo, hi] = [randomUUID(), randomUUID()].sort();
  await tunnel(n1, '1.1.1.1', 'provisioned', 40, hi!);
  await tunnel(n1, '1.1.1.1', 'provisioned', 40, lo!);
  // Pair (n2, 4.4.4.4): bought first, provisioned second (refused by the kernel, failed); the younger one
  // is the one on the edge (active), and keeps no key.
  const refused = await tunnel(n2, '4.4.4.4', 'failed', 35);
  const onEdge = await tunnel(n2, '4.4.4.4', 'active', 34);
  // One tunnel to 8.8.4.4 on the other node, and a lone one: nothing repeats, nothing changes.
  const otherNode = await tunnel(n2, '8.8.4.4', 'active', 30);
  const lone = await tunnel(n2, '9.9.9.9', 'pending', 20);

  await orm.migrator.up();

  const { rows } = await raw.query<{ id: string; gre_key: string | null }>('select id, gre_key::text as gre_key from tunnel');
  const key = new Map(rows.map((r) => [r.id, r.gre_key]));
  for (const unkeyed of [deletedOldest, oldest, lo!, onEdge, otherNode, lone]) expect(key.get(unkeyed), unkeyed).toBeNull();
  expect(key.get(refused)).not.toBeNull();
  const given = [...repeats, hi!].map((id) => key.get(id));
  for (const k of given) {
    expect(k).not.toBeNull();
    expect(Number(k)).toBeGreaterThanOrEqual(1);
    expect(Number(k)).toBeLessThanOrEqual(2 ** 32 - 1);
  }
  expect(new Set(given).size).toBe(given.length);

  // From now on the database keeps the kernel's rule. A second unkeyed live tunnel of a pair:
  await expect(tunnel(n1, '8.8.4.4', 'pending', 1)).rejects.toMatchObject({ code: '23505', constraint: 'tunnel_live_gre_key_uniq' });
  // A key already live in the pair:
  await expect(raw.query('update tunnel set gre_key = $1 where id = $2', [given[1], repeats[0]!])).rejects.toMatchObject({ constraint: 'tunnel_live_gre_key_uniq' });
  // ...while a deleted tunnel's unkeyed slot is free again, and another node's pair is its own.
  await raw.query(`update tunnel set status = 'deleted' where id = $1`, [oldest]);
  await expect(tunnel(n1, '8.8.4.4', 'pending', 1)).resolves.toBeDefined();
  await expect(raw.query('update tunnel set gre_key = $1 where id = $2', [given[0], otherNode])).resolves.toBeDefined();
  // Keys are 1..2^32-1.
  await expect(raw.query('update tunnel set gre_key = 0 where id = $1', [lone])).rejects.toMatchObject({ constraint: 'tunnel_gre_key_range' });
  await expect(raw.query('update tunnel set gre_key = 4294967296 where id = $1', [lone])).rejects.toMatchObject({ constraint: 'tunnel_gre_key_range' });
});
