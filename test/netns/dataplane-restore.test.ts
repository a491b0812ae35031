// restore() (an edge reboot must not silently kill paid tunnels; docs/CONTRACTS.md "Restart and reboot"): the dataplane journals the last desired state
// (apply puts, remove deletes, reconcile replaces the set) and restore() reconciles the kernel to it. A
// "reboot" here is: dataplane closed, its links and its table deleted, dataplane opened again. Production
// dataplane in a fresh namespace, veth stand-in for GRE; `ip -j` and `nft -j` are the oracles.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataplaneHandle } from '../../agent/dataplane/index.ts';
import { DESIRED_FILE } from '../../agent/dataplane/state.ts';
import { DataplaneEdge, NFT_TABLE as T, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

const tun = numberedTunnels('tg-r');

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('restore(): the last desired state back after a reboot', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle | undefined;
  const open = () => edge.openDataplane();
  const links = (): Map<string, number> => new Map([...edge.linkIndexes()].filter(([name]) => name.startsWith('tg-')));
  const mapKeys = (): string[] => edge.protectedMap().map(([k]) => k).sort();
  const reboot = async () => {
    await dp!.close();
    for (const name of links().keys()) edge.run('ip', 'link', 'del', name);
    edge.run('nft', 'delete', 'table', 'ip', T);
    dp = await open();
  };

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-restore');
    dp = await open();
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  it('records applies, removes and reconciles; restore rebuilds exactly that set, and on a plain restart touches nothing', async () => {
    await dp!.apply(tun(1));
    await dp!.apply(tun(2));
    await dp!.apply(tun(3));
    await dp!.remove(tun(3));
    await dp!.reconcile([tun(1), tun(2, { mtu: 1400 }), tun(4)]);
    await dp!.apply(tun(5));
    const want = [tun(1), tun(2, { mtu: 1400 }), tun(4), tun(5)];
    expect(dp!.desiredTunnels().sort((a, b) => a.id.localeCompare(b.id))).toEqual(want);

    await reboot();
    expect(links().size).toBe(0);
    expect(mapKeys()).toEqual([]);
    expect(await dp!.restore()).toEqual({ added: 0, changed: 4, removed: 0, unchanged: 0, failed: [] });
    expect([...links().keys()].sort()).toEqual(['tg-r1', 'tg-r2', 'tg-r4', 'tg-r5']);
    expect(edge.ipJson<{ mtu: number }[]>('link', 'show', 'dev', 'tg-r2')[0]!.mtu).toBe(1400);
    expect(mapKeys()).toEqual(['203.0.113.1', '203.0.113.2', '203.0.113.4', '203.0.113.5']);

    // A restart without a reboot: everything is already right, nothing is recreated.
    const before = links();
    await dp!.close();
    dp = await open();
    expect(await dp.restore()).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 4, failed: [] });
    expect(links()).toEqual(before);
  });

  it('an agent upgraded from a version without the journal restores what it had created', async () => {
    await dp!.close();
    rmSync(join(edge.stateDir, DESIRED_FILE));
    dp = await open();
    expect(dp.desiredTunnels().map((t) => t.tunnel_name).sort()).toEqual(['tg-r1', 'tg-r2', 'tg-r4', 'tg-r5']);
    await reboot();
    expect((await dp!.restore()).failed).toEqual([]);
    expect([...links().keys()].sort()).toEqual(['tg-r1', 'tg-r2', 'tg-r4', 'tg-r5']);
  });
});
