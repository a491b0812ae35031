// The netlink request machinery (request/reply matching by sequence number, timeouts, flow control) over
// a datagram endpoint; the only endpoint that touches the OS, a raw AF_NETLINK socket through koffi (FFI to
// libc), is kernel-endpoint.ts. The endpoint is the seam for tests: test/helpers/netlink-kernel.ts answers requests
// with recorded kernel replies, without root (as mdlayher/netlink's nltest does for Go).
//
// Why non-blocking recv on the main thread plus an async poll, rather than a worker thread:
// the kernel handles a netlink request synchronously inside sendmsg() (rtnetlink under the RTNL lock,
// nfnetlink batches in nfnetlink_rcv_batch), so by the time sendto() returns, the acks and errors are
// already queued on our socket and a MSG_DONTWAIT recv() picks them up at once. A dump's next chunk is
// produced inside recv() too. Waiting is therefore rare (a large dump, a busy kernel); when it happens
// we call poll() through koffi's `.async`, which runs it on a koffi worker thread in slices of
// POLL_SLICE_MS, so the event loop is never blocked by a wait, and the fast path costs no thread hop
// or message copy between threads. The main thread is only ever busy for the kernel's own processing
// time of what we sent (milliseconds for a 10,000-element nft batch); as that fast path never leaves the
// promise chain, the pump lets the event loop turn once YIELD_AFTER_MS have passed since a pump last did. The exception is a request whose
// processing blocks long after its effect (a link deletion's RCU barrier, ~20 ms): a socket opened with
// `sendOffThread` makes each sendto() a koffi async call on a worker thread.
//
// Why a single pump with a bounded amount in flight, rather than "send everything at once":
// replies land in the socket's receive queue; if it overflows, the kernel drops them and recv() fails
// with ENOBUFS, losing the acks of requests we can then never complete (the `netlink` npm package
// aborts the process in that state). So requests queue in JS (any number of them), at most
// MAX_COALESCE_MSGS of them are sent per sendto(), and the receive buffer is sized far above what one
// round can produce.
//
// Why every wait has a deadline, off-thread calls included: a kernel that never answers (a reply lost, a lock
// held by someone else) must become an error naming the request, never a promise that stays pending and holds
// the dataplane's queue, or a worker thread of libuv's pool (4 by default, shared with fs and crypto; koffi's
// `.async` runs there) lost for good. A worker's poll() is at most POLL_SLICE_MS and never more than one per
// socket at a time; a worker's sendto() the kernel holds past its request's deadline fails that request and
// the socket, and stays counted (offThreadOverdue) for the agent's watchdog (housekeeping/activity.ts), which
// restarts the agent if the thread never comes back. A call made on the event loop that the kernel holds
// cannot be timed out from the same thread: the observer's enter/leave name it for the watchdog's own thread.
import { constants as osConstants } from 'node:os';
import { HOST_LE } from './attrs.ts';
import type { NetlinkEndpoint, NetlinkSocketOptions } from './endpoint.ts';
import { KernelEndpoint, POLL_SLICE_MS, sysError } from './kernel-endpoint.ts';
import { NLMSG_DONE, NLMSG_ERROR, NLMSG_OVERRUN, NLM_F_DUMP_INTR, NetlinkError, parseError, parseMessages, type NlMsg } from './message.ts';
import { observer, overdue, type OverdueCall, type RequestWatch } from './observer.ts';

const E = osConstants.errno;

/**
 * After this long in one stretch of the pump (the fast path below never leaves the promise chain), it lets the
 * event loop turn once: a dump of hundreds of thousands of set elements or a queue of 10,000 requests would
 * otherwise hold timers and the SSH server's sockets for seconds. One kernel call is never split.
 */
const YIELD_AFTER_MS = 20;
/** When a pump last let the event loop turn (NetlinkSocket.yieldIfLong). */
let pumpTurnedAt = 0;

