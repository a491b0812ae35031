// The activation probe (docs/CONTRACTS.md "Exact rules"): an ICMP echo to the origin's inner address, sent from
// the edge's own underlay address (edge_ip, outside the tunnel's inner subnet) out of the tunnel link.
// The origin answers to edge_ip; only its policy route (`ip rule from <origin inner> lookup <table>`) sends
// that answer into the tunnel, otherwise it leaves by its main table (the underlay). `reachable` means the
// reply came back THROUGH THE TUNNEL LINK: a reply counts only if the kernel says it arrived on that link's
// ifindex (IP_PKTINFO), and matches the echo's id, seq and payload.
//
// Why a raw socket through koffi rather than `ping -I`: ping can pin the source address or the device but
// not both (and with the device it picks the inner address, which would make the probe pass without the
// origin's policy route); koffi is already how the agent talks to the kernel, and an echo costs no process.
//
// One socket per dataplane (EchoProber), not one per probe (a node has up to 10,000 tunnels, each checked every 30 s).
// A socket per probe cost, every time, a switch into the edge namespace and back (two setns and four
// open/close), socket, SO_BINDTODEVICE, bind, two epoll_ctl and close, plus a netlink RTM_GETLINK decoded whole
// to learn whether the link was up. Now the socket is opened once (in the namespace, where it stays) and:
//  - each echo is sent with sendmsg and an IP_PKTINFO control message: ipi_ifindex = the tunnel link (the
//    route lookup is pinned to it, as SO_BINDTODEVICE pinned it) and ipi_spec_dst = edge_ip (the source, as
//    bind() set it);
//  - each reply is read with recvmsg and IP_PKTINFO on: the kernel tells the ifindex it arrived on, which
//    must be the probe's link (what SO_BINDTODEVICE filtered before); ICMP_FILTER passes echo replies only;
//  - the link's ifindex and IFF_UP come from one RTM_GETLINK by name (LinkLookup: a route socket of the
//    prober's own, in the namespace), at every probe: a tunnel recreated under the same name has a new ifindex.
//    Never from an ioctl on the name (SIOCGIFINDEX, SIOCGIFFLAGS): for a name that does not exist (a tunnel of the
//    desired state whose link is not made yet, or failed) the kernel's dev_load() runs modprobe for
//    "netdev-<name>" and then "<name>" and waits for each in the calling thread, uninterruptibly: the event loop.
//    With a couple of hundred such tunnels checked every few seconds that held the agent's main thread in the
//    kernel almost without pause (Debian 12's kernel in the VM: a reconcile, the SSH handshakes and SIGTERM
//    all waited behind it, test/vm/reconcile-stress.test.ts; docs/CONTRACTS.md "Health and status"). rtnetlink looks
//    the name up and answers ENODEV.
//
// Waiting: koffi has no hook into Node's event loop, so a blocking wait runs in libuv's threadpool (4 threads,
// shared with fs, dns and crypto). The prober sockets of the process share ONE epoll set (EchoWaiter): a
// single epoll_wait runs in the threadpool while any probe is pending (none when idle), the sends and the
// timeout are timers on the event loop, and a readable socket is drained on the event loop.
import { randomBytes } from 'node:crypto';
import koffi from 'koffi';
import { ipv4ToBytes } from '../netlink/attrs.ts';
import { inNetns } from './netns.ts';
import type { ProbeResult } from './types.ts';

const AF_INET = 2;
const SOCK_RAW = 3;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const IPPROTO_IP = 0;
const IPPROTO_ICMP = 1;
const IP_PKTINFO = 8;
const SOL_RAW = 255;
const ICMP_FILTER = 1;
const ICMP_ECHOREPLY = 0;
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

// LP64 layouts (x86_64, aarch64): struct msghdr (56 bytes), struct iovec (16), struct cmsghdr (16 + data),
// struct in_pktinfo (ifindex, spec_dst, addr: 12).
const MSGHDR = { name: 0, namelen: 8, iov: 16, iovlen: 24, control: 32, controllen: 40, flags: 48, size: 56 } as const;
const CMSG_HDR = 16;
const PKTINFO_LEN = 12;
/** CMSG_SPACE(sizeof(struct in_pktinfo)). */
const PKTINFO_SPACE = CMSG_HDR + 16;
const PACKET_MAX = 2048;

