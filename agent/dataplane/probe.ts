// The activation probe (docs/CONTRACTS.md "Exact rules"): an ICMP echo to the origin's inner address, sent from
// the edge's own underlay address (edge_ip, outside the tunnel's inner subnet) out of the tunnel link.
// The origin answers to edge_ip; only its policy route (`ip rule from <origin inner> lookup <table>`) sends
// that answer into the tunnel, otherwise it leaves by its main table (the underlay). The socket is bound
// to the tunnel link (SO_BINDTODEVICE), so the kernel delivers to it only what arrived through the tunnel:
// `reachable` means the reply came back through the tunnel.
//
// Why a raw socket through koffi rather than `ping -I`: ping can pin the source address or the device but
// not both (and with the device it picks the inner address, which would make the probe pass without the
// origin's policy route); koffi is already how the agent talks to the kernel, and an echo costs no process.
import { randomBytes } from 'node:crypto';
import koffi from 'koffi';
import { ipv4ToBytes } from '../netlink/attrs.ts';
import { inNetns } from './netns.ts';
import type { ProbeResult } from './types.ts';

const AF_INET = 2;
const SOCK_RAW = 3;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const IPPROTO_ICMP = 1;
const SOL_SOCKET = 1;
const SO_BINDTODEVICE = 25;
const MSG_DONTWAIT = 0x40;
const POLLIN = 1;
const EAGAIN = 11;
const EINTR = 4;

interface Sys {
  socket(d: number, t: number, p: number): number;
  setsockopt(fd: number, lvl: number, name: number, val: Buffer, len: number): number;
  bind(fd: number, addr: Buffer, len: number): number;
  sendto(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, alen: number): number;
  recv(fd: number, buf: Buffer, len: number, flags: number): number;
  close(fd: number): number;
  poll(pfd: Buffer, n: number, ms: number): Promise<number>;
}

let sys: Sys | undefined;
function load(): Sys {
  if (sys) return sys;
  const lib = koffi.load('libc.so.6');
  const num = (v: unknown): number => (typeof v === 'bigint' ? Number(v) : (v as number));
  const socket = lib.func('int socket(int, int, int)');
  const setsockopt = lib.func('int setsockopt(int, int, int, void *, uint32_t)');
  const bind = lib.func('int bind(int, void *, uint32_t)');
  const sendto = lib.func('intptr_t sendto(int, void *, size_t, int, void *, uint32_t)');
  const recv = lib.func('intptr_t recv(int, void *, size_t, int)');
  const close = lib.func('int close(int)');
  const poll = lib.func('int poll(void *, unsigned long, int)');
  sys = {
    socket: (d, t, p) => num(socket(d, t, p)),
    setsockopt: (fd, l, n, v, len) => num(setsockopt(fd, l, n, v, len)),
    bind: (fd, a, l) => num(bind(fd, a, l)),
    sendto: (fd, b, l, f, a, al) => num(sendto(fd, b, l, f, a, al)),
    recv: (fd, b, l, f) => num(recv(fd, b, l, f)),
    close: (fd) => num(close(fd)),
    poll: (pfd, n, ms) => new Promise((res, rej) => poll.async(pfd, n, ms, (err: unknown, r: unknown) => (err ? rej(err as Error) : res(num(r))))),
  };
  return sys;
}

function sockaddrIn(ip: string): Buffer {
  const b = Buffer.alloc(16);
  b.writeUInt16LE(AF_INET, 0); // sa_family is host order (x86_64/aarch64: little endian)
  ipv4ToBytes(ip).copy(b, 4);
  return b;
}

export function icmpChecksum(b: Buffer): number {
  let sum = 0;
  for (let i = 0; i + 1 < b.length; i += 2) sum += b.readUInt16BE(i);
  if (b.length % 2) sum += b[b.length - 1]! << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return ~sum & 0xffff;
}

export function echoRequest(id: number, seq: number, payload: Buffer): Buffer {
  const b = Buffer.alloc(8 + payload.length);
  b[0] = 8; // echo request
  b.writeUInt16BE(id, 4);
  b.writeUInt16BE(seq, 6);
  payload.copy(b, 8);
  b.writeUInt16BE(icmpChecksum(b), 2);
  return b;
}

