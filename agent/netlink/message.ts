// struct nlmsghdr framing, NLMSG_ERROR (with extended ack) decoding and the typed NetlinkError.
// Pure: no I/O. Layout per include/uapi/linux/netlink.h.
import { constants as osConstants } from 'node:os';
import { AttrTable, HOST_LE, NetlinkParseError, NlWriter, nlaAlign, readString } from './attrs.ts';

// include/uapi/linux/netlink.h: protocols
export const NETLINK_ROUTE = 0;
export const NETLINK_NETFILTER = 12;

// include/uapi/linux/netlink.h: standard message types
export const NLMSG_ERROR = 0x2;
export const NLMSG_DONE = 0x3;
export const NLMSG_OVERRUN = 0x4;

// include/uapi/linux/netlink.h: flags
export const NLM_F_REQUEST = 0x01;
export const NLM_F_MULTI = 0x02;
export const NLM_F_ACK = 0x04;
/** On a dump part: the kernel's list changed while it was dumped, so the dump may have missed or repeated entries. */
export const NLM_F_DUMP_INTR = 0x10;
// GET requests
const NLM_F_ROOT = 0x100;
const NLM_F_MATCH = 0x200;
export const NLM_F_DUMP = NLM_F_ROOT | NLM_F_MATCH;
// NEW requests
export const NLM_F_REPLACE = 0x100;
export const NLM_F_EXCL = 0x200;
export const NLM_F_CREATE = 0x400;
export const NLM_F_APPEND = 0x800;
// NLMSG_ERROR acks
export const NLM_F_CAPPED = 0x100;
export const NLM_F_ACK_TLVS = 0x200;

// include/uapi/linux/netlink.h: enum nlmsgerr_attrs
export const NLMSGERR_ATTR_MSG = 1;
export const NLMSGERR_ATTR_OFFS = 2;
const NLMSGERR_ATTR_MISS_TYPE = 5;

export const NLMSG_HDRLEN = 16;

export interface NlMsgHeader {
  len: number;
  type: number;
  flags: number;
  seq: number;
  pid: number;
}

export interface NlMsg extends NlMsgHeader {
  /** Everything after the 16-byte header (family header + attributes), a view into the received buffer. */
  payload: Buffer;
}

/** Starts a message in `w`; returns its start offset for endMessage. */
export function beginMessage(w: NlWriter, type: number, flags: number, seq: number, pid = 0): number {
  const start = w.length;
  w.u32(0).u16(type).u16(flags).u32(seq).u32(pid);
  return start;
}

/** Patches nlmsg_len and pads to NLMSG_ALIGN. */
export function endMessage(w: NlWriter, start: number): void {
  w.patchU32(start, w.length - start);
  w.align();
}

function readHeader(buf: Buffer, off: number): NlMsgHeader {
  if (off + NLMSG_HDRLEN > buf.length) throw new NetlinkParseError(`truncated nlmsghdr at ${off}`);
  return HOST_LE
    ? { len: buf.readUInt32LE(off), type: buf.readUInt16LE(off + 4), flags: buf.readUInt16LE(off + 6), seq: buf.readUInt32LE(off + 8), pid: buf.readUInt32LE(off + 12) }
    : { len: buf.readUInt32BE(off), type: buf.readUInt16BE(off + 4), flags: buf.readUInt16BE(off + 6), seq: buf.readUInt32BE(off + 8), pid: buf.readUInt32BE(off + 12) };
}

/** Splits a datagram (or a captured buffer) into messages. */
export function parseMessages(buf: Buffer): NlMsg[] {
  const out: NlMsg[] = [];
  let off = 0;
  while (off + NLMSG_HDRLEN <= buf.length) {
    const h = readHeader(buf, off);
    if (h.len < NLMSG_HDRLEN || off + h.len > buf.length) {
      throw new NetlinkParseError(`bad nlmsg_len ${h.len} at offset ${off} of ${buf.length}`);
    }
    out.push({ ...h, payload: buf.subarray(off + NLMSG_HDRLEN, off + h.len) });
    off += nlaAlign(h.len);
  }
  return out;
}

/** Rewrites seq (and pid) of every message in a buffer: lets tests compare against captures. */
export function normaliseSeq(buf: Buffer, seq = 0, pid = 0): Buffer {
  const out = Buffer.from(buf);
  let off = 0;
  while (off + NLMSG_HDRLEN <= out.length) {
    const h = readHeader(out, off);
    if (h.len < NLMSG_HDRLEN) break;
    if (HOST_LE) {
      out.writeUInt32LE(seq, off + 8);
      out.writeUInt32LE(pid, off + 12);
    } else {
      out.writeUInt32BE(seq, off + 8);
      out.writeUInt32BE(pid, off + 12);
    }
    off += nlaAlign(h.len);
  }
  return out;
}

