// nftables over nfnetlink: a batch builder (BEGIN ... END, one transaction in the kernel), expression
// encoders, and decoders for what the kernel lists back. Pure: no I/O here.
// Attribute order, flags and the userdata blobs follow what nft 1.0.6 (libnftnl) sends for the same
// ruleset, so test/unit/netlink can compare our batches with strace captures of `nft -f` byte for byte.
import { AttrTable, NlWriter, NetlinkParseError, bytesToIpv4, ipv4ToBytes, parseAttrs, readString, readU32be, readU64be } from './attrs.ts';
import { NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST, NLMSG_HDRLEN, beginMessage, endMessage, type NlMsg } from './message.ts';

// include/uapi/linux/netfilter/nfnetlink.h
export const NFNL_SUBSYS_NFTABLES = 10;
export const NFNL_MSG_BATCH_BEGIN = 0x10; // NLMSG_MIN_TYPE
export const NFNL_MSG_BATCH_END = 0x11;
export const NFNL_BATCH_GENID = 1;
export const NFNETLINK_V0 = 0;

// include/uapi/linux/netfilter.h
export const NFPROTO_UNSPEC = 0;
export const NFPROTO_INET = 1;
export const NFPROTO_IPV4 = 2;
export const NF_INET_PRE_ROUTING = 0;
export const NF_INET_LOCAL_IN = 1;
export const NF_INET_FORWARD = 2;
export const NF_INET_LOCAL_OUT = 3;
export const NF_INET_POST_ROUTING = 4;
export const NF_DROP = 0;
export const NF_ACCEPT = 1;
// include/uapi/linux/netfilter_ipv4.h: enum nf_ip_hook_priorities
export const NF_IP_PRI_MANGLE = -150;
export const NF_IP_PRI_NAT_DST = -100;
export const NF_IP_PRI_FILTER = 0;
export const NF_IP_PRI_NAT_SRC = 100;

// include/uapi/linux/netfilter/nf_tables.h: enum nf_tables_msg_types
export const NFT_MSG_NEWTABLE = 0;
export const NFT_MSG_GETTABLE = 1;
export const NFT_MSG_DELTABLE = 2;
export const NFT_MSG_NEWCHAIN = 3;
export const NFT_MSG_GETCHAIN = 4;
export const NFT_MSG_DELCHAIN = 5;
export const NFT_MSG_NEWRULE = 6;
export const NFT_MSG_GETRULE = 7;
export const NFT_MSG_DELRULE = 8;
export const NFT_MSG_NEWSET = 9;
export const NFT_MSG_GETSET = 10;
export const NFT_MSG_DELSET = 11;
export const NFT_MSG_NEWSETELEM = 12;
export const NFT_MSG_GETSETELEM = 13;
export const NFT_MSG_DELSETELEM = 14;
export const NFT_MSG_NEWGEN = 15;
export const NFT_MSG_GETGEN = 16;
export const NFT_MSG_NEWOBJ = 18;
export const NFT_MSG_GETOBJ = 19;
export const NFT_MSG_DELOBJ = 20;
export const NFT_MSG_GETOBJ_RESET = 21;

/** The nlmsg_type of an nftables message. */
export const nftType = (msg: number): number => (NFNL_SUBSYS_NFTABLES << 8) | msg;

