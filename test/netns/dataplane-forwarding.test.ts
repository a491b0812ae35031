// A tunnel's `forwarding` on this kernel (docs/CONTRACTS.md "Dataplane", job version 3): until its origin
// answered the activate probe the edge forwards nothing to it but the probe. Client, edge (the production
// dataplane) and origins as network namespaces; the tunnel link is the dataplane's veth stand-in (this kernel
// has no GRE), its far end moved into the origin and routed as the origin script routes (so the probe, sent
// from outside the inner subnet, is answered through the tunnel). What reached an origin is counted there by
// nftables; the client's connections are bounded by their own timeouts, and nothing asserts on time.
//
//  client 198.51.100.10 ── up0 edge 192.0.2.2 (lo) ── tg-fw 100.64.0.1/30 ≈≈ 100.64.0.2 origin (then origin2)
//
// The steps are the gateway's: provisioned (forwarding false), activated (the same spec, forwarding on), the
// origin re-pointed (a new origin_ip, forwarding false again), then activated again.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataplaneHandle, TunnelSpec } from '../../agent/dataplane/index.ts';
import { attachStandinOriginRouted } from '../../demo/standin-origin.ts';
import { counterArgv, counterPackets, observeRuleset } from '../helpers/nft-observe.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { DataplaneEdge, EDGE_IP, NFT_TABLE } from './dataplane-edge.ts';
import { isRoot, TestNetns } from './netns.ts';
import { KEEP, Proc, SERVER } from './origin-standin.ts';

const execFileP = promisify(execFile);
const CLIENT = '198.51.100.10';

const ACTIVE: TunnelSpec = {
  id: '00000000-0000-4000-8000-0000000f0001',
  tunnel_name: 'tg-fw',
  protected_ip: '203.0.113.70',
  origin_ip: '198.18.70.1',
  edge_ip: EDGE_IP,
  edge_inner: '100.64.0.1/30',
  origin_inner: '100.64.0.2/30',
  mtu: 1476,
};
const PROVISIONED: TunnelSpec = { ...ACTIVE, forwarding: false };
/** After a PATCH of origin_ip: the new origin, held back until it is probed. */
const REPOINTED: TunnelSpec = { ...ACTIVE, origin_ip: '198.18.70.2', forwarding: false };

