// The upstream side of an edge in namespace tests: a client and an attacker, each on a link of its own to the edge
// (up0 and up1), the edge's own address on its loopback, and its default route via the client, so a protected IP is
// not local and the kernel forwards it (the SYN proxy sits in forward). Shared by edge-protection.test.ts and
// edge-fairness.test.ts.
import type { TestNetns } from './netns.ts';

export const EDGE = '192.0.2.2';
export const CLIENT = '198.51.100.10';
export const ATTACKER = '198.51.101.10';

/** Links, addresses and routes of the edge, the client and the attacker (fresh namespaces, loopbacks up). */
export function wireUpstream(ns: { edge: TestNetns; client: TestNetns; attacker: TestNetns }): void {
  const e = ns.edge;
  e.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', ns.client.name);
  e.run('ip', 'link', 'add', 'up1', 'type', 'veth', 'peer', 'name', 'a0', 'netns', ns.attacker.name);
  e.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
  e.run('ip', 'addr', 'add', '198.51.101.1/24', 'dev', 'up1');
  e.run('ip', 'addr', 'add', `${EDGE}/32`, 'dev', 'lo');
  for (const l of ['up0', 'up1']) e.run('ip', 'link', 'set', l, 'up');
  e.run('ip', 'route', 'add', 'default', 'via', CLIENT);
  for (const [n, dev, addr, gw] of [
    [ns.client, 'c0', `${CLIENT}/24`, '198.51.100.1'],
    [ns.attacker, 'a0', `${ATTACKER}/24`, '198.51.101.1'],
  ] as const) {
    n.run('ip', 'addr', 'add', addr, 'dev', dev);
    n.run('ip', 'link', 'set', dev, 'up');
    n.run('ip', 'route', 'add', 'default', 'via', gw);
  }
}

/** Waits until the client's and the attacker's links to the edge carry packets (TestNetns.waitForPing). */
export async function upstreamReady(ns: { client: TestNetns; attacker: TestNetns }): Promise<void> {
  await ns.client.waitForPing('198.51.100.1');
  await ns.attacker.waitForPing('198.51.101.1');
}
