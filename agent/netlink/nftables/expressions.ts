// nftables rule expressions: each a name and a writer of its NFTA_EXPR_DATA attributes, with the
// registers, operators and header fields the agent's rules use. Numbers from nf_tables.h.
import type { NlWriter } from '../attrs.ts';
import { NFTA_DATA_VERDICT, dataValue } from './message.ts';

export const NFT_REG_VERDICT = 0;
export const NFT_REG_1 = 1;

const NFTA_VERDICT_CODE = 1;
const NFTA_VERDICT_CHAIN = 2;
// include/uapi/linux/netfilter/nf_tables.h enum nft_verdicts; NF_DROP/NF_ACCEPT from netfilter.h
export const NF_DROP = 0;
export const NFT_JUMP = -3;
/** Continue in another chain and do not come back (its end ends the calling chain too). */
export const NFT_GOTO = -4;
/** Back to the chain that jumped here, after its jump rule. */
export const NFT_RETURN = -5;
/** 32-bit registers (NFT_REG32_00 + n): concatenations put each field in the next 4-byte register. */
export const NFT_REG32_00 = 8;

const NFTA_META_DREG = 1;
const NFTA_META_KEY = 2;
export const NFT_META_IIFNAME = 6;
export const NFT_META_OIFNAME = 7;
export const NFT_META_L4PROTO = 16;

const NFTA_CMP_SREG = 1;
const NFTA_CMP_OP = 2;
const NFTA_CMP_DATA = 3;
export const NFT_CMP_EQ = 0;
export const NFT_CMP_NEQ = 1;

const NFTA_LOOKUP_SET = 1;
const NFTA_LOOKUP_SREG = 2;
const NFTA_LOOKUP_DREG = 3;
const NFTA_LOOKUP_SET_ID = 4;
const NFTA_LOOKUP_FLAGS = 5;
/** `!= @set`: the lookup matches when the key is NOT in the set. */
export const NFT_LOOKUP_F_INV = 1;

const NFTA_PAYLOAD_DREG = 1;
const NFTA_PAYLOAD_BASE = 2;
const NFTA_PAYLOAD_OFFSET = 3;
const NFTA_PAYLOAD_LEN = 4;
export const NFT_PAYLOAD_NETWORK_HEADER = 1;
export const NFT_PAYLOAD_TRANSPORT_HEADER = 2;

const NFTA_IMMEDIATE_DREG = 1;
const NFTA_IMMEDIATE_DATA = 2;

const NFTA_NAT_TYPE = 1;
const NFTA_NAT_FAMILY = 2;
const NFTA_NAT_REG_ADDR_MIN = 3;
const NFTA_NAT_REG_ADDR_MAX = 4;
export const NFT_NAT_DNAT = 1;

// NFTA_FLOW_TABLE_NAME: the flowtable a `flow add` puts the packet's connection in.
const NFTA_FLOW_TABLE_NAME = 1;

const NFTA_OBJREF_IMM_TYPE = 1;
const NFTA_OBJREF_IMM_NAME = 2;
const NFTA_OBJREF_SET_SREG = 3;
const NFTA_OBJREF_SET_NAME = 4;
const NFTA_OBJREF_SET_ID = 5;

const NFTA_EXTHDR_TYPE = 2;
const NFTA_EXTHDR_OFFSET = 3;
const NFTA_EXTHDR_LEN = 4;
const NFTA_EXTHDR_OP = 6;
const NFTA_EXTHDR_SREG = 7;
const NFT_EXTHDR_OP_TCPOPT = 1;

const NFTA_RT_DREG = 1;
const NFTA_RT_KEY = 2;
export const NFT_RT_TCPMSS = 3;

const NFTA_BITWISE_SREG = 1;
const NFTA_BITWISE_DREG = 2;
const NFTA_BITWISE_LEN = 3;
const NFTA_BITWISE_MASK = 4;
const NFTA_BITWISE_XOR = 5;
const NFTA_BITWISE_OP = 6;
const NFT_BITWISE_BOOL = 0;

const NFTA_CT_DREG = 1;
const NFTA_CT_KEY = 2;
const NFTA_CT_DIRECTION = 3;
export const NFT_CT_STATE = 0;
export const NFT_CT_DIRECTION = 1;
export const NFT_CT_STATUS = 2;
export const NFT_CT_DST_IP = 20;
export const IP_CT_DIR_ORIGINAL = 0;
export const IP_CT_DIR_REPLY = 1;
// conntrack state bits (nf_conntrack_common.h: NF_CT_STATE_BIT(ctinfo), invalid and untracked)
export const NF_CT_STATE_INVALID = 0x01;
export const NF_CT_STATE_ESTABLISHED = 0x02;
export const NF_CT_STATE_RELATED = 0x04;
export const NF_CT_STATE_UNTRACKED = 0x40;
/** IPS_DST_NAT: the connection's destination was rewritten (it went through our DNAT). */
export const IPS_DST_NAT = 0x20;

