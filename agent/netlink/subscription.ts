// NetlinkSubscription: a socket that only listens to the kernel's multicast notifications (the nftables commits
// other programs make: dataplane/commit-watch.ts). Nothing is sent on it, so it needs none of the request
// machinery of socket.ts; what it shares with it is the endpoint (endpoint.ts, kernel-endpoint.ts).
import { constants as osConstants } from 'node:os';
import type { NetlinkEndpoint } from './endpoint.ts';
import { KernelEndpoint, sysError } from './kernel-endpoint.ts';
import { parseMessages, type NlMsg } from './message.ts';

const E = osConstants.errno;

/** What NetlinkSubscription.drain found. */
export type DrainResult = 'drained' | 'overflow' | 'forged';

/**
 * A socket that only listens: the kernel's multicast notifications of the groups it joins (listen(); joining
 * nfnetlink's needs CAP_NET_ADMIN), read without waiting. Nothing
 * is sent on it, so it needs none of NetlinkSocket's request machinery. When its receive buffer fills, the
 * kernel drops what no longer fits and the next read fails with ENOBUFS: drain() then says `overflow`, and what
 * was read is no complete account of what happened. It can stop listening for a while without being closed
 * (leave, then join): a closed netlink socket is freed after an RCU grace period, which the next link deletion's
 * rcu_barrier() then waits out (~10 ms on a one-tunnel remove).
 */
export class NetlinkSubscription {
  private readonly buf: Buffer;
  private overflowed = false;
  private forged = false;

  /** `buffer`: where datagrams are read to (64 KB by default). */
  constructor(
    private readonly endpoint: NetlinkEndpoint,
    buffer?: Buffer,
  ) {
    this.buf = buffer ?? Buffer.alloc(64 * 1024);
  }

  /** `rcvbuf`: what is asked for; the kernel counts twice that against the socket (its bookkeeping). */
  static open(protocol: number, opts: { netns?: string; rcvbuf?: number } = {}): NetlinkSubscription {
    return new NetlinkSubscription(KernelEndpoint.open(protocol, { netns: opts.netns, rcvbuf: opts.rcvbuf ?? 2 * 1024 * 1024, sndbuf: 4096 }));
  }

  /** Stops (false) or starts (true) hearing `groups`. */
  listen(groups: readonly number[], on: boolean): void {
    if (!this.endpoint.setMembership) throw new Error('this netlink endpoint cannot join groups');
    for (const g of groups) this.endpoint.setMembership(g, on);
  }

  /** Throws away whatever is queued, and forgets an overflow: what follows is a fresh account. */
  discard(): void {
    this.drain(() => undefined);
    this.overflowed = false;
    this.forged = false;
  }

  /**
   * Hands every queued message to `onMessage` (a view of the receive buffer: not to be kept), in order. A datagram
   * from anyone but the kernel (a process with CAP_NET_ADMIN may send to a multicast group) is no notification:
   * it makes the account `forged`, which proves nothing, as an overflow does.
   */
  drain(onMessage: (m: NlMsg) => void): DrainResult {
    const from = { pid: 0 };
    for (;;) {
      const n = this.endpoint.receive(this.buf, from);
      if (n === -E.EAGAIN) return this.overflowed ? 'overflow' : this.forged ? 'forged' : 'drained';
      if (n === -E.ENOBUFS) {
        this.overflowed = true;
        continue;
      }
      if (n < 0) throw sysError('recv(netlink subscription)', -n);
      if (from.pid !== 0) {
        this.forged = true;
        continue;
      }
      // A notification larger than the buffer was cut: as good as lost.
      if (n > this.buf.length) {
        this.overflowed = true;
        continue;
      }
      for (const m of parseMessages(this.buf.subarray(0, n))) onMessage(m);
    }
  }

  close(): void {
    this.endpoint.close();
  }
}