/** Parses an IPv4 datagram (what a raw socket returns); the echo reply's source, id, seq and payload. */
export function parseEchoReply(pkt: Buffer): { src: string; id: number; seq: number; payload: Buffer } | undefined {
  if (pkt.length < 20 || pkt[0]! >> 4 !== 4) return undefined;
  const ihl = (pkt[0]! & 0x0f) * 4;
  if (pkt[9] !== IPPROTO_ICMP || pkt.length < ihl + 8) return undefined;
  const icmp = pkt.subarray(ihl);
  if (icmp[0] !== 0 || icmp[1] !== 0) return undefined;
  return { src: `${pkt[12]}.${pkt[13]}.${pkt[14]}.${pkt[15]}`, id: icmp.readUInt16BE(4), seq: icmp.readUInt16BE(6), payload: icmp.subarray(8) };
}

export interface ProbeOptions {
  netns?: string;
  /** The tunnel link the reply must arrive on. */
  link: string;
  /** Source: an address of the edge outside the tunnel's inner subnet. */
  source: string;
  target: string;
  timeoutMs?: number;
  /** Echoes sent, spread over the timeout (a lost first packet, an ARP/neighbour delay). */
  attempts?: number;
}

export async function probeEcho(o: ProbeOptions): Promise<ProbeResult> {
  const s = load();
  const timeoutMs = o.timeoutMs ?? 3000;
  const attempts = o.attempts ?? 3;
  const fd = inNetns(o.netns, () => s.socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_ICMP));
  if (fd < 0) throw new Error(`socket(AF_INET, SOCK_RAW, IPPROTO_ICMP) failed: errno ${koffi.errno()}`);
  try {
    const dev = Buffer.from(`${o.link}\0`);
    if (s.setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, dev, dev.length) < 0) throw new Error(`SO_BINDTODEVICE ${o.link}: errno ${koffi.errno()}`);
    if (s.bind(fd, sockaddrIn(o.source), 16) < 0) throw new Error(`bind ${o.source}: errno ${koffi.errno()}`);
    const id = randomBytes(2).readUInt16BE(0);
    const token = randomBytes(16);
    const dst = sockaddrIn(o.target);
    const sentAt = new Map<number, bigint>();
    const pfd = Buffer.alloc(8);
    pfd.writeInt32LE(fd, 0);
    pfd.writeUInt16LE(POLLIN, 4);
    const buf = Buffer.alloc(2048);
    const start = Date.now();
    let nextSend = start;
    let seq = 0;
    while (Date.now() - start < timeoutMs) {
      if (seq < attempts && Date.now() >= nextSend) {
        seq++;
        const req = echoRequest(id, seq, token);
        sentAt.set(seq, process.hrtime.bigint());
        // A send can fail while the link is down or has no route yet: keep listening, the next attempt may go.
        s.sendto(fd, req, req.length, 0, dst, 16);
        nextSend = start + (timeoutMs * seq) / attempts;
      }
      for (;;) {
        const n = s.recv(fd, buf, buf.length, MSG_DONTWAIT);
        if (n < 0) {
          const e = koffi.errno();
          if (e === EAGAIN || e === EINTR) break;
          throw new Error(`recv: errno ${e}`);
        }
        const r = parseEchoReply(buf.subarray(0, n));
        if (r && r.src === o.target && r.id === id && r.payload.equals(token) && sentAt.has(r.seq)) {
          const rtt = Number(process.hrtime.bigint() - sentAt.get(r.seq)!) / 1e6;
          return { reachable: true, rtt_ms: Math.round(rtt * 1000) / 1000 };
        }
      }
      const untilSend = seq < attempts ? nextSend - Date.now() : Number.POSITIVE_INFINITY;
      const wait = Math.max(1, Math.min(50, untilSend, timeoutMs - (Date.now() - start)));
      await s.poll(pfd, 1, wait);
    }
    return { reachable: false };
  } finally {
    s.close(fd);
  }
}