/** Requests coalesced into one sendto(); their acks (capped: ~40 bytes each) fit the receive buffer many times over. */
const MAX_COALESCE_MSGS = 256;
const MAX_COALESCE_BYTES = 256 * 1024;
const RECV_BUF_BYTES = 1024 * 1024;

/** What one request waits for. */
export interface RequestSpec {
  /** The encoded message(s); sent with one sendto(). */
  data: Buffer;
  /** Every one of these seqs must receive its final reply (NLMSG_ERROR or NLMSG_DONE). */
  seqs: readonly number[];
  /** A reply (an error) to one of these ends the request at once, e.g. the BATCH_BEGIN of an nft batch. */
  abortSeqs?: readonly number[];
  /** A dump (NLM_F_DUMP): only one may run on a socket at a time, so never coalesced. Non-dump requests must carry NLM_F_ACK. */
  dump?: boolean;
  /** nfnetlink batches must be alone in their datagram. */
  exclusive?: boolean;
  /**
   * Data messages are handed here as they arrive instead of being collected in SeqReply.messages, so a
   * 10,000-entry dump is decoded datagram by datagram and never held whole. The message (a view of a
   * datagram) must not be kept.
   */
  onMessage?: (m: NlMsg) => void;
  /**
   * Acks expected besides `seqs`: one for every seq in [first, first + count), kept in RequestResult.replies
   * only when it carries an error. An nft batch of 10,000 tunnels is ~80,000 messages, and a reply object and
   * a map entry per ack were ~15 MB at the apply's peak. Only with `exclusive` (nothing else in its datagram).
   */
  ackRange?: { first: number; count: number };
  timeoutMs?: number;
  /** What the request does ("create GRE link tg-1"): its errors, a timeout included, and the watchdog name it. */
  what?: string;
}

export interface SeqReply {
  seq: number;
  /** 0 = acked or dump finished; otherwise the kernel's errno for this message. */
  errno: number;
  extack: { message?: string; offset?: number };
  /** Data messages (dump parts, echoes) for this seq, in arrival order. */
  messages: NlMsg[];
  /** A part of this dump carried NLM_F_DUMP_INTR: it is not a consistent picture of the kernel's list. */
  interrupted?: boolean;
}

export interface RequestResult {
  replies: Map<number, SeqReply>;
}

interface Pending {
  spec: RequestSpec;
  deadline: number;
  waiting: Set<number>;
  /** Acks of spec.ackRange still to come. */
  rangeLeft: number;
  abort: Set<number>;
  replies: Map<number, SeqReply>;
  resolve: (r: RequestResult) => void;
  reject: (e: Error) => void;
  done: boolean;
  /** The observer's watch over it. */
  watch?: RequestWatch;
}

export class NetlinkSocket {
  readonly portId: number;
  private seq: number;
  private readonly timeoutMs: number;
  private readonly clock: () => number;
  private readonly queue: Pending[] = [];
  private readonly bySeq = new Map<number, Pending>();
  /** Requests in flight with an ack range (RequestSpec.ackRange): at most a few, looked up by range. */
  private readonly ranged = new Set<Pending>();

  private rangeOwner(seq: number): Pending | undefined {
    for (const p of this.ranged) {
      const r = p.spec.ackRange!;
      if (seq >= r.first && seq < r.first + r.count) return p;
    }
    return undefined;
  }
  private pumping = false;
  private closed = false;
  private readonly recvBuf: Buffer;

  constructor(
    private readonly endpoint: NetlinkEndpoint,
    opts: { timeoutMs?: number; clock?: () => number; receiveBytes?: number } = {},
  ) {
    this.recvBuf = Buffer.alloc(opts.receiveBytes ?? RECV_BUF_BYTES);
    this.portId = endpoint.portId;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
    this.clock = opts.clock ?? Date.now;
    // Random start: a reopened socket must not match stale replies by accident.
    this.seq = (Math.random() * 0x3fffffff) | 0;
  }

