// One broken tunnel must not block its node: a reconcile applies every tunnel it can and
// reports the ones the kernel refuses in `failed`, leaving them as they were. The breakage is real: a
// link with one tunnel's name already exists in the namespace and is not the agent's (docs/CONTRACTS.md "Dataplane": the
// agent never touches links it did not create), so that tunnel cannot be applied. Production dataplane,
// fresh namespace, veth stand-in for GRE; `ip -j` and `nft -j` are the oracles.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KernelError, type DataplaneHandle } from '../../agent/dataplane/index.ts';
import { DataplaneEdge, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

const tun = numberedTunnels('tg-f');

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('a reconcile with one tunnel the kernel refuses', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle;
  const links = (): Map<string, number> => edge.linkIndexes();
  const mapKeys = (): string[] => edge.protectedMap().map(([k]) => k).sort();

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-failed-tunnel');
    dp = await edge.openDataplane();
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  it('applies the others, lists that one in failed, and leaves the foreign link alone; a later reconcile adds it once fixed', async () => {
    // Tunnels 1 and 2 exist; 3 is about to be removed (not desired any more).
    expect(await dp.reconcile([tun(1), tun(2), tun(3)])).toMatchObject({ added: 3, failed: [] });
    const before = links();
    // Someone else's link carries tunnel 5's name.
    edge.run('ip', 'link', 'add', 'tg-f5', 'type', 'veth', 'peer', 'name', 'foreign5p');
    const foreign = links().get('tg-f5');

    // Desired: 1 unchanged, 2 changed (MTU), 3 gone, 4 and 6 new, 5 new and broken.
    const r = await dp.reconcile([tun(1), tun(2, { mtu: 1400 }), tun(4), tun(5), tun(6)]);
    expect(r.failed).toEqual([{ id: tun(5).id, error: 'kernel_error', error_description: expect.stringContaining('tg-f5') }]);
    expect(r.failed[0]!.error_description).toMatch(/not created by this agent/);
    expect({ added: r.added, changed: r.changed, removed: r.removed, unchanged: r.unchanged }).toEqual({ added: 2, changed: 1, removed: 1, unchanged: 1 });

    const now = links();
    expect(now.get('tg-f1')).toBe(before.get('tg-f1')); // untouched: same link, not recreated
    expect(now.get('tg-f2')).toBe(before.get('tg-f2'));
    expect(edge.ipJson<{ mtu: number }[]>('link', 'show', 'dev', 'tg-f2')[0]!.mtu).toBe(1400);
    expect(now.has('tg-f3')).toBe(false);
    expect(now.has('tg-f4')).toBe(true);
    expect(now.has('tg-f6')).toBe(true);
    expect(now.get('tg-f5')).toBe(foreign); // the foreign link, as it was
    expect(now.has('foreign5p')).toBe(true);
    expect(mapKeys()).toEqual(['203.0.113.1', '203.0.113.2', '203.0.113.4', '203.0.113.6']);
    expect(await dp.has(tun(5).id)).toBe(false);
    expect(await dp.has(tun(4).id)).toBe(true);

    // A single apply of the broken tunnel still fails as a whole.
    await expect(dp.apply(tun(5))).rejects.toBeInstanceOf(KernelError);

    // The operator removes the foreign link: the next reconcile adds tunnel 5 and leaves the rest alone.
    edge.run('ip', 'link', 'del', 'tg-f5');
    const again = await dp.reconcile([tun(1), tun(2, { mtu: 1400 }), tun(4), tun(5), tun(6)]);
    expect(again).toEqual({ added: 1, changed: 0, removed: 0, unchanged: 4, failed: [] });
    expect(mapKeys()).toEqual(['203.0.113.1', '203.0.113.2', '203.0.113.4', '203.0.113.5', '203.0.113.6']);
    expect(links().get('tg-f1')).toBe(before.get('tg-f1'));
  }, 60_000);
});
