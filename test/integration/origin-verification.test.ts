// A tunnel forwards only to an origin that answered the activate probe (docs/CONTRACTS.md "Tunnel lifecycle",
// "Dataplane"; docs/SECURITY.md), end to end through the product: the real gateway, queue and worker drive the
// real agent process over SSH (job version 3), its dataplane in a namespace with the veth stand-in for GRE (this
// kernel has none), a client namespace upstream of the edge and origins on the stand-in's far end, set up with
// the origin script's routing so the probe is answered through the tunnel.
//
//  - provisioned, not activated: the client's connections to the protected IP never reach the origin (no DNAT:
//    dropped at the edge), while activate's probe is answered through the same link; activated: they do;
//    PATCH origin_ip: the edge stops at once, and the new origin gets nothing until it is activated in turn.
//  - the race: a PATCH of origin_ip that lands after the probe was answered and before activate commits. The
//    agent holds the probe's answer (TestEdge `hold: 'after'`: the probe ran, its result not yet sent) while the
//    PATCH is applied; released, activate must answer 409 (the probe was of the earlier origin), never `active`.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { innerSubnet, parseCidr } from '../../server/domain/ip.ts';
import { call, type RunningGateway } from '../helpers/gateway.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { startProvisioningRig, type TestEdge } from '../helpers/edge.ts';
import { counterArgv, counterPackets, observeRuleset } from '../helpers/nft-observe.ts';
import { expectMatchesOpenApi } from '../helpers/openapi.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { settle, until } from '../helpers/wait.ts';
import { isRoot, TestNetns } from '../netns/netns.ts';
import { Proc, SERVER } from '../netns/origin-standin.ts';
import { attachStandinOriginRouted } from '../../demo/standin-origin.ts';

const execFileP = promisify(execFile);
const CLIENT = '198.51.100.10';

// One TCP exchange with the protected IP: a line out, the origin's answer back, or why not. Bounded by its own
// socket timeout; the test asserts what came back, never how long it took.
const CONNECT = `
const net = require('node:net');
const [host, port] = process.argv.slice(1);
const done = (o) => { console.log(JSON.stringify(o)); process.exit(0); };
const s = net.connect({ host, port: Number(port), timeout: 1500 });
let data = '';
s.on('connect', () => s.write('hello\\n'));
s.on('data', (d) => { data += d; if (data.includes('\\n')) done({ ok: true, data: data.trim() }); });
s.on('timeout', () => done({ ok: false, error: 'timeout' }));
s.on('error', (e) => done({ ok: false, error: e.code }));
`;

