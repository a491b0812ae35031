// nftables rule expressions: each a name and a writer of its NFTA_EXPR_DATA attributes, with the
// registers, operators and header fields the agent's rules use. Numbers from nf_tables.h.
import type { NlWriter } from '../attrs.ts';
import { NFTA_DATA_VERDICT, dataValue } from './message.ts';

export const NFT_REG_VERDICT = 0;
export const NFT_REG_1 = 1;

const NFTA_VERDICT_CODE = 1;

const NFTA_META_DREG = 1;
const NFTA_META_KEY = 2;
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

/** One nft expression: its name and a writer of its NFTA_EXPR_DATA attributes. */
export interface Expr {
  readonly name: string;
  readonly data: (w: NlWriter) => void;
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
