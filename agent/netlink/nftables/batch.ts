// One nftables transaction: BATCH_BEGIN, the changes, BATCH_END, which the kernel applies whole or not at
// all. The builder only collects; each kernel object's attributes are written by its own module.
import { AttrTable, HOST_LE, NlWriter, parseAttrs } from '../attrs.ts';
import { NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST, beginMessage, endMessage } from '../message.ts';
import { chainBody, type ChainSpec } from './chain.ts';
import {
  NFNL_BATCH_GENID,
  NFNL_MSG_BATCH_BEGIN,
  NFNL_MSG_BATCH_END,
  NFNL_SUBSYS_NFTABLES,
  NFPROTO_IPV4,
  NFPROTO_UNSPEC,
  NFT_MSG_DELCHAIN,
  NFT_MSG_DELFLOWTABLE,
  NFT_MSG_DELOBJ,
  NFT_MSG_DELRULE,
  NFT_MSG_DELSET,
  NFT_MSG_DELSETELEM,
  NFT_MSG_DELTABLE,
  NFT_MSG_NEWCHAIN,
  NFT_MSG_NEWFLOWTABLE,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  NFT_MSG_NEWSET,
  NFT_MSG_NEWSETELEM,
  NFT_MSG_NEWTABLE,
  nfgenmsg,
  nftType,
} from './message.ts';
import { NFT_OBJECT_SYNPROXY, counterBody, deleteCounterBody, deleteObjectBody, synproxyBody, type CounterSpec, type SynproxySpec } from './object.ts';
import { deleteFlowtableBody, flowtableBody, type FlowtableSpec } from './flowtable.ts';
import { ruleBody, type RuleSpec } from './rule.ts';
import { elementSize, elementsBody, elementsHeaderSize, setBody, type ElementsSpec, type SetElement, type SetSpec } from './set.ts';
import { tableBody } from './table.ts';

// Attribute numbers of the delete messages (nf_tables.h: NFTA_SET_*, NFTA_RULE_*, NFTA_CHAIN_*).
const NFTA_SET_TABLE_ATTR = 1;
const NFTA_SET_NAME_ATTR = 2;
const NFTA_RULE_TABLE_ATTR = 1;
const NFTA_RULE_CHAIN_ATTR = 2;
const NFTA_CHAIN_TABLE_ATTR = 1;
const NFTA_CHAIN_NAME_ATTR = 3;

/** Each netlink message of a batch stays below this (nla_len is a u16, and the kernel's nests with it). */
export const MAX_NFT_MESSAGE = 0xffff;

/** One message of an encoded batch, so a kernel error (by seq) names what failed. */
export interface BatchMessage {
  seq: number;
  /** 0-based position among the batch's messages (BEGIN and END excluded). */
  index: number;
  type: number;
  /** "add set element tunnelgate/protected (2000 elements)" */
  description: string;
}

export interface EncodedBatch {
  data: Buffer;
  beginSeq: number;
  endSeq: number;
  /** The messages between BEGIN and END carry firstMessageSeq .. firstMessageSeq + count - 1, in order. */
  firstMessageSeq: number;
  count: number;
  /** Each message with its seq and description, built when read. */
  readonly messages: BatchMessage[];
}

export interface EncodeOptions {
  /** Sequence number of BATCH_BEGIN; the messages follow it consecutively, END last. */
  firstSeq: number;
  /** Ask for an ack per message (how we learn the batch finished); off reproduces nft's own flags. */
  ack: boolean;
  /** NFNL_BATCH_GENID: the kernel refuses the whole batch with ERESTART if the ruleset changed since. */
  genId?: number;
}


/** Room kept at the front of the buffer for BATCH_BEGIN: headers (20 bytes) and an optional genid attribute (8). */
const BEGIN_RESERVE = 28;
/** Where a message's flags and sequence number sit in its netlink header (struct nlmsghdr). */
const NLMSG_FLAGS_AT = 6;
const NLMSG_SEQ_AT = 8;
/** A message's netlink (16) and nfgenmsg (4) headers: its attributes start after them. */
const MESSAGE_HEADER_BYTES = 20;

