// The dataplane on REAL GRE: this host's kernel has no GRE, so a QEMU guest boots Debian's kernel and
// hosts client, router, edge and origin as network namespaces (test/vm/guest/start.sh). The edge runs
// agent/dataplane with GRE links; the origin runs the real origin script the gateway hands buyers.
// Everything is observed from here, through the guest's control server. See test/vm/vm.ts. The whole
// product over the same lab (gateway, worker, SSH, the real agent) is gre-product.test.ts, in a guest of its own.
//
// Skips (saying why) where QEMU cannot run; with TUNNELGATE_VM=require or CI set, that is a failure instead.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelSpec } from '../../agent/dataplane/types.ts';
import { LAB } from './protocol.ts';
import { labClient, labServe, originScript } from './lab.ts';
import { TestVm, buildAssets, vmRequired, vmUnavailable } from './vm.ts';

const unavailable = vmUnavailable();
if (unavailable) process.stderr.write(`test/vm: ${vmRequired ? 'REQUIRED (TUNNELGATE_VM=require or CI) but cannot run' : 'skipping the GRE VM test'}: ${unavailable}\n`);

// Inner subnets from the top of 100.64.0.0/10: the gateway in the product tests allocates from its bottom.
const plain: TunnelSpec = {
  id: '0a1b2c3d-0000-4000-8000-000000000001',
  tunnel_name: 'tg-vmplain',
  protected_ip: '203.0.113.10',
  origin_ip: LAB.origin,
  edge_ip: LAB.edge,
  edge_inner: '100.127.0.1/30',
  origin_inner: '100.127.0.2/30',
  mtu: 1476,
};
// With a GRE key the header grows by 4 bytes: MTU 1472.
const keyed: TunnelSpec = {
  id: '0a1b2c3d-0000-4000-8000-000000000002', // shares the plain one's first hex digits: the route tables must still differ
  tunnel_name: 'tg-vmkey',
  protected_ip: '203.0.113.11',
  origin_ip: LAB.origin,
  edge_ip: LAB.edge,
  edge_inner: '100.127.0.5/30',
  origin_inner: '100.127.0.6/30',
  mtu: 1472,
  gre_key: 4242,
};

const inner = (cidr: string) => cidr.split('/')[0]!;
/**
 * The table's listing without the flow caps' dynamic sets: their elements are the kernel's connection counts by
 * protected IP, which it collects itself once their connections are gone (docs/CONTRACTS.md "Dataplane", flow caps),
 * so a removed tunnel's IP may linger there, counting nothing, after everything the agent owns for it is gone.
 */
const withoutFlowCounts = (table: string): string => table.replace(/\tset (new)?flows_\d+ \{[\s\S]*?\n\t\}\n/g, '');