// nf_tables.h: attributes
export const NFTA_LIST_ELEM = 1;
export const NFTA_TABLE_NAME = 1;
export const NFTA_TABLE_FLAGS = 2;
export const NFTA_TABLE_HANDLE = 4;
export const NFTA_CHAIN_TABLE = 1;
export const NFTA_CHAIN_HANDLE = 2;
export const NFTA_CHAIN_NAME = 3;
export const NFTA_CHAIN_HOOK = 4;
export const NFTA_CHAIN_POLICY = 5;
export const NFTA_CHAIN_TYPE = 7;
export const NFTA_HOOK_HOOKNUM = 1;
export const NFTA_HOOK_PRIORITY = 2;
export const NFTA_RULE_TABLE = 1;
export const NFTA_RULE_CHAIN = 2;
export const NFTA_RULE_HANDLE = 3;
export const NFTA_RULE_EXPRESSIONS = 4;
export const NFTA_EXPR_NAME = 1;
export const NFTA_EXPR_DATA = 2;
export const NFTA_SET_TABLE = 1;
export const NFTA_SET_NAME = 2;
export const NFTA_SET_FLAGS = 3;
export const NFTA_SET_KEY_TYPE = 4;
export const NFTA_SET_KEY_LEN = 5;
export const NFTA_SET_DATA_TYPE = 6;
export const NFTA_SET_DATA_LEN = 7;
export const NFTA_SET_DESC = 9;
export const NFTA_SET_ID = 10;
export const NFTA_SET_USERDATA = 13;
export const NFTA_SET_OBJ_TYPE = 15;
export const NFTA_SET_DESC_SIZE = 1;
export const NFT_SET_ANONYMOUS = 0x1;
export const NFT_SET_CONSTANT = 0x2;
export const NFT_SET_INTERVAL = 0x4;
export const NFT_SET_MAP = 0x8;
export const NFT_SET_TIMEOUT = 0x10;
export const NFT_SET_EVAL = 0x20;
export const NFT_SET_OBJECT = 0x40;
export const NFTA_SET_ELEM_LIST_TABLE = 1;
export const NFTA_SET_ELEM_LIST_SET = 2;
export const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
export const NFTA_SET_ELEM_LIST_SET_ID = 4;
export const NFTA_SET_ELEM_KEY = 1;
export const NFTA_SET_ELEM_DATA = 2;
export const NFTA_SET_ELEM_FLAGS = 3;
export const NFTA_SET_ELEM_OBJREF = 9;
export const NFTA_DATA_VALUE = 1;
export const NFTA_DATA_VERDICT = 2;
export const NFTA_VERDICT_CODE = 1;
export const NFTA_VERDICT_CHAIN = 2;
export const NFTA_OBJ_TABLE = 1;
export const NFTA_OBJ_NAME = 2;
export const NFTA_OBJ_TYPE = 3;
export const NFTA_OBJ_DATA = 4;
export const NFTA_OBJ_USE = 5;
export const NFTA_OBJ_HANDLE = 6;
export const NFT_OBJECT_COUNTER = 1;
export const NFTA_COUNTER_BYTES = 1;
export const NFTA_COUNTER_PACKETS = 2;
export const NFTA_GEN_ID = 1;
// expressions
export const NFT_REG_VERDICT = 0;
export const NFT_REG_1 = 1;
export const NFTA_META_DREG = 1;
export const NFTA_META_KEY = 2;
export const NFT_META_OIFNAME = 7;
export const NFT_META_NFPROTO = 15;
export const NFT_META_L4PROTO = 16;
export const NFTA_CMP_SREG = 1;
export const NFTA_CMP_OP = 2;
export const NFTA_CMP_DATA = 3;
export const NFT_CMP_EQ = 0;
export const NFT_CMP_NEQ = 1;
export const NFTA_LOOKUP_SET = 1;
export const NFTA_LOOKUP_SREG = 2;
export const NFTA_LOOKUP_DREG = 3;
export const NFTA_LOOKUP_SET_ID = 4;
export const NFTA_PAYLOAD_DREG = 1;
export const NFTA_PAYLOAD_BASE = 2;
export const NFTA_PAYLOAD_OFFSET = 3;
export const NFTA_PAYLOAD_LEN = 4;
export const NFT_PAYLOAD_LL_HEADER = 0;
export const NFT_PAYLOAD_NETWORK_HEADER = 1;
export const NFT_PAYLOAD_TRANSPORT_HEADER = 2;
export const NFTA_IMMEDIATE_DREG = 1;
export const NFTA_IMMEDIATE_DATA = 2;
export const NFTA_NAT_TYPE = 1;
export const NFTA_NAT_FAMILY = 2;
export const NFTA_NAT_REG_ADDR_MIN = 3;
export const NFTA_NAT_REG_ADDR_MAX = 4;
export const NFT_NAT_SNAT = 0;
export const NFT_NAT_DNAT = 1;
export const NFTA_OBJREF_IMM_TYPE = 1;
export const NFTA_OBJREF_IMM_NAME = 2;
export const NFTA_OBJREF_SET_SREG = 3;
export const NFTA_OBJREF_SET_NAME = 4;
export const NFTA_OBJREF_SET_ID = 5;
export const NFTA_EXTHDR_TYPE = 2;
export const NFTA_EXTHDR_OFFSET = 3;
export const NFTA_EXTHDR_LEN = 4;
export const NFTA_EXTHDR_OP = 6;
export const NFTA_EXTHDR_SREG = 7;
export const NFT_EXTHDR_OP_TCPOPT = 1;
export const NFTA_RT_DREG = 1;
export const NFTA_RT_KEY = 2;
export const NFT_RT_TCPMSS = 3;
export const NFTA_BITWISE_SREG = 1;
export const NFTA_BITWISE_DREG = 2;
export const NFTA_BITWISE_LEN = 3;
export const NFTA_BITWISE_MASK = 4;
export const NFTA_BITWISE_XOR = 5;
export const NFTA_BYTEORDER_SREG = 1;
export const NFTA_BYTEORDER_DREG = 2;
export const NFTA_BYTEORDER_OP = 3;
export const NFTA_BYTEORDER_LEN = 4;
export const NFTA_BYTEORDER_SIZE = 5;
export const NFT_BYTEORDER_HTON = 1;

// include/uapi/linux/in.h
export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;
// TCP option kind (RFC 793): maximum segment size
export const TCPOPT_MAXSEG = 2;
// TCP flags byte: SYN
export const TCP_FLAG_SYN = 0x02;

