// Inner subnets unique across nodes (docs/NODES.md), end to end: one origin with a tunnel on each of two edges, and both tunnels carry
// traffic. The real gateway (REST, queue, worker) provisions both through two real agent processes, each
// with its dataplane in its own network namespace (veth stand-in for GRE: this kernel has no GRE; the
// VM test covers real GRE). The origin is a third namespace holding both stand-ins' far ends as its two
// tunnel links, configured by the tunnel's own origin script from GET /setup (sourced; every step but
// creating the GRE link, which the stand-in replaces). A client namespace reaches each protected IP
// through its edge.
//
// Before inner subnets were numbered across nodes, both tunnels got 100.64.0.2/30 on the origin, and the
// second script's `ip rule from 100.64.0.2` sent the first tunnel's replies into the second tunnel: the
// first tunnel stopped answering (this test then fails at its first ping or client exchange).
//
//   client ─ cA 198.51.100.10/30 ── edge A (agent) ═ tunnel A ═╗
//          ─ cB 198.51.100.14/30 ── edge B (agent) ═ tunnel B ═╩═ origin (both links, TCP server :8080)
import { spawn, type ChildProcess, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { standinPeerName } from '../../agent/dataplane/index.ts';
import type { ServerSecrets } from '../../server/secrets.ts';
import { startProvisioningRig, TestEdge } from '../helpers/edge.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { provisionTunnel } from '../helpers/queue.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

const execFileP = promisify(execFile);
const NODE = process.execPath;
const ORIGIN_IP = '8.8.4.4';

// The origin's service: TCP on every address; the answer names the client and the address it reached.
const SERVER = `
const tcp = require('node:net').createServer((s) => s.end('peer=' + s.remoteAddress + ' local=' + s.localAddress + '\\n'));
tcp.listen(8080, '0.0.0.0', () => console.log('ready'));
`;

// One TCP exchange with a short timeout.
const CLIENT = `
const [host] = process.argv.slice(1);
const done = (o) => { console.log(JSON.stringify(o)); process.exit(0); };
const s = require('node:net').connect({ host, port: 8080, timeout: 1500 });
let data = '';
s.on('data', (d) => (data += d));
s.on('end', () => done({ ok: true, data, remote: s.remoteAddress }));
s.on('timeout', () => { s.destroy(); done({ ok: false, error: 'timeout' }); });
s.on('error', (e) => done({ ok: false, error: e.code }));
`;

interface Bought {
  id: string;
  protected_ip: string;
  tunnel_name: string;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('two tunnels to one origin on two edges (namespaces, veth stand-in for GRE)', () => {
  let gw: RunningGateway;
  let secrets: ServerSecrets;
  let edgeA: TestEdge;
  let edgeB: TestEdge | undefined;
  let user: SeededUser;
  let origin: TestNetns | undefined;
  let client: TestNetns | undefined;
  let server: ChildProcess | undefined;
  const scriptDir = mkdtempSync(join(tmpdir(), 'tg-two-edges-'));

  beforeAll(async () => {
    ({ gw, secrets, edge: edgeA } = await startProvisioningRig({ config: { edgeWaitMs: 5000, edgeJobTimeoutMs: 8000, edgeRetryLimit: 20 }, pool: '203.0.113.64/29' }));
    edgeB = await TestEdge.create(gw.testDb.db, secrets, '203.0.113.80/29');
    await edgeB.start();
    user = await seedUser(gw.testDb.db);
  }, 90_000);

  afterAll(async () => {
    if (server && server.exitCode === null) server.kill('SIGTERM');
    origin?.delete();
    client?.delete();
    await gw?.close();
    await edgeA?.close();
    await edgeB?.close();
    rmSync(scriptDir, { recursive: true, force: true });
  });

  /** Moves the stand-in's far end into the origin as the tunnel's link (what `ip link add ... type gre` does there). */
  const linkIntoOrigin = (edge: TestEdge, t: Bought) => {
    const peer = standinPeerName(t.tunnel_name);
    const mac = edge.netns.ipJson<{ address: string }[]>('link', 'show', 'dev', t.tunnel_name)[0]!.address;
    // Point-to-point like GRE: no ARP, one MAC on both ends, so every frame is "for us" on the other side.
    edge.netns.run('ip', 'link', 'set', 'dev', t.tunnel_name, 'arp', 'off');
    edge.netns.run('ip', 'link', 'set', 'dev', peer, 'address', mac, 'arp', 'off', 'netns', origin!.name);
    origin!.run('ip', 'link', 'set', 'dev', peer, 'name', t.tunnel_name);
    origin!.run('ip', 'link', 'set', 'dev', t.tunnel_name, 'mtu', '1476', 'up');
  };

  /** Runs the tunnel's own origin script in the origin namespace: address, policy rule and route, rp_filter, MSS clamp. */
  const runOriginScript = async (t: Bought): Promise<string> => {
    const setup = await call(gw.url, 'GET', `/api/dedicated/${t.id}/setup`, { token: user.readKey });
    expect(setup.status).toBe(200);
    const script: string = setup.body.scripts.origin;
    const file = join(scriptDir, `${t.tunnel_name}.sh`);
    writeFileSync(file, script);
    origin!.run('bash', '-c', `source ${file}; ensure_address; ensure_routing; ensure_rp_filter; ensure_mss_clamp`);
    return /^readonly ORIGIN_INNER_IP='([0-9.]+)'$/m.exec(script)![1]!;
  };

  /** A client's TCP exchange with `host`; three fresh attempts tell a slow moment on a busy host from a broken path. */
  const exchange = async (host: string) => {
    let last: { ok: boolean; data?: string; remote?: string; error?: string } | undefined;
    for (let attempt = 0; attempt < 3; attempt++) {
      const { stdout } = await execFileP('ip', ['netns', 'exec', client!.name, NODE, '-e', CLIENT, host], { timeout: 8000 });
      last = JSON.parse(stdout.trim()) as typeof last;
      if (last!.ok) return last!;
    }
    return last!;
  };

  it('both tunnels get their own inner subnet, both activate, and both carry the client traffic to the one origin', async () => {
    const buy = async () => {
      const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name: 'same-origin', origin_ip: ORIGIN_IP } });
      expect(r.status).toBe(201);
      return r.body.tunnel as Bought;
    };
    const a = await buy();
    const b = await buy();
    // Purchases take the lowest pool position first: one tunnel on each edge.
    const nodeOf = async (id: string) => (await gw.testDb.raw.query<{ node_id: string }>('select node_id from tunnel where id = $1', [id])).rows[0]!.node_id;
    const byEdge = new Map([[edgeA.nodeId, edgeA], [edgeB!.nodeId, edgeB!]]);
    const ea = byEdge.get(await nodeOf(a.id))!;
    const eb = byEdge.get(await nodeOf(b.id))!;
    expect(ea).not.toBe(eb);

    for (const t of [a, b]) {
      // 200 or 202 (how fast the first SSH handshake is depends on the host), then provisioned.
      await provisionTunnel(gw.url, gw.testDb.raw, user.writeKey, t.id);
    }
    expect(ea.links()).toContain(a.tunnel_name);
    expect(eb.links()).toContain(b.tunnel_name);

    origin = new TestNetns();
    client = new TestNetns();
    for (const ns of [origin, client]) ns.run('ip', 'link', 'set', 'lo', 'up');
    linkIntoOrigin(ea, a);
    linkIntoOrigin(eb, b);
    const innerA = await runOriginScript(a);
    const innerB = await runOriginScript(b);
    expect(innerB).not.toBe(innerA);

    // The client reaches each protected IP through its edge (upstream routes each pool to its edge).
    const uplink = (edge: TestEdge, cIf: string, cAddr: string, eAddr: string, protectedIp: string) => {
      client!.run('ip', 'link', 'add', cIf, 'type', 'veth', 'peer', 'name', `${cIf}-e`, 'netns', edge.netns.name);
      client!.run('ip', 'addr', 'add', `${cAddr}/30`, 'dev', cIf);
      client!.run('ip', 'link', 'set', cIf, 'up');
      edge.netns.run('ip', 'addr', 'add', `${eAddr}/30`, 'dev', `${cIf}-e`);
      edge.netns.run('ip', 'link', 'set', `${cIf}-e`, 'up');
      client!.run('ip', 'route', 'add', `${protectedIp}/32`, 'via', eAddr);
    };
    uplink(ea, 'cA', '198.51.100.10', '198.51.100.9', a.protected_ip);
    uplink(eb, 'cB', '198.51.100.14', '198.51.100.13', b.protected_ip);

    // Each edge reaches the origin's inner address through its own tunnel, and the answer comes back
    // through that same tunnel (the origin's policy rule for that inner address).
    await ea.netns.waitForPing(innerA);
    await eb.netns.waitForPing(innerB);
    await client.waitForPing('198.51.100.9');
    await client.waitForPing('198.51.100.13');

    // The agent's own probe through each tunnel: both activate.
    for (const t of [a, b]) {
      const r = await call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });
      expect([t.tunnel_name, r.status, r.body.tunnel?.status], r.text).toEqual([t.tunnel_name, 200, 'active']);
    }

    server = spawn('ip', ['netns', 'exec', origin.name, NODE, '-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('origin server did not start')), 15_000);
      server!.stdout!.on('data', (d: Buffer) => {
        if (String(d).includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
      server!.on('exit', (code) => reject(new Error(`origin server exited ${code}`)));
    });

    // Client traffic through both tunnels, to the one origin: each reaches the origin at that tunnel's
    // inner address with the client's real address, and the reply comes back from the protected IP.
    const ra = await exchange(a.protected_ip);
    const rb = await exchange(b.protected_ip);
    expect(ra).toMatchObject({ ok: true, remote: a.protected_ip });
    expect(ra.data).toBe(`peer=198.51.100.10 local=${innerA}\n`);
    expect(rb).toMatchObject({ ok: true, remote: b.protected_ip });
    expect(rb.data).toBe(`peer=198.51.100.14 local=${innerB}\n`);
    // And again the first: the second tunnel's set-up did not take its replies.
    expect(await exchange(a.protected_ip)).toMatchObject({ ok: true, remote: a.protected_ip });
  }, 180_000);
});
