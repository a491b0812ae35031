// The only netlink endpoint that touches the OS: a raw, non-blocking AF_NETLINK socket through koffi (FFI to
// libc), opened in a network namespace when asked. socket.ts runs the request machinery over any
// NetlinkEndpoint; why its sends and waits are made as they are (the event loop, worker threads, deadlines)
// is said at the top of socket.ts.
import { closeSync, openSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import koffi from 'koffi';
import { HOST_LE } from './attrs.ts';
import { NetlinkError } from './message.ts';
import type { NetlinkEndpoint, NetlinkSocketOptions } from './endpoint.ts';

const E = osConstants.errno;

/** How long one async poll() may occupy its worker thread before the socket looks at deadlines again. */
export const POLL_SLICE_MS = 50;

// include/linux/socket.h / asm-generic/socket.h (x86_64 and aarch64 share these)
const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const SOL_SOCKET = 1;
const SO_SNDBUF = 7;
const SO_RCVBUF = 8;
const SO_SNDBUFFORCE = 32;
const SO_RCVBUFFORCE = 33;
const SOL_NETLINK = 270;
const MSG_TRUNC = 0x20;
const MSG_DONTWAIT = 0x40;
// include/uapi/linux/netlink.h: socket options
const NETLINK_ADD_MEMBERSHIP = 1;
const NETLINK_DROP_MEMBERSHIP = 2;
const NETLINK_CAP_ACK = 10;
const NETLINK_EXT_ACK = 11;
/** Dump requests' headers are checked and their filters honoured (an address dump of one ifindex). */
const NETLINK_GET_STRICT_CHK = 12;
// include/uapi/linux/sched.h
const CLONE_NEWNET = 0x40000000;
// include/uapi/asm-generic/poll.h
const POLLIN = 0x1;


interface Libc {
  socket(domain: number, type: number, protocol: number): number;
  bind(fd: number, addr: Buffer, len: number): number;
  getsockname(fd: number, addr: Buffer, len: Buffer): number;
  setsockopt(fd: number, level: number, name: number, val: Buffer, len: number): number;
  getsockopt(fd: number, level: number, name: number, val: Buffer, len: Buffer): number;
  sendto(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, addrlen: number): number;
  /** sendto() on a worker thread; -1 on failure (the worker's errno does not reach us). */
  sendtoAsync(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, addrlen: number): Promise<number>;
  recv(fd: number, buf: Buffer, len: number, flags: number): number;
  recvfrom(fd: number, buf: Buffer, len: number, flags: number, addr: Buffer, addrlen: Buffer): number;
  close(fd: number): number;
  setns(fd: number, nstype: number): number;
  pollAsync(pfd: Buffer, nfds: number, timeoutMs: number): Promise<number>;
}

let libc: Libc | undefined;

function loadLibc(): Libc {
  if (libc) return libc;
  const lib = koffi.load('libc.so.6');
  const socket = lib.func('int socket(int domain, int type, int protocol)');
  const bind = lib.func('int bind(int fd, void *addr, uint32_t len)');
  const getsockname = lib.func('int getsockname(int fd, void *addr, void *len)');
  const setsockopt = lib.func('int setsockopt(int fd, int level, int name, void *val, uint32_t len)');
  const getsockopt = lib.func('int getsockopt(int fd, int level, int name, void *val, void *len)');
  const sendto = lib.func('intptr_t sendto(int fd, void *buf, size_t len, int flags, void *addr, uint32_t addrlen)');
  const recv = lib.func('intptr_t recv(int fd, void *buf, size_t len, int flags)');
  const recvfrom = lib.func('intptr_t recvfrom(int fd, void *buf, size_t len, int flags, void *addr, void *addrlen)');
  const close = lib.func('int close(int fd)');
  const setns = lib.func('int setns(int fd, int nstype)');
  const poll = lib.func('int poll(void *fds, unsigned long nfds, int timeout)');
  // koffi returns intptr_t as number or bigint depending on magnitude; ours are always small.
  const num = (v: unknown): number => (typeof v === 'bigint' ? Number(v) : (v as number));
  libc = {
    socket: (d, t, p) => num(socket(d, t, p)),
    bind: (fd, a, l) => num(bind(fd, a, l)),
    getsockname: (fd, a, l) => num(getsockname(fd, a, l)),
    setsockopt: (fd, lv, n, v, l) => num(setsockopt(fd, lv, n, v, l)),
    getsockopt: (fd, lv, n, v, l) => num(getsockopt(fd, lv, n, v, l)),
    sendto: (fd, b, l, f, a, al) => num(sendto(fd, b, l, f, a, al)),
    sendtoAsync: (fd, b, l, f, a, al) =>
      new Promise<number>((resolve, reject) => {
        sendto.async(fd, b, l, f, a, al, (err: unknown, res: unknown) => (err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve(num(res))));
      }),
    recv: (fd, b, l, f) => num(recv(fd, b, l, f)),
    recvfrom: (fd, b, l, f, a, al) => num(recvfrom(fd, b, l, f, a, al)),
    close: (fd) => num(close(fd)),
    setns: (fd, t) => num(setns(fd, t)),
    pollAsync: (pfd, n, t) =>
      new Promise<number>((resolve, reject) => {
        poll.async(pfd, n, t, (err: unknown, res: unknown) => (err ? reject(err instanceof Error ? err : new Error(String(err))) : resolve(num(res))));
      }),
  };
  return libc;
}

function errno(): number {
  return koffi.errno();
}

export function sysError(operation: string, e = errno()): NetlinkError {
  return new NetlinkError({ errno: e, operation });
}

/** The real endpoint: a non-blocking AF_NETLINK socket through koffi. */
export class KernelEndpoint implements NetlinkEndpoint {
  private readonly kernelAddr = Buffer.alloc(12); // struct sockaddr_nl, nl_pid 0 = the kernel
  private readonly pollFd = Buffer.alloc(8); // struct pollfd
  private readonly senderAddr = Buffer.alloc(12); // struct sockaddr_nl of recvfrom
  private readonly senderLen = Buffer.alloc(4);
  private fd: number;
  /** The poll() running on a worker thread, if any (wait()). */
  private polling: Promise<void> | undefined;
  readonly sendAsync?: (data: Buffer) => Promise<number>;

  constructor(
    fd: number,
    readonly portId: number,
    offThread = false,
  ) {
    this.fd = fd;
    if (offThread) this.sendAsync = (data) => this.sendOffThread(data);
    this.kernelAddr.writeUInt16LE(AF_NETLINK, 0);
    if (HOST_LE) this.pollFd.writeInt32LE(fd, 0);
    else this.pollFd.writeInt32BE(fd, 0);
    const ev = Buffer.alloc(2);
    if (HOST_LE) ev.writeUInt16LE(POLLIN);
    else ev.writeUInt16BE(POLLIN);
    ev.copy(this.pollFd, 4);
  }

  static open(protocol: number, opts: NetlinkSocketOptions): KernelEndpoint {
    const c = loadLibc();
    const fd = opts.netns ? inNetns(c, opts.netns, () => c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol)) : c.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
    if (fd < 0) throw sysError('socket(AF_NETLINK)');
    try {
      setBuf(c, fd, SO_RCVBUFFORCE, SO_RCVBUF, opts.rcvbuf ?? 32 * 1024 * 1024);
      setBuf(c, fd, SO_SNDBUFFORCE, SO_SNDBUF, opts.sndbuf ?? 32 * 1024 * 1024);
      // Extended acks give the kernel's reason text; capped acks keep a failing 64 KiB message from
      // being echoed back whole (which would eat the receive buffer on a big batch).
      setInt(c, fd, SOL_NETLINK, NETLINK_EXT_ACK, 1);
      setInt(c, fd, SOL_NETLINK, NETLINK_CAP_ACK, 1);
      if (opts.strictDumps) {
        try {
          setInt(c, fd, SOL_NETLINK, NETLINK_GET_STRICT_CHK, 1);
        } catch {
          // An older kernel: dumps stay unfiltered, which the callers' own filters cover.
        }
      }
      const addr = Buffer.alloc(12);
      addr.writeUInt16LE(AF_NETLINK, 0);
      if (c.bind(fd, addr, 12) < 0) throw sysError('bind(AF_NETLINK)');
      const len = Buffer.alloc(4);
      len.writeUInt32LE(12);
      if (c.getsockname(fd, addr, len) < 0) throw sysError('getsockname');
      return new KernelEndpoint(fd, HOST_LE ? addr.readUInt32LE(4) : addr.readUInt32BE(4), opts.sendOffThread === true);
    } catch (e) {
      c.close(fd);
      throw e;
    }
  }

  send(data: Buffer): number {
    const c = loadLibc();
    let n: number;
    do n = c.sendto(this.fd, data, data.length, 0, this.kernelAddr, 12);
    while (n < 0 && errno() === E.EINTR);
    return n < 0 ? errno() : 0;
  }

  private async sendOffThread(data: Buffer): Promise<number> {
    // `data` stays referenced by this frame until the worker's call has returned.
    const n = await loadLibc().sendtoAsync(this.fd, data, data.length, 0, this.kernelAddr, 12);
    return n < 0 ? E.EIO : 0;
  }

  receive(buf: Buffer, from?: { pid: number }): number {
    const c = loadLibc();
    for (;;) {
      let n: number;
      if (from) {
        // socklen_t in, the address's length out; nl_pid is at offset 4 of struct sockaddr_nl.
        if (HOST_LE) this.senderLen.writeUInt32LE(12);
        else this.senderLen.writeUInt32BE(12);
        n = c.recvfrom(this.fd, buf, buf.length, MSG_DONTWAIT | MSG_TRUNC, this.senderAddr, this.senderLen);
        if (n >= 0) from.pid = HOST_LE ? this.senderAddr.readUInt32LE(4) : this.senderAddr.readUInt32BE(4);
      } else n = c.recv(this.fd, buf, buf.length, MSG_DONTWAIT | MSG_TRUNC);
      if (n >= 0) return n;
      const e = errno();
      if (e !== E.EINTR) return -e;
    }
  }

  async wait(ms: number): Promise<void> {
    // One poll() per socket at a time, and the wait ends on the event loop's own timer too: a pool whose threads
    // are all taken would otherwise queue poll after poll, and the request's deadline would never be looked at.
    this.polling ??= loadLibc()
      .pollAsync(this.pollFd, 1, ms)
      .then(
        () => undefined,
        () => undefined,
      )
      .finally(() => {
        this.polling = undefined;
      });
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.polling, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms + POLL_SLICE_MS)))]);
    clearTimeout(timer);
  }

  receiveBufferSize(): number {
    return getInt(loadLibc(), this.fd, SOL_SOCKET, SO_RCVBUF);
  }

  setMembership(group: number, member: boolean): void {
    setInt(loadLibc(), this.fd, SOL_NETLINK, member ? NETLINK_ADD_MEMBERSHIP : NETLINK_DROP_MEMBERSHIP, group);
  }

  close(): void {
    if (this.fd >= 0) {
      loadLibc().close(this.fd);
      this.fd = -1;
    }
  }
}