// nftables userspace (src/datatype.h, not uapi): set key/data type ids nft stores and prints by
export const NFT_TYPE_IPADDR = 7;
export const NFT_TYPE_INET_PROTOCOL = 12;

// libnftnl include/udata.h & nftables userspace: set userdata TLVs (u8 type, u8 len, value)
export const NFTNL_UDATA_SET_KEYBYTEORDER = 0;
export const NFTNL_UDATA_SET_DATABYTEORDER = 1;
export const NFTNL_UDATA_SET_KEY_TYPEOF = 3;
export const NFTNL_UDATA_SET_DATA_INTERVAL = 6;
export const NFTNL_UDATA_SET_TYPEOF_EXPR = 0;
export const NFTNL_UDATA_SET_TYPEOF_DATA = 1;
export const NFTNL_UDATA_META_KEY = 0;
// nftables src/expression.h enum expr_types, and enum byteorder
export const NFT_EXPR_META = 9;
export const BYTEORDER_HOST_ENDIAN = 1;
export const BYTEORDER_BIG_ENDIAN = 2;

/** Each netlink message of a batch stays below this (nla_len is a u16, and the kernel's nests with it). */
export const MAX_NFT_MESSAGE = 0xffff;

// --- userdata ----------------------------------------------------------------------------------

/** nftnl udata: a flat run of (type u8, len u8, value) records. nft reads these to print sets back. */
export function udata(entries: readonly (readonly [number, Uint8Array])[]): Buffer {
  const parts: Buffer[] = [];
  for (const [t, v] of entries) {
    if (v.length > 255) throw new RangeError('udata value over 255 bytes');
    parts.push(Buffer.from([t, v.length]), Buffer.from(v));
  }
  return Buffer.concat(parts);
}

function hostU32(v: number): Buffer {
  const w = new NlWriter(4);
  w.u32(v);
  return w.toBuffer();
}

/** The userdata nft writes for a map whose key and data are big-endian (ipv4_addr : ipv4_addr). */
export function mapUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)],
    [NFTNL_UDATA_SET_DATABYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)],
    [NFTNL_UDATA_SET_DATA_INTERVAL, hostU32(0)],
  ]);
}

/** ... for an object map (ipv4_addr : counter). */
export function objMapUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_BIG_ENDIAN)],
    [NFTNL_UDATA_SET_DATA_INTERVAL, hostU32(0)],
  ]);
}

/** ... for the anonymous set of `meta l4proto { tcp, udp }` (typeof meta l4proto). */
export function l4protoSetUserdata(): Buffer {
  return udata([
    [NFTNL_UDATA_SET_KEYBYTEORDER, hostU32(BYTEORDER_HOST_ENDIAN)],
    [
      NFTNL_UDATA_SET_KEY_TYPEOF,
      udata([
        [NFTNL_UDATA_SET_TYPEOF_EXPR, hostU32(NFT_EXPR_META)],
        [NFTNL_UDATA_SET_TYPEOF_DATA, udata([[NFTNL_UDATA_META_KEY, hostU32(NFT_META_L4PROTO)]])],
      ]),
    ],
  ]);
}

// --- expressions -------------------------------------------------------------------------------

/** One nft expression: its name and a writer of its NFTA_EXPR_DATA attributes. */
export interface Expr {
  readonly name: string;
  readonly data: (w: NlWriter) => void;
}

function dataValue(w: NlWriter, type: number, value: Uint8Array): void {
  w.nest(type, (d) => d.attrBytes(NFTA_DATA_VALUE, value));
}

/** A reference to a set: by name, plus its batch-local id when it is created in the same batch. */
export interface SetRef {
  name: string;
  id?: number;
}

