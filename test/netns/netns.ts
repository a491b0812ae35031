// Fresh network namespaces for the kernel tests, and `ip`/`nft` run inside them as oracles: the demo's
// named namespaces (demo/netns.ts) with a random name each, so tests running at once never meet.
import { randomBytes } from 'node:crypto';
import { Netns } from '../../demo/netns.ts';
import { until } from '../helpers/wait.ts';

export const isRoot = process.getuid?.() === 0;

export class TestNetns extends Netns {
  constructor() {
    super(`tg-test-${randomBytes(4).toString('hex')}`);
  }

  /**
   * Waits until `ping` from this namespace gets an answer from `target`. A link that was just moved,
   * renamed or brought up can drop everything for seconds: its qdisc is only attached when the kernel's
   * linkwatch work runs, and that work waits for the RTNL lock, which other namespace tests on the same
   * host may hold for a long time. Tests wait for the path instead of timing out on the first packet.
   */
  async waitForPing(target: string, deadlineMs = 120_000): Promise<void> {
    await until(`${this.name}: an answer from ${target}`, () => {
      this.run('ping', '-n', '-q', '-c', '1', '-W', '1', target);
      return true;
    }, deadlineMs);
  }
}

/**
 * Joins `client` upstream of the edge namespace by a veth pair (up0 in the edge, c0 in the client; a /24
 * between `edgeSide` and `clientSide`): the edge routes everything that is not its own back there, so a
 * protected IP is forwarded through the agent's chains, not delivered locally. Waits until the client
 * reaches the edge. `edgeRoutes: false` leaves the edge's routes alone (a test whose edge routes by its own
 * tunnels, or that only counts what arrives: the agent's counters see a packet before any route).
 */
export async function joinUpstream(edge: TestNetns, client: TestNetns, edgeSide: string, clientSide: string, opts: { edgeRoutes?: boolean } = {}): Promise<void> {
  client.run('ip', 'link', 'set', 'lo', 'up');
  edge.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client.name);
  edge.run('ip', 'addr', 'add', `${edgeSide}/24`, 'dev', 'up0');
  edge.run('ip', 'link', 'set', 'up0', 'up');
  if (opts.edgeRoutes !== false) edge.run('ip', 'route', 'add', 'default', 'via', clientSide);
  client.run('ip', 'addr', 'add', `${clientSide}/24`, 'dev', 'c0');
  client.run('ip', 'link', 'set', 'c0', 'up');
  client.run('ip', 'route', 'add', 'default', 'via', edgeSide);
  await client.waitForPing(edgeSide);
}