// The guest console and the agent's log are kept in test-results/ (git-ignored) for a failed run.
const ARTIFACTS = resolve(import.meta.dirname, '../../test-results');
function writeArtifact(name: string, text: string): void {
  mkdirSync(ARTIFACTS, { recursive: true });
  writeFileSync(join(ARTIFACTS, name), text);
}
// Generous per-test time: the guest's CPU is emulated, and CI hosts run other tests beside it.
describe.skipIf(unavailable !== undefined && !vmRequired)('real GRE in a QEMU guest', { timeout: 240_000 }, () => {
  let vm: TestVm;
  const timings: Record<string, number> = {};
  const timed = async <T>(name: string, fn: () => Promise<T>): Promise<T> => {
    const t0 = performance.now();
    try {
      return await fn();
    } finally {
      timings[name] = Math.round(performance.now() - t0);
    }
  };

  const client = (proto: 'tcp' | 'udp', ip: string, attempts = 3): Promise<string> => labClient(vm, proto, ip, { attempts });
  const serve = (name: string, proto: 'tcp' | 'udp', bind?: string): Promise<void> => labServe(vm, name, proto, bind === undefined ? {} : { bind });

  beforeAll(async () => {
    if (unavailable) throw new Error(`the VM test is required here (TUNNELGATE_VM=require or CI) but cannot run: ${unavailable}`);
    const assets = await timed('assets', async () => buildAssets());
    vm = await TestVm.boot(assets, { echoConsole: process.env.TUNNELGATE_VM_CONSOLE === '1' });
    timings.boot = vm.bootMs;
  }, 300_000);

  afterAll(async () => {
    const code = await vm?.shutdown();
    process.stderr.write(`test/vm timings (ms): ${JSON.stringify({ ...timings, kernelBootS: vm?.kernelBootSeconds, guestExit: code })}\n`);
    if (vm) writeArtifact('vm-console.log', vm.console);
  }, 60_000);


  describe('agent/dataplane with GRE links, the origin set up by the real origin script', () => {
    beforeAll(async () => {
      await vm.dataplane({ op: 'open', edgeIp: LAB.edge, nftTable: 'tg_vm', stateDir: '/run/tg-vm-dataplane' });
      // TCP may listen anywhere; UDP must be bound to the tunnel-inner address (the origin script says why).
      await serve('tcp-server', 'tcp');
    }, 120_000);

    // Whatever the tests above left (they stop at the first failed assertion) goes: the guest ends clean.
    afterAll(async () => {
      if (!vm) return;
      const quiet = () => undefined;
      for (const t of [plain, keyed]) await vm.dataplane({ op: 'remove', tunnel: t }).catch(quiet);
      await vm.dataplane({ op: 'close' }).catch(quiet);
      await vm.exec({ ns: 'edge', argv: ['nft', 'delete', 'table', 'ip', 'tg_vm'] }).catch(quiet);
      for (const t of [plain, keyed]) await vm.exec({ ns: 'origin', argv: ['bash', '-s', '--', '--remove'], input: originScript(t) }).catch(quiet);
      for (const p of ['tcp-server', 'udp-plain', 'udp-keyed']) await vm.stop(p).catch(quiet);
    }, 120_000);

    it('apply creates a GRE link edge → origin; the probe says unreachable while the origin is not set up', async () => {
      expect(await timed('apply', () => vm.dataplane({ op: 'apply', tunnel: plain }))).toEqual({ added: 1, changed: 0, removed: 0, unchanged: 0 });
      const [link] = JSON.parse(await vm.run('edge', ['ip', '-d', '-j', 'link', 'show', 'dev', plain.tunnel_name])) as {
        mtu: number;
        operstate: string;
        flags: string[];
        linkinfo: { info_kind: string; info_data: { local: string; remote: string; ttl: number; ikey?: string } };
      }[];
      expect(link!.linkinfo.info_kind).toBe('gre');
      expect(link!.linkinfo.info_data).toMatchObject({ local: LAB.edge, remote: LAB.origin });
      expect(link!.linkinfo.info_data.ikey).toBeUndefined();
      expect(link!.mtu).toBe(1476);
      expect(link!.flags).toContain('UP');
      const table = await vm.run('edge', ['nft', 'list', 'table', 'ip', 'tg_vm']);
      expect(table).toContain(`${plain.protected_ip} : ${inner(plain.origin_inner)}`);

      expect(await timed('probeBeforeOrigin', () => vm.dataplane({ op: 'probe', tunnel: plain }))).toEqual({ reachable: false });
    });

    it('the origin script brings the far end up; then the probe sees the origin through the tunnel', async () => {
      const out = await timed('originScript', () => vm.run('origin', ['bash', '-s'], originScript(plain)));
      expect(out).toContain(`tunnelgate: done. GRE tunnel ${plain.tunnel_name} is up`);
      const [link] = JSON.parse(await vm.run('origin', ['ip', '-d', '-j', 'link', 'show', 'dev', plain.tunnel_name])) as {
        linkinfo: { info_kind: string; info_data: { local: string; remote: string } };
      }[];
      expect(link!.linkinfo).toMatchObject({ info_kind: 'gre', info_data: { local: LAB.origin, remote: LAB.edge } });

      const probe = await timed('probeAfterOrigin', () => vm.dataplane({ op: 'probe', tunnel: plain }));
      expect(probe.reachable).toBe(true);
      expect(probe.rtt_ms).toBeGreaterThan(0);
    });

    it('TCP and UDP to the protected IP reach the origin, which sees the client; the replies come from the protected IP', async () => {
      await serve('udp-plain', 'udp', inner(plain.origin_inner));
      const tcp = await timed('tcp', () => client('tcp', plain.protected_ip));
      expect(tcp).toMatch(new RegExp(`^peer=${LAB.client} local=${inner(plain.origin_inner)} got=hello-tcp-\\d$`));
      const udp = await timed('udp', () => client('udp', plain.protected_ip));
      // socat names no local address for UDP; the server is bound to the inner one, and conntrack below shows the DNAT.
      expect(udp).toMatch(new RegExp(`^peer=${LAB.client} local= got=hello-udp-\\d$`));

      // The kernel's account: DNAT to the origin's inner address, no SNAT, the packets crossed GRE.
      const ct = await vm.run('edge', ['conntrack', '-L', '-d', plain.protected_ip]);
      expect(ct).toMatch(new RegExp(`tcp .*src=${LAB.client} dst=${plain.protected_ip} .* src=${inner(plain.origin_inner)} dst=${LAB.client}`));
      expect(ct).toMatch(new RegExp(`udp .*src=${LAB.client} dst=${plain.protected_ip} .* src=${inner(plain.origin_inner)} dst=${LAB.client}`));
      const stats = JSON.parse(await vm.run('origin', ['ip', '-s', '-j', 'link', 'show', 'dev', plain.tunnel_name])) as { stats64: { rx: { packets: number }; tx: { packets: number } } }[];
      expect(stats[0]!.stats64.rx.packets).toBeGreaterThan(0);
      expect(stats[0]!.stats64.tx.packets).toBeGreaterThan(0);
    });

    it('a tunnel with a GRE key (MTU 1472) works beside the plain one between the same endpoints', async () => {
      expect(await vm.dataplane({ op: 'apply', tunnel: keyed })).toEqual({ added: 1, changed: 0, removed: 0, unchanged: 0 });
      const [link] = JSON.parse(await vm.run('edge', ['ip', '-d', '-j', 'link', 'show', 'dev', keyed.tunnel_name])) as {
        mtu: number;
        linkinfo: { info_kind: string; info_data: { ikey?: string; okey?: string } };
      }[];
      // 4242 = 0x00001092, printed by ip as a dotted quad.
      expect(link!.linkinfo).toMatchObject({ info_kind: 'gre', info_data: { ikey: '0.0.16.146', okey: '0.0.16.146' } });
      expect(link!.mtu).toBe(1472);
      expect(await vm.dataplane({ op: 'probe', tunnel: keyed })).toEqual({ reachable: false });

      await timed('originScriptKeyed', () => vm.run('origin', ['bash', '-s'], originScript(keyed)));
      expect((await vm.dataplane({ op: 'probe', tunnel: keyed })).reachable).toBe(true);
      await serve('udp-keyed', 'udp', inner(keyed.origin_inner));
      expect(await client('tcp', keyed.protected_ip)).toMatch(new RegExp(`^peer=${LAB.client} local=${inner(keyed.origin_inner)} got=`));
      expect(await client('udp', keyed.protected_ip)).toMatch(new RegExp(`^peer=${LAB.client} local= got=hello-udp-\\d$`));
    });

    it('remove deletes the GRE link, the map element and the conntrack entries; only that tunnel stops', async () => {
      // Fresh flows, so there is something to flush however long the tests before took.
      expect(await client('tcp', plain.protected_ip)).toContain(`peer=${LAB.client}`);
      expect(await client('udp', plain.protected_ip)).toContain(`peer=${LAB.client}`);
      const before = await vm.run('edge', ['conntrack', '-L', '-d', plain.protected_ip]);
      expect(before).toMatch(new RegExp(`tcp .*dst=${plain.protected_ip}`));
      expect(before).toMatch(new RegExp(`udp .*dst=${plain.protected_ip}`));
      expect(await timed('remove', () => vm.dataplane({ op: 'remove', tunnel: plain }))).toEqual({ added: 0, changed: 0, removed: 1, unchanged: 0 });

      const show = await vm.exec({ ns: 'edge', argv: ['ip', 'link', 'show', 'dev', plain.tunnel_name] });
      expect(show.code).not.toBe(0);
      const table = withoutFlowCounts(await vm.run('edge', ['nft', 'list', 'table', 'ip', 'tg_vm']));
      expect(table).not.toContain(plain.protected_ip);
      expect(table).toContain(`${keyed.protected_ip} : ${inner(keyed.origin_inner)}`);
      const ct = await vm.exec({ ns: 'edge', argv: ['conntrack', '-L', '-d', plain.protected_ip] });
      expect(ct.stdout).not.toContain(`dst=${plain.protected_ip}`);

      expect(await client('tcp', plain.protected_ip, 1)).not.toContain('peer=');
      expect(await client('tcp', keyed.protected_ip)).toContain(`peer=${LAB.client}`);

      expect((await vm.dataplane({ op: 'remove', tunnel: keyed })).removed).toBe(1);
      // The origin side comes down with the script's --remove; both ends are then clean for the next test.
      for (const t of [plain, keyed]) await vm.run('origin', ['bash', '-s', '--', '--remove'], originScript(t));
      expect(await vm.run('origin', ['ip', '-o', 'link', 'show', 'type', 'gre'])).not.toMatch(/tg-vm/);
      for (const p of ['udp-plain', 'udp-keyed']) await vm.stop(p);
      await vm.run('edge', ['nft', 'delete', 'table', 'ip', 'tg_vm']);
    });
  });
});