export const expr = {
  /** meta load: `meta KEY` into dreg. */
  meta(key: number, dreg = NFT_REG_1): Expr {
    return { name: 'meta', data: (w) => w.attrU32be(NFTA_META_KEY, key).attrU32be(NFTA_META_DREG, dreg) };
  },
  cmp(op: number, data: Uint8Array, sreg = NFT_REG_1): Expr {
    return { name: 'cmp', data: (w) => (w.attrU32be(NFTA_CMP_SREG, sreg).attrU32be(NFTA_CMP_OP, op), dataValue(w, NFTA_CMP_DATA, data)) };
  },
  /** Set membership (no dreg) or map lookup (dreg receives the mapped value). */
  lookup(set: SetRef, sreg = NFT_REG_1, dreg?: number): Expr {
    return {
      name: 'lookup',
      data: (w) => {
        w.attrU32be(NFTA_LOOKUP_SREG, sreg);
        if (dreg !== undefined) w.attrU32be(NFTA_LOOKUP_DREG, dreg);
        w.attrString(NFTA_LOOKUP_SET, set.name);
        if (set.id !== undefined) w.attrU32be(NFTA_LOOKUP_SET_ID, set.id);
      },
    };
  },
  payload(base: number, offset: number, len: number, dreg = NFT_REG_1): Expr {
    return { name: 'payload', data: (w) => w.attrU32be(NFTA_PAYLOAD_DREG, dreg).attrU32be(NFTA_PAYLOAD_BASE, base).attrU32be(NFTA_PAYLOAD_OFFSET, offset).attrU32be(NFTA_PAYLOAD_LEN, len) };
  },
  immediateVerdict(code: number, dreg = NFT_REG_VERDICT): Expr {
    return {
      name: 'immediate',
      data: (w) => {
        w.attrU32be(NFTA_IMMEDIATE_DREG, dreg);
        w.nest(NFTA_IMMEDIATE_DATA, (d) => d.nest(NFTA_DATA_VERDICT, (v) => v.attrU32be(NFTA_VERDICT_CODE, code)));
      },
    };
  },
  immediateData(value: Uint8Array, dreg = NFT_REG_1): Expr {
    return { name: 'immediate', data: (w) => (w.attrU32be(NFTA_IMMEDIATE_DREG, dreg), dataValue(w, NFTA_IMMEDIATE_DATA, value)) };
  },
  nat(type: number, family: number, regAddrMin = NFT_REG_1, regAddrMax?: number): Expr {
    return {
      name: 'nat',
      data: (w) => {
        w.attrU32be(NFTA_NAT_TYPE, type).attrU32be(NFTA_NAT_FAMILY, family).attrU32be(NFTA_NAT_REG_ADDR_MIN, regAddrMin);
        if (regAddrMax !== undefined) w.attrU32be(NFTA_NAT_REG_ADDR_MAX, regAddrMax);
      },
    };
  },
  /** An anonymous counter (its own, not a named object). */
  counter(): Expr {
    return { name: 'counter', data: () => undefined };
  },
  /** `counter name KEY map @set`: the named counter chosen by looking up sreg in an object map. */
  objrefMap(set: SetRef, sreg = NFT_REG_1): Expr {
    return {
      name: 'objref',
      data: (w) => {
        w.attrU32be(NFTA_OBJREF_SET_SREG, sreg);
        // libnftnl puts this name without its NUL (mnl_attr_put_str); the kernel's NLA_STRING takes either.
        w.attrStringNoNul(NFTA_OBJREF_SET_NAME, set.name);
        if (set.id !== undefined) w.attrU32be(NFTA_OBJREF_SET_ID, set.id);
      },
    };
  },
  /** `counter name "x"`: a fixed named object. */
  objrefImm(type: number, name: string): Expr {
    return { name: 'objref', data: (w) => w.attrU32be(NFTA_OBJREF_IMM_TYPE, type).attrString(NFTA_OBJREF_IMM_NAME, name) };
  },
  rt(key: number, dreg = NFT_REG_1): Expr {
    return { name: 'rt', data: (w) => w.attrU32be(NFTA_RT_KEY, key).attrU32be(NFTA_RT_DREG, dreg) };
  },
  bitwise(len: number, mask: Uint8Array, xor: Uint8Array, sreg = NFT_REG_1, dreg = NFT_REG_1): Expr {
    return {
      name: 'bitwise',
      data: (w) => {
        w.attrU32be(NFTA_BITWISE_SREG, sreg).attrU32be(NFTA_BITWISE_DREG, dreg).attrU32be(NFTA_BITWISE_LEN, len);
        dataValue(w, NFTA_BITWISE_MASK, mask);
        dataValue(w, NFTA_BITWISE_XOR, xor);
      },
    };
  },
  byteorder(op: number, len: number, size: number, sreg = NFT_REG_1, dreg = NFT_REG_1): Expr {
    return {
      name: 'byteorder',
      data: (w) => w.attrU32be(NFTA_BYTEORDER_SREG, sreg).attrU32be(NFTA_BYTEORDER_DREG, dreg).attrU32be(NFTA_BYTEORDER_OP, op).attrU32be(NFTA_BYTEORDER_LEN, len).attrU32be(NFTA_BYTEORDER_SIZE, size),
    };
  },
  /** Writes sreg into a TCP option field (`tcp option maxseg size set ...`). */
  exthdrTcpoptWrite(optType: number, offset: number, len: number, sreg = NFT_REG_1): Expr {
    return {
      name: 'exthdr',
      data: (w) => w.attrU32be(NFTA_EXTHDR_SREG, sreg).attrU8(NFTA_EXTHDR_TYPE, optType).attrU32be(NFTA_EXTHDR_OFFSET, offset).attrU32be(NFTA_EXTHDR_LEN, len).attrU32be(NFTA_EXTHDR_OP, NFT_EXTHDR_OP_TCPOPT),
    };
  },
};

// --- batch -------------------------------------------------------------------------------------

export interface ChainSpec {
  table: string;
  name: string;
  /** Base chain: "filter" | "nat" | "route". Omit type/hook for a regular chain. */
  type?: string;
  hook?: number;
  priority?: number;
  policy?: number;
}

