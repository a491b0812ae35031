// The seam under the request machinery: what a netlink endpoint must do (NetlinkEndpoint: the kernel's socket in
// kernel-endpoint.ts, or the tests' stand-in kernel in test/helpers/netlink-kernel.ts) and the options a socket
// on the kernel is opened with. Types only, so both sides import them without importing each other.
/** Datagrams to and from the kernel: all the request machinery needs of a socket. */
export interface NetlinkEndpoint {
  /** Our netlink port id (nl_pid), which the kernel puts in its replies. */
  readonly portId: number;
  /** Sends one datagram; 0, or the errno of the failure. */
  send(data: Buffer): number;
  /**
   * Sends one datagram from a worker thread (NetlinkSocketOptions.sendOffThread): the kernel's work on it
   * runs there, and the event loop goes on meanwhile. Absent: send() is used.
   */
  sendAsync?(data: Buffer): Promise<number>;
  /**
   * Copies the next queued datagram into `buf` without waiting: its full length (larger than `buf` when it
   * was truncated), or minus an errno (EAGAIN: nothing queued; ENOBUFS: the kernel dropped replies).
   * `from`: filled with the sender's port id (0: the kernel; any other is a process).
   */
  receive(buf: Buffer, from?: { pid: number }): number;
  /** Resolves when a datagram may be readable, or after at most `ms`. */
  wait(ms: number): Promise<void>;
  /** The receive buffer the kernel granted, where there is one. */
  receiveBufferSize?(): number;
  /** Joins or leaves a multicast group (NETLINK_ADD_MEMBERSHIP / NETLINK_DROP_MEMBERSHIP). */
  setMembership?(group: number, member: boolean): void;
  close(): void;
}

export interface NetlinkSocketOptions {
  /** Receive buffer; SO_RCVBUFFORCE (root) lifts it above net.core.rmem_max. */
  rcvbuf?: number;
  /** Send buffer: bounds the largest single sendto(), i.e. the largest nft batch. */
  sndbuf?: number;
  /** Open the socket inside this network namespace (a /run/netns/NAME path); the socket stays there. */
  netns?: string;
  /**
   * NETLINK_GET_STRICT_CHK: the kernel honours a dump's filters (rtnetlink: an address dump of one ifindex)
   * instead of sending everything. Best effort: a kernel without it (before 4.20) sends all, and the client
   * still filters what it decodes.
   */
  strictDumps?: boolean;
  /** Default per-request timeout. */
  timeoutMs?: number;
  /**
   * Each sendto() runs on a worker thread (koffi's async call) instead of the event loop: for requests whose
   * processing in the kernel blocks the sender long after their effect is visible (deleting a link waits for
   * an RCU barrier, ~20 ms, after it has released RTNL and the link is gone from every list).
   */
  sendOffThread?: boolean;
  /** Milliseconds now, for request deadlines; Date.now unless a test drives the time itself. */
  clock?: () => number;
  /**
   * The largest datagram one receive takes (default 1 MB, a dump's). A socket for one small request gives less:
   * each buffer is allocated zeroed with the socket, and 1 MB of it per one-tunnel remove (its link's deletion has
   * a socket of its own) was external memory enough to set off a full collection every few removes under the
   * agent's heap flags (agent/bin/runtime.mjs).
   */
  receiveBytes?: number;
}