const NFTA_DYNSET_SET_NAME = 1;
const NFTA_DYNSET_SET_ID = 2;
const NFTA_DYNSET_OP = 3;
const NFTA_DYNSET_SREG_KEY = 4;
const NFTA_DYNSET_EXPR = 7;
/** `add @set { ... }`: the element is added when missing; an existing one keeps its timeout. */
export const NFT_DYNSET_OP_ADD = 0;
/** `update @set { ... }`: added when missing, and its timeout restarted on every packet. */
export const NFT_DYNSET_OP_UPDATE = 1;

const NFTA_LIMIT_RATE = 1;
const NFTA_LIMIT_UNIT = 2;
const NFTA_LIMIT_BURST = 3;
const NFTA_LIMIT_TYPE = 4;
const NFTA_LIMIT_FLAGS = 5;
const NFT_LIMIT_PKTS = 0;
const NFT_LIMIT_F_INV = 1;
/** nft's default burst for `limit rate N/second` (packets). */
export const NFT_LIMIT_DEFAULT_BURST = 5;

const NFTA_CONNLIMIT_COUNT = 1;
const NFTA_CONNLIMIT_FLAGS = 2;
const NFT_CONNLIMIT_F_INV = 1;

const NFTA_HASH_SREG = 1;
const NFTA_HASH_DREG = 2;
const NFTA_HASH_LEN = 3;
const NFTA_HASH_MODULUS = 4;
const NFTA_HASH_OFFSET = 6;
const NFTA_HASH_TYPE = 7;
const NFT_HASH_JENKINS = 0;

const NFTA_EXPR_NAME = 1;
const NFTA_EXPR_DATA = 2;

const NFTA_BYTEORDER_SREG = 1;
const NFTA_BYTEORDER_DREG = 2;
const NFTA_BYTEORDER_OP = 3;
const NFTA_BYTEORDER_LEN = 4;
const NFTA_BYTEORDER_SIZE = 5;
export const NFT_BYTEORDER_HTON = 1;

// include/uapi/linux/in.h
export const IPPROTO_TCP = 6;
export const IPPROTO_UDP = 17;
// TCP option kind (RFC 793): maximum segment size
export const TCPOPT_MAXSEG = 2;
// TCP flags byte: SYN
export const TCP_FLAG_SYN = 0x02;

/** One nft expression: its name and a writer of its NFTA_EXPR_DATA attributes (none at all: no nest, as nft sends notrack). */
export interface Expr {
  readonly name: string;
  readonly data?: (w: NlWriter) => void;
}