export interface SetSpec {
  table: string;
  name: string;
  flags: number;
  keyType: number;
  keyLen: number;
  dataType?: number;
  dataLen?: number;
  /** For object maps (NFT_SET_OBJECT): the object type, e.g. NFT_OBJECT_COUNTER. */
  objType?: number;
  /** NFTA_SET_DESC_SIZE (nft sends the element count for constant anonymous sets). */
  descSize?: number;
  userdata?: Uint8Array;
}

export interface SetElement {
  key: Uint8Array;
  /** Map value (NFTA_SET_ELEM_DATA). */
  data?: Uint8Array;
  /** Object map value: the object's name (NFTA_SET_ELEM_OBJREF). */
  objref?: string;
}

export interface ElementsSpec {
  table: string;
  set: string;
  /** The set's batch-local id; nft sends it for every element message, the kernel only needs it for new sets. */
  setId?: number;
  elements: readonly SetElement[];
  /** `create element` semantics: fail with EEXIST even when the element is identical. */
  exclusive?: boolean;
}

export interface RuleSpec {
  table: string;
  chain: string;
  exprs: readonly Expr[];
}

export interface CounterSpec {
  table: string;
  name: string;
  bytes?: bigint;
  packets?: bigint;
}

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

type Op = { type: number; flags: number; family: number; description: string; body: (w: NlWriter) => void };

/**
 * Collects nftables changes for one atomic transaction. Nothing is encoded until encode(): the caller
 * then knows how many sequence numbers to reserve (messageCount() + 2).
 */