  /** A socket on the kernel (in `opts.netns` when given). */
  static open(protocol: number, opts: NetlinkSocketOptions = {}): NetlinkSocket {
    return new NetlinkSocket(KernelEndpoint.open(protocol, opts), opts);
  }

  /** Allocates `n` consecutive sequence numbers; returns the first. Never 0 (nft/iproute2 use 0 for unsolicited). */
  allocSeq(n = 1): number {
    if (this.seq + n >= 0xffffffff) this.seq = 1;
    const first = this.seq + 1;
    this.seq += n;
    return first;
  }

  /** The receive buffer the kernel actually granted (it doubles the requested value for bookkeeping). */
  receiveBufferSize(): number {
    if (!this.endpoint.receiveBufferSize) throw new Error('this netlink endpoint has no receive buffer');
    return this.endpoint.receiveBufferSize();
  }

  /** Queues a request; resolves when every expected seq has its final reply. Kernel errors are returned, not thrown. */
  request(spec: RequestSpec): Promise<RequestResult> {
    if (this.closed) return Promise.reject(new NetlinkError({ errno: E.EBADF, operation: 'netlink socket is closed' }));
    return new Promise<RequestResult>((resolve, reject) => {
      const p: Pending = {
        spec,
        deadline: 0,
        waiting: new Set(spec.seqs),
        rangeLeft: spec.ackRange?.count ?? 0,
        abort: new Set(spec.abortSeqs ?? []),
        replies: new Map(),
        resolve,
        reject,
        done: false,
      };
      if (spec.ackRange && !spec.exclusive) {
        reject(new Error('an ack range needs an exclusive request'));
        return;
      }
      const watched = observer?.request(spec.what ?? 'netlink request');
      if (watched instanceof Error) {
        reject(watched);
        return;
      }
      p.watch = watched;
      for (const s of [...spec.seqs, ...(spec.abortSeqs ?? [])]) {
        if (this.bySeq.has(s) || this.rangeOwner(s)) {
          reject(new Error(`netlink seq ${s} already in flight`));
          return;
        }
      }
      this.queue.push(p);
      if (!this.pumping) void this.pump();
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    const err = new NetlinkError({ errno: E.EBADF, operation: 'netlink socket closed' });
    for (const p of [...this.queue, ...this.bySeq.values()]) this.finish(p, err);
    this.queue.length = 0;
    // While an async poll is running on a worker, the pump closes the fd when it returns.
    if (!this.pumping) this.closeFd();
  }

  private closeFd(): void {
    this.endpoint.close();
  }

  private finish(p: Pending, err?: Error): void {
    if (p.done) return;
    p.done = true;
    for (const s of p.spec.seqs) this.bySeq.delete(s);
    for (const s of p.spec.abortSeqs ?? []) this.bySeq.delete(s);
    this.ranged.delete(p);
    p.watch?.settled(err);
    if (err) p.reject(err);
    else p.resolve({ replies: p.replies });
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const round = this.takeRound();
        const sending = this.sendRound(round);
        if (sending && !(await this.sentInTime(sending, round))) break;
        await this.receiveRound(round);
        await this.yieldIfLong();
      }
    } catch (e) {
      // Unexpected (a parse failure of a kernel message): fail what is in flight, keep the socket usable.
      const err = e instanceof Error ? e : new Error(String(e));
      for (const p of [...this.bySeq.values()]) this.finish(p, err);
    } finally {
      this.pumping = false;
      if (this.closed) this.closeFd();
      else if (this.queue.length > 0) void this.pump();
    }
  }