interface Sys {
  socket(d: number, t: number, p: number): number;
  setsockopt(fd: number, lvl: number, name: number, val: Buffer, len: number): number;
  sendmsg(fd: number, msg: Buffer, flags: number): number;
  recvmsg(fd: number, msg: Buffer, flags: number): number;
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
  const sendmsg = lib.func('intptr_t sendmsg(int, void *, int)');
  const recvmsg = lib.func('intptr_t recvmsg(int, void *, int)');
  const close = lib.func('int close(int)');
  const epollCreate = lib.func('int epoll_create1(int)');
  const epollCtl = lib.func('int epoll_ctl(int, int, int, void *)');
  const epollWait = lib.func('int epoll_wait(int, void *, int, int)');
  sys = {
    socket: (d, t, p) => num(socket(d, t, p)),
    setsockopt: (fd, l, n, v, len) => num(setsockopt(fd, l, n, v, len)),
    sendmsg: (fd, m, f) => num(sendmsg(fd, m, f)),
    recvmsg: (fd, m, f) => num(recvmsg(fd, m, f)),
    close: (fd) => num(close(fd)),
    epollCreate: (flags) => num(epollCreate(flags)),
    epollCtl: (epfd, op, fd, ev) => num(epollCtl(epfd, op, fd, ev)),
    epollWait: (epfd, events, max, ms) =>
      new Promise((res, rej) => epollWait.async(epfd, events, max, ms, (err: unknown, r: unknown) => (err ? rej(err as Error) : res(num(r))))),
  };
  return sys;
}

/** The IPv4 address as the 32-bit number of its network-order bytes (read big endian), to compare without strings. */
function ipv4Number(ip: string): number {
  return ipv4ToBytes(ip).readUInt32BE(0);
}

function icmpChecksum(b: Buffer): number {
  let sum = 0;
  for (let i = 0; i + 1 < b.length; i += 2) sum += b.readUInt16BE(i);
  if (b.length % 2) sum += b[b.length - 1]! << 8;
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return ~sum & 0xffff;
}

/** Parses an IPv4 datagram (what a raw socket returns); the echo reply's source, id, seq and payload. */
function parseEchoReply(pkt: Buffer): { src: string; id: number; seq: number; payload: Buffer } | undefined {
  if (pkt.length < 20 || pkt[0]! >> 4 !== 4) return undefined;
  const ihl = (pkt[0]! & 0x0f) * 4;
  if (pkt[9] !== IPPROTO_ICMP || pkt.length < ihl + 8) return undefined;
  const icmp = pkt.subarray(ihl);
  if (icmp[0] !== 0 || icmp[1] !== 0) return undefined;
  return { src: `${pkt[12]}.${pkt[13]}.${pkt[14]}.${pkt[15]}`, id: icmp.readUInt16BE(4), seq: icmp.readUInt16BE(6), payload: icmp.subarray(8) };
}

/**
 * One epoll set for every prober socket of the process; one epoll_wait in the threadpool while any probe is
 * pending (none when idle: an idle socket stays in the set, unwatched). epoll_ctl from the event loop while
 * that wait runs is what epoll allows, and a socket added then is reported by the wait under way.
 */
class EchoWaiter {
  private epfd = -1;
  private readonly readable = new Map<number, () => void>();
  /** Probes pending in every prober: the wait runs while there is one. */
  private pending = 0;
  private waiting = false;
  private readonly events = Buffer.alloc(EVENT_SIZE * MAX_EVENTS);
  private readonly ev = Buffer.alloc(EVENT_SIZE);