export class NftBatch {
  private readonly ops: Op[] = [];
  private nextSetId = 1;
  readonly family: number;
  private readonly maxMessage: number;

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
    this.ops.push({ type: nftType(type), flags, family: this.family, description, body });
    return this;
  }

  addTable(name: string, flags = 0): this {
    // nft sends NEWTABLE without NLM_F_CREATE ("add table": no error if it exists)
    return this.push(NFT_MSG_NEWTABLE, NLM_F_REQUEST, `add table ${name}`, (w) => w.attrString(NFTA_TABLE_NAME, name).attrU32be(NFTA_TABLE_FLAGS, flags));
  }

  deleteTable(name: string): this {
    return this.push(NFT_MSG_DELTABLE, NLM_F_REQUEST, `delete table ${name}`, (w) => w.attrString(NFTA_TABLE_NAME, name));
  }

  addChain(c: ChainSpec): this {
    return this.push(NFT_MSG_NEWCHAIN, NLM_F_REQUEST | NLM_F_CREATE, `add chain ${c.table}/${c.name}`, (w) => {
      w.attrString(NFTA_CHAIN_TABLE, c.table).attrString(NFTA_CHAIN_NAME, c.name);
      if (c.type !== undefined) w.attrString(NFTA_CHAIN_TYPE, c.type);
      if (c.policy !== undefined) w.attrU32be(NFTA_CHAIN_POLICY, c.policy);
      if (c.hook !== undefined) {
        const hook = c.hook;
        w.nest(NFTA_CHAIN_HOOK, (h) => h.attrU32be(NFTA_HOOK_HOOKNUM, hook).attrU32be(NFTA_HOOK_PRIORITY, (c.priority ?? 0) >>> 0));
      }
    });
  }

  /** Adds a set or map; returns its batch-local id (use it in SetRef / ElementsSpec.setId). */
  addSet(s: SetSpec): number {
    const id = this.allocSetId();
    this.push(NFT_MSG_NEWSET, NLM_F_REQUEST | NLM_F_CREATE, `add set ${s.table}/${s.name}`, (w) => {
      w.attrString(NFTA_SET_TABLE, s.table).attrString(NFTA_SET_NAME, s.name);
      w.attrU32be(NFTA_SET_FLAGS, s.flags).attrU32be(NFTA_SET_KEY_TYPE, s.keyType).attrU32be(NFTA_SET_KEY_LEN, s.keyLen);
      if (s.dataType !== undefined) w.attrU32be(NFTA_SET_DATA_TYPE, s.dataType);
      if (s.dataLen !== undefined) w.attrU32be(NFTA_SET_DATA_LEN, s.dataLen);
      if (s.objType !== undefined) w.attrU32be(NFTA_SET_OBJ_TYPE, s.objType);
      w.attrU32be(NFTA_SET_ID, id);
      if (s.descSize !== undefined) {
        const n = s.descSize;
        w.nest(NFTA_SET_DESC, (d) => d.attrU32be(NFTA_SET_DESC_SIZE, n));
      }
      if (s.userdata) w.attrBytes(NFTA_SET_USERDATA, s.userdata);
    });
    return id;
  }

  addElements(e: ElementsSpec): this {
    return this.elements(NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_CREATE | (e.exclusive ? NLM_F_EXCL : 0), 'add', e);
  }

  /** Deletes by key (data and objref are ignored by the kernel and not sent). */
  deleteElements(e: ElementsSpec): this {
    return this.elements(NFT_MSG_DELSETELEM, NLM_F_REQUEST, 'delete', { ...e, elements: e.elements.map((x) => ({ key: x.key })) });
  }

  /**
   * Splits the element list over as many messages as needed to keep each under maxMessage bytes:
   * NFTA_SET_ELEM_LIST_ELEMENTS is one attribute, and an attribute's length is a u16.
   */
  private elements(type: number, flags: number, verb: string, e: ElementsSpec): this {
    const header = NLMSG_HDRLEN + 4 + attrSize(Buffer.byteLength(e.table) + 1) + attrSize(Buffer.byteLength(e.set) + 1) + (e.setId !== undefined ? 8 : 0) + 4;
    let chunk: SetElement[] = [];
    let size = header;
    const flush = (): void => {
      if (chunk.length === 0) return;
      const els = chunk;
      this.push(type, flags, `${verb} element ${e.table}/${e.set} (${els.length} elements)`, (w) => {
        w.attrString(NFTA_SET_ELEM_LIST_TABLE, e.table).attrString(NFTA_SET_ELEM_LIST_SET, e.set);
        if (e.setId !== undefined) w.attrU32be(NFTA_SET_ELEM_LIST_SET_ID, e.setId);
        w.nest(NFTA_SET_ELEM_LIST_ELEMENTS, (l) => {
          // libnftnl numbers the list entries 1, 2, 3...; the kernel ignores the type of list entries.
          els.forEach((el, i) => l.nest(i + 1, (x) => encodeElement(x, el)));
        });
      });
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
    return this.push(NFT_MSG_NEWRULE, NLM_F_REQUEST | NLM_F_CREATE | NLM_F_APPEND, `add rule ${r.table}/${r.chain} (${r.exprs.map((x) => x.name).join(' ')})`, (w) => {
      w.attrString(NFTA_RULE_TABLE, r.table).attrString(NFTA_RULE_CHAIN, r.chain);
      w.nest(NFTA_RULE_EXPRESSIONS, (l) => {
        for (const x of r.exprs) {
          l.nest(NFTA_LIST_ELEM, (e) => {
            e.attrString(NFTA_EXPR_NAME, x.name);
            e.nest(NFTA_EXPR_DATA, (d) => x.data(d));
          });
        }
      });
    });
  }

  addCounter(c: CounterSpec): this {
    return this.push(NFT_MSG_NEWOBJ, NLM_F_REQUEST | NLM_F_CREATE, `add counter ${c.table}/${c.name}`, (w) => {
      w.attrString(NFTA_OBJ_TABLE, c.table).attrString(NFTA_OBJ_NAME, c.name).attrU32be(NFTA_OBJ_TYPE, NFT_OBJECT_COUNTER);
      w.nest(NFTA_OBJ_DATA, (d) => d.attrU64be(NFTA_COUNTER_BYTES, c.bytes ?? 0n).attrU64be(NFTA_COUNTER_PACKETS, c.packets ?? 0n));
    });
  }

  deleteCounter(table: string, name: string): this {
    return this.push(NFT_MSG_DELOBJ, NLM_F_REQUEST, `delete counter ${table}/${name}`, (w) => {
      w.attrString(NFTA_OBJ_TABLE, table).attrString(NFTA_OBJ_NAME, name).attrU32be(NFTA_OBJ_TYPE, NFT_OBJECT_COUNTER);
      // libnftnl sends an empty data nest on delete; kept for byte-equality with nft
      w.nest(NFTA_OBJ_DATA, () => undefined);
    });
  }

  encode(opts: EncodeOptions): EncodedBatch {
    const w = new NlWriter(4096 + this.ops.length * 256);
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
      op.body(w);
      endMessage(w, mstart);
      messages.push({ seq: s, index, type: op.type, description: op.description });
    });
    const endSeq = seq;
    start = beginMessage(w, NFNL_MSG_BATCH_END, NLM_F_REQUEST, endSeq);
    nfgenmsg(w, NFPROTO_UNSPEC, NFNL_SUBSYS_NFTABLES);
    endMessage(w, start);
    return { data: w.toBuffer(), beginSeq, endSeq, messages };
  }
}

function nfgenmsg(w: NlWriter, family: number, resId: number): void {
  // struct nfgenmsg { u8 nfgen_family; u8 version; __be16 res_id; }
  w.u8(family).u8(NFNETLINK_V0).u16be(resId);
}

const attrSize = (payload: number): number => 4 + ((payload + 3) & ~3);

function elementSize(el: SetElement): number {
  let n = 4 + 4 + attrSize(el.key.length); // list entry + KEY nest + DATA_VALUE
  if (el.data) n += 4 + attrSize(el.data.length);
  if (el.objref !== undefined) n += attrSize(Buffer.byteLength(el.objref) + 1);
  return n;
}