/**
 * Collects nftables changes for one atomic transaction. Each change is encoded into one growing buffer as it
 * is added, in the order it is added, behind room for BATCH_BEGIN; encode() writes the sequence numbers (the
 * caller knows how many to reserve only then: messageCount + 2), BEGIN and END in place and returns that same
 * buffer. So a 10,000-tunnel batch (~15 MB) is in memory once, never twice as when the messages were copied
 * into a second buffer at the end (the agent's RSS at the apply's peak), and no element object lives
 * longer than the call that added it.
 */
export class NftBatch {
  /**
   * Where each message starts in the buffer (its netlink header: type, flags, seq). Numbers, not an object per
   * message: a first apply of 10,000 tunnels is ~80,000 messages (RSS at its peak).
   */
  private readonly starts: number[] = [];
  /** Descriptions of the few messages that are not bulk (a counter or an element list is described from its bytes). */
  private readonly descriptions = new Map<number, string>();
  private nextSetId = 1;
  readonly family: number;
  private readonly maxMessage: number;
  private readonly w: NlWriter;
  /** Where BATCH_END was written by the first encode(); nothing may be added after it. */
  private endAt: number | undefined;

  /**
   * `storage`: a buffer to encode into, e.g. a committed batch's (a first apply's further batches reuse one
   * buffer rather than growing a new one each: glibc keeps what they freed resident, RSS).
   */
  constructor(opts: { family?: number; maxMessageBytes?: number; storage?: Buffer } = {}) {
    this.family = opts.family ?? NFPROTO_IPV4;
    this.maxMessage = opts.maxMessageBytes ?? MAX_NFT_MESSAGE;
    this.w = new NlWriter(opts.storage ?? 64 * 1024).zeros(BEGIN_RESERVE);
  }

  /** The buffer this batch encoded into, for the next batch once this one was sent (constructor `storage`). */
  get storage(): Buffer {
    return this.w.storage;
  }

  get messageCount(): number {
    return this.starts.length;
  }

  /** A fresh batch-local set id (NFTA_SET_ID), for referring to a set created in this batch. */
  allocSetId(): number {
    return this.nextSetId++;
  }

  /** Appends one message; `description` undefined for bulk messages (describe() reads them back). */
  private push(type: number, flags: number, description: string | undefined, body: (w: NlWriter) => void): this {
    if (this.endAt !== undefined) throw new Error('NftBatch: a change added after encode()');
    const start = beginMessage(this.w, nftType(type), flags, 0);
    nfgenmsg(this.w, this.family, 0);
    body(this.w);
    endMessage(this.w, start);
    if (description !== undefined) this.descriptions.set(this.starts.length, description);
    this.starts.push(start);
    return this;
  }

  /** The message type (nfnetlink: subsystem << 8 | message) of the index-th message. */
  typeOf(index: number): number {
    return readU16(this.w.take(), this.starts[index]! + 4);
  }

  /** "add counter tunnelgate/tg-1", "add element tunnelgate/protected (2000 elements)": what an error names. */
  describe(index: number): string {
    const known = this.descriptions.get(index);
    if (known !== undefined) return known;
    const buf = this.w.take();
    const start = this.starts[index]!;
    const attrs = new AttrTable(buf.subarray(start + MESSAGE_HEADER_BYTES, start + readU32(buf, start)));
    const table = attrs.string(1) ?? '?';
    const type = this.typeOf(index) & 0xff;
    if (type === NFT_MSG_NEWOBJ || type === NFT_MSG_DELOBJ) return `${type === NFT_MSG_NEWOBJ ? 'add' : 'delete'} counter ${table}/${attrs.string(2) ?? '?'}`;
    const n = parseAttrs(attrs.get(3) ?? Buffer.alloc(0)).length;
    return `${type === NFT_MSG_NEWSETELEM ? 'add' : 'delete'} element ${table}/${attrs.string(2) ?? '?'} (${n} elements)`;
  }

  addTable(name: string, flags = 0): this {
    // nft sends NEWTABLE without NLM_F_CREATE ("add table": no error if it exists)
    return this.push(NFT_MSG_NEWTABLE, NLM_F_REQUEST, `add table ${name}`, (w) => tableBody(w, name, flags));
  }

