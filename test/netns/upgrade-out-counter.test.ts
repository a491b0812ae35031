// An agent upgraded to the `out` counter (health checks' traffic out) over a table built by the agent before it: no tunnel_out
// map, no counting rule. At start the table is rebuilt (its rules differ) keeping every tunnel's isolation
// elements, so replies keep their `replies` element through the upgrade; the restore that follows adds each
// tunnel's `<N>.out` counter and its tunnel_out element. Veth stand-in for GRE.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataplaneHandle } from '../../agent/dataplane/index.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { DataplaneEdge, NFT_TABLE, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';

const tun = numberedTunnels('tg-u');

describe.skipIf(skipUnless(isRoot, 'upgrade test: root (network namespaces)'))('upgrade over a table without the out counter', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle | undefined;
  beforeAll(() => {
    edge = new DataplaneEdge('tg-upgrade');
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  const nft = (...args: string[]): string => edge.run('nft', ...args);
  const setText = (set: string): string => nft('list', set === 'tunnel_out' ? 'map' : 'set', 'ip', NFT_TABLE, set);

  it('the rebuild keeps the replies elements; the restore adds the out counters', async () => {
    const ts = [tun(1), tun(2)];
    dp = await edge.openDataplane();
    expect((await dp.reconcile(ts)).failed).toEqual([]);
    await dp.close();
    dp = undefined;
    // Make it the older agent's table: its counting rule, the tunnel_out map and the out counters go.
    const handle = /# handle (\d+)/.exec(nft('-a', 'list', 'chain', 'ip', NFT_TABLE, 'tunnel_reply').split('\n').find((l) => l.includes('@tunnel_out'))!)![1]!;
    nft('delete', 'rule', 'ip', NFT_TABLE, 'tunnel_reply', 'handle', handle);
    nft('delete', 'map', 'ip', NFT_TABLE, 'tunnel_out');
    for (const t of ts) nft('delete', 'counter', 'ip', NFT_TABLE, `${t.tunnel_name}.out`);
    expect(setText('replies')).toContain('"tg-u1"');

    dp = await edge.openDataplane();
    expect(dp.table).toBe('rebuilt');
    // Kept through the rebuild: without them the first replies after the upgrade would be dropped as spoofed.
    for (const t of ts) expect(setText('replies')).toContain(`"${t.tunnel_name}"`);
    expect(setText('tunnel_out')).not.toContain('tg-u1');
    await dp.restore();
    for (const t of ts) {
      expect(nft('list', 'counter', 'ip', NFT_TABLE, `${t.tunnel_name}.out`)).toContain('packets 0');
      expect(setText('tunnel_out')).toContain(`"${t.tunnel_name}" : "${t.tunnel_name}.out"`);
    }
    const counters = await dp.counters();
    expect(counters.get('tg-u2.out')).toEqual({ packets: 0n, bytes: 0n });
  });
});