  add(fd: number, onReadable: () => void): void {
    const s = load();
    if (this.epfd < 0) {
      this.epfd = s.epollCreate(EPOLL_CLOEXEC);
      if (this.epfd < 0) throw new Error(`epoll_create1 failed: errno ${koffi.errno()}`);
    }
    this.ev.writeUInt32LE(EPOLLIN, 0);
    this.ev.writeInt32LE(fd, EVENT_DATA);
    if (s.epollCtl(this.epfd, EPOLL_CTL_ADD, fd, this.ev) < 0) throw new Error(`epoll_ctl ADD: errno ${koffi.errno()}`);
    this.readable.set(fd, onReadable);
  }

  /** Before the fd is closed. */
  remove(fd: number): void {
    if (!this.readable.delete(fd)) return;
    load().epollCtl(this.epfd, EPOLL_CTL_DEL, fd, null);
  }

  /** A probe starts waiting: the loop runs until every such probe called done(). */
  hold(): void {
    this.pending++;
    if (!this.waiting) void this.loop();
  }

  done(): void {
    this.pending--;
  }

  private async loop(): Promise<void> {
    this.waiting = true;
    try {
      // A bounded wait (100 ms) so that the loop notices when the last probe left; nothing waits on it.
      while (this.pending > 0) {
        const n = await load().epollWait(this.epfd, this.events, MAX_EVENTS, 100);
        for (let i = 0; i < n; i++) this.readable.get(this.events.readInt32LE(i * EVENT_SIZE + EVENT_DATA))?.();
      }
    } finally {
      this.waiting = false;
    }
  }
}

const waiter = new EchoWaiter();

/** The link named `name`: its ifindex and whether it is up; undefined when there is none (agent/netlink Rtnl.linkState). */
type LinkLookup = (name: string) => Promise<{ index: number; up: boolean } | undefined>;

export interface ProbeOptions {
  /** The tunnel link the echo leaves by and the reply must arrive on. */
  link: string;
  /** Source: an address of the edge outside the tunnel's inner subnet. */
  source: string;
  target: string;
  timeoutMs?: number;
  /** Echoes sent, spread over the timeout (a lost first packet, an ARP/neighbour delay). */
  attempts?: number;
}

interface Pending {
  ifindex: number;
  target: number;
  token: Buffer;
  /** performance.now() at each attempt's send, by seq - 1. */
  sentAt: number[];
  resolve: (r: ProbeResult) => void;
}

/** Per-probe payload: a random prefix of this prober, then a counter, so no two probes' echoes look alike. */
const TOKEN_LEN = 16;

/**
 * The probes of one network namespace (the dataplane's; undefined: the agent's own), on one raw ICMP socket
 * opened at the first probe and closed by close(). Echo ids are handed out in turn, so pending probes never
 * share one; a reply is matched by id, then checked for its source, seq, payload and arrival link.
 */
export class EchoProber {
  private fd = -1;
  private closed = false;
  private readonly pending = new Map<number, Pending>();
  private nextId = randomBytes(2).readUInt16BE(0);
  private readonly prefix = randomBytes(8);
  private counter = 0n;
  // Reused for every send and receive: koffi passes them as pointers, and the msghdrs hold their addresses
  // (one arena, larger than V8 keeps on its heap, so it never moves).
  private readonly arena = Buffer.alloc(4096);
  private readonly txMsg = this.arena.subarray(0, MSGHDR.size);
  private readonly txIov = this.arena.subarray(64, 80);
  private readonly txName = this.arena.subarray(80, 96);
  private readonly txCtl = this.arena.subarray(96, 96 + PKTINFO_SPACE);
  private readonly rxMsg = this.arena.subarray(192, 192 + MSGHDR.size);
  private readonly rxIov = this.arena.subarray(256, 272);
  private readonly rxName = this.arena.subarray(272, 288);
  private readonly rxCtl = this.arena.subarray(320, 448);
  private readonly rxBuf = this.arena.subarray(1024, 1024 + PACKET_MAX);
  private readonly txBuf = this.arena.subarray(3072, 3072 + 8 + TOKEN_LEN);

