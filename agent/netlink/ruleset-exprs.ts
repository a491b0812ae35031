// The small expressions the edge table's rules are made of (agent/netlink/ruleset-table.ts, ruleset-chains.ts): header
// offsets, registers and the matches and verdicts both files write the same way. Pure.
import {
  IPS_DST_NAT,
  NFT_CT_STATE,
  NFT_CT_STATUS,
  NFT_REG32_00,
  NF_DROP,
  type Expr,
  IPPROTO_TCP,
  NFT_CMP_EQ,
  NFT_CMP_NEQ,
  NFT_META_L4PROTO,
  NFT_PAYLOAD_NETWORK_HEADER,
  NFT_PAYLOAD_TRANSPORT_HEADER,
  NFT_REG_1,
  NF_ACCEPT,
  TCP_FLAG_SYN,
  expr,
} from './nftables/index.ts';

// Byte offsets in the headers the rules read.
export const IPV4_FRAG_OFF_OFFSET = 6;
export const IPV4_SADDR_OFFSET = 12;
export const IPV4_DADDR_OFFSET = 16;
export const TH_SPORT_OFFSET = 0;
export const TH_DPORT_OFFSET = 2;
export const TCP_FLAGS_OFFSET = 13;
export const TCPOPT_MAXSEG_VALUE_OFFSET = 2;
/** IP_MF | IP_OFFSET: any fragment, first or later. */
export const IPV4_FRAG_MASK = Uint8Array.of(0x3f, 0xff);
/** IP_OFFSET: a fragment after the first (no transport header). */
export const IPV4_FRAG_OFFSET_MASK = Uint8Array.of(0x1f, 0xff);
/** fin|syn|rst|ack: of these, only syn set is a connection's first packet. */
export const TCP_FLAGS_FSRA = 0x17;

// 32-bit registers of the concatenations (nft's own choice, kept for byte equality): a 16-byte ifname fills
// NFT_REG_1 (32-bit registers 0-3), the next field starts at NFT_REG_2 (4-7).
export const NFT_REG_2 = 2;
export const REG32 = (n: number): number => NFT_REG32_00 + n;

/** The network-order mask keeping a port's block of 2^bits ports (its first port). */
export const portMask = (bits: number): Uint8Array => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE((0xffff << bits) & 0xffff);
  return b;
};
export const hostU32 = (v: number): Uint8Array => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
export const daddr = (dreg = NFT_REG_1): Expr => expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR_OFFSET, 4, dreg);
export const saddr = (dreg = NFT_REG_1): Expr => expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_SADDR_OFFSET, 4, dreg);
export const drop = (): Expr => expr.immediateVerdict(NF_DROP);
export const accept = (): Expr => expr.immediateVerdict(NF_ACCEPT);
/** `ct state a,b`: the packet's state bit is one of these (a flag test nft derives itself: no explicit op). */
export const ctStateIn = (bits: number): Expr[] => [expr.ct(NFT_CT_STATE), expr.bitwise(4, hostU32(bits), hostU32(0)), expr.cmp(NFT_CMP_NEQ, hostU32(0))];
/** `ct status & BIT == 0` (op EQ) or `!= 0` (NEQ); no connection at all (invalid, untracked) ends the rule. */
export const ctStatus = (bit: number, op: number): Expr[] => [expr.ct(NFT_CT_STATUS), expr.bitwise(4, hostU32(bit), hostU32(0), NFT_REG_1, NFT_REG_1, true), expr.cmp(op, hostU32(0))];
/** `ct status & dnat == 0` (or `!= 0`). */
export const ctDnat = (op: number): Expr[] => ctStatus(IPS_DST_NAT, op);
/** `tcp flags & (fin|syn|rst|ack) == syn`: a connection's first packet (a packet with no TCP header ends the rule). */
export const tcpSyn = (): Expr[] => [
  expr.meta(NFT_META_L4PROTO),
  expr.cmp(NFT_CMP_EQ, Uint8Array.of(IPPROTO_TCP)),
  expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TCP_FLAGS_OFFSET, 1),
  expr.bitwise(1, Uint8Array.of(TCP_FLAGS_FSRA), Uint8Array.of(0), NFT_REG_1, NFT_REG_1, true),
  expr.cmp(NFT_CMP_EQ, Uint8Array.of(TCP_FLAG_SYN)),
];
/** `counter name KEY map @<map> drop`: a key missing from the map ends the rule (no count, no drop). */
export const countedDrop = (map: string, key: Expr, ids: Map<string, number>): Expr[] => [key, expr.objrefMap({ name: map, id: ids.get(map) }), drop()];