function encodeElement(w: NlWriter, el: SetElement): void {
  dataValue(w, NFTA_SET_ELEM_KEY, el.key);
  if (el.data) dataValue(w, NFTA_SET_ELEM_DATA, el.data);
  if (el.objref !== undefined) w.attrString(NFTA_SET_ELEM_OBJREF, el.objref);
}

// --- requests outside batches (GET, dumps) -----------------------------------------------------

function getMessage(type: number, flags: number, seq: number, family: number, body: (w: NlWriter) => void): Buffer {
  const w = new NlWriter(256);
  const start = beginMessage(w, nftType(type), flags, seq);
  nfgenmsg(w, family, 0);
  body(w);
  endMessage(w, start);
  return w.toBuffer();
}

/** NFT_MSG_GETSETELEM dump of one set (the attribute order is nft's: set, then table). */
export function encodeGetSetElements(table: string, set: string, seq: number, family = NFPROTO_IPV4): Buffer {
  return getMessage(NFT_MSG_GETSETELEM, NLM_F_REQUEST | NLM_F_DUMP, seq, family, (w) => w.attrString(NFTA_SET_ELEM_LIST_SET, set).attrString(NFTA_SET_ELEM_LIST_TABLE, table));
}

/** NFT_MSG_GETOBJ dump of a table's objects of one type (NFT_MSG_GETOBJ_RESET reads and zeroes them). */
export function encodeGetObjects(table: string, seq: number, opts: { type?: number; reset?: boolean; family?: number } = {}): Buffer {
  return getMessage(opts.reset ? NFT_MSG_GETOBJ_RESET : NFT_MSG_GETOBJ, NLM_F_REQUEST | NLM_F_DUMP, seq, opts.family ?? NFPROTO_IPV4, (w) => {
    w.attrString(NFTA_OBJ_TABLE, table);
    if (opts.type !== undefined) w.attrU32be(NFTA_OBJ_TYPE, opts.type);
  });
}

export function encodeGetRules(table: string, seq: number, family = NFPROTO_IPV4): Buffer {
  return getMessage(NFT_MSG_GETRULE, NLM_F_REQUEST | NLM_F_DUMP, seq, family, (w) => w.attrString(NFTA_RULE_TABLE, table));
}

export function encodeGetTables(seq: number, family = NFPROTO_UNSPEC): Buffer {
  return getMessage(NFT_MSG_GETTABLE, NLM_F_REQUEST | NLM_F_DUMP, seq, family, () => undefined);
}

/** NFT_MSG_GETGEN: the ruleset generation id, for NFNL_BATCH_GENID. */
export function encodeGetGen(seq: number): Buffer {
  return getMessage(NFT_MSG_GETGEN, NLM_F_REQUEST | NLM_F_ACK, seq, NFPROTO_UNSPEC, () => undefined);
}

// --- decoders ----------------------------------------------------------------------------------

const NFGENMSG_LEN = 4;

function nftAttrs(msg: NlMsg, expected: number): AttrTable {
  if (msg.type !== nftType(expected)) throw new NetlinkParseError(`expected nft message ${expected}, got type ${msg.type}`);
  if (msg.payload.length < NFGENMSG_LEN) throw new NetlinkParseError('short nfgenmsg');
  return new AttrTable(msg.payload.subarray(NFGENMSG_LEN));
}

export interface DecodedElement {
  key: Buffer;
  data?: Buffer;
  objref?: string;
  flags?: number;
}

export interface DecodedElements {
  table: string;
  set: string;
  elements: DecodedElement[];
}

/** Decodes one NFT_MSG_NEWSETELEM (a dump part or our own request). */
export function decodeSetElements(msg: NlMsg): DecodedElements {
  const t = nftAttrs(msg, NFT_MSG_NEWSETELEM);
  const out: DecodedElements = { table: t.string(NFTA_SET_ELEM_LIST_TABLE) ?? '', set: t.string(NFTA_SET_ELEM_LIST_SET) ?? '', elements: [] };
  const list = t.get(NFTA_SET_ELEM_LIST_ELEMENTS);
  if (!list) return out;
  for (const entry of parseAttrs(list)) {
    const e = new AttrTable(entry.data);
    const key = e.nested(NFTA_SET_ELEM_KEY)?.get(NFTA_DATA_VALUE);
    if (!key) throw new NetlinkParseError('set element without a key');
    const el: DecodedElement = { key: Buffer.from(key) };
    const data = e.nested(NFTA_SET_ELEM_DATA)?.get(NFTA_DATA_VALUE);
    if (data) el.data = Buffer.from(data);
    const obj = e.get(NFTA_SET_ELEM_OBJREF);
    if (obj) el.objref = readString(obj);
    const fl = e.u32be(NFTA_SET_ELEM_FLAGS);
    if (fl !== undefined) el.flags = fl;
    out.elements.push(el);
  }
  return out;
}

/**
 * Visits the elements of one NFT_MSG_NEWSETELEM without building DecodedElements: `key` and `data` are
 * views into the message, valid only during the call. For dumps of 10,000 elements, where a copied
 * Buffer and an object per element were the bulk of the transient heap of reading the table back.
 */
