// An edge reboot must not silently kill paid tunnels (docs/CONTRACTS.md "Restart and reboot", "Dataplane"):
// the agent restores the last desired state from AGENT_STATE_DIR at start, before any job arrives, without
// disturbing what is already right. The real gateway provisions and activates a tunnel on the real agent process
// (test/helpers/edge.ts: dataplane in a namespace, veth stand-in for GRE); a client namespace reaches the
// protected IP over TCP through the edge (DNAT into the tunnel; a server on the origin's inner address
// answers back through it, naming the client address it saw). Then the gateway
// is shut down, so no job can be sent at all, and the router "reboots": agent stopped, its links and its
// nftables table deleted. The agent alone must bring the traffic back.
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type ProvisioningRig } from '../helpers/edge.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { standinPeerName } from '../../agent/dataplane/index.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';
import { provisionTunnel } from '../helpers/queue.ts';

const TABLE = 'tunnelgate'; // AGENT_NFT_TABLE's default, which TestEdge uses
const NODE_BIN = join(resolve(import.meta.dirname, '../..'), 'node_modules/.bin/node');
const PORT = 7000;
/** The origin's service: answers each connection with the client address it saw (DNAT without SNAT). */
const SERVER = `require('node:net').createServer((s) => s.end('origin saw ' + s.remoteAddress + '\\n')).listen(${PORT}, '0.0.0.0', () => console.log('listening'))`;

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('the agent restores its dataplane at start (a reboot)', () => {
  let rig: ProvisioningRig;
  let gatewayClosed = false;
  let user: SeededUser;
  const origin = isRoot ? new TestNetns() : undefined;
  const client = isRoot ? new TestNetns() : undefined;
  let server: ChildProcess | undefined;

  /** One TCP exchange from the client to `ip`:PORT (bounded by 3 s); the line the origin sent, or null. */
  const fetchFrom = (ip: string): string | null => {
    try {
      return client!.run('timeout', '3', 'bash', '-c', `exec 3<>/dev/tcp/${ip}/${PORT} && head -n 1 <&3`).trim() || null;
    } catch {
      return null;
    }
  };
  /** Polls fetchFrom until the origin answers (a fresh link can drop packets for a moment, netns.ts). */
  const waitForOrigin = (ip: string): Promise<string> => until(`an answer from the origin through ${ip}:${PORT}`, () => fetchFrom(ip), 30_000);

  beforeAll(async () => {
    rig = await startProvisioningRig({ config: { edgeWaitMs: 5000, edgeJobTimeoutMs: 5000, edgeRetryLimit: 20 }, pool: '203.0.113.0/28' });
    user = await seedUser(rig.gw.testDb.db);
    // The client's upstream link into the edge: packets to protected IPs cross the edge's prerouting hook.
    const edge = rig.edge.netns;
    edge.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client!.name);
    edge.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    edge.run('ip', 'link', 'set', 'up0', 'up');
    client!.run('ip', 'link', 'set', 'lo', 'up');
    client!.run('ip', 'addr', 'add', '198.51.100.10/24', 'dev', 'c0');
    client!.run('ip', 'link', 'set', 'c0', 'up');
    client!.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
    origin!.run('ip', 'link', 'set', 'lo', 'up');
    server = spawn('ip', ['netns', 'exec', origin!.name, NODE_BIN, '-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((ready, fail) => {
      server!.once('exit', (code) => fail(new Error(`the origin server exited (${code})`)));
      createInterface({ input: server!.stdout! }).once('line', () => ready());
    });
  }, 60_000);

  afterAll(async () => {
    server?.kill();
    if (!gatewayClosed) await rig?.gw.close();
    await rig?.edge.close();
    origin?.delete();
    client?.delete();
  });

  /**
   * The origin end of the tunnel, as the origin script sets it up: with the stand-in, the veth peer the
   * agent created moves into the origin namespace (a real GRE origin keeps its own link across an edge
   * reboot; the stand-in's far end is recreated with the edge's link, so it is wired again).
   */
  const wireOrigin = (tunnelName: string): string => {
    const edge = rig.edge.netns;
    const addr = edge.ipJson<{ addr_info: { family: string; local: string; prefixlen: number }[] }[]>('addr', 'show', 'dev', tunnelName)[0]!.addr_info.find((a) => a.family === 'inet')!;
    const edgeInner = addr.local.split('.').map(Number);
    const originInnerIp = [...edgeInner.slice(0, 3), edgeInner[3]! + 1].join('.');
    const peer = standinPeerName(tunnelName);
    const mac = edge.ipJson<{ address: string }[]>('link', 'show', 'dev', tunnelName)[0]!.address;
    edge.run('ip', 'link', 'set', 'dev', tunnelName, 'arp', 'off');
    edge.run('ip', 'link', 'set', 'dev', peer, 'address', mac, 'arp', 'off', 'netns', origin!.name);
    origin!.run('ip', 'link', 'set', 'dev', peer, 'name', tunnelName);
    origin!.run('ip', 'link', 'set', 'dev', tunnelName, 'mtu', '1476', 'up');
    origin!.run('ip', 'addr', 'replace', `${originInnerIp}/${addr.prefixlen}`, 'dev', tunnelName);
    origin!.run('ip', 'route', 'replace', 'default', 'dev', tunnelName, 'table', '100');
    return originInnerIp;
  };

  it('after the agent is stopped and its links and table are deleted, traffic to the protected IP flows again with no job sent', async () => {
    const { gw, edge } = rig;
    const bought = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'reboot', origin_ip: '8.8.4.4' } });
    expect(bought.status).toBe(201);
    const t = bought.body.tunnel as { id: string; protected_ip: string; tunnel_name: string };
    // 200 or 202 (how fast the first SSH handshake is depends on the host), then provisioned.
    await provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, t.id);

    const originInnerIp = wireOrigin(t.tunnel_name);
    origin!.run('ip', 'rule', 'add', 'from', originInnerIp, 'lookup', '100');
    // Activated: the origin answers the probe through the tunnel, and only then does the edge forward to it
    // (docs/CONTRACTS.md "Dataplane"); what the agent restores below is that activated tunnel.
    await rig.edge.netns.waitForPing(originInnerIp);
    const a = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });
    expect([a.status, a.body.tunnel.status]).toEqual([200, 'active']);
    // Traffic: the client connects to the protected IP; the edge DNATs it into the tunnel, the origin
    // answers from its inner address back through the tunnel.
    expect(await waitForOrigin(t.protected_ip)).toBe('origin saw 198.51.100.10');

    // No gateway from here on: nothing can send the agent a job.
    await gw.close();
    gatewayClosed = true;
    const callsBefore = edge.calls.length;

    // The reboot: the agent is gone, and so are its links and its table.
    await edge.kill();
    edge.netns.run('ip', 'link', 'del', t.tunnel_name);
    edge.netns.run('nft', 'delete', 'table', 'ip', TABLE);
    expect(edge.links()).toEqual([]);
    expect(() => edge.netns.run('nft', 'list', 'table', 'ip', TABLE)).toThrow();
    expect(fetchFrom(t.protected_ip)).toBeNull();

    await edge.start(); // ready means listening, which comes after the restore
    expect(edge.links()).toEqual([t.tunnel_name]);
    expect(edge.mapElements()).toEqual([t.protected_ip]);
    wireOrigin(t.tunnel_name);
    expect(await waitForOrigin(t.protected_ip)).toBe('origin saw 198.51.100.10');
    expect(edge.calls.length).toBe(callsBefore);

    // A plain restart (no reboot) changes nothing: the same link (ifindex) carries the traffic on.
    const ifindex = () => edge.netns.ipJson<{ ifindex: number }[]>('link', 'show', 'dev', t.tunnel_name)[0]!.ifindex;
    const before = ifindex();
    await edge.kill();
    await edge.start();
    expect(ifindex()).toBe(before);
    expect(await waitForOrigin(t.protected_ip)).toBe('origin saw 198.51.100.10');
    expect(edge.calls.length).toBe(callsBefore);
  }, 120_000);
});