  deleteTable(name: string): this {
    return this.push(NFT_MSG_DELTABLE, NLM_F_REQUEST, `delete table ${name}`, (w) => tableBody(w, name));
  }

  addChain(c: ChainSpec): this {
    return this.push(NFT_MSG_NEWCHAIN, NLM_F_REQUEST | NLM_F_CREATE, `add chain ${c.table}/${c.name}`, (w) => chainBody(w, c));
  }

  /** Adds a set or map; returns its batch-local id (use it in SetRef / ElementsSpec.setId). */
  addSet(s: SetSpec): number {
    const id = this.allocSetId();
    this.push(NFT_MSG_NEWSET, NLM_F_REQUEST | NLM_F_CREATE, `add set ${s.table}/${s.name}`, (w) => setBody(w, s, id));
    return id;
  }

  addElements(e: ElementsSpec): this {
    return this.elements(NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_CREATE | (e.exclusive ? NLM_F_EXCL : 0), 'add', e);
  }

  /** Deletes by key (data, objref and an interval's end are ignored by the kernel and not sent, as nft does). */
  deleteElements(e: ElementsSpec): this {
    return this.elements(NFT_MSG_DELSETELEM, NLM_F_REQUEST, 'delete', { ...e, elements: e.elements.map((x) => ({ key: x.key })) });
  }

  /** Deletes every element of a set (`flush set`: a DELSETELEM naming no element). */
  flushSet(table: string, name: string): this {
    return this.push(NFT_MSG_DELSETELEM, NLM_F_REQUEST, `flush set ${table}/${name}`, (w) => w.attrString(NFTA_SET_TABLE_ATTR, table).attrString(NFTA_SET_NAME_ATTR, name));
  }

  deleteSet(table: string, name: string): this {
    return this.push(NFT_MSG_DELSET, NLM_F_REQUEST, `delete set ${table}/${name}`, (w) => w.attrString(NFTA_SET_TABLE_ATTR, table).attrString(NFTA_SET_NAME_ATTR, name));
  }

  /** Deletes every rule of a chain (`flush chain`). */
  flushChain(table: string, chain: string): this {
    return this.push(NFT_MSG_DELRULE, NLM_F_REQUEST, `flush chain ${table}/${chain}`, (w) => w.attrString(NFTA_RULE_TABLE_ATTR, table).attrString(NFTA_RULE_CHAIN_ATTR, chain));
  }

  /** Deletes an empty chain nothing jumps to. */
  deleteChain(table: string, name: string): this {
    return this.push(NFT_MSG_DELCHAIN, NLM_F_REQUEST, `delete chain ${table}/${name}`, (w) => w.attrString(NFTA_CHAIN_TABLE_ATTR, table).attrString(NFTA_CHAIN_NAME_ATTR, name));
  }

  /** `add flowtable`: also how devices are added to one that exists (the kernel merges the lists). */
  addFlowtable(f: FlowtableSpec): this {
    return this.push(NFT_MSG_NEWFLOWTABLE, NLM_F_REQUEST | NLM_F_CREATE, `add flowtable ${f.table}/${f.name}`, (w) => flowtableBody(w, f));
  }

  deleteFlowtable(table: string, name: string): this {
    return this.push(NFT_MSG_DELFLOWTABLE, NLM_F_REQUEST, `delete flowtable ${table}/${name}`, (w) => deleteFlowtableBody(w, table, name));
  }

  addSynproxy(s: SynproxySpec): this {
    return this.push(NFT_MSG_NEWOBJ, NLM_F_REQUEST | NLM_F_CREATE, `add synproxy ${s.table}/${s.name}`, (w) => synproxyBody(w, s));
  }

  deleteSynproxy(table: string, name: string): this {
    return this.push(NFT_MSG_DELOBJ, NLM_F_REQUEST, `delete synproxy ${table}/${name}`, (w) => deleteObjectBody(w, table, name, NFT_OBJECT_SYNPROXY));
  }

