// One nftables transaction: BATCH_BEGIN, the changes, BATCH_END, which the kernel applies whole or not at
// all. The builder only collects; each kernel object's attributes are written by its own module.
import { NlWriter } from '../attrs.ts';
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
  NFT_MSG_DELOBJ,
  NFT_MSG_DELRULE,
  NFT_MSG_DELSET,
  NFT_MSG_DELSETELEM,
  NFT_MSG_DELTABLE,
  NFT_MSG_NEWCHAIN,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  NFT_MSG_NEWSET,
  NFT_MSG_NEWSETELEM,
  NFT_MSG_NEWTABLE,
  nfgenmsg,
  nftType,
} from './message.ts';
import { NFT_OBJECT_SYNPROXY, counterBody, deleteCounterBody, deleteObjectBody, synproxyBody, type CounterSpec, type SynproxySpec } from './object.ts';
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
  messages: BatchMessage[];
}

export interface EncodeOptions {
  /** Sequence number of BATCH_BEGIN; the messages follow it consecutively, END last. */
  firstSeq: number;
  /** Ask for an ack per message (how we learn the batch finished); off reproduces nft's own flags. */
  ack: boolean;
  /** NFNL_BATCH_GENID: the kernel refuses the whole batch with ERESTART if the ruleset changed since. */
  genId?: number;
}

/**
 * One message of the batch. Its body is either written by `body` at encode(), or already encoded into the
 * batch's arena at [start, end): the many small messages of a bulk change (a counter each, element lists) are
 * bytes there rather than a closure and the objects it holds each (RSS at 10,000 tunnels: 70,000 counters).
 */
type Op = { type: number; flags: number; family: number; description: string; body?: (w: NlWriter) => void; start: number; end: number };

/** What encode() reserves for a message whose body size is not known in advance (an object, a rule, a chain). */
const SMALL_MESSAGE_BYTES = 256;
/** A message's netlink and nfgenmsg headers. */
const MESSAGE_HEADER_BYTES = 20;

/**
 * Collects nftables changes for one atomic transaction. Nothing is encoded until encode(): the caller
 * then knows how many sequence numbers to reserve (messageCount() + 2).
 */
export class NftBatch {
  private readonly ops: Op[] = [];
  private nextSetId = 1;
  readonly family: number;
  private readonly maxMessage: number;
  /** Bytes encode() allocates at once: exact for pre-encoded element messages, an estimate for the rest. */
  private sizeHint = 4096;
  /** The bodies encoded when they were added (pushEncoded). */
  private readonly arena = new NlWriter(64 * 1024);

  constructor(opts: { family?: number; maxMessageBytes?: number } = {}) {
    this.family = opts.family ?? NFPROTO_IPV4;
    this.maxMessage = opts.maxMessageBytes ?? MAX_NFT_MESSAGE;
  }

  get messageCount(): number {
    return this.ops.length;
  }

  /** A fresh batch-local set id (NFTA_SET_ID), for referring to a set created in this batch. */
  allocSetId(): number {
    return this.nextSetId++;
  }

  private push(type: number, flags: number, description: string, body: (w: NlWriter) => void): this {
    this.ops.push({ type: nftType(type), flags, family: this.family, description, body, start: 0, end: 0 });
    this.sizeHint += MESSAGE_HEADER_BYTES + SMALL_MESSAGE_BYTES;
    return this;
  }

  /** A message whose body is encoded now, into the arena (its position is 4-aligned, as in the batch). */
  private pushEncoded(type: number, flags: number, description: string, body: (w: NlWriter) => void): this {
    const start = this.arena.length;
    body(this.arena);
    const end = this.arena.length;
    this.arena.align();
    this.ops.push({ type: nftType(type), flags, family: this.family, description, start, end });
    this.sizeHint += MESSAGE_HEADER_BYTES + end - start;
    return this;
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
      this.pushEncoded(type, flags, `${verb} element ${e.table}/${e.set} (${els.length} elements)`, (w) => elementsBody(w, e, els));
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
    return this.pushEncoded(NFT_MSG_NEWOBJ, NLM_F_REQUEST | NLM_F_CREATE, `add counter ${c.table}/${c.name}`, (w) => counterBody(w, c));
  }

  deleteCounter(table: string, name: string): this {
    return this.push(NFT_MSG_DELOBJ, NLM_F_REQUEST, `delete counter ${table}/${name}`, (w) => deleteCounterBody(w, table, name));
  }

  encode(opts: EncodeOptions): EncodedBatch {
    // One allocation of about the batch's size (a 10,000-tunnel batch is ~10 MB), and no copy at the end.
    const w = new NlWriter(this.sizeHint);
    const arena = this.arena.take();
    let seq = opts.firstSeq;
    const beginSeq = seq++;
    let start = beginMessage(w, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, beginSeq);
    nfgenmsg(w, NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES);
    if (opts.genId !== undefined) w.attrU32be(NFNL_BATCH_GENID, opts.genId);
    endMessage(w, start);
    const messages: BatchMessage[] = [];
    this.ops.forEach((op, index) => {
      const s = seq++;
      const mstart = beginMessage(w, op.type, op.flags | (opts.ack ? NLM_F_ACK : 0), s);
      nfgenmsg(w, op.family, 0);
      if (op.body) op.body(w);
      else w.bytes(arena.subarray(op.start, op.end));
      endMessage(w, mstart);
      messages.push({ seq: s, index, type: op.type, description: op.description });
    });
    const endSeq = seq;
    start = beginMessage(w, NFNL_MSG_BATCH_END, NLM_F_REQUEST, endSeq);
    nfgenmsg(w, NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES);
    endMessage(w, start);
    return { data: w.take(), beginSeq, endSeq, messages };
  }
}
