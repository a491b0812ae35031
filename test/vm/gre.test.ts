// The dataplane on REAL GRE: this host's kernel has no GRE, so a QEMU guest boots Debian's kernel and
// hosts client, router, edge and origin as network namespaces (test/vm/guest/start.sh). The edge runs
// agent/dataplane with GRE links; the origin runs the real origin script the gateway hands buyers.
// Everything is observed from here, through the guest's control server. See test/vm/vm.ts.
//
// Skips (saying why) where QEMU cannot run; with TUNNELGATE_VM=require or CI set, that is a failure instead.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelSpec } from '../../agent/dataplane/types.ts';
import { renderOriginScripts } from '../../server/domain/origin-scripts.ts';
import { routeTableFor } from '../../server/domain/tunnels.ts';
import { LAB } from './protocol.ts';
import { TestVm, buildAssets, vmRequired, vmUnavailable } from './vm.ts';

const unavailable = vmUnavailable();
if (unavailable) process.stderr.write(`test/vm: ${vmRequired ? 'REQUIRED (TUNNELGATE_VM=require or CI) but cannot run' : 'skipping the GRE VM test'}: ${unavailable}\n`);

const plain: TunnelSpec = {
  id: '0a1b2c3d-0000-4000-8000-000000000001',
  tunnel_name: 'tg-vmplain',
  protected_ip: '203.0.113.10',
  origin_ip: LAB.origin,
  edge_ip: LAB.edge,
  edge_inner: '100.64.0.1/30',
  origin_inner: '100.64.0.2/30',
  mtu: 1476,
};
// With a GRE key the header grows by 4 bytes: MTU 1472.
const keyed: TunnelSpec = {
  id: '0a1b2c3d-0000-4000-8000-000000000002',
  tunnel_name: 'tg-vmkey',
  protected_ip: '203.0.113.11',
  origin_ip: LAB.origin,
  edge_ip: LAB.edge,
  edge_inner: '100.64.0.5/30',
  origin_inner: '100.64.0.6/30',
  mtu: 1472,
  gre_key: 4242,
};

function originScript(t: TunnelSpec): string {
  return renderOriginScripts({
    tunnelId: t.id,
    tunnelName: t.tunnel_name,
    protectedIp: t.protected_ip,
    originIp: t.origin_ip,
    edgeIp: t.edge_ip,
    edgeInner: t.edge_inner,
    originInner: t.origin_inner,
    mtu: t.mtu,
    greKey: t.gre_key ?? null,
    routeTable: routeTableFor(t.id),
  }).origin;
}

const inner = (cidr: string) => cidr.split('/')[0]!;
// The origin's services answer with the peer address they saw and their own (post-DNAT) address.
const ANSWER = `read -r l; echo "peer=$SOCAT_PEERADDR local=$SOCAT_SOCKADDR got=$l"`;
const TCP_PORT = 8080;
const UDP_PORT = 5353;

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

  /**
   * One exchange from the client: bash's /dev/tcp and /dev/udp (a connected socket either way), with a
   * short timeout and up to three fresh attempts (new source port, new conntrack entry), so one slow
   * moment of an emulated CPU on a busy host is not a failure; a broken path fails all three. TCP
   * connects to the protected IP, so an answer came from it; the connected UDP socket gets from the
   * kernel only datagrams whose source is the protected IP.
   */
  const client = async (proto: 'tcp' | 'udp', ip: string, attempts = 3, waitS = 10): Promise<string> => {
    const port = proto === 'tcp' ? TCP_PORT : UDP_PORT;
    let out = '';
    for (let i = 0; i < attempts && !out.includes('peer='); i++) {
      // One read of up to 4 KiB takes the whole datagram (bash's `read` takes a byte, and UDP drops the rest).
      const answer = proto === 'tcp' ? `read -t ${waitS} -r l <&3 && echo "$l"` : `timeout ${waitS} dd bs=4096 count=1 status=none <&3`;
      const script = `exec 3<>/dev/${proto}/${ip}/${port} && echo hello-${proto}-${i} >&3 && ${answer}`;
      out = (await vm.exec({ ns: 'client', argv: ['timeout', String(waitS + 5), 'bash', '-c', script], timeoutMs: (waitS + 15) * 1000 })).stdout.trim();
    }
    return out;
  };

  /** Starts a socat server in the origin and waits until its socket is bound. */
  const serve = async (name: string, proto: 'tcp' | 'udp', bind?: string): Promise<void> => {
    const listen = proto === 'tcp' ? `TCP4-LISTEN:${TCP_PORT},reuseaddr,fork` : `UDP4-RECVFROM:${UDP_PORT},fork`;
    await vm.spawn({ name, ns: 'origin', argv: ['socat', bind ? `${listen},bind=${bind}` : listen, `SYSTEM:${ANSWER}`] });
    const want = `${bind ?? (proto === 'tcp' ? '0.0.0.0' : '*')}:${proto === 'tcp' ? TCP_PORT : UDP_PORT} `;
    for (let i = 0; ; i++) {
      const ss = await vm.run('origin', ['ss', '-Hln', proto === 'tcp' ? '-t' : '-u']);
      if (ss.includes(want)) return;
      if (i > 100) throw new Error(`origin: ${name} is not listening on ${want}: ${ss}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };

  beforeAll(async () => {
    if (unavailable) throw new Error(`the VM test is required here (TUNNELGATE_VM=require or CI) but cannot run: ${unavailable}`);
    const assets = await timed('assets', async () => buildAssets());
    vm = await TestVm.boot(assets, { echoConsole: process.env.TUNNELGATE_VM_CONSOLE === '1' });
    timings.boot = vm.bootMs;
  }, 300_000);

  afterAll(async () => {
    const code = await vm?.shutdown();
    process.stderr.write(`test/vm timings (ms): ${JSON.stringify({ ...timings, kernelBootS: vm?.kernelBootSeconds, guestExit: code })}\n`);
  }, 60_000);

  describe('agent/dataplane with GRE links, the origin set up by the real origin script', () => {
    beforeAll(async () => {
      await vm.dataplane({ op: 'open', edgeIp: LAB.edge, nftTable: 'tg_vm', stateDir: '/run/tg-vm-dataplane' });
      // TCP may listen anywhere; UDP must be bound to the tunnel-inner address (the origin script says why).
      await serve('tcp-server', 'tcp');
    }, 120_000);

    afterAll(async () => {
      await vm?.dataplane({ op: 'close' }).catch(() => undefined);
    });

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
      const table = await vm.run('edge', ['nft', 'list', 'table', 'ip', 'tg_vm']);
      expect(table).not.toContain(plain.protected_ip);
      expect(table).toContain(`${keyed.protected_ip} : ${inner(keyed.origin_inner)}`);
      const ct = await vm.exec({ ns: 'edge', argv: ['conntrack', '-L', '-d', plain.protected_ip] });
      expect(ct.stdout).not.toContain(`dst=${plain.protected_ip}`);

      expect(await client('tcp', plain.protected_ip, 1, 4)).not.toContain('peer=');
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
