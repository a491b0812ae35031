// Migration20261125010000_nodes on data written before it (docs/NODES.md): per-node inner numbers
// become each IP's pool position, every IP gets an inner /30 number unique across nodes and above every
// live tunnel's, and existing tunnels keep the inner subnet their origins were set up with.
import { randomUUID } from 'node:crypto';
import { afterAll, expect, inject, it } from 'vitest';
import { Database } from '../../server/db/database.ts';
import { addNode } from '../../server/domain/nodes.ts';
import { databaseAt, type DatabaseAtMigration } from '../helpers/migration-db.ts';

const adminUrl = inject('adminDatabaseUrl');
let db: DatabaseAtMigration | undefined;

afterAll(async () => db?.drop());

it('renumbers inner subnets across nodes and leaves existing tunnels theirs', async () => {
  db = await databaseAt(adminUrl, 'tg_migration_nodes', 'Migration20261121020000_oidc_payload');
  const { orm, raw } = db;

  // Before: two nodes, inner numbers 0..2 on each; live tunnels on inner 0 (node 1) and 1 (node 2),
  // a deleted one on inner 2 (node 2).
  const account = randomUUID();
  await raw.query(`insert into account (id, balance_usd) values ($1, 10)`, [account]);
  const nodes = [randomUUID(), randomUUID()];
  for (const [i, id] of nodes.entries()) {
    await raw.query(
      `insert into edge_node (id, name, public_ip, ssh_host, ssh_port, host_key, created_at) values ($1, $2, '192.0.2.1', '127.0.0.1', 52222, null, now() - make_interval(days => $3))`,
      [id, `legacy-${i}`, 10 - i],
    );
    for (const k of [0, 1, 2]) await raw.query('insert into protected_ip (ip, node_id, inner_index) values ($1, $2, $3)', [`198.18.7${i}.${k + 1}`, id, k]);
  }
  const tunnel = async (node: string, ip: string, inner: number, status: string) => {
    const id = randomUUID();
    await raw.query(
      `insert into tunnel (id, account_id, node_id, protected_ip, origin_ip, tunnel_name, inner_index, status, charged_usd, charged_rub)
       values ($1, $2, $3, $4, '8.8.4.4', $5, $6, $7, 1, 100)`,
      [id, account, node, ip, `tg-${id.slice(0, 10)}`, inner, status],
    );
    if (status !== 'deleted') await raw!.query('update protected_ip set tunnel_id = $1 where ip = $2', [id, ip]);
    return id;
  };
  const t1 = await tunnel(nodes[0]!, '198.18.70.1', 0, 'active');
  const t2 = await tunnel(nodes[1]!, '198.18.71.2', 1, 'provisioned');
  await tunnel(nodes[1]!, '198.18.71.3', 2, 'deleted');

  await orm.migrator.up();

  // Existing tunnels keep theirs.
  const { rows: tunnels } = await raw.query<{ id: string; inner_index: number }>(`select id, inner_index from tunnel where status <> 'deleted' order by inner_index`);
  expect(tunnels).toEqual([{ id: t1, inner_index: 0 }, { id: t2, inner_index: 1 }]);
  // Pool positions are the old per-node numbers; the new inner numbers run on across nodes in the order
  // the nodes were added, above every live tunnel's (so none is given out twice).
  const { rows: ips } = await raw.query('select ip, position, inner_index from protected_ip order by ip');
  expect(ips).toEqual([
    { ip: '198.18.70.1', position: 0, inner_index: 2 },
    { ip: '198.18.70.2', position: 1, inner_index: 3 },
    { ip: '198.18.70.3', position: 2, inner_index: 4 },
    { ip: '198.18.71.1', position: 0, inner_index: 5 },
    { ip: '198.18.71.2', position: 1, inner_index: 6 },
    { ip: '198.18.71.3', position: 2, inner_index: 7 },
  ]);
  const { rows: flags } = await raw.query('select sellable, pool from edge_node order by name');
  expect(flags).toEqual([{ sellable: true, pool: null }, { sellable: true, pool: null }]);

  // A node added now continues after them.
  await addNode(new Database(orm), { name: 'after', publicIp: '192.0.2.1', sshHost: '127.0.0.1', pool: '198.18.72.0/30' });
  const { rows: added } = await raw.query(`select p.inner_index from protected_ip p join edge_node n on n.id = p.node_id where n.name = 'after' order by 1`);
  expect(added).toEqual([{ inner_index: 8 }, { inner_index: 9 }]);
});
