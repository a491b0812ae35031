// An attack's vector as the kernel meters it (agent/netlink/ruleset.ts VECTOR_SETS, agent/dataplane/kernel/vector.ts):
// the production dataplane in a namespace, real packets from a client namespace upstream of it (hping3, a fixed
// count each). While P is watched its packets are counted exactly, per protocol and per destination port; another
// tunnel's IP, not watched, is not counted at all; leaving the watch with `clean` deletes P's counts, so a second
// watch counts from zero. The watch's commits are the agent's own: the commit watch does not hear them as another
// program's touch (no repair follows).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataplane, type DataplaneHandle } from '../../agent/dataplane/index.ts';
import { onPath, skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { DataplaneEdge, EDGE_IP, NFT_TABLE as T, numberedTunnels } from './dataplane-edge.ts';
import { isRoot, joinUpstream, TestNetns } from './netns.ts';

const tun = numberedTunnels('tg-v', 140);
const CLIENT = '198.51.100.10';

describe.skipIf(skipUnless(isRoot && onPath('hping3'), 'root (network namespaces) and hping3'))('the vector meter in the kernel', () => {
  let edge: DataplaneEdge;
  let client: TestNetns;
  let dp: DataplaneHandle;
  const events: string[] = [];
  const desired = [tun(1), tun(2)];
  const [P1, P2] = desired.map((t) => t.protected_ip) as [string, string];
  const send = (args: string) => client.runAsync('bash', '-c', `hping3 -q ${args} >/dev/null 2>&1 || true`);

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-vector');
    client = new TestNetns();
    await joinUpstream(edge, client, '198.51.100.1', CLIENT);
    dp = await createDataplane({ edgeIp: EDGE_IP, nftTable: T, stateDir: edge.stateDir, netns: edge.name, linkKind: 'veth-standin', log: (event) => void events.push(event) });
    expect(await dp.reconcile(desired)).toMatchObject({ added: 2, failed: [] });
  });
  afterAll(async () => {
    await dp?.close();
    client?.delete();
    edge?.delete();
  });

  it('counts a watched IP exactly by protocol and port, nothing of one not watched; a clean leave deletes its counts', async () => {
    await dp.vector.watch(new Set([P1]), true);
    expect(edge.run('nft', 'list', 'set', 'ip', T, 'vector_watch')).toContain(P1);
    await send(`--udp -c 30 -i u2000 -p 7000 ${P1}`);
    await send(`--udp -c 10 -i u2000 -p 27015 ${P1}`);
    await send(`-S -c 5 -i u2000 -p 443 ${P1}`);
    await send(`--icmp -c 4 -i u2000 ${P1}`);
    await send(`--udp -c 20 -i u2000 -p 7000 ${P2}`);
    const v = await until('the counts of every packet sent', async () => {
      const m = await dp.vector.read();
      const c = m.counts.get(P1);
      return c && (c.protocols.get(1) ?? 0) >= 4 && (c.ports.get(7000) ?? 0) >= 30 ? m : null;
    }, 30_000);
    expect(Object.fromEntries(v.counts.get(P1)!.protocols)).toEqual({ 1: 4, 6: 5, 17: 40 });
    expect(Object.fromEntries(v.counts.get(P1)!.ports)).toEqual({ 443: 5, 7000: 30, 27015: 10 });
    expect(v.counts.has(P2)).toBe(false);
    expect(v.watched).toEqual(new Set([P1]));

    await dp.vector.watch(new Set(), true);
    expect(await dp.vector.read()).toEqual({ counts: new Map(), watched: new Set() });
    await send(`--udp -c 10 -i u2000 -p 7000 ${P1}`);
    await dp.vector.watch(new Set([P1]), false);
    await send(`--udp -c 3 -i u2000 -p 53 ${P1}`);
    const again = await until('the second watch', async () => ((await dp.vector.read()).counts.get(P1)?.ports.get(53) === 3 ? dp.vector.read() : null), 30_000);
    expect(Object.fromEntries(again.counts.get(P1)!.ports)).toEqual({ 53: 3 });
    // The agent's own commits: nothing heard as a touch, no repair.
    await dp.reconcile(desired);
    expect(events).not.toContain('dataplane.heal');
    expect(events).toContain('dataplane.reconcile.unchanged');
  });
});