  /**
   * Splits the element list over as many messages as needed to keep each under maxMessage bytes:
   * NFTA_SET_ELEM_LIST_ELEMENTS is one attribute, and an attribute's length is a u16.
   */
  private elements(type: number, flags: number, verb: string, e: ElementsSpec): this {
    const header = elementsHeaderSize(e);
    let chunk: SetElement[] = [];
    let size = header;
    const flush = (): void => {
      if (chunk.length === 0) return;
      // Encoded now, not in encode(): the chunk's element objects (a Buffer or two each) are garbage at once
      // instead of all held until the batch is sent; at 10,000 tunnels that is ~100,000 of them (RSS).
      const els = chunk;
      this.push(type, flags, undefined, (w) => elementsBody(w, e, els));
      chunk = [];
      size = header;
    };
    for (const el of e.elements) {
      const s = elementSize(el);
      if (header + s > this.maxMessage) throw new RangeError('one set element does not fit a netlink message');
      if (size + s > this.maxMessage) flush();
      chunk.push(el);
      size += s;
    }
    flush();
    return this;
  }

  addRule(r: RuleSpec): this {
    return this.push(NFT_MSG_NEWRULE, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_APPEND, `add rule ${r.table}/${r.chain} (${r.exprs.map((x) => x.name).join(' ')})`, (w) => ruleBody(w, r));
  }

  addCounter(c: CounterSpec): this {
    return this.push(NFT_MSG_NEWOBJ, NLM_F_REQUEST | NLM_F_CREATE, undefined, (w) => counterBody(w, c));
  }

  deleteCounter(table: string, name: string): this {
    return this.push(NFT_MSG_DELOBJ, NLM_F_REQUEST, undefined, (w) => deleteCounterBody(w, table, name));
  }

  encode(opts: EncodeOptions): EncodedBatch {
    const w = this.w;
    if (this.endAt === undefined) {
      this.endAt = w.length;
      const end = beginMessage(w, NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0);
      nfgenmsg(w, NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES);
      endMessage(w, end);
    }
    const buf = w.take();
    let seq = opts.firstSeq;
    // BEGIN is written last, against the first message: it starts the returned buffer.
    const head = new NlWriter(BEGIN_RESERVE);
    const beginSeq = seq++;
    const begin = beginMessage(head, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, beginSeq);
    nfgenmsg(head, NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES);
    if (opts.genId !== undefined) head.attrU32be(NFNL_BATCH_GENID, opts.genId);
    endMessage(head, begin);
    const headBytes = head.take();
    const from = BEGIN_RESERVE - headBytes.length;
    buf.set(headBytes, from);
    const firstMessageSeq = seq;
    for (const at of this.starts) {
      const flags = readU16(buf, at + NLMSG_FLAGS_AT);
      writeHeaderU16(buf, at + NLMSG_FLAGS_AT, opts.ack ? flags | NLM_F_ACK : flags & ~NLM_F_ACK);
      writeHeaderU32(buf, at + NLMSG_SEQ_AT, seq++);
    }
    const endSeq = seq;
    writeHeaderU32(buf, this.endAt + NLMSG_SEQ_AT, endSeq);
    const batch = this;
    return {
      data: buf.subarray(from),
      beginSeq,
      endSeq,
      firstMessageSeq,
      count: this.starts.length,
      // Built on demand (tests, a failure): one object per message is what the batch no longer keeps.
      get messages(): BatchMessage[] {
        return batch.starts.map((_, index) => ({ seq: firstMessageSeq + index, index, type: batch.typeOf(index), description: batch.describe(index) }));
      },
    };
  }
}

/** Netlink headers are in host byte order. */
const writeHeaderU16 = (b: Buffer, at: number, v: number): void => void (HOST_LE ? b.writeUInt16LE(v, at) : b.writeUInt16BE(v, at));
const readU16 = (b: Buffer, at: number): number => (HOST_LE ? b.readUInt16LE(at) : b.readUInt16BE(at));
const readU32 = (b: Buffer, at: number): number => (HOST_LE ? b.readUInt32LE(at) : b.readUInt32BE(at));
const writeHeaderU32 = (b: Buffer, at: number, v: number): void => void (HOST_LE ? b.writeUInt32LE(v >>> 0, at) : b.writeUInt32BE(v >>> 0, at));