// --- NLMSG_ERROR -------------------------------------------------------------------------------

export interface ExtAck {
  message?: string;
  /** Byte offset into the original request message of the offending attribute (NLMSGERR_ATTR_OFFS). */
  offset?: number;
  missingType?: number;
}

export interface NlError {
  /** 0 for an ack, else a positive errno. */
  errno: number;
  /** The header of the request this answers. */
  request: NlMsgHeader;
  extack: ExtAck;
}

/**
 * Decodes the payload of an NLMSG_ERROR: struct nlmsgerr { int error; struct nlmsghdr msg; } followed by
 * the original request's payload unless NLM_F_CAPPED, then extack TLVs when NLM_F_ACK_TLVS.
 */
export function parseError(msg: NlMsg): NlError {
  const p = msg.payload;
  if (p.length < 4 + NLMSG_HDRLEN) throw new NetlinkParseError(`NLMSG_ERROR too short (${p.length} bytes)`);
  const err = HOST_LE ? p.readInt32LE(0) : p.readInt32BE(0);
  const request = readHeader(p, 4);
  const extack: ExtAck = {};
  if (msg.flags & NLM_F_ACK_TLVS) {
    const origLen = msg.flags & NLM_F_CAPPED ? NLMSG_HDRLEN : request.len;
    const tlvStart = 4 + nlaAlign(origLen);
    if (tlvStart <= p.length) {
      const t = new AttrTable(p.subarray(tlvStart));
      const m = t.get(NLMSGERR_ATTR_MSG);
      if (m !== undefined) extack.message = readString(m);
      const o = t.u32(NLMSGERR_ATTR_OFFS);
      if (o !== undefined) extack.offset = o;
      const mt = t.u32(NLMSGERR_ATTR_MISS_TYPE);
      if (mt !== undefined) extack.missingType = mt;
    }
  }
  return { errno: err === 0 ? 0 : -err, request, extack };
}

const errnoNames = new Map<number, string>();
// Several names share a number on Linux; these are the ones the kernel's own sources use.
const PREFERRED = new Set(['EAGAIN', 'EOPNOTSUPP', 'EDEADLK']);
for (const [name, num] of Object.entries(osConstants.errno)) {
  if (!errnoNames.has(num) || PREFERRED.has(name)) errnoNames.set(num, name);
}

// include/uapi/asm-generic/errno.h names that Node's POSIX table lacks but netlink does return
// (ERESTART: nfnetlink's answer to a stale NFNL_BATCH_GENID).
const LINUX_ONLY: Record<number, string> = { 85: 'ERESTART', 524: 'ENOTSUPP' };

export function errnoName(errno: number): string {
  return errnoNames.get(errno) ?? LINUX_ONLY[errno] ?? `E${errno}`;
}

export interface NetlinkErrorDetails {
  errno: number;
  seq?: number;
  /** The request's message type (RTM_NEWLINK, NFT_MSG_NEWSETELEM ...). */
  requestType?: number;
  /** Position of the failing message in the batch sent (0-based, BATCH_BEGIN excluded). */
  index?: number;
  extack?: ExtAck;
  /** What the caller was doing ("create link tg1"), for the message. */
  operation?: string;
}

/** A kernel refusal (or a socket error), with the errno's name and the extended-ack text when the kernel gave one. */
export class NetlinkError extends Error {
  readonly errno: number;
  readonly code: string;
  readonly seq: number | undefined;
  readonly requestType: number | undefined;
  readonly index: number | undefined;
  readonly extackMessage: string | undefined;
  readonly extackOffset: number | undefined;

  constructor(d: NetlinkErrorDetails) {
    const code = errnoName(d.errno);
    const parts = [d.operation ? `${d.operation}: ` : '', code];
    if (d.extack?.message) parts.push(` (${d.extack.message})`);
    if (d.index !== undefined) parts.push(` [batch message ${d.index}]`);
    super(parts.join(''));
    this.name = 'NetlinkError';
    this.errno = d.errno;
    this.code = code;
    this.seq = d.seq;
    this.requestType = d.requestType;
    this.index = d.index;
    this.extackMessage = d.extack?.message;
    this.extackOffset = d.extack?.offset;
  }
}
