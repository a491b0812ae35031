// The agent's one nftables table (docs/CONTRACTS.md "Dataplane"), as a batch: built once, after which tunnels only add
// and remove map elements and counters, never rules. Pure; the same messages, in the same order, that
// `nft -f` sends for the equivalent ruleset file (see test/fixtures/netlink/nft-setup.hex).
import {
  IPPROTO_TCP,
  IPPROTO_UDP,
  NFPROTO_IPV4,
  NFT_BYTEORDER_HTON,
  NFT_CMP_EQ,
  NFT_CMP_NEQ,
  NFT_META_L4PROTO,
  NFT_META_OIFNAME,
  NFT_NAT_DNAT,
  NFT_OBJECT_COUNTER,
  NFT_PAYLOAD_NETWORK_HEADER,
  NFT_PAYLOAD_TRANSPORT_HEADER,
  NFT_REG_1,
  NFT_RT_TCPMSS,
  NFT_SET_ANONYMOUS,
  NFT_SET_CONSTANT,
  NFT_SET_MAP,
  NFT_SET_OBJECT,
  NFT_TYPE_INET_PROTOCOL,
  NFT_TYPE_IPADDR,
  NF_ACCEPT,
  NF_INET_FORWARD,
  NF_INET_PRE_ROUTING,
  NF_IP_PRI_MANGLE,
  NF_IP_PRI_NAT_DST,
  TCPOPT_MAXSEG,
  TCP_FLAG_SYN,
  expr,
  l4protoSetUserdata,
  mapUserdata,
  objMapUserdata,
  type NftBatch,
} from './nftables/index.ts';

export interface RulesetOptions {
  table: string;
  /** protected ip → origin inner ip */
  dnatMap?: string;
  /** protected ip → named counter */
  counterMap?: string;
  preroutingChain?: string;
  /** The filter chain (prerouting hook, before DNAT) that counts every packet to a protected IP. */
  countChain?: string;
  forwardChain?: string;
  /** MSS clamp applies to packets leaving through links whose name starts with this. */
  ifnamePrefix: string;
  /** Named counters to create with the table (normally none: tunnels add their own). */
  counters?: readonly string[];
}

export const RULESET_DEFAULTS = { dnatMap: 'protected', counterMap: 'tunnel_counters', countChain: 'count', preroutingChain: 'prerouting', forwardChain: 'forward' } as const;

// Byte offsets in the headers the rules read: IPv4 destination address, TCP flags byte, MSS option value.
const IPV4_DADDR_OFFSET = 16;
const TCP_FLAGS_OFFSET = 13;
const TCPOPT_MAXSEG_VALUE_OFFSET = 2;

/**
 * table ip T {
 *   map protected { type ipv4_addr : ipv4_addr }
 *   map tunnel_counters { type ipv4_addr : counter }
 *   chain count { type filter hook prerouting priority mangle; policy accept;
 *     counter name ip daddr map @tunnel_counters }
 *   chain prerouting { type nat hook prerouting priority dstnat; policy accept;
 *     meta l4proto { tcp, udp } counter dnat to ip daddr map @protected }
 *   chain forward { type filter hook forward priority mangle; policy accept;
 *     oifname "PREFIX*" tcp flags syn tcp option maxseg size set rt mtu }
 * }
 * The per-tunnel counter sits in a filter chain of its own: a nat chain sees only the first packet of
 * each connection, a filter chain sees every packet, and at mangle priority (-150) it runs before DNAT
 * (-100), while `ip daddr` is still the protected IP. Its own chain and rule also mean an object-map miss
 * (which ends the rule it is in) never costs a tunnel its NAT. Client-to-origin direction only.
 */
