// Netlink TLV attributes: a growable writer for building messages and a parser for reading them.
// Pure: no I/O. Layout per include/uapi/linux/netlink.h (struct nlattr, NLA_ALIGN).
import { endianness } from 'node:os';
import { parseIPv4 } from '../../common/ipv4.ts';

// include/uapi/linux/netlink.h
export const NLA_F_NESTED = 1 << 15;
const NLA_F_NET_BYTEORDER = 1 << 14;
export const NLA_TYPE_MASK = ~(NLA_F_NESTED | NLA_F_NET_BYTEORDER) & 0xffff;
const NLA_ALIGNTO = 4;
export const NLA_HDRLEN = 4;
/** nla_len is a u16: no single attribute (nest included) may exceed this. */
const NLA_MAX_LEN = 0xffff;

export const nlaAlign = (n: number): number => (n + NLA_ALIGNTO - 1) & ~(NLA_ALIGNTO - 1);

/** Netlink "host order" is the kernel's CPU order; every Linux target Node runs on here is LE, but say so once. */
export const HOST_LE = endianness() === 'LE';

export class NetlinkParseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NetlinkParseError';
  }
}

/**
 * Appends netlink data into one growing buffer, so that a batch of thousands of elements is a handful of
 * allocations rather than one Buffer per attribute. Offsets are absolute within the writer; nests and
 * messages are length-patched when closed.
 */
export class NlWriter {
  private buf: Buffer;
  private pos = 0;

  /** `initial`: a size to allocate, or a buffer to write into (reused storage: every byte written is written explicitly). */
  constructor(initial: number | Buffer = 4096) {
    this.buf = typeof initial === 'number' ? Buffer.alloc(initial) : initial;
  }

  /** The storage written into (grown past `initial` if it had to be), for a later writer to reuse once this one is done. */
  get storage(): Buffer {
    return this.buf;
  }

  get length(): number {
    return this.pos;
  }

  private ensure(n: number): void {
    const need = this.pos + n;
    if (need <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < need) size *= 2;
    const next = Buffer.alloc(size);
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  /** A copy of what was written (the writer may be reused). */
  toBuffer(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.pos));
  }

  /** What was written, without a copy: the writer must not be written to after (a batch's one large buffer). */
  take(): Buffer {
    return this.buf.subarray(0, this.pos);
  }

  // --- raw scalars -----------------------------------------------------------------------------
  u8(v: number): this {
    this.ensure(1);
    this.buf.writeUInt8(v, this.pos);
    this.pos += 1;
    return this;
  }
  u16(v: number): this {
    this.ensure(2);
    if (HOST_LE) this.buf.writeUInt16LE(v, this.pos);
    else this.buf.writeUInt16BE(v, this.pos);
    this.pos += 2;
    return this;
  }
  u32(v: number): this {
    this.ensure(4);
    if (HOST_LE) this.buf.writeUInt32LE(v >>> 0, this.pos);
    else this.buf.writeUInt32BE(v >>> 0, this.pos);
    this.pos += 4;
    return this;
  }
  i32(v: number): this {
    this.ensure(4);
    if (HOST_LE) this.buf.writeInt32LE(v, this.pos);
    else this.buf.writeInt32BE(v, this.pos);
    this.pos += 4;
    return this;
  }
  u16be(v: number): this {
    this.ensure(2);
    this.buf.writeUInt16BE(v, this.pos);
    this.pos += 2;
    return this;
  }
  u32be(v: number): this {
    this.ensure(4);
    this.buf.writeUInt32BE(v >>> 0, this.pos);
    this.pos += 4;
    return this;
  }
  u64be(v: bigint): this {
    this.ensure(8);
    this.buf.writeBigUInt64BE(v, this.pos);
    this.pos += 8;
    return this;
  }
  bytes(b: Uint8Array): this {
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
    return this;
  }
  zeros(n: number): this {
    this.ensure(n);
    this.buf.fill(0, this.pos, this.pos + n);
    this.pos += n;
    return this;
  }
  /** Pads with zero bytes to the next 4-byte boundary. */
  align(): this {
    return this.zeros(nlaAlign(this.pos) - this.pos);
  }

  /** Overwrites a host-order u32 at an absolute offset (length patching). */
  patchU32(at: number, v: number): void {
    if (HOST_LE) this.buf.writeUInt32LE(v >>> 0, at);
    else this.buf.writeUInt32BE(v >>> 0, at);
  }
  patchU16(at: number, v: number): void {
    if (HOST_LE) this.buf.writeUInt16LE(v, at);
    else this.buf.writeUInt16BE(v, at);
  }

  // --- attributes ------------------------------------------------------------------------------
  /** One attribute whose payload is written by `body`; nla_len excludes the trailing pad, as the kernel expects. */
  attr(type: number, body: (w: this) => void): this {
    const start = this.pos;
    this.u16(0).u16(type);
    body(this);
    const len = this.pos - start;
    if (len > NLA_MAX_LEN) throw new RangeError(`netlink attribute ${type & NLA_TYPE_MASK} is ${len} bytes (max ${NLA_MAX_LEN})`);
    this.patchU16(start, len);
    return this.align();
  }
  attrBytes(type: number, data: Uint8Array): this {
    return this.attr(type, (w) => w.bytes(data));
  }
  attrU8(type: number, v: number): this {
    return this.attr(type, (w) => w.u8(v));
  }
  attrU16(type: number, v: number): this {
    return this.attr(type, (w) => w.u16(v));
  }
  attrU32(type: number, v: number): this {
    return this.attr(type, (w) => w.u32(v));
  }
  attrU16be(type: number, v: number): this {
    return this.attr(type, (w) => w.u16be(v));
  }
  attrU32be(type: number, v: number): this {
    return this.attr(type, (w) => w.u32be(v));
  }
  attrU64be(type: number, v: bigint): this {
    return this.attr(type, (w) => w.u64be(v));
  }
  /** NUL-terminated string (NLA_NUL_STRING / NLA_STRING both accept it). */
  attrString(type: number, s: string): this {
    return this.attr(type, (w) => w.bytes(Buffer.from(s, 'utf8')).u8(0));
  }
  /** String without the terminating NUL: what iproute2 sends for IFLA_INFO_KIND, and nft for wildcard prefixes. */
  attrStringNoNul(type: number, s: string): this {
    return this.attr(type, (w) => w.bytes(Buffer.from(s, 'utf8')));
  }
  /**
   * A nested attribute. nftables sets NLA_F_NESTED (nla_parse_nested with strict validation wants it);
   * rtnetlink's iproute2 does not, and the kernel accepts both there, so the flag is the caller's choice.
   */
  nest(type: number, body: (w: this) => void, nestedFlag = true): this {
    return this.attr(nestedFlag ? type | NLA_F_NESTED : type, body);
  }
}

