// The dataplane on REAL GRE: this host's kernel has no GRE, so a QEMU guest boots Debian's kernel and
// hosts client, router, edge and origin as network namespaces (test/vm/guest/start.sh). The edge runs
// agent/dataplane with GRE links; the origin runs the real origin script the gateway hands buyers.
// Everything is observed from here, through the guest's control server. See test/vm/vm.ts.
//
// Skips (saying why) where QEMU cannot run; with TUNNELGATE_VM=require or CI set, that is a failure instead.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { TunnelSpec } from '../../agent/dataplane/types.ts';
import { renderOriginScripts } from '../../server/domain/origin-scripts.ts';
import { routeTableFor } from '../../server/domain/tunnels.ts';
import { addNode } from '../../server/domain/nodes.ts';
import { loadSecrets } from '../../server/secrets.ts';
import { seedUser, type SeededUser } from '../helpers/fixtures.ts';
import { call, startGateway, type RunningGateway } from '../helpers/gateway.ts';
import { LAB } from './protocol.ts';
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
  id: '0a1b2c3d-0000-4000-8000-000000000002',
  tunnel_name: 'tg-vmkey',
  protected_ip: '203.0.113.11',
  origin_ip: LAB.origin,
  edge_ip: LAB.edge,
  edge_inner: '100.127.0.5/30',
  origin_inner: '100.127.0.6/30',
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

