// The restore at start (agent/main.ts restoreAtStart) holds the journaled tunnels to the addresses a job's
// would be held to (jobs/verify.ts addressRefusal, docs/CONFIGURATION.md AGENT_PROTECTED_POOLS): an operator
// who narrows AGENT_PROTECTED_POOLS and restarts the agent must not have it map, from its journal, an address
// outside them until the gateway's next reconcile. Production dataplane in a fresh namespace (veth stand-in
// for GRE); `ip -j` and `nft -j` are the oracles, the agent's JSON log lines are read as written.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseCidrList } from '../../agent/cidr.ts';
import type { DataplaneHandle } from '../../agent/dataplane/index.ts';
import { standinPeerName } from '../../agent/dataplane/links.ts';
import { restoreAtStart } from '../../agent/main.ts';
import { createLogger } from '../../common/log.ts';
import { DataplaneEdge, EDGE_IP, NFT_TABLE, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

const tun = numberedTunnels('tg-q');

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('restore at start after AGENT_PROTECTED_POOLS was narrowed', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle | undefined;
  const links = (): Map<string, number> => edge.linkIndexes();
  const mapKeys = (): string[] => edge.protectedMap().map(([k]) => k).sort();
  /** The agent's log lines, parsed: what an operator reads in the journal. */
  const lines: Record<string, unknown>[] = [];
  const log = createLogger('info', { service: 'tunnel-agent' }, (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
  // tg-q1 is 203.0.113.1 (inside), tg-q2 is 203.0.113.2 (outside).
  const narrowed = { edgeIp: EDGE_IP, protectedPools: parseCidrList('203.0.113.0/31', { ipv4Only: true }) };
  const restart = async () => {
    await dp!.close();
    lines.length = 0;
    dp = await edge.openDataplane();
    await restoreAtStart(dp, log, narrowed);
  };

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-restore-pools');
    dp = await edge.openDataplane();
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  it('the tunnel outside the pools is logged, removed from the kernel and the journal; the other is left as it was', async () => {
    // The refused tunnel has a GRE key: the log line names the tunnel, it never carries its spec.
    await dp!.apply(tun(1));
    await dp!.apply(tun(2, { gre_key: 424242 }));
    expect(mapKeys()).toEqual(['203.0.113.1', '203.0.113.2']);
    const kept = links().get('tg-q1');
    expect(kept).toBeTypeOf('number');
    expect(links().has('tg-q2')).toBe(true);

    // A plain restart (links and table still there) with the pools narrowed.
    await restart();
    expect(mapKeys()).toEqual(['203.0.113.1']);
    expect(links().has('tg-q2')).toBe(false);
    expect(links().has(standinPeerName('tg-q2'))).toBe(false);
    expect(links().get('tg-q1')).toBe(kept); // untouched: the same link
    expect(links().has(standinPeerName('tg-q1'))).toBe(true);
    expect(dp!.desiredTunnels().map((t) => t.tunnel_name)).toEqual(['tg-q1']);
    expect(await dp!.has(tun(2).id)).toBe(false);

    const refusals = lines.filter((l) => l.level === 'warn');
    expect(refusals).toEqual([
      {
        time: expect.any(String),
        level: 'warn',
        msg: expect.stringMatching(/^tunnel not restored/),
        service: 'tunnel-agent',
        tunnel_id: tun(2).id,
        tunnel_name: 'tg-q2',
        code: 'wrong_audience',
        reason: 'protected_ip 203.0.113.2 is outside this router\'s protected pools (203.0.113.0/31)',
      },
    ]);
    expect(JSON.stringify(lines)).not.toContain('424242');
    expect(lines.find((l) => l.msg === 'restored the last desired state')).toMatchObject({ refused: 1, removed: 1, unchanged: 1, failed: 0 });
  });

  it('after a reboot only the tunnel inside the pools comes back, and nothing is refused any more', async () => {
    await dp!.close();
    for (const name of ['tg-q1', 'tg-q2']) if (links().has(name)) edge.run('ip', 'link', 'del', name);
    edge.run('nft', 'delete', 'table', 'ip', NFT_TABLE);
    dp = await edge.openDataplane();
    lines.length = 0;
    await restoreAtStart(dp, log, narrowed);
    expect(mapKeys()).toEqual(['203.0.113.1']);
    expect(links().has('tg-q1')).toBe(true);
    expect(links().has('tg-q2')).toBe(false);
    expect(lines.filter((l) => l.level === 'warn')).toEqual([]);
    expect(lines.find((l) => l.msg === 'restored the last desired state')).toMatchObject({ refused: 0, changed: 1, failed: 0 });
  });
});