interface Bought {
  id: string;
  protected_ip: string;
  tunnel_name: string;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('forwarding waits for a probed origin (gateway, real agent v3, namespaces)', () => {
  let gw: RunningGateway;
  let edge: TestEdge;
  let user: SeededUser;
  let client: TestNetns;
  const namespaces: TestNetns[] = [];
  const procs: Proc[] = [];

  const status = async (id: string) => (await gw.testDb.raw.query<{ status: string }>('select status from tunnel where id = $1', [id])).rows[0]!.status;
  const originInner = async (id: string): Promise<string> => {
    const { rows } = await gw.testDb.raw.query<{ inner_index: number; inner_pool: string }>(
      'select t.inner_index, n.inner_pool from tunnel t join edge_node n on n.id = t.node_id where t.id = $1',
      [id],
    );
    return innerSubnet(parseCidr(rows[0]!.inner_pool), rows[0]!.inner_index).originInner;
  };
  /** A new origin namespace on the tunnel's stand-in link as the edge has it now, with its TCP services and a SYN counter. */
  const attachOrigin = async (t: Bought, table: number): Promise<TestNetns> => {
    const origin = new TestNetns();
    namespaces.push(origin);
    origin.run('ip', 'link', 'set', 'lo', 'up');
    const inner = await originInner(t.id);
    attachStandinOriginRouted(edge.netns, origin, { tunnel_name: t.tunnel_name, origin_inner: inner }, table);
    origin.run('bash', '-c', `nft -f - <<'EOF'\n${observeRuleset('input', { syn: 'tcp dport 8080 tcp flags & (syn|ack) == syn' })}EOF`);
    const server = new Proc(origin, SERVER);
    procs.push(server);
    await server.saw((l) => l === 'ready');
    return origin;
  };
  const synsAt = (origin: TestNetns): number => counterPackets(origin.run(...counterArgv('syn')));
  /** The edge's drop counter `invalid` of the tunnel: packets to the protected IP that had no DNAT to follow. */
  const droppedInvalid = (t: Bought): number => {
    const j = JSON.parse(edge.netns.run('nft', '-j', 'list', 'counter', 'ip', 'tunnelgate', `${t.tunnel_name}.invalid`)) as { nftables: { counter?: { packets: number } }[] };
    return j.nftables.find((o) => o.counter)!.counter!.packets;
  };
  /** One connection from the client; `tries` fresh ones (new source ports) until one answers. */
  const connect = async (t: Bought, tries: number): Promise<{ ok: boolean; data?: string; error?: string }> => {
    let last: { ok: boolean; data?: string; error?: string } = { ok: false };
    for (let i = 0; i < tries && !last.ok; i++) {
      const { stdout } = await execFileP('ip', ['netns', 'exec', client.name, process.execPath, '-e', CONNECT, t.protected_ip, '8080'], { timeout: 10_000 });
      last = JSON.parse(stdout.trim()) as typeof last;
    }
    return last;
  };
  const buy = async (name: string): Promise<Bought> => {
    const r = await call(gw.url, 'POST', '/api/dedicated', { token: user.writeKey, body: { name, origin_ip: '8.8.4.4' } });
    expect(r.status, r.text).toBe(201);
    return r.body.tunnel as Bought;
  };
  const provision = async (t: Bought): Promise<void> => {
    const p = await call(gw.url, 'POST', `/api/dedicated/${t.id}/provision`, { token: user.writeKey });
    expect(await settle(p, 'provisioned', () => status(t.id))).toBe('provisioned');
  };
  const activate = (t: Bought) => call(gw.url, 'POST', `/api/dedicated/${t.id}/activate`, { token: user.writeKey });

  beforeAll(async () => {
    // The longest wait the gateway allows, so a 200 is what an answering agent gives on a loaded host.
    ({ gw, edge } = await startProvisioningRig({ config: { edgeWaitMs: 60_000, edgeJobTimeoutMs: 30_000, edgeRetryLimit: 20 }, pool: '203.0.113.80/28', startAgent: false }));
    // Every call is announced and may be held: the race test holds the probe's answer; the rest go on at once.
    await edge.start({ hold: 'after' });
    user = await seedUser(gw.testDb.db);
    client = new TestNetns();
    namespaces.push(client);
    client.run('ip', 'link', 'set', 'lo', 'up');
    edge.netns.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client.name);
    edge.netns.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    edge.netns.run('ip', 'link', 'set', 'up0', 'up');
    edge.netns.run('ip', 'route', 'add', 'default', 'via', CLIENT);
    client.run('ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
    client.run('ip', 'link', 'set', 'c0', 'up');
    client.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
    await client.waitForPing('198.51.100.1');
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) p.stop();
    for (const ns of namespaces) ns.delete();
    await gw?.close();
    await edge?.close();
  });

  it('provisioned: the probe is answered but no client traffic reaches the origin; activated: it does; a new origin_ip stops it, and the new origin gets nothing until activated', async () => {
    const t = await buy('verify-flow');
    await provision(t);
    // The edge holds the tunnel's link, but no DNAT for its protected IP.
    expect(edge.links()).toContain(t.tunnel_name);
    expect(edge.mapElements()).not.toContain(t.protected_ip);

    const origin = await attachOrigin(t, 100);
    await edge.netns.waitForPing((await originInner(t.id)).split('/')[0]!);
    const before = droppedInvalid(t);
    expect(await connect(t, 2)).toEqual({ ok: false, error: 'timeout' });
    // Not one SYN reached the origin: the edge dropped them (to the protected IP, no DNAT: `invalid`).
    expect(synsAt(origin)).toBe(0);
    expect(droppedInvalid(t)).toBeGreaterThan(before);

    // The probe is the agent's own traffic through the link: it is answered, so activate succeeds, and only
    // then does the edge forward (200: the edge applied it before the answer).
    const a = await activate(t);
    expectMatchesOpenApi('post', '/api/dedicated/{id}/activate', a.status, a.body, a.headers);
    expect([a.status, a.body.tunnel?.status]).toEqual([200, 'active']);
    expect(edge.mapElements()).toContain(t.protected_ip);
    expect(await connect(t, 3)).toEqual({ ok: true, data: `peer=${CLIENT} echo=hello` });
    expect(synsAt(origin)).toBeGreaterThan(0);

    // The buyer points the tunnel elsewhere: from the spec that carries the new origin on, no DNAT.
    const p = await call(gw.url, 'PATCH', `/api/dedicated/${t.id}`, { token: user.writeKey, body: { origin_ip: '8.8.8.8' } });
    expectMatchesOpenApi('patch', '/api/dedicated/{id}', p.status, p.body, p.headers);
    expect([p.status, p.body.tunnel.status]).toEqual([200, 'provisioned']);
    expect(edge.mapElements()).not.toContain(t.protected_ip);
    expect((await connect(t, 1)).ok).toBe(false);

    // The new origin (the stand-in link was made again for it): probed and answered, yet nothing forwarded to it
    // until the activation that probed it.
    const next = await attachOrigin(t, 101);
    expect(await connect(t, 2)).toEqual({ ok: false, error: 'timeout' });
    expect(synsAt(next)).toBe(0);
    const again = await activate(t);
    expect([again.status, again.body.tunnel?.status]).toEqual([200, 'active']);
    expect(edge.mapElements()).toContain(t.protected_ip);
    expect(await connect(t, 3)).toEqual({ ok: true, data: `peer=${CLIENT} echo=hello` });
    expect(synsAt(next)).toBeGreaterThan(0);
  }, 180_000);

  it('a PATCH of origin_ip between the probe\'s answer and activate\'s commit: 409 invalid_state (origin changed), the tunnel stays provisioned and forwards nothing', async () => {
    const t = await buy('verify-race');
    await provision(t);
    await attachOrigin(t, 102);
    await edge.netns.waitForPing((await originInner(t.id)).split('/')[0]!);

    // The agent answers the probe (the origin is there) but holds the answer until released.
    const from = edge.calls.length;
    edge.holding = (c) => c.call === 'probe' && c.ids.includes(t.id);
    try {
      const pending = activate(t);
      const probe = await edge.waitForCall((c) => c.call === 'probe' && c.ids.includes(t.id), from);
      // Meanwhile the buyer (or anyone with the key) re-points the tunnel; the edge applies it at once.
      const p = await call(gw.url, 'PATCH', `/api/dedicated/${t.id}`, { token: user.writeKey, body: { origin_ip: '8.8.8.8' } });
      expect([p.status, p.body.tunnel.status]).toEqual([200, 'provisioned']);
      edge.release(probe);
      const a = await pending;
      expectMatchesOpenApi('post', '/api/dedicated/{id}/activate', a.status, a.body, a.headers);
      expect(a.status).toBe(409);
      expect(a.body).toEqual({ error: 'invalid_state', error_description: expect.stringMatching(/origin changed during activation/) });
    } finally {
      edge.holding = () => false;
    }
    expect(await status(t.id)).toBe('provisioned');
    // Nothing was turned on: no DNAT now, and none later (the worker has nothing more to apply).
    await until('the edge has applied every revision', async () => (await gw.testDb.raw.query<{ ok: boolean }>('select applied_revision >= spec_revision as ok from tunnel where id = $1', [t.id])).rows[0]!.ok);
    expect(edge.mapElements()).not.toContain(t.protected_ip);

    // The new origin, once it runs the script, activates as usual.
    await attachOrigin(t, 103);
    const again = await activate(t);
    expect([again.status, again.body.tunnel?.status]).toEqual([200, 'active']);
    expect(edge.mapElements()).toContain(t.protected_ip);
  }, 180_000);
});
