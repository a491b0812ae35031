// restore() (issue 8 item 2; docs/CONTRACTS.md "Restart and reboot"): the dataplane journals the last desired state
// (apply puts, remove deletes, reconcile replaces the set) and restore() reconciles the kernel to it. A
// "reboot" here is: dataplane closed, its links and its table deleted, dataplane opened again. Production
// dataplane in a fresh namespace, veth stand-in for GRE; `ip -j` and `nft -j` are the oracles.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataplane, type DataplaneHandle, type TunnelSpec } from '../../agent/dataplane/index.ts';
import { DESIRED_FILE } from '../../agent/dataplane/state.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

const T = 'tunnelgate';
const EDGE = '192.0.2.2';

const tun = (i: number, over: Partial<TunnelSpec> = {}): TunnelSpec => ({
  id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  tunnel_name: `tg-r${i}`,
  protected_ip: `203.0.113.${i}`,
  origin_ip: `198.18.0.${i}`,
  edge_ip: EDGE,
  edge_inner: `100.64.0.${4 * i + 1}/30`,
  origin_inner: `100.64.0.${4 * i + 2}/30`,
  mtu: 1476,
  ...over,
});

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('restore(): the last desired state back after a reboot', () => {
  let edge: TestNetns;
  let stateDir: string;
  let dp: DataplaneHandle | undefined;
  const open = () => createDataplane({ edgeIp: EDGE, nftTable: T, stateDir, netns: edge.name, linkKind: 'veth-standin' });
  const links = (): Map<string, number> =>
    new Map(
      edge
        .ipJson<{ ifname: string; ifindex: number }[]>('link', 'show')
        .filter((l) => l.ifname.startsWith('tg-'))
        .map((l) => [l.ifname, l.ifindex]),
    );
  const mapKeys = (): string[] => {
    const j = JSON.parse(edge.run('nft', '-j', 'list', 'map', 'ip', T, 'protected')) as { nftables: { map?: { elem?: [string, string][] } }[] };
    return (j.nftables.find((o) => o.map)!.map!.elem ?? []).map(([k]) => k).sort();
  };
  const reboot = async () => {
    await dp!.close();
    for (const name of links().keys()) edge.run('ip', 'link', 'del', name);
    edge.run('nft', 'delete', 'table', 'ip', T);
    dp = await open();
  };

  beforeAll(async () => {
    edge = new TestNetns();
    edge.run('ip', 'link', 'set', 'lo', 'up');
    stateDir = mkdtempSync(join(tmpdir(), 'tg-restore-'));
    dp = await open();
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
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
    rmSync(join(stateDir, DESIRED_FILE));
    dp = await open();
    expect(dp.desiredTunnels().map((t) => t.tunnel_name).sort()).toEqual(['tg-r1', 'tg-r2', 'tg-r4', 'tg-r5']);
    await reboot();
    expect((await dp!.restore()).failed).toEqual([]);
    expect([...links().keys()].sort()).toEqual(['tg-r1', 'tg-r2', 'tg-r4', 'tg-r5']);
  });
});