// One TCP exchange with the protected IP (a line out, the answer back), bounded by its socket timeout.
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

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('forwarding waits for the activate probe (veth stand-in for GRE)', () => {
  let edge: DataplaneEdge;
  let client: TestNetns;
  const origins: TestNetns[] = [];
  const procs: Proc[] = [];
  let dp: DataplaneHandle;

  const connect = async (tries: number): Promise<{ ok: boolean; data?: string; error?: string }> => {
    let last: { ok: boolean; data?: string; error?: string } = { ok: false };
    for (let i = 0; i < tries && !last.ok; i++) {
      const { stdout } = await execFileP('ip', ['netns', 'exec', client.name, process.execPath, '-e', CONNECT, ACTIVE.protected_ip, '8080'], { timeout: 10_000 });
      last = JSON.parse(stdout.trim()) as typeof last;
    }
    return last;
  };
  /** A new origin on the tunnel's stand-in link as the edge has it now: the origin script's routing, a TCP service, a SYN counter. */
  const attachOrigin = async (table: number): Promise<TestNetns> => {
    const o = new TestNetns();
    origins.push(o);
    o.run('ip', 'link', 'set', 'lo', 'up');
    attachStandinOriginRouted(edge, o, ACTIVE, table);
    o.run('bash', '-c', `nft -f - <<'EOF'\n${observeRuleset('input', { syn: 'tcp dport 8080 tcp flags & (syn|ack) == syn', data: 'tcp dport 8080' })}EOF`);
    const server = new Proc(o, SERVER);
    procs.push(server);
    await server.saw((l) => l === 'ready');
    await edge.waitForPing('100.64.0.2');
    return o;
  };
  const counted = (o: TestNetns, name: string): number => counterPackets(o.run(...counterArgv(name)));
  const dnat = (): [string, string][] => edge.protectedMap();

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-forwarding');
    client = new TestNetns();
    client.run('ip', 'link', 'set', 'lo', 'up');
    edge.run('ip', 'link', 'add', 'up0', 'type', 'veth', 'peer', 'name', 'c0', 'netns', client.name);
    edge.run('ip', 'addr', 'add', '198.51.100.1/24', 'dev', 'up0');
    edge.run('ip', 'link', 'set', 'up0', 'up');
    // The edge's upstream: a protected IP is not local, the kernel forwards it.
    edge.run('ip', 'route', 'add', 'default', 'via', CLIENT);
    client.run('ip', 'addr', 'add', `${CLIENT}/24`, 'dev', 'c0');
    client.run('ip', 'link', 'set', 'c0', 'up');
    client.run('ip', 'route', 'add', 'default', 'via', '198.51.100.1');
    await client.waitForPing('198.51.100.1');
    dp = await edge.openDataplane();
  }, 60_000);

  afterAll(async () => {
    for (const p of procs) p.stop();
    await dp?.close();
    for (const o of origins) o.delete();
    client?.delete();
    edge?.delete();
  });

  it('provisioned: the probe is answered, the client reaches nothing; activated: it does; held back again: even the open connection stops; a restart or a reconcile puts no DNAT back', async () => {
    expect(await dp.apply(PROVISIONED)).toMatchObject({ added: 1 });
    expect(dnat()).toEqual([]);
    const origin = await attachOrigin(100);

    // The probe is the agent's own traffic through the link: answered with no DNAT at all.
    expect(await dp.probe(PROVISIONED)).toMatchObject({ reachable: true });
    expect(await connect(2)).toEqual({ ok: false, error: 'timeout' });
    expect(counted(origin, 'syn')).toBe(0);
    // Dropped at the edge and counted as the tunnel's `invalid` (to the protected IP without a DNAT).
    expect((await dp.dropped(PROVISIONED)).invalid).toBeGreaterThan(0);

    // Activated: the same tunnel with forwarding on. Only the DNAT changes.
    expect(await dp.apply(ACTIVE)).toMatchObject({ changed: 1 });
    expect(dnat()).toEqual([[ACTIVE.protected_ip, '100.64.0.2']]);
    expect(await connect(3)).toEqual({ ok: true, data: `peer=${CLIENT} echo=hello` });
    const held = new Proc(client, KEEP, [ACTIVE.protected_ip, '8080']);
    procs.push(held);
    await held.saw((l) => l === 'open');
    held.send('one');
    expect(await held.saw((l) => l.includes('echo=one'))).toBe(`peer=${CLIENT} echo=one`);

    // Held back again (as a new origin is, below, or after an agent restart from a held-back record): the DNAT
    // goes and its connections with it (conntrack flushed), so the open connection carries nothing more.
    expect(await dp.apply(PROVISIONED)).toMatchObject({ changed: 1 });
    expect(dnat()).toEqual([]);
    const dataBefore = counted(origin, 'data');
    held.send('two');
    expect(await connect(1)).toEqual({ ok: false, error: 'timeout' });
    expect(counted(origin, 'data')).toBe(dataBefore);
    expect(held.lines.some((l) => l.includes('echo=two'))).toBe(false);

    // The agent restarts from its records: still no DNAT. A DNAT added by hand is drift the reconcile removes.
    await dp.close();
    dp = await edge.openDataplane();
    expect(dnat()).toEqual([]);
    edge.run('nft', 'add', 'element', 'ip', NFT_TABLE, 'protected', `{ ${ACTIVE.protected_ip} : 100.64.0.2 }`);
    expect(await dp.reconcile([PROVISIONED])).toMatchObject({ changed: 1, failed: [] });
    expect(dnat()).toEqual([]);
    expect(await dp.probe(PROVISIONED)).toMatchObject({ reachable: true });
  }, 120_000);

  it('a new origin_ip comes held back: the new origin answers the probe but gets no client traffic until activated; then it does', async () => {
    expect(await dp.apply(ACTIVE)).toMatchObject({ changed: 1 });
    expect(await connect(3)).toMatchObject({ ok: true });
    // The PATCH: the link is re-pointed (the stand-in is made again) with forwarding off in the same change.
    expect(await dp.apply(REPOINTED)).toMatchObject({ changed: 1 });
    expect(dnat()).toEqual([]);
    const next = await attachOrigin(101);
    expect(await dp.probe(REPOINTED)).toMatchObject({ reachable: true });
    expect(await connect(2)).toEqual({ ok: false, error: 'timeout' });
    expect(counted(next, 'syn')).toBe(0);
    // Activated after that probe: forwarded.
    expect(await dp.apply({ ...REPOINTED, forwarding: true })).toMatchObject({ changed: 1 });
    expect(dnat()).toEqual([[ACTIVE.protected_ip, '100.64.0.2']]);
    expect(await connect(3)).toEqual({ ok: true, data: `peer=${CLIENT} echo=hello` });
    expect(counted(next, 'syn')).toBeGreaterThan(0);
  }, 120_000);
});
