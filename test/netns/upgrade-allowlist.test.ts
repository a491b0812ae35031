// An agent upgraded to the allowlist of port blocks (cheaper per packet: five exact-lookup sets instead of the
// `allowed` interval set) over a table built by the agent before it. At start the table is rebuilt (its rules
// differ) and the old set's ranges are carried over as blocks in the same batch, so no allowed port is closed
// between the rebuild and the restore; the restore then finds every tunnel's allowlist already right.
// Veth stand-in for GRE.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataplaneHandle } from '../../agent/dataplane/index.ts';
import type { PortRange, TunnelPolicy } from '../../common/tunnel-policy.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { DataplaneEdge, NFT_TABLE, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';

const tun = numberedTunnels('tg-a');
const BLOCK_SETS = ['allowed_all', 'allowed_4096', 'allowed_256', 'allowed_16', 'allowed_1'];

describe.skipIf(skipUnless(isRoot, 'upgrade test: root (network namespaces)'))('upgrade over a table with the interval allowlist', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle | undefined;
  beforeAll(() => {
    edge = new DataplaneEdge('tg-upgrade-allow');
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  const nft = (...args: string[]): string => edge.run('nft', ...args);
  /** Every element of the block sets, one line per set, as `nft list` prints them. */
  const blocks = (): string => BLOCK_SETS.map((s) => `${s}: ${nft('list', 'set', 'ip', NFT_TABLE, s).replace(/\s+/g, ' ')}`).join('\n');

  it("the rebuild turns the old set's ranges into blocks; the restore has nothing left to add", async () => {
    const policy = (ports: '*' | PortRange[]): TunnelPolicy => ({ ports, protocol: 'both', syn_proxy: false, source_pps_limit: null, drop_fragments: false });
    const ts = [tun(1, { policy: policy([[22, 22], [5000, 10000]]) }), tun(2, { policy: policy('*') })];
    dp = await edge.openDataplane();
    expect((await dp.reconcile(ts)).failed).toEqual([]);
    await dp.close();
    dp = undefined;
    const want = blocks();
    expect(want).toContain('203.0.113.1 . tcp . 22');
    // Make it the older agent's table: the allowlist rules go, the blocks go, the interval set holds the ranges.
    nft('flush', 'chain', 'ip', NFT_TABLE, 'allowlist');
    for (const s of BLOCK_SETS) nft('flush', 'set', 'ip', NFT_TABLE, s);
    nft('add', 'set', 'ip', NFT_TABLE, 'allowed', '{ type ipv4_addr . inet_proto . inet_service; flags interval; }');
    const ranges = ['tcp . 22', 'tcp . 5000-10000', 'udp . 22', 'udp . 5000-10000'].map((r) => `203.0.113.1 . ${r}`);
    nft('add', 'element', 'ip', NFT_TABLE, 'allowed', `{ ${[...ranges, '203.0.113.2 . tcp . 0-65535', '203.0.113.2 . udp . 0-65535'].join(', ')} }`);
    expect(blocks()).not.toContain('203.0.113.1');

    dp = await edge.openDataplane();
    expect(dp.table).toBe('rebuilt');
    // The same blocks the new agent itself builds, before any reconcile: no port closed by the upgrade.
    expect(blocks()).toBe(want);
    expect(nft('list', 'table', 'ip', NFT_TABLE)).not.toContain('set allowed {');
    expect(await dp.restore()).toMatchObject({ added: 0, changed: 0, failed: [] });
    expect(blocks()).toBe(want);
  });
});