// --- parsing -----------------------------------------------------------------------------------

export interface RawAttr {
  /** The type without the NESTED / NET_BYTEORDER flag bits. */
  type: number;
  nested: boolean;
  netByteorder: boolean;
  /** Payload (nla_len minus the header), a view into the parsed buffer. */
  data: Buffer;
}

/** Parses a run of attributes; throws NetlinkParseError on a length that runs past the buffer. */
export function parseAttrs(buf: Buffer): RawAttr[] {
  const out: RawAttr[] = [];
  let off = 0;
  while (off + NLA_HDRLEN <= buf.length) {
    const len = HOST_LE ? buf.readUInt16LE(off) : buf.readUInt16BE(off);
    const rawType = HOST_LE ? buf.readUInt16LE(off + 2) : buf.readUInt16BE(off + 2);
    if (len < NLA_HDRLEN || off + len > buf.length) {
      throw new NetlinkParseError(`bad attribute length ${len} at offset ${off} of ${buf.length}`);
    }
    out.push({
      type: rawType & NLA_TYPE_MASK,
      nested: (rawType & NLA_F_NESTED) !== 0,
      netByteorder: (rawType & NLA_F_NET_BYTEORDER) !== 0,
      data: buf.subarray(off + NLA_HDRLEN, off + len),
    });
    off += nlaAlign(len);
  }
  return out;
}

/**
 * Attributes by type (the last one wins, as in the kernel's nla_parse). Lists of same-typed
 * attributes (nft expressions, set elements) are read with parseAttrs instead.
 */
export class AttrTable {
  /**
   * type -> where its payload is in `buf`: start * 65536 + length (an attribute's length fits in u16).
   * Offsets rather than Buffer views: a 10,000-link dump carries ~40 attributes per link, and a view
   * per attribute was most of the garbage (and of the heap growth) of reading the kernel back.
   */
  private readonly at = new Map<number, number>();