  constructor(
    private readonly netns: string | undefined,
    /** The tunnel link's ifindex and whether it is up, by name (undefined: no such link). */
    private readonly lookup: LinkLookup,
  ) {
    const addr = (b: Buffer): bigint => koffi.address(b) as bigint;
    this.txMsg.writeBigUInt64LE(addr(this.txName), MSGHDR.name);
    this.txMsg.writeUInt32LE(16, MSGHDR.namelen);
    this.txMsg.writeBigUInt64LE(addr(this.txIov), MSGHDR.iov);
    this.txMsg.writeBigUInt64LE(1n, MSGHDR.iovlen);
    this.txMsg.writeBigUInt64LE(addr(this.txCtl), MSGHDR.control);
    this.txMsg.writeBigUInt64LE(BigInt(PKTINFO_SPACE), MSGHDR.controllen);
    this.txIov.writeBigUInt64LE(addr(this.txBuf), 0);
    this.txIov.writeBigUInt64LE(BigInt(this.txBuf.length), 8);
    this.txName.writeUInt16LE(AF_INET, 0); // sa_family is host order (x86_64/aarch64: little endian)
    this.txCtl.writeBigUInt64LE(BigInt(CMSG_HDR + PKTINFO_LEN), 0);
    this.txCtl.writeInt32LE(IPPROTO_IP, 8);
    this.txCtl.writeInt32LE(IP_PKTINFO, 12);
    this.rxMsg.writeBigUInt64LE(addr(this.rxName), MSGHDR.name);
    this.rxMsg.writeBigUInt64LE(addr(this.rxIov), MSGHDR.iov);
    this.rxMsg.writeBigUInt64LE(1n, MSGHDR.iovlen);
    this.rxMsg.writeBigUInt64LE(addr(this.rxCtl), MSGHDR.control);
    this.rxIov.writeBigUInt64LE(addr(this.rxBuf), 0);
    this.rxIov.writeBigUInt64LE(BigInt(this.rxBuf.length), 8);
  }

  private socket(): number {
    if (this.fd >= 0) return this.fd;
    if (this.closed) throw new Error('the prober is closed');
    const s = load();
    const fd = inNetns(this.netns, () => s.socket(AF_INET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_ICMP));
    if (fd < 0) throw new Error(`socket(AF_INET, SOCK_RAW, IPPROTO_ICMP) failed: errno ${koffi.errno()}`);
    try {
      const on = Buffer.alloc(4);
      on.writeInt32LE(1, 0);
      if (s.setsockopt(fd, IPPROTO_IP, IP_PKTINFO, on, 4) < 0) throw new Error(`IP_PKTINFO: errno ${koffi.errno()}`);
      // The types the socket does NOT receive: all but echo replies (the namespace's other ICMP is not ours).
      const filter = Buffer.alloc(4);
      filter.writeUInt32LE(~(1 << ICMP_ECHOREPLY) >>> 0, 0);
      if (s.setsockopt(fd, SOL_RAW, ICMP_FILTER, filter, 4) < 0) throw new Error(`ICMP_FILTER: errno ${koffi.errno()}`);
      waiter.add(fd, () => this.drain());
    } catch (e) {
      s.close(fd);
      throw e;
    }
    this.fd = fd;
    return fd;
  }

  /** The link's ifindex when it exists and is up; undefined otherwise (no probe through a link that is down). */
  private async upLink(link: string): Promise<number | undefined> {
    const l = await this.lookup(link);
    return l?.up ? l.index : undefined;
  }

  private allocId(): number {
    for (;;) {
      this.nextId = (this.nextId + 1) & 0xffff;
      if (!this.pending.has(this.nextId)) return this.nextId;
    }
  }

  private send(fd: number, id: number, seq: number, p: Pending, source: number): void {
    const b = this.txBuf;
    b.fill(0, 0, 8);
    b[0] = 8; // echo request
    b.writeUInt16BE(id, 4);
    b.writeUInt16BE(seq, 6);
    p.token.copy(b, 8);
    b.writeUInt16BE(icmpChecksum(b), 2);
    this.txName.writeUInt32BE(p.target, 4);
    this.txCtl.writeInt32LE(p.ifindex, CMSG_HDR);
    this.txCtl.writeUInt32BE(source, CMSG_HDR + 4);
    this.txCtl.writeUInt32BE(0, CMSG_HDR + 8);
    p.sentAt[seq - 1] = performance.now();
    // A send can fail while the link is down or has no route yet: keep listening, the next attempt may go.
    load().sendmsg(fd, this.txMsg, MSG_DONTWAIT);
  }

