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
//
// Waiting: koffi has no hook into Node's event loop, so a blocking wait runs in libuv's threadpool (4 threads,
// shared with fs, dns and crypto). A wait per probe (as before) put up to 16 health checks' 50 ms polls into
// it, and failing probes, which wait their whole timeout, queued behind each other and behind everything
// else. Now every probe's socket joins ONE epoll set per process (EchoWaiter): a single epoll_wait runs in
// the threadpool while any probe is pending, the sends and the timeout are timers on the event loop, and a
// readable socket is drained on the event loop. Each probe keeps its own socket bound to its tunnel link, so
// what `reachable` means is unchanged.
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
const EAGAIN = 11;
const EINTR = 4;

const EPOLLIN = 1;
const EPOLL_CTL_ADD = 1;
const EPOLL_CTL_DEL = 2;
const EPOLL_CLOEXEC = 0o2000000;
/** struct epoll_event: packed (12 bytes) on x86_64, 16 elsewhere; the fd sits in its data word. */
const EVENT_SIZE = process.arch === 'x64' ? 12 : 16;
const EVENT_DATA = process.arch === 'x64' ? 4 : 8;
const MAX_EVENTS = 64;

interface Sys {
  socket(d: number, t: number, p: number): number;
  setsockopt(fd: number, lvl: number, name: number, val: Buffer, len: number): number;
  bind(fd: number, addr: Buffer, len: number): number;
  sendto(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, alen: number): number;
  recv(fd: number, buf: Buffer, len: number, flags: number): number;
  close(fd: number): number;
  epollCreate(flags: number): number;
  epollCtl(epfd: number, op: number, fd: number, ev: Buffer | null): number;
  epollWait(epfd: number, events: Buffer, max: number, ms: number): Promise<number>;
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
  const epollCreate = lib.func('int epoll_create1(int)');
  const epollCtl = lib.func('int epoll_ctl(int, int, int, void *)');
  const epollWait = lib.func('int epoll_wait(int, void *, int, int)');
  sys = {
    socket: (d, t, p) => num(socket(d, t, p)),
    setsockopt: (fd, l, n, v, len) => num(setsockopt(fd, l, n, v, len)),
    bind: (fd, a, l) => num(bind(fd, a, l)),
    sendto: (fd, b, l, f, a, al) => num(sendto(fd, b, l, f, a, al)),
    recv: (fd, b, l, f) => num(recv(fd, b, l, f)),
    close: (fd) => num(close(fd)),
    epollCreate: (flags) => num(epollCreate(flags)),
    epollCtl: (epfd, op, fd, ev) => num(epollCtl(epfd, op, fd, ev)),
    epollWait: (epfd, events, max, ms) =>
      new Promise((res, rej) => epollWait.async(epfd, events, max, ms, (err: unknown, r: unknown) => (err ? rej(err as Error) : res(num(r))))),
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

/**
 * One epoll set for every probe socket of the process; one epoll_wait in the threadpool while any is
 * registered (none when idle). epoll_ctl from the event loop while that wait runs is what epoll allows, and
 * a socket added then is reported by the wait under way. A wake for an fd already closed and reused by a
 * newer probe is harmless: the probe drains its socket and finds nothing.
 */
class EchoWaiter {
  private epfd = -1;
  private readonly readable = new Map<number, () => void>();
  private waiting = false;
  private readonly events = Buffer.alloc(EVENT_SIZE * MAX_EVENTS);
  private readonly ev = Buffer.alloc(EVENT_SIZE);

  add(fd: number, onReadable: () => void): void {
    const s = load();
    if (this.epfd < 0) {
      this.epfd = s.epollCreate(EPOLL_CLOEXEC);
      if (this.epfd < 0) throw new Error(`epoll_create1 failed: errno ${koffi.errno()}`);
    }
    // The kernel copies the event at the call: one buffer serves every ADD.
    this.ev.writeUInt32LE(EPOLLIN, 0);
    this.ev.writeInt32LE(fd, EVENT_DATA);
    if (s.epollCtl(this.epfd, EPOLL_CTL_ADD, fd, this.ev) < 0) throw new Error(`epoll_ctl ADD: errno ${koffi.errno()}`);
    this.readable.set(fd, onReadable);
    if (!this.waiting) void this.loop();
  }

  /** Before the fd is closed. */
  remove(fd: number): void {
    if (!this.readable.delete(fd)) return;
    load().epollCtl(this.epfd, EPOLL_CTL_DEL, fd, null);
  }

  private async loop(): Promise<void> {
    this.waiting = true;
    try {
      // A bounded wait (100 ms) so that the loop notices when the last probe left; nothing waits on it.
      while (this.readable.size > 0) {
        const n = await load().epollWait(this.epfd, this.events, MAX_EVENTS, 100);
        for (let i = 0; i < n; i++) this.readable.get(this.events.readInt32LE(i * EVENT_SIZE + EVENT_DATA))?.();
      }
    } finally {
      this.waiting = false;
    }
  }
}

const waiter = new EchoWaiter();

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
  let timer: NodeJS.Timeout | undefined;
  let registered = false;
  try {
    const dev = Buffer.from(`${o.link}\0`);
    if (s.setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, dev, dev.length) < 0) throw new Error(`SO_BINDTODEVICE ${o.link}: errno ${koffi.errno()}`);
    if (s.bind(fd, sockaddrIn(o.source), 16) < 0) throw new Error(`bind ${o.source}: errno ${koffi.errno()}`);
    const id = randomBytes(2).readUInt16BE(0);
    const token = randomBytes(16);
    const dst = sockaddrIn(o.target);
    const sentAt = new Map<number, bigint>();
    const buf = Buffer.alloc(2048);
    return await new Promise<ProbeResult>((resolve, reject) => {
      let seq = 0;
      const send = () => {
        seq++;
        const req = echoRequest(id, seq, token);
        sentAt.set(seq, process.hrtime.bigint());
        // A send can fail while the link is down or has no route yet: keep listening, the next attempt may go.
        s.sendto(fd, req, req.length, 0, dst, 16);
      };
      /** Reads every datagram waiting (the socket is level-triggered in the epoll set); resolves on our reply. */
      const drain = () => {
        for (;;) {
          const n = s.recv(fd, buf, buf.length, MSG_DONTWAIT);
          if (n < 0) {
            const e = koffi.errno();
            if (e === EAGAIN || e === EINTR) return;
            reject(new Error(`recv: errno ${e}`));
            return;
          }
          const r = parseEchoReply(buf.subarray(0, n));
          if (r && r.src === o.target && r.id === id && r.payload.equals(token) && sentAt.has(r.seq)) {
            const rtt = Number(process.hrtime.bigint() - sentAt.get(r.seq)!) / 1e6;
            resolve({ reachable: true, rtt_ms: Math.round(rtt * 1000) / 1000 });
            return;
          }
        }
      };
      waiter.add(fd, drain);
      registered = true;
      // The attempts spread over the timeout (a lost first echo, a neighbour still resolving), then the end:
      // one timer at a time, so a probe answered at once set only one.
      const step = timeoutMs / attempts;
      const tick = () => {
        if (seq >= attempts) return resolve({ reachable: false });
        send();
        timer = setTimeout(tick, step);
      };
      tick();
    });
  } finally {
    clearTimeout(timer);
    if (registered) waiter.remove(fd);
    s.close(fd);
  }
}
