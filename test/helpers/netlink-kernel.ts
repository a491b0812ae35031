// A stand-in for the kernel's side of a netlink socket (a test fake, named as such): it implements the
// NetlinkEndpoint seam of agent/netlink/socket.ts, so Rtnl, Nft and the dataplane's kernel code run above
// it without root or a namespace, answering with recorded kernel replies (test/fixtures/netlink) or with
// errors the test chooses. The request machinery, the decoders and the error mapping are the real ones.
// Modelled on mdlayher/netlink's nltest: the test sees every request and decides each answer.
import { constants as osConstants } from 'node:os';
import { NlWriter } from '../../agent/netlink/attrs.ts';
import {
  NLMSGERR_ATTR_MSG,
  NLMSG_DONE,
  NLMSG_ERROR,
  NLMSG_HDRLEN,
  NLM_F_ACK,
  NLM_F_ACK_TLVS,
  NLM_F_CAPPED,
  NLM_F_DUMP,
  NLM_F_MULTI,
  beginMessage,
  endMessage,
  normaliseSeq,
  parseMessages,
  type NlMsg,
} from '../../agent/netlink/message.ts';
import type { NetlinkEndpoint } from '../../agent/netlink/endpoint.ts';

const E = osConstants.errno;

/** How the stand-in answers one request message. */
export interface Answer {
  /** Whole netlink messages (header included) sent back first, e.g. recorded dump parts; seq and pid are rewritten. */
  messages?: readonly Buffer[];
  /** `messages` already end the answer (a recorded NLMSG_ERROR or NLMSG_DONE): nothing is added. */
  complete?: boolean;
  /** A refusal: NLMSG_ERROR with this errno (and the extended-ack text), instead of the ack or NLMSG_DONE. */
  errno?: number;
  extack?: string;
  /** No reply at all (the request then times out). */
  silent?: boolean;
}

export type Handler = (request: NlMsg, index: number) => Answer | undefined;

export class KernelStandIn implements NetlinkEndpoint {
  readonly portId = 0x7e57;
  /** Every datagram the client sent, in order. */
  readonly sent: Buffer[] = [];
  /** Every request message, in order (views into `sent`). */
  readonly requests: NlMsg[] = [];
  /** Set to an errno to make the next receive fail with it once (ENOBUFS: the kernel dropped replies). */
  failNextReceive: number | undefined;
  closed = false;
  private readonly queue: Buffer[] = [];

  /** `handler` answers each request message; undefined means a plain success (ack, or an empty dump). */
  constructor(private readonly handler: Handler = () => undefined) {}

  send(data: Buffer): number {
    const copy = Buffer.from(data);
    this.sent.push(copy);
    for (const m of parseMessages(copy)) {
      const index = this.requests.push(m) - 1;
      this.answer(m, this.handler(m, index) ?? {});
    }
    return 0;
  }

  receive(buf: Buffer): number {
    if (this.failNextReceive !== undefined) {
      const e = this.failNextReceive;
      this.failNextReceive = undefined;
      return -e;
    }
    const d = this.queue.shift();
    if (!d) return -E.EAGAIN;
    d.copy(buf, 0, 0, Math.min(d.length, buf.length));
    return d.length;
  }

  wait(): Promise<void> {
    return new Promise((resolve) => setImmediate(resolve));
  }

  close(): void {
    this.closed = true;
  }

  private answer(req: NlMsg, a: Answer): void {
    if (a.silent) return;
    const parts = (a.messages ?? []).map((m) => normaliseSeq(m, req.seq, this.portId));
    const dump = (req.flags & NLM_F_DUMP) === NLM_F_DUMP;
    if (a.complete) {
      // as recorded
    } else if (a.errno) parts.push(errorMessage(req, a.errno, a.extack, this.portId));
    else if (dump) parts.push(doneMessage(req.seq, this.portId));
    else if (req.flags & NLM_F_ACK) parts.push(errorMessage(req, 0, undefined, this.portId));
    // The kernel sends a dump in several datagrams; one per message here exercises the same path.
    for (const p of parts) this.queue.push(p);
  }
}


/**
 * The stand-in with an off-thread send (socket.ts sendOffThread): each datagram is handed to the kernel
 * stand-in only when the test calls `release()`, as a worker thread blocked in the kernel would return late.
 */
export class SlowSendKernelStandIn extends KernelStandIn {
  private readonly held: (() => void)[] = [];
  /** Datagrams sent through sendAsync (none go through send). */
  asyncSends = 0;

  sendAsync(data: Buffer): Promise<number> {
    this.asyncSends++;
    return new Promise((resolve) => this.held.push(() => resolve(this.send(data))));
  }

  /** How many sends are held. */
  get holding(): number {
    return this.held.length;
  }

  /** Lets the oldest held send reach the kernel stand-in and return. */
  release(): void {
    this.held.shift()?.();
  }
}

/** NLMSG_ERROR as a socket with NETLINK_CAP_ACK and NETLINK_EXT_ACK receives it: the request's header only, then TLVs. */
function errorMessage(req: NlMsg, errno: number, extack: string | undefined, pid: number): Buffer {
  const w = new NlWriter(128);
  const flags = NLM_F_CAPPED | (extack !== undefined ? NLM_F_ACK_TLVS : 0);
  const start = beginMessage(w, NLMSG_ERROR, flags, req.seq, pid);
  w.i32(-errno);
  w.u32(NLMSG_HDRLEN + req.payload.length).u16(req.type).u16(req.flags).u32(req.seq).u32(req.pid);
  if (extack !== undefined) w.attrString(NLMSGERR_ATTR_MSG, extack);
  endMessage(w, start);
  return w.toBuffer();
}

function doneMessage(seq: number, pid: number): Buffer {
  const w = new NlWriter(32);
  const start = beginMessage(w, NLMSG_DONE, NLM_F_MULTI, seq, pid);
  w.i32(0);
  endMessage(w, start);
  return w.toBuffer();
}
