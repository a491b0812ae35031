// The lab's client and origin services, shared by the VM's test files (gre.test.ts, gre-product.test.ts, protection.test.ts):
// what they say, how a client tries, and how a server is known to be listening.
import type { TunnelSpec } from '../../agent/dataplane/types.ts';
import { renderOriginScripts } from '../../server/domain/origin-scripts.ts';
import { routeTableFor } from '../../server/domain/tunnels/index.ts';
import type { TestVm } from './vm.ts';

/** The origin script the gateway would hand the buyer of this tunnel (run with `bash -s` in the origin). */
export function originScript(t: TunnelSpec): string {
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
    routeTable: routeTableFor(t.origin_inner),
  }).origin;
}

// The origin's services answer with the peer address they saw and their own (post-DNAT) address.
const ANSWER = `read -r l; echo "peer=$SOCAT_PEERADDR local=$SOCAT_SOCKADDR got=$l"`;
export const TCP_PORT = 8080;
export const UDP_PORT = 5353;

/**
 * One exchange from the client, up to `attempts` fresh attempts (new source port, new conntrack entry); a
 * broken path fails all of them. TCP: socat connects to the protected IP, so an answer came from it.
 * UDP: bash's /dev/udp is a connected socket, which the kernel hands only datagrams whose source is the
 * protected IP; one `dd` read takes the whole datagram (bash's `read` would take one byte of it). Every
 * wait starts at the network step itself (socat's connect-timeout, -t and -T; `timeout dd` after the
 * send): on a loaded host the emulated guest can take seconds just to start a process.
 */
export async function labClient(vm: TestVm, proto: 'tcp' | 'udp', ip: string, opts: { attempts?: number; port?: number } = {}): Promise<string> {
  const attempts = opts.attempts ?? 3;
  const port = opts.port ?? (proto === 'tcp' ? TCP_PORT : UDP_PORT);
  let out = '';
  for (let i = 0; i < attempts && !out.includes('peer='); i++) {
    const argv =
      proto === 'tcp'
        ? ['socat', '-t10', '-T10', '-', `TCP4:${ip}:${port},connect-timeout=10`]
        : // --norc: the control server's pipes are sockets, so bash takes itself for an ssh session and
          // sources ~/.bashrc (the host's, shared over 9p), which cost 12-16 s per call in the guest.
          ['bash', '--norc', '--noprofile', '-c', `exec 3<>/dev/udp/${ip}/${port} && echo hello-udp-${i} >&3 && timeout 10 dd bs=4096 count=1 status=none <&3`];
    const r = await vm.exec({ ns: 'client', argv, input: `hello-tcp-${i}\n`, timeoutMs: 120_000 });
    out = r.stdout.trim();
    if (!out.includes('peer=')) process.stderr.write(`test/vm: ${proto} ${ip}:${port} attempt ${i + 1}: no answer after ${r.ms} ms (exit ${r.code ?? r.signal}) ${r.stderr.trim()}\n`);
  }
  return out;
}

/** Starts a socat server in the origin and waits until its socket is bound. */
export async function labServe(vm: TestVm, name: string, proto: 'tcp' | 'udp', opts: { bind?: string; port?: number } = {}): Promise<void> {
  const port = opts.port ?? (proto === 'tcp' ? TCP_PORT : UDP_PORT);
  const listen = proto === 'tcp' ? `TCP4-LISTEN:${port},reuseaddr,fork` : `UDP4-RECVFROM:${port},fork`;
  // -t10: once the client has sent its line and shut its side, the server still waits up to 10 s for the
  // answer script (socat's default is 0.5 s; a loaded guest can take longer just to fork the shell, and
  // the client then saw a clean close with no answer).
  await vm.spawn({ name, ns: 'origin', argv: ['socat', '-t10', opts.bind ? `${listen},bind=${opts.bind}` : listen, `SYSTEM:${ANSWER}`] });
  const want = `${opts.bind ?? (proto === 'tcp' ? '0.0.0.0' : '*')}:${port} `;
  for (let i = 0; ; i++) {
    const ss = await vm.run('origin', ['ss', '-Hln', proto === 'tcp' ? '-t' : '-u']);
    if (ss.includes(want)) return;
    if (i > 100) throw new Error(`origin: ${name} is not listening on ${want}: ${ss}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