export function addTunnelgateRuleset(b: NftBatch, o: RulesetOptions): void {
  const dnatMap = o.dnatMap ?? RULESET_DEFAULTS.dnatMap;
  const counterMap = o.counterMap ?? RULESET_DEFAULTS.counterMap;
  const pre = o.preroutingChain ?? RULESET_DEFAULTS.preroutingChain;
  const count = o.countChain ?? RULESET_DEFAULTS.countChain;
  const fwd = o.forwardChain ?? RULESET_DEFAULTS.forwardChain;
  const t = o.table;
  b.addTable(t);
  b.addChain({ table: t, name: count, type: 'filter', hook: NF_INET_PRE_ROUTING, priority: NF_IP_PRI_MANGLE, policy: NF_ACCEPT });
  b.addChain({ table: t, name: pre, type: 'nat', hook: NF_INET_PRE_ROUTING, priority: NF_IP_PRI_NAT_DST, policy: NF_ACCEPT });
  b.addChain({ table: t, name: fwd, type: 'filter', hook: NF_INET_FORWARD, priority: NF_IP_PRI_MANGLE, policy: NF_ACCEPT });
  for (const c of o.counters ?? []) b.addCounter({ table: t, name: c });
  const mapId = b.addSet({ table: t, name: dnatMap, flags: NFT_SET_MAP, keyType: NFT_TYPE_IPADDR, keyLen: 4, dataType: NFT_TYPE_IPADDR, dataLen: 4, userdata: mapUserdata() });
  const ctrId = b.addSet({ table: t, name: counterMap, flags: NFT_SET_OBJECT, keyType: NFT_TYPE_IPADDR, keyLen: 4, objType: NFT_OBJECT_COUNTER, userdata: objMapUserdata() });

  b.addRule({ table: t, chain: count, exprs: [expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR_OFFSET, 4), expr.objrefMap({ name: counterMap, id: ctrId })] });

  // `{ tcp, udp }` is an anonymous constant set; the kernel names it (__set0...) from the "%d" template.
  const anonId = b.addSet({
    table: t,
    name: '__set%d',
    flags: NFT_SET_ANONYMOUS | NFT_SET_CONSTANT,
    keyType: NFT_TYPE_INET_PROTOCOL,
    keyLen: 1,
    descSize: 2,
    userdata: l4protoSetUserdata(),
  });
  b.addElements({ table: t, set: '__set%d', setId: anonId, elements: [{ key: Uint8Array.of(IPPROTO_TCP) }, { key: Uint8Array.of(IPPROTO_UDP) }] });
  b.addRule({
    table: t,
    chain: pre,
    exprs: [
      expr.meta(NFT_META_L4PROTO),
      expr.lookup({ name: '__set%d', id: anonId }),
      expr.counter(),
      expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR_OFFSET, 4),
      expr.lookup({ name: dnatMap, id: mapId }, NFT_REG_1, NFT_REG_1),
      expr.nat(NFT_NAT_DNAT, NFPROTO_IPV4, NFT_REG_1),
    ],
  });

  b.addRule({
    table: t,
    chain: fwd,
    exprs: [
      expr.meta(NFT_META_OIFNAME),
      // A wildcard name compares only the prefix bytes (no NUL), which is how nft encodes "tg-*".
      expr.cmp(NFT_CMP_EQ, Buffer.from(o.ifnamePrefix, 'utf8')),
      expr.meta(NFT_META_L4PROTO),
      expr.cmp(NFT_CMP_EQ, Uint8Array.of(IPPROTO_TCP)),
      expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TCP_FLAGS_OFFSET, 1),
      expr.bitwise(1, Uint8Array.of(TCP_FLAG_SYN), Uint8Array.of(0)),
      expr.cmp(NFT_CMP_NEQ, Uint8Array.of(0)),
      expr.rt(NFT_RT_TCPMSS),
      expr.byteorder(NFT_BYTEORDER_HTON, 2, 2),
      expr.exthdrTcpoptWrite(TCPOPT_MAXSEG, TCPOPT_MAXSEG_VALUE_OFFSET, 2),
    ],
  });
}