  /** Reads every datagram waiting (the socket is level-triggered in the epoll set); resolves the probes answered. */
  private drain(): void {
    if (this.fd < 0) return;
    const s = load();
    for (;;) {
      this.rxMsg.writeUInt32LE(16, MSGHDR.namelen);
      this.rxMsg.writeBigUInt64LE(BigInt(this.rxCtl.length), MSGHDR.controllen);
      const n = s.recvmsg(this.fd, this.rxMsg, MSG_DONTWAIT);
      if (n < 0) {
        const e = koffi.errno();
        if (e !== EINTR) return; // EAGAIN: drained. Anything else: the next wake tries again, the timeout ends the probe.
        continue;
      }
      const r = parseEchoReply(this.rxBuf.subarray(0, n));
      if (!r) continue;
      const p = this.pending.get(r.id);
      if (!p || this.rxBuf.readUInt32BE(12) !== p.target || !r.payload.equals(p.token)) continue;
      const sent = p.sentAt[r.seq - 1];
      if (sent === undefined) continue;
      // Where it arrived: a reply that came back by any other link (the underlay) is not the tunnel's.
      if (this.arrivedOn() !== p.ifindex) continue;
      const rtt = performance.now() - sent;
      p.resolve({ reachable: true, rtt_ms: Math.round(rtt * 1000) / 1000 });
    }
  }

  /** The IP_PKTINFO ipi_ifindex of the datagram just received; -1 without one. */
  private arrivedOn(): number {
    const ctl = this.rxCtl;
    const len = Number(this.rxMsg.readBigUInt64LE(MSGHDR.controllen));
    for (let at = 0; at + CMSG_HDR <= len; ) {
      const clen = Number(ctl.readBigUInt64LE(at));
      if (clen < CMSG_HDR) break;
      if (ctl.readInt32LE(at + 8) === IPPROTO_IP && ctl.readInt32LE(at + 12) === IP_PKTINFO && clen >= CMSG_HDR + PKTINFO_LEN) return ctl.readInt32LE(at + CMSG_HDR);
      at += (clen + 7) & ~7;
    }
    return -1;
  }

  async probe(o: ProbeOptions): Promise<ProbeResult> {
    const timeoutMs = o.timeoutMs ?? 3000;
    const attempts = o.attempts ?? 3;
    const fd = this.socket();
    const ifindex = await this.upLink(o.link);
    if (ifindex === undefined) return { reachable: false };
    const source = ipv4Number(o.source);
    const id = this.allocId();
    const token = Buffer.allocUnsafe(TOKEN_LEN);
    this.prefix.copy(token, 0);
    token.writeBigUInt64BE(this.counter++, 8);
    let timer: NodeJS.Timeout | undefined;
    waiter.hold();
    try {
      return await new Promise<ProbeResult>((resolve) => {
        const p: Pending = { ifindex, target: ipv4Number(o.target), token, sentAt: [], resolve };
        this.pending.set(id, p);
        // The attempts spread over the timeout (a lost first echo, a neighbour still resolving), then the end:
        // one timer at a time, so a probe answered at once set only one.
        const step = timeoutMs / attempts;
        let seq = 0;
        const tick = () => {
          if (seq >= attempts || this.fd < 0) return resolve({ reachable: false });
          this.send(fd, id, ++seq, p, source);
          timer = setTimeout(tick, step);
        };
        tick();
      });
    } finally {
      clearTimeout(timer);
      this.pending.delete(id);
      waiter.done();
    }
  }

  /** Closes the socket; probes pending end unanswered at their next attempt. */
  close(): void {
    this.closed = true;
    if (this.fd < 0) return;
    waiter.remove(this.fd);
    load().close(this.fd);
    this.fd = -1;
  }
}