  constructor(private readonly buf: Buffer) {
    let off = 0;
    while (off + NLA_HDRLEN <= buf.length) {
      const len = HOST_LE ? buf.readUInt16LE(off) : buf.readUInt16BE(off);
      const rawType = HOST_LE ? buf.readUInt16LE(off + 2) : buf.readUInt16BE(off + 2);
      if (len < NLA_HDRLEN || off + len > buf.length) {
        throw new NetlinkParseError(`bad attribute length ${len} at offset ${off} of ${buf.length}`);
      }
      this.at.set(rawType & NLA_TYPE_MASK, (off + NLA_HDRLEN) * 65536 + (len - NLA_HDRLEN));
      off += nlaAlign(len);
    }
  }

  has(type: number): boolean {
    return this.at.has(type);
  }
  get(type: number): Buffer | undefined {
    const v = this.at.get(type);
    if (v === undefined) return undefined;
    const start = Math.floor(v / 65536);
    return this.buf.subarray(start, start + (v % 65536));
  }
  nested(type: number): AttrTable | undefined {
    const b = this.get(type);
    return b === undefined ? undefined : new AttrTable(b);
  }
  /** Offset of the payload in the table's buffer, after checking it has at least `n` bytes. */
  private offset(type: number, n: number, what: string): number | undefined {
    const v = this.at.get(type);
    if (v === undefined) return undefined;
    const len = v % 65536;
    if (len < n) throw new NetlinkParseError(`${what}: attribute has ${len} bytes, needs ${n}`);
    return Math.floor(v / 65536);
  }
  u8(type: number): number | undefined {
    const o = this.offset(type, 1, 'u8');
    return o === undefined ? undefined : this.buf.readUInt8(o);
  }
  u16(type: number): number | undefined {
    const o = this.offset(type, 2, 'u16');
    return o === undefined ? undefined : HOST_LE ? this.buf.readUInt16LE(o) : this.buf.readUInt16BE(o);
  }
  u32(type: number): number | undefined {
    const o = this.offset(type, 4, 'u32');
    return o === undefined ? undefined : HOST_LE ? this.buf.readUInt32LE(o) : this.buf.readUInt32BE(o);
  }
  u16be(type: number): number | undefined {
    const o = this.offset(type, 2, 'be16');
    return o === undefined ? undefined : this.buf.readUInt16BE(o);
  }
  u32be(type: number): number | undefined {
    const o = this.offset(type, 4, 'be32');
    return o === undefined ? undefined : this.buf.readUInt32BE(o);
  }
  u64be(type: number): bigint | undefined {
    const o = this.offset(type, 8, 'be64');
    return o === undefined ? undefined : this.buf.readBigUInt64BE(o);
  }
  string(type: number): string | undefined {
    const v = this.at.get(type);
    if (v === undefined) return undefined;
    const start = Math.floor(v / 65536);
    const end = start + (v % 65536);
    const nul = this.buf.indexOf(0, start);
    return this.buf.toString('utf8', start, nul === -1 || nul > end ? end : nul);
  }
}

function need(b: Buffer, n: number, what: string): void {
  if (b.length < n) throw new NetlinkParseError(`${what}: attribute has ${b.length} bytes, needs ${n}`);
}
export function readU16(b: Buffer): number {
  need(b, 2, 'u16');
  return HOST_LE ? b.readUInt16LE(0) : b.readUInt16BE(0);
}
export function readU32(b: Buffer): number {
  need(b, 4, 'u32');
  return HOST_LE ? b.readUInt32LE(0) : b.readUInt32BE(0);
}
export function readU64(b: Buffer): bigint {
  need(b, 8, 'u64');
  return HOST_LE ? b.readBigUInt64LE(0) : b.readBigUInt64BE(0);
}
export function readU32be(b: Buffer): number {
  need(b, 4, 'be32');
  return b.readUInt32BE(0);
}
export function readU64be(b: Buffer): bigint {
  need(b, 8, 'be64');
  return b.readBigUInt64BE(0);
}
/** A string attribute, with or without its NUL. */
export function readString(b: Buffer): string {
  const nul = b.indexOf(0);
  return b.toString('utf8', 0, nul === -1 ? b.length : nul);
}

// --- IPv4 helpers (addresses travel in network order everywhere in netlink) --------------------

/** A dotted quad in network order; the one strict parser (common/ipv4.ts) decides what is an address. */
export function ipv4ToBytes(ip: string): Buffer {
  const n = parseIPv4(ip);
  if (n === null) throw new RangeError(`not an IPv4 address: ${ip}`);
  const out = Buffer.allocUnsafe(4);
  out.writeUInt32BE(n, 0);
  return out;
}

export function bytesToIpv4(b: Uint8Array): string {
  if (b.length !== 4) throw new NetlinkParseError(`IPv4 address needs 4 bytes, got ${b.length}`);
  return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
}