function setBuf(c: Libc, fd: number, force: number, plain: number, size: number): void {
  // FORCE needs CAP_NET_ADMIN; without it fall back to the plain option (clamped by rmem_max/wmem_max).
  const v = Buffer.alloc(4);
  if (HOST_LE) v.writeInt32LE(size);
  else v.writeInt32BE(size);
  if (c.setsockopt(fd, SOL_SOCKET, force, v, 4) === 0) return;
  if (c.setsockopt(fd, SOL_SOCKET, plain, v, 4) < 0) throw sysError('setsockopt(buffer size)');
}

function setInt(c: Libc, fd: number, level: number, name: number, value: number): void {
  const v = Buffer.alloc(4);
  if (HOST_LE) v.writeInt32LE(value);
  else v.writeInt32BE(value);
  if (c.setsockopt(fd, level, name, v, 4) < 0) throw sysError(`setsockopt(${level}, ${name})`);
}

function getInt(c: Libc, fd: number, level: number, name: number): number {
  const v = Buffer.alloc(4);
  const len = Buffer.alloc(4);
  len.writeUInt32LE(4);
  if (c.getsockopt(fd, level, name, v, len) < 0) throw sysError(`getsockopt(${level}, ${name})`);
  return HOST_LE ? v.readInt32LE(0) : v.readInt32BE(0);
}

/**
 * Runs `fn` (a synchronous socket() call) with this thread in another network namespace, then returns.
 * setns() affects only the calling thread, and no JS runs in between, so nothing else observes the switch;
 * the socket keeps the namespace it was created in.
 */
function inNetns(c: Libc, path: string, fn: () => number): number {
  const self = openSync('/proc/thread-self/ns/net', 'r');
  let target: number | undefined;
  try {
    target = openSync(path, 'r');
    if (c.setns(target, CLONE_NEWNET) < 0) throw sysError(`setns(${path})`);
    const fd = fn();
    const e = errno();
    if (c.setns(self, CLONE_NEWNET) < 0) {
      // Could not return: this thread now lives in the other namespace. Nothing sane is left to do.
      throw new Error(`setns back to the original network namespace failed (errno ${errno()}); aborting`);
    }
    koffi.errno(e);
    return fd;
  } finally {
    if (target !== undefined) closeSync(target);
    closeSync(self);
  }
}