// The guest console and the agent's log are kept in test-results/ (git-ignored) for a failed run.
const ARTIFACTS = resolve(import.meta.dirname, '../../test-results');
function writeArtifact(name: string, text: string): void {
  mkdirSync(ARTIFACTS, { recursive: true });
  writeFileSync(join(ARTIFACTS, name), text);
}
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
   * One exchange from the client, up to three fresh attempts (new source port, new conntrack entry); a
   * broken path fails all three. TCP: socat connects to the protected IP, so an answer came from it.
   * UDP: bash's /dev/udp is a connected socket, which the kernel hands only datagrams whose source is the
   * protected IP; one `dd` read takes the whole datagram (bash's `read` would take one byte of it). Every
   * wait starts at the network step itself (socat's connect-timeout, -t and -T; `timeout dd` after the
   * send): on a loaded host the emulated guest can take seconds just to start a process.
   */
  const client = async (proto: 'tcp' | 'udp', ip: string, attempts = 3): Promise<string> => {
    let out = '';
    for (let i = 0; i < attempts && !out.includes('peer='); i++) {
      const argv =
        proto === 'tcp'
          ? ['socat', '-t10', '-T10', '-', `TCP4:${ip}:${TCP_PORT},connect-timeout=10`]
          : ['bash', '-c', `exec 3<>/dev/udp/${ip}/${UDP_PORT} && echo hello-udp-${i} >&3 && timeout 10 dd bs=4096 count=1 status=none <&3`];
      const r = await vm.exec({ ns: 'client', argv, input: `hello-tcp-${i}\n`, timeoutMs: 120_000 });
      out = r.stdout.trim();
      if (!out.includes('peer=')) process.stderr.write(`test/vm: ${proto} ${ip} attempt ${i + 1}: no answer after ${r.ms} ms (exit ${r.code ?? r.signal}) ${r.stderr.trim()}\n`);
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
    if (vm) writeArtifact('vm-console.log', vm.console);
  }, 60_000);

  describe('agent/dataplane with GRE links, the origin set up by the real origin script', () => {
    beforeAll(async () => {
      await vm.dataplane({ op: 'open', edgeIp: LAB.edge, nftTable: 'tg_vm', stateDir: '/run/tg-vm-dataplane' });
      // TCP may listen anywhere; UDP must be bound to the tunnel-inner address (the origin script says why).
      await serve('tcp-server', 'tcp');
    }, 120_000);

    // Whatever the tests above left (they stop at the first failed assertion), the product tests start clean.
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
      const table = await vm.run('edge', ['nft', 'list', 'table', 'ip', 'tg_vm']);
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
  // The whole product: the gateway and PostgreSQL here on the host (the test's own database), the real
  // agent (agent/main.ts, GRE) in the guest's edge namespace. The gateway's worker dials the agent's SSH
  // port through the port QEMU forwards from 127.0.0.1 — as it would dial a router over the internet.
  describe('the product: REST API → gateway worker → SSH → real agent → GRE, origin script on the origin', () => {
    let gw: RunningGateway;
    let user: SeededUser;
    let tunnel: { id: string; protected_ip: string; tunnel_name: string; status: string };
    let script: string;
    let stockBefore: number;
    let originInner: string;

    const api = (method: string, path: string, body?: unknown) => call(gw.url, method, path, { token: user.writeKey, ...(body === undefined ? {} : { body }) });
    const stock = async () => ((await call(gw.url, 'GET', '/api/dedicated/pricing')).body as { availability: { available: number } }).availability.available;
    const status = async () => ((await api('GET', `/api/dedicated/${tunnel.id}`)).body as { tunnel: { status: string } }).tunnel.status;
    /** 200 with the final status, or 202 while the worker keeps trying: then wait for the final one. */
    const settle = async (r: { status: number; body: { tunnel?: { status: string } } }, final: string): Promise<string> => {
      if (r.status === 202) {
        for (let i = 0; i < 120 && (await status()) !== final; i++) await new Promise((res) => setTimeout(res, 500));
        return status();
      }
      expect(r.status).toBe(200);
      return r.body.tunnel!.status;
    };

    beforeAll(async () => {
      await timed('productSetup', async () => {
        // Slow guest: the gateway waits longer for the agent before answering 202, and each job may take longer.
        gw = await startGateway({ config: { allowPrivateOrigins: true, edgeWaitMs: 30_000, edgeJobTimeoutMs: 45_000, edgeRetryLimit: 20 } });
        const secrets = (await loadSecrets(gw.testDb.db, {})).secrets;
        await gw.services.provisioning.start(secrets, { worker: true });
        const env = {
          AGENT_LISTEN: `0.0.0.0:${LAB.agentPort}`,
          AGENT_STATE_DIR: '/run/tg-agent',
          AGENT_AUTHORIZED_KEY: secrets.gatewaySshKey.publicKey,
          AGENT_JOB_KEY: JSON.stringify(secrets.jobSigningKey.publicJwk),
          AGENT_EDGE_IP: LAB.edge,
          AGENT_LOG_LEVEL: 'info',
        };
        const agentArgv = ['node_modules/.bin/node', '--enable-source-maps', '--import', './loader/register.mjs', 'agent/main.ts'];
        // The operator's order: the agent's host key first (`tunnel-agent fingerprint`; the node id is not known
        // yet and not needed for it), then `node add` with that key pinned, then the agent with the node's id.
        const fp = await vm.exec({ ns: 'edge', argv: [...agentArgv, 'fingerprint'], env: { ...env, AGENT_NODE_ID: '00000000-0000-4000-8000-000000000000' }, timeoutMs: 120_000 });
        expect(fp.stdout.trim(), fp.stderr).toMatch(/^SHA256:/);
        const node = await addNode(gw.testDb.db, { name: 'vm-edge', publicIp: LAB.edge, sshHost: '127.0.0.1', sshPort: vm.agentPort, pool: '203.0.113.32/28', hostKey: fp.stdout.trim() });
        await vm.spawn({ name: 'agent', ns: 'edge', argv: agentArgv, env: { ...env, AGENT_NODE_ID: node.node_id }, readyText: 'host key fingerprint', readyTimeoutMs: 180_000 });
        user = await seedUser(gw.testDb.db);
        await serve('tcp-product', 'tcp');
      });
    }, 300_000);

    afterAll(async () => {
      const agent = await vm?.output('agent').catch(() => undefined);
      if (agent) writeArtifact('vm-agent.log', agent.output);
      await vm?.stop('agent').catch(() => undefined);
      await gw?.close();
    }, 60_000);

    it('buy through the API: the IP leaves stock; the setup scripts are there; activate before provision is 409', async () => {
      stockBefore = await stock();
      const r = await api('POST', '/api/dedicated', { name: 'vm-e2e', origin_ip: LAB.origin });
      expect(r.status, r.text).toBe(201);
      tunnel = r.body.tunnel;
      expect(tunnel.status).toBe('pending');
      expect(tunnel.protected_ip).toMatch(/^203\.0\.113\.(3[3-9]|4[0-6])$/);
      expect(await stock()).toBe(stockBefore - 1);

      const setup = await api('GET', `/api/dedicated/${tunnel.id}/setup`);
      expect(setup.status, setup.text).toBe(200);
      script = (setup.body as { scripts: { origin: string } }).scripts.origin;
      expect(script).toContain(`readonly TUNNEL_NAME='${tunnel.tunnel_name}'`);

      const early = await api('POST', `/api/dedicated/${tunnel.id}/activate`);
      expect(early.status).toBe(409);
      expect(early.body.error).toBe('invalid_state');
    });

    it('provision puts a GRE link and the map element into the edge; activate before the origin script is 409', async () => {
      const p = await timed('provision', () => api('POST', `/api/dedicated/${tunnel.id}/provision`));
      expect(await settle(p, 'provisioned')).toBe('provisioned');
      const [link] = JSON.parse(await vm.run('edge', ['ip', '-d', '-j', 'link', 'show', 'dev', tunnel.tunnel_name])) as {
        linkinfo: { info_kind: string; info_data: { local: string; remote: string } };
      }[];
      expect(link!.linkinfo).toMatchObject({ info_kind: 'gre', info_data: { local: LAB.edge, remote: LAB.origin } });
      expect(await vm.run('edge', ['nft', 'list', 'map', 'ip', 'tunnelgate', 'protected'])).toContain(tunnel.protected_ip);

      const a = await timed('activateRefused', () => api('POST', `/api/dedicated/${tunnel.id}/activate`));
      expect(a.status, a.text).toBe(409);
      expect(a.body.error).toBe('invalid_state');
      expect(a.body.error_description).toMatch(/origin script/);
      expect(await status()).toBe('provisioned');
    });

    it('after the origin script ran on the origin, activate is 200 active', async () => {
      const out = await timed('productOriginScript', () => vm.run('origin', ['bash', '-s'], script));
      expect(out).toContain(`GRE tunnel ${tunnel.tunnel_name} is up`);
      const a = await timed('activate', () => api('POST', `/api/dedicated/${tunnel.id}/activate`));
      expect(a.status, a.text).toBe(200);
      expect(a.body.tunnel.status).toBe('active');
      expect(await status()).toBe('active');
    });

    it('TCP and UDP from the client reach the origin, which sees the client; replies come from the protected IP', async () => {
      const addrs = JSON.parse(await vm.run('origin', ['ip', '-4', '-j', 'addr', 'show', 'dev', tunnel.tunnel_name])) as { addr_info: { local: string }[] }[];
      originInner = addrs[0]!.addr_info[0]!.local;
      await serve('udp-product', 'udp', originInner);
      const tcp = await timed('productTcp', () => client('tcp', tunnel.protected_ip));
      expect(tcp).toMatch(new RegExp(`^peer=${LAB.client} local=${originInner} got=hello-tcp-\\d$`));
      const udp = await timed('productUdp', () => client('udp', tunnel.protected_ip));
      expect(udp).toMatch(new RegExp(`^peer=${LAB.client} local= got=hello-udp-\\d$`));
      const ct = await vm.run('edge', ['conntrack', '-L', '-d', tunnel.protected_ip]);
      expect(ct).toMatch(new RegExp(`tcp .*src=${LAB.client} dst=${tunnel.protected_ip} .* src=${originInner} dst=${LAB.client}`));
      expect(ct).toMatch(new RegExp(`udp .*src=${LAB.client} dst=${tunnel.protected_ip} .* src=${originInner} dst=${LAB.client}`));
    });

    it('delete removes the GRE link, the map element and the conntrack entries, and the IP returns to stock', async () => {
      expect(await client('tcp', tunnel.protected_ip)).toContain(`peer=${LAB.client}`);
      expect(await vm.run('edge', ['conntrack', '-L', '-d', tunnel.protected_ip])).toContain(`dst=${tunnel.protected_ip}`);

      const d = await timed('delete', () => api('DELETE', `/api/dedicated/${tunnel.id}`));
      expect(await settle(d, 'deleted')).toBe('deleted');
      expect((await vm.exec({ ns: 'edge', argv: ['ip', 'link', 'show', 'dev', tunnel.tunnel_name] })).code).not.toBe(0);
      expect(await vm.run('edge', ['nft', 'list', 'map', 'ip', 'tunnelgate', 'protected'])).not.toContain(tunnel.protected_ip);
      expect((await vm.exec({ ns: 'edge', argv: ['conntrack', '-L', '-d', tunnel.protected_ip] })).stdout).not.toContain(`dst=${tunnel.protected_ip}`);
      expect(await stock()).toBe(stockBefore);
      expect(await client('tcp', tunnel.protected_ip, 1)).not.toContain('peer=');

      await vm.run('origin', ['bash', '-s', '--', '--remove'], script);
      await vm.stop('udp-product');
    });
  });
});