export function eachSetElement(msg: NlMsg, visit: (key: Buffer, data: Buffer | undefined, objref: string | undefined) => void): void {
  const list = nftAttrs(msg, NFT_MSG_NEWSETELEM).get(NFTA_SET_ELEM_LIST_ELEMENTS);
  if (!list) return;
  for (const entry of parseAttrs(list)) {
    const e = new AttrTable(entry.data);
    const key = e.nested(NFTA_SET_ELEM_KEY)?.get(NFTA_DATA_VALUE);
    if (!key) throw new NetlinkParseError('set element without a key');
    const obj = e.get(NFTA_SET_ELEM_OBJREF);
    visit(key, e.nested(NFTA_SET_ELEM_DATA)?.get(NFTA_DATA_VALUE), obj ? readString(obj) : undefined);
  }
}

/** An `ipv4_addr : ipv4_addr` map's elements as strings. */
export function decodeIpv4MapElements(msgs: readonly NlMsg[], out = new Map<string, string>()): Map<string, string> {
  for (const m of msgs) {
    eachSetElement(m, (key, data) => {
      if (!data) throw new NetlinkParseError('map element without data');
      out.set(bytesToIpv4(key), bytesToIpv4(data));
    });
  }
  return out;
}

/** The table and name of one NFT_MSG_NEWOBJ, nothing else (no counter values, no BigInts). */
export function decodeObjectName(msg: NlMsg): { table: string; name: string } {
  const t = nftAttrs(msg, NFT_MSG_NEWOBJ);
  return { table: t.string(NFTA_OBJ_TABLE) ?? '', name: t.string(NFTA_OBJ_NAME) ?? '' };
}

export interface DecodedCounter {
  table: string;
  name: string;
  type: number;
  handle?: bigint;
  use?: number;
  bytes?: bigint;
  packets?: bigint;
}

export function decodeObject(msg: NlMsg): DecodedCounter {
  const t = nftAttrs(msg, NFT_MSG_NEWOBJ);
  const out: DecodedCounter = { table: t.string(NFTA_OBJ_TABLE) ?? '', name: t.string(NFTA_OBJ_NAME) ?? '', type: t.u32be(NFTA_OBJ_TYPE) ?? 0 };
  const h = t.u64be(NFTA_OBJ_HANDLE);
  if (h !== undefined) out.handle = h;
  const u = t.u32be(NFTA_OBJ_USE);
  if (u !== undefined) out.use = u;
  if (out.type === NFT_OBJECT_COUNTER) {
    const d = t.nested(NFTA_OBJ_DATA);
    const b = d?.get(NFTA_COUNTER_BYTES);
    const p = d?.get(NFTA_COUNTER_PACKETS);
    if (b) out.bytes = readU64be(b);
    if (p) out.packets = readU64be(p);
  }
  return out;
}

export interface DecodedRule {
  table: string;
  chain: string;
  handle?: bigint;
  exprs: string[];
}

export function decodeRule(msg: NlMsg): DecodedRule {
  const t = nftAttrs(msg, NFT_MSG_NEWRULE);
  const out: DecodedRule = { table: t.string(NFTA_RULE_TABLE) ?? '', chain: t.string(NFTA_RULE_CHAIN) ?? '', exprs: [] };
  const h = t.u64be(NFTA_RULE_HANDLE);
  if (h !== undefined) out.handle = h;
  const list = t.get(NFTA_RULE_EXPRESSIONS);
  if (list) for (const e of parseAttrs(list)) out.exprs.push(new AttrTable(e.data).string(NFTA_EXPR_NAME) ?? '?');
  return out;
}

export function decodeTable(msg: NlMsg): { name: string; family: number; flags?: number } {
  const t = nftAttrs(msg, NFT_MSG_NEWTABLE);
  const out: { name: string; family: number; flags?: number } = { name: t.string(NFTA_TABLE_NAME) ?? '', family: msg.payload[0]! };
  const f = t.u32be(NFTA_TABLE_FLAGS);
  if (f !== undefined) out.flags = f;
  return out;
}

export function decodeGen(msg: NlMsg): number {
  const t = nftAttrs(msg, NFT_MSG_NEWGEN);
  const b = t.get(NFTA_GEN_ID);
  if (!b) throw new NetlinkParseError('NEWGEN without NFTA_GEN_ID');
  return readU32be(b);
}

// --- conveniences for the dataplane's shapes ---------------------------------------------------

/** ipv4 → ipv4 map element (protected ip → origin inner ip). */
export function ipv4MapElement(key: string, value: string): SetElement {
  return { key: ipv4ToBytes(key), data: ipv4ToBytes(value) };
}

/** ipv4 → named counter element. */
export function ipv4ObjElement(key: string, objName: string): SetElement {
  return { key: ipv4ToBytes(key), objref: objName };
}