/** The NFTA_DATA_VERDICT nest: a verdict code, and the chain of a jump/goto. */
export function verdictData(w: NlWriter, code: number, chain?: string): void {
  w.nest(NFTA_DATA_VERDICT, (v) => {
    v.attrU32be(NFTA_VERDICT_CODE, code >>> 0);
    if (chain !== undefined) v.attrString(NFTA_VERDICT_CHAIN, chain);
  });
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
  /** Set membership (no dreg) or map lookup (dreg receives the mapped value; NFT_REG_VERDICT: a vmap). */
  lookup(set: SetRef, sreg = NFT_REG_1, dreg?: number, flags?: number): Expr {
    return {
      name: 'lookup',
      data: (w) => {
        w.attrU32be(NFTA_LOOKUP_SREG, sreg);
        if (dreg !== undefined) w.attrU32be(NFTA_LOOKUP_DREG, dreg);
        w.attrString(NFTA_LOOKUP_SET, set.name);
        if (set.id !== undefined) w.attrU32be(NFTA_LOOKUP_SET_ID, set.id);
        if (flags !== undefined) w.attrU32be(NFTA_LOOKUP_FLAGS, flags);
      },
    };
  },
  /** `ct KEY` (optionally `ct original KEY`) into dreg. */
  ct(key: number, dreg = NFT_REG_1, direction?: number): Expr {
    return {
      name: 'ct',
      data: (w) => {
        w.attrU32be(NFTA_CT_KEY, key).attrU32be(NFTA_CT_DREG, dreg);
        if (direction !== undefined) w.attrU8(NFTA_CT_DIRECTION, direction);
      },
    };
  },
  /** `notrack`: the packet skips connection tracking (sent without a data nest). */
  notrack(): Expr {
    return { name: 'notrack' };
  },
  /**
   * `update @set { KEY <expr> }` / `add @set { KEY <expr> }`: the element for the key in sreg is added (and with
   * `update` its timeout restarted), and its own copy of `template` (a stateful expression: a limit, a ct count)
   * decides whether the rule goes on. A set that is full adds nothing and the rule ends (NFT_BREAK).
   */
  dynset(set: SetRef, op: number, template: Expr, sreg = NFT_REG_1): Expr {
    return {
      name: 'dynset',
      data: (w) => {
        w.attrU32be(NFTA_DYNSET_SREG_KEY, sreg).attrU32be(NFTA_DYNSET_OP, op).attrString(NFTA_DYNSET_SET_NAME, set.name);
        if (set.id !== undefined) w.attrU32be(NFTA_DYNSET_SET_ID, set.id);
        w.nest(NFTA_DYNSET_EXPR, (e) => {
          e.attrString(NFTA_EXPR_NAME, template.name);
          const data = template.data;
          if (data) e.nest(NFTA_EXPR_DATA, (d) => data(d));
        });
      },
    };
  },
  /**
   * `limit rate [over] N/second [burst B packets]`: a token bucket of B packets refilled at N a second. Without
   * `over` the rule goes on while there are tokens; with it, once there are none.
   */
  limit(perSecond: number, opts: { over?: boolean; burst?: number } = {}): Expr {
    return {
      name: 'limit',
      data: (d) =>
        d
          .attrU64be(NFTA_LIMIT_RATE, BigInt(perSecond))
          .attrU64be(NFTA_LIMIT_UNIT, 1n)
          .attrU32be(NFTA_LIMIT_BURST, opts.burst ?? NFT_LIMIT_DEFAULT_BURST)
          .attrU32be(NFTA_LIMIT_TYPE, NFT_LIMIT_PKTS)
          .attrU32be(NFTA_LIMIT_FLAGS, opts.over ? NFT_LIMIT_F_INV : 0),
    };
  },
  /** `ct count over N`: the connections counted under the key (this one added) are more than N. */
  connlimitOver(count: number): Expr {
    return { name: 'connlimit', data: (w) => w.attrU32be(NFTA_CONNLIMIT_COUNT, count).attrU32be(NFTA_CONNLIMIT_FLAGS, NFT_CONNLIMIT_F_INV) };
  },
  /** `jhash <len bytes from sreg> mod M` into dreg (no seed: the kernel draws one per rule, and does not list it). */
  jhash(sreg: number, len: number, modulus: number, dreg: number): Expr {
    return {
      name: 'hash',
      data: (w) => w.attrU32be(NFTA_HASH_SREG, sreg).attrU32be(NFTA_HASH_DREG, dreg).attrU32be(NFTA_HASH_LEN, len).attrU32be(NFTA_HASH_MODULUS, modulus).attrU32be(NFTA_HASH_OFFSET, 0).attrU32be(NFTA_HASH_TYPE, NFT_HASH_JENKINS),
    };
  },
  payload(base: number, offset: number, len: number, dreg = NFT_REG_1): Expr {
    return { name: 'payload', data: (w) => w.attrU32be(NFTA_PAYLOAD_DREG, dreg).attrU32be(NFTA_PAYLOAD_BASE, base).attrU32be(NFTA_PAYLOAD_OFFSET, offset).attrU32be(NFTA_PAYLOAD_LEN, len) };
  },
  /** accept / drop (`NF_ACCEPT`, `NF_DROP`), or `jump CHAIN` (`NFT_JUMP` with the chain's name). */
  immediateVerdict(code: number, chain?: string, dreg = NFT_REG_VERDICT): Expr {
    return {
      name: 'immediate',
      data: (w) => {
        w.attrU32be(NFTA_IMMEDIATE_DREG, dreg);
        w.nest(NFTA_IMMEDIATE_DATA, (d) => verdictData(d, code, chain));
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
  /** `flow add @name`: the packet's connection onto the fast path of that flowtable (the kernel takes only those it can). */
  flowOffload(flowtable: string): Expr {
    return { name: 'flow_offload', data: (w) => w.attrString(NFTA_FLOW_TABLE_NAME, flowtable) };
  },
  /** `counter name "x"`: a fixed named object. */
  objrefImm(type: number, name: string): Expr {
    return { name: 'objref', data: (w) => w.attrU32be(NFTA_OBJREF_IMM_TYPE, type).attrString(NFTA_OBJREF_IMM_NAME, name) };
  },
  rt(key: number, dreg = NFT_REG_1): Expr {
    return { name: 'rt', data: (w) => w.attrU32be(NFTA_RT_KEY, key).attrU32be(NFTA_RT_DREG, dreg) };
  },
  /**
   * `reg & mask ^ xor`. `explicitOp`: nft names the operation (NFTA_BITWISE_OP bool) when the rule text wrote
   * the `&` itself (`ip frag-off & 0x3fff`), not for a flag test it derived (`ct state invalid`).
   */
  bitwise(len: number, mask: Uint8Array, xor: Uint8Array, sreg = NFT_REG_1, dreg = NFT_REG_1, explicitOp = false): Expr {
    return {
      name: 'bitwise',
      data: (w) => {
        w.attrU32be(NFTA_BITWISE_SREG, sreg).attrU32be(NFTA_BITWISE_DREG, dreg);
        if (explicitOp) w.attrU32be(NFTA_BITWISE_OP, NFT_BITWISE_BOOL);
        w.attrU32be(NFTA_BITWISE_LEN, len);
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