  private takeRound(): Pending[] {
    const first = this.queue.shift()!;
    const round = [first];
    if (first.spec.dump || first.spec.exclusive) return round;
    let bytes = first.spec.data.length;
    let msgs = first.spec.seqs.length;
    while (this.queue.length > 0) {
      const next = this.queue[0]!;
      if (next.spec.dump || next.spec.exclusive) break;
      if (bytes + next.spec.data.length > MAX_COALESCE_BYTES || msgs + next.spec.seqs.length > MAX_COALESCE_MSGS) break;
      bytes += next.spec.data.length;
      msgs += next.spec.seqs.length;
      round.push(this.queue.shift()!);
    }
    return round;
  }

  /**
   * Waits for a send made on a worker thread until the round's deadline. Past it the kernel still holds the call:
   * the round fails naming it, and so does the socket (its fd is in a call that may never return); the call stays
   * in offThreadOverdue() until it does. False when that happened.
   */
  private async sentInTime(sending: Promise<void>, round: Pending[]): Promise<boolean> {
    const ms = Math.max(0, Math.min(...round.map((p) => p.deadline)) - this.clock());
    let timer: NodeJS.Timeout | undefined;
    const late = await Promise.race([sending.then(() => false), new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), ms)))]);
    clearTimeout(timer);
    if (!late) return true;
    const what = describe(round);
    const call: OverdueCall = { what: `sendto for ${what}`, since: Date.now() };
    overdue.add(call);
    void sending.finally(() => overdue.delete(call)).catch(() => undefined);
    const err = new NetlinkError({ errno: E.ETIMEDOUT, operation: `${what}: the kernel did not return from sendto within ${round[0]!.spec.timeoutMs ?? this.timeoutMs} ms` });
    for (const p of round) this.finish(p, err);
    this.close();
    return false;
  }

  /** Sends a round; a promise only when the endpoint sends off the event loop. */
  private sendRound(round: Pending[]): Promise<void> | undefined {
    const now = this.clock();
    for (const p of round) {
      p.deadline = now + (p.spec.timeoutMs ?? this.timeoutMs);
      for (const s of p.spec.seqs) this.bySeq.set(s, p);
      for (const s of p.spec.abortSeqs ?? []) this.bySeq.set(s, p);
      if (p.spec.ackRange) this.ranged.add(p);
    }
    const data = round.length === 1 ? round[0]!.spec.data : Buffer.concat(round.map((p) => p.spec.data));
    const failed = (e: number): void => {
      if (e === 0) return;
      const err = sysError(`sendto(${data.length} bytes)`, e);
      for (const p of round) this.finish(p, err);
    };
    if (this.endpoint.sendAsync) return this.endpoint.sendAsync(data).then(failed);
    observer?.enter(round[0]!.spec.what ?? 'netlink send');
    try {
      failed(this.endpoint.send(data));
    } finally {
      observer?.leave();
    }
    return undefined;
  }

  private async receiveRound(round: Pending[]): Promise<void> {
    const what = round[0]!.spec.what ?? 'netlink receive';
    while (!this.closed && round.some((p) => !p.done)) {
      observer?.enter(what);
      let n: number;
      try {
        n = this.endpoint.receive(this.recvBuf);
      } finally {
        observer?.leave();
      }
      if (n >= 0) {
        if (n > this.recvBuf.length) throw new Error(`netlink datagram of ${n} bytes exceeds the ${this.recvBuf.length}-byte receive buffer`);
        // Copy: the receive buffer is reused, and replies handed out must stay valid. A streamed dump
        // (always alone in its round) is decoded in place instead: its messages are not kept, and copying
        // a 10,000-link dump was ~30 MB of garbage.
        const inPlace = round.length === 1 && round[0]!.spec.onMessage !== undefined;
        this.dispatch(inPlace ? this.recvBuf.subarray(0, n) : Buffer.from(this.recvBuf.subarray(0, n)));
        // A dump or a batch is alone in its round: each datagram of its answer is progress (a round of many small
        // requests settles them one by one instead).
        if (round.length === 1) round[0]!.watch?.progress();
        // Between datagrams only: a dump's rest stays queued in the kernel meanwhile.
        await this.yieldIfLong();
        continue;
      }
      const e = -n;
      if (e === E.ENOBUFS) {
        // The kernel dropped replies: we cannot know whose. Fail this round rather than hang on it.
        const err = new NetlinkError({ errno: e, operation: 'netlink receive queue overflowed (replies lost)' });
        for (const p of round) this.finish(p, err);
        return;
      }
      if (e !== E.EAGAIN) throw sysError('recv', e);
      const now = this.clock();
      for (const p of round) {
        if (!p.done && now >= p.deadline) {
          this.finish(p, new NetlinkError({ errno: E.ETIMEDOUT, operation: `${p.spec.what ?? 'netlink request'}: no reply within ${p.spec.timeoutMs ?? this.timeoutMs} ms`, seq: p.spec.seqs[0] }));
        }
      }
      if (round.every((p) => p.done)) return;
      await this.endpoint.wait(POLL_SLICE_MS);
    }
  }

  /**
   * Lets the event loop turn when no pump has for YIELD_AFTER_MS. One clock for every socket of the process:
   * the dataplane's work alternates between its route and nftables sockets in one promise chain.
   */
  private async yieldIfLong(): Promise<void> {
    if (performance.now() - pumpTurnedAt < YIELD_AFTER_MS) return;
    await new Promise((resolve) => setImmediate(resolve));
    pumpTurnedAt = performance.now();
  }

  private dispatch(datagram: Buffer): void {
    for (const m of parseMessages(datagram)) {
      const byRange = this.bySeq.has(m.seq) ? undefined : this.rangeOwner(m.seq);
      if (byRange) {
        if (byRange.done || m.type !== NLMSG_ERROR) continue;
        const e = parseError(m);
        if (e.errno !== 0) byRange.replies.set(m.seq, { seq: m.seq, errno: e.errno, extack: e.extack, messages: [] });
        byRange.rangeLeft--;
        if (byRange.rangeLeft === 0 && byRange.waiting.size === 0) this.finish(byRange);
        continue;
      }
      const p = this.bySeq.get(m.seq);
      if (!p || p.done) continue; // stale (a request that timed out) or unsolicited
      let r = p.replies.get(m.seq);
      if (!r) {
        r = { seq: m.seq, errno: 0, extack: {}, messages: [] };
        p.replies.set(m.seq, r);
      }
      if (m.flags & NLM_F_DUMP_INTR) r.interrupted = true;
      if (m.type === NLMSG_ERROR) {
        const e = parseError(m);
        r.errno = e.errno;
        r.extack = e.extack;
        this.settle(p, m.seq, e.errno !== 0);
      } else if (m.type === NLMSG_DONE) {
        // A dump may end in error: NLMSG_DONE then carries a negative int (and extack TLVs).
        if (m.payload.length >= 4) {
          const v = HOST_LE ? m.payload.readInt32LE(0) : m.payload.readInt32BE(0);
          if (v < 0) r.errno = -v;
        }
        this.settle(p, m.seq, r.errno !== 0);
      } else if (m.type === NLMSG_OVERRUN) {
        r.errno = E.EOVERFLOW;
        this.settle(p, m.seq, true);
      } else {
        // Data (dump parts, GET answers): final state comes from NLMSG_ERROR (requests carry NLM_F_ACK) or NLMSG_DONE.
        if (p.spec.onMessage) p.spec.onMessage(m);
        else r.messages.push(m);
      }
    }
  }

  private settle(p: Pending, seq: number, failed: boolean): void {
    p.waiting.delete(seq);
    if ((failed && p.abort.has(seq)) || (p.waiting.size === 0 && p.rangeLeft === 0)) this.finish(p);
  }
}

/** A round's requests by name, for an error that fails them together. */
function describe(round: readonly Pending[]): string {
  const first = round[0]!.spec.what ?? 'netlink request';
  return round.length === 1 ? first : `${first} (and ${round.length - 1} more requests sent with it)`;
}
