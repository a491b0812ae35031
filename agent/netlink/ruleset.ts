// The agent's one nftables table (docs/CONTRACTS.md "Dataplane"), as a batch: built once, after which tunnels only add
// and remove set and map elements and named objects, never rules (the rate-limit chains are per distinct limit
// value, see addRateLimitChain). Pure; the same messages, in the same order, that
// `nft -f` sends for the equivalent ruleset file (see test/fixtures/netlink/nft-setup.hex).
import {
  IFNAME_LEN,
  IPS_DST_NAT,
  IP_CT_DIR_ORIGINAL,
  IP_CT_DIR_REPLY,
  NFT_CT_DIRECTION,
  NFT_CT_DST_IP,
  NFT_CT_STATE,
  NFT_CT_STATUS,
  NFT_DATA_VERDICT,
  NFT_JUMP,
  NFT_RETURN,
  NFT_META_IIFNAME,
  NFT_OBJECT_SYNPROXY,
  NFT_REG32_00,
  NFT_REG_VERDICT,
  NFT_SET_EVAL,
  NFT_SET_TIMEOUT,
  NFT_TYPE_IFNAME,
  NFT_TYPE_INET_SERVICE,
  NF_CT_STATE_ESTABLISHED,
  NF_CT_STATE_INVALID,
  NF_CT_STATE_RELATED,
  NF_CT_STATE_UNTRACKED,
  NF_DROP,
  concatSetUserdata,
  concatType,
  ifnameObjMapUserdata,
  ipv4SetUserdata,
  vmapUserdata,
  type Expr,
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
  NF_IP_PRI_NAT_DST,
  TCPOPT_MAXSEG,
  TCP_FLAG_SYN,
  expr,
  l4protoSetUserdata,
  mapUserdata,
  objMapUserdata,
  type NftBatch,
  type SetSpec,
} from './nftables/index.ts';

export interface RulesetOptions {
  table: string;
  /** protected ip → origin inner ip */
  dnatMap?: string;
  /** protected ip → named counter */
  counterMap?: string;
  preroutingChain?: string;
  /** Tunnel links' names start with this: the MSS clamp and the isolation rules match it. */
  ifnamePrefix: string;
  /** Named counters to create with the table (normally none: tunnels add their own). */
  counters?: readonly string[];
  /** A dormant table: its chains hook nothing (the tamper check's reference copy: dataplane/kernel/table.ts ensureTable). */
  dormant?: boolean;
}

/** NFT_TABLE_F_DORMANT: the table's base chains are not registered with their hooks. */
export const NFT_TABLE_F_DORMANT = 1;

export const RULESET_DEFAULTS = { dnatMap: 'protected', counterMap: 'tunnel_counters', preroutingChain: 'prerouting' } as const;

/** Why a packet was dropped; each tunnel has one named counter per reason (docs/CONTRACTS.md "Dataplane"). */
export const DROP_REASONS = ['not_allowed', 'rate_limited', 'spoofed', 'invalid', 'fragment'] as const;
export type DropReason = (typeof DROP_REASONS)[number];

/**
 * The sets and maps of the isolation and the policy, every one keyed by protected IP P, or by tunnel link
 * name N for traffic coming out of a tunnel. Tunnels add and remove elements; the rules never change.
 */
export const POLICY_SETS = {
  /** N . O . P: replies from origin O through link N of connections DNAT-ed to P may leave the tunnel. */
  replies: 'replies',
  /** N . O: the agent's probe replies (to the edge itself) from origin O through link N. */
  origins: 'origins',
  /** P: fragments to P are dropped. */
  fragments: 'fragments',
  /** P: SYNs to P skip conntrack and meet the SYN proxy in forward. */
  synproxied: 'synproxied',
  /** P → synproxy object (one per MSS value in use, synproxyName). */
  synproxy: 'syn_proxy',
  /** P → jump to the rate-limit chain of its limit (rateLimitName). */
  rateLimits: 'rate_limits',
} as const;

/**
 * The port allowlist, as exact hash lookups (issue 10 item 6: an interval set of concatenations is the pipapo
 * backend, whose lookup cost grows with its element count, so with the number of tunnels). Each allowed range
 * of P is split into aligned blocks of 16^k ports (k = 4 .. 0: every port, 4096, 256, 16, 1), and a block of
 * 16^k ports is the element `P . proto . first port` of the set for that size (`P . proto` for every port).
 * A packet's port, masked to each block size in turn, is looked up in each of the five sets: at most five
 * hash lookups, whatever the number of tunnels. Coarse to fine, so "every port" (the default) costs one.
 * A range costs at most 2 x 15 elements per block size (typically a few: 5000-10000 is 36).
 */
export const PORT_BLOCK_BITS = [16, 12, 8, 4, 0] as const;
export type PortBlockBits = (typeof PORT_BLOCK_BITS)[number];
/** The set of blocks of 2^bits ports: `allowed_all`, `allowed_4096`, `allowed_256`, `allowed_16`, `allowed_1`. */
export const allowedSet = (bits: PortBlockBits): string => (bits === 16 ? 'allowed_all' : `allowed_${1 << bits}`);
export const ALLOWED_SETS: readonly string[] = PORT_BLOCK_BITS.map(allowedSet);

/** The object map reaching a tunnel's drop counter for a reason: keyed by N for `spoofed`, by P otherwise. */
export const dropMap = (reason: DropReason): string => `drop_${reason}`;

/**
 * N → the tunnel's `out` counter (`<N>.out`): replies accepted out of link N toward clients (the status op's
 * packets_out and bytes_out, docs/CONTRACTS.md "Edge jobs"). Keyed by link name like drop_spoofed, because a
 * reply's destination is a client, not P.
 */
export const OUT_MAP = 'tunnel_out';

/** The chain and its meter set for one per-client limit value (packets per second). */
export const rateLimitName = (pps: number): string => `ratelimit_${pps}`;
/** The synproxy object for one MSS value. */
export const synproxyName = (mss: number): string => `synproxy_${mss}`;

/** The MSS of a synproxy object's name; undefined for any other name. */
export function synproxyMssOf(name: string): number | undefined {
  const m = /^synproxy_(\d+)$/.exec(name);
  return m ? Number(m[1]) : undefined;
}

/** The SYN proxy's window scale (STACK.md: the recipe proven on this kernel). */
const SYNPROXY_WSCALE = 7;
/** Meter elements (one per client address and protected IP) expire this long after their last packet. */
const RATE_METER_TIMEOUT_MS = 60_000;
/** At most this many client addresses per limit value are metered at once (a full meter adds no new client: it passes). */
const RATE_METER_SIZE = 65_535;

// Chain names. `fwd`, `frag`, `raw`, `policy`, `input` and `output` are nft keywords: a file using them does not parse,
// and the text twin (test/netns/ruleset-text.ts) must stay loadable with `nft -f`.
const CHAINS = {
  early: 'early',
  allowlist: 'allowlist',
  natOut: 'nat_out',
  guard: 'guard',
  guardCt: 'guard_ct',
  guardNoDnat: 'guard_nodnat',
  fromTunnel: 'from_tunnel',
  tunnelReply: 'tunnel_reply',
  localIn: 'local_in',
  tunnelIn: 'tunnel_in',
} as const;

// Hook priorities: before defragmentation (-400) and conntrack (-200), and filter (0).
const PRIO_BEFORE_DEFRAG = -450;
const PRIO_FILTER = 0;
const NF_INET_LOCAL_IN = 1;
const NF_INET_LOCAL_OUT = 3;

// Byte offsets in the headers the rules read.
const IPV4_FRAG_OFF_OFFSET = 6;
const IPV4_SADDR_OFFSET = 12;
const IPV4_DADDR_OFFSET = 16;
const TH_DPORT_OFFSET = 2;
const TCP_FLAGS_OFFSET = 13;
const TCPOPT_MAXSEG_VALUE_OFFSET = 2;
/** IP_MF | IP_OFFSET: any fragment, first or later. */
const IPV4_FRAG_MASK = Uint8Array.of(0x3f, 0xff);
/** fin|syn|rst|ack: of these, only syn set is a connection's first packet. */
const TCP_FLAGS_FSRA = 0x17;

// 32-bit registers of the concatenations (nft's own choice, kept for byte equality): a 16-byte ifname fills
// NFT_REG_1 (32-bit registers 0-3), the next field starts at NFT_REG_2 (4-7).
const NFT_REG_2 = 2;
const REG32 = (n: number): number => NFT_REG32_00 + n;

/** The network-order mask keeping a port's block of 2^bits ports (its first port). */
const portMask = (bits: number): Uint8Array => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE((0xffff << bits) & 0xffff);
  return b;
};
const hostU32 = (v: number): Uint8Array => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v);
  return b;
};
const daddr = (dreg = NFT_REG_1): Expr => expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_DADDR_OFFSET, 4, dreg);
const saddr = (dreg = NFT_REG_1): Expr => expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_SADDR_OFFSET, 4, dreg);
const drop = (): Expr => expr.immediateVerdict(NF_DROP);
const accept = (): Expr => expr.immediateVerdict(NF_ACCEPT);
/** `ct state a,b`: the packet's state bit is one of these (a flag test nft derives itself: no explicit op). */
const ctStateIn = (bits: number): Expr[] => [expr.ct(NFT_CT_STATE), expr.bitwise(4, hostU32(bits), hostU32(0)), expr.cmp(NFT_CMP_NEQ, hostU32(0))];
/** `ct status & BIT == 0` (op EQ) or `!= 0` (NEQ); no connection at all (invalid, untracked) ends the rule. */
const ctStatus = (bit: number, op: number): Expr[] => [expr.ct(NFT_CT_STATUS), expr.bitwise(4, hostU32(bit), hostU32(0), NFT_REG_1, NFT_REG_1, true), expr.cmp(op, hostU32(0))];
/** `ct status & dnat == 0` (or `!= 0`). */
const ctDnat = (op: number): Expr[] => ctStatus(IPS_DST_NAT, op);
/** `tcp flags & (fin|syn|rst|ack) == syn`: a connection's first packet (a packet with no TCP header ends the rule). */
const tcpSyn = (): Expr[] => [
  expr.meta(NFT_META_L4PROTO),
  expr.cmp(NFT_CMP_EQ, Uint8Array.of(IPPROTO_TCP)),
  expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TCP_FLAGS_OFFSET, 1),
  expr.bitwise(1, Uint8Array.of(TCP_FLAGS_FSRA), Uint8Array.of(0), NFT_REG_1, NFT_REG_1, true),
  expr.cmp(NFT_CMP_EQ, Uint8Array.of(TCP_FLAG_SYN)),
];
/** `counter name KEY map @drop_<reason> drop`: a key missing from the map ends the rule (no count, no drop). */
const countedDrop = (reason: DropReason, key: Expr, ids: Map<string, number>): Expr[] => [key, expr.objrefMap({ name: dropMap(reason), id: ids.get(dropMap(reason)) }), drop()];

/**
 * table ip T {
 *   (maps and sets: see POLICY_SETS, dropMap, and docs/CONTRACTS.md "Dataplane")
 *   chain early { type filter hook prerouting priority -450;
 *     counter name ip daddr map @tunnel_counters
 *     ip frag-off & 0x3fff != 0 ip daddr @fragments counter name ip daddr map @drop_fragment drop
 *     ip daddr vmap @rate_limits
 *     tcp flags & (fin|syn|rst|ack) == syn ip daddr @synproxied notrack }
 *   chain allowlist {
 *     ip daddr . meta l4proto @allowed_all return
 *     ip daddr . meta l4proto . th dport & 0xf000 @allowed_4096 return
 *     ip daddr . meta l4proto . th dport & 0xff00 @allowed_256 return
 *     ip daddr . meta l4proto . th dport & 0xfff0 @allowed_16 return
 *     ip daddr . meta l4proto . th dport @allowed_1 return
 *     counter name ip daddr map @drop_not_allowed drop }
 *   chain prerouting { type nat hook prerouting priority dstnat;
 *     tcp flags & (fin|syn|rst|ack) == syn ip daddr @synproxied counter name ip daddr map @drop_invalid drop
 *     jump allowlist
 *     meta l4proto { tcp, udp } counter dnat to ip daddr map @protected }
 *   chain nat_out { type nat hook output priority -100;
 *     meta l4proto tcp dnat to ip daddr map @protected }
 *   chain guard { type filter hook forward priority filter;
 *     tcp flags syn oifname "PREFIX*" tcp option maxseg size set rt mtu
 *     ct status & dnat != 0 iifname != "PREFIX*" accept
 *     iifname "PREFIX*" jump from_tunnel
 *     ct state invalid,untracked jump guard_ct
 *     ct status & dnat == 0 jump guard_nodnat }
 *   chain guard_ct {
 *     jump allowlist
 *     synproxy name ip daddr map @syn_proxy
 *     counter name ip daddr map @drop_invalid drop
 *     oifname "PREFIX*" drop }
 *   chain guard_nodnat {
 *     oifname "PREFIX*" drop
 *     counter name ip daddr map @drop_invalid drop }
 *   chain from_tunnel {
 *     ct direction reply ct status & dnat != 0 iifname . ip saddr . ct original ip daddr @replies jump tunnel_reply
 *     counter name iifname map @drop_spoofed drop
 *     drop }
 *   chain tunnel_reply {
 *     counter name iifname map @tunnel_out
 *     accept }
 *   chain local_in { type filter hook input priority filter;
 *     iifname "PREFIX*" jump tunnel_in
 *     counter name ip daddr map @drop_invalid drop }
 *   chain tunnel_in {
 *     ct state established,related iifname . ip saddr @origins accept
 *     counter name iifname map @drop_spoofed drop
 *     drop }
 * }
 * The per-tunnel counter is the first rule of `early`: every packet to P, before any drop (a rule of its own, so an
 * object-map miss, which ends the rule it is in, skips nothing else). Client-to-origin direction only.
 * The per-packet path of an admitted connection is short on purpose (issue 10 item 6: every base chain and every
 * expression on it is paid per packet): ONE filter chain before conntrack holds all that must see every packet to
 * P (the counter, the fragment drop, the rate limit, the SYN proxy's notrack), the allowlist sits in the nat chain,
 * which the kernel runs for a connection's first packet only, and `guard` accepts DNAT-ed traffic from outside the
 * tunnels in its second rule.
 * Why each of the other rules is there, and why where it is: docs/CONTRACTS.md "Dataplane".
 */
export function addTunnelgateRuleset(b: NftBatch, o: RulesetOptions): void {
  const dnatMap = o.dnatMap ?? RULESET_DEFAULTS.dnatMap;
  const counterMap = o.counterMap ?? RULESET_DEFAULTS.counterMap;
  const pre = o.preroutingChain ?? RULESET_DEFAULTS.preroutingChain;
  const t = o.table;
  const prefix = Buffer.from(o.ifnamePrefix, 'utf8');
  b.addTable(t, o.dormant ? NFT_TABLE_F_DORMANT : 0);
  const base = (name: string, type: string, hook: number, priority: number): void => void b.addChain({ table: t, name, type, hook, priority, policy: NF_ACCEPT });
  base(CHAINS.early, 'filter', NF_INET_PRE_ROUTING, PRIO_BEFORE_DEFRAG);
  b.addChain({ table: t, name: CHAINS.allowlist });
  base(pre, 'nat', NF_INET_PRE_ROUTING, NF_IP_PRI_NAT_DST);
  base(CHAINS.natOut, 'nat', NF_INET_LOCAL_OUT, NF_IP_PRI_NAT_DST);
  // One forward chain: a second base chain, and the guard testing ct state and ct status twice each, cost 2-4% of
  // the forwarding rate (bench:edge, issue 10 item 6); jumps test each once.
  base(CHAINS.guard, 'filter', NF_INET_FORWARD, PRIO_FILTER);
  b.addChain({ table: t, name: CHAINS.guardCt });
  b.addChain({ table: t, name: CHAINS.guardNoDnat });
  b.addChain({ table: t, name: CHAINS.fromTunnel });
  b.addChain({ table: t, name: CHAINS.tunnelReply });
  base(CHAINS.localIn, 'filter', NF_INET_LOCAL_IN, PRIO_FILTER);
  b.addChain({ table: t, name: CHAINS.tunnelIn });
  for (const c of o.counters ?? []) b.addCounter({ table: t, name: c });

  const ids = new Map<string, number>();
  const set = (s: Omit<SetSpec, 'table'>): number => {
    const id = b.addSet({ table: t, ...s });
    ids.set(s.name, id);
    return id;
  };
  const ipv4ObjMap = (name: string, objType: number): number => set({ name, flags: NFT_SET_OBJECT, keyType: NFT_TYPE_IPADDR, keyLen: 4, objType, userdata: objMapUserdata() });
  const mapId = set({ name: dnatMap, flags: NFT_SET_MAP, keyType: NFT_TYPE_IPADDR, keyLen: 4, dataType: NFT_TYPE_IPADDR, dataLen: 4, userdata: mapUserdata() });
  const ctrId = ipv4ObjMap(counterMap, NFT_OBJECT_COUNTER);
  set({ name: POLICY_SETS.replies, flags: 0, keyType: concatType([NFT_TYPE_IFNAME, NFT_TYPE_IPADDR, NFT_TYPE_IPADDR]), keyLen: IFNAME_LEN + 8, userdata: concatSetUserdata() });
  set({ name: POLICY_SETS.origins, flags: 0, keyType: concatType([NFT_TYPE_IFNAME, NFT_TYPE_IPADDR]), keyLen: IFNAME_LEN + 4, userdata: concatSetUserdata() });
  for (const bits of PORT_BLOCK_BITS) {
    const all = bits === 16;
    set({
      name: allowedSet(bits),
      flags: 0,
      keyType: concatType(all ? [NFT_TYPE_IPADDR, NFT_TYPE_INET_PROTOCOL] : [NFT_TYPE_IPADDR, NFT_TYPE_INET_PROTOCOL, NFT_TYPE_INET_SERVICE]),
      keyLen: all ? 8 : 12,
      userdata: concatSetUserdata(),
    });
  }
  set({ name: POLICY_SETS.fragments, flags: 0, keyType: NFT_TYPE_IPADDR, keyLen: 4, userdata: ipv4SetUserdata() });
  set({ name: POLICY_SETS.synproxied, flags: 0, keyType: NFT_TYPE_IPADDR, keyLen: 4, userdata: ipv4SetUserdata() });
  ipv4ObjMap(POLICY_SETS.synproxy, NFT_OBJECT_SYNPROXY);
  set({ name: POLICY_SETS.rateLimits, flags: NFT_SET_MAP, keyType: NFT_TYPE_IPADDR, keyLen: 4, dataType: NFT_DATA_VERDICT, dataLen: 0, userdata: vmapUserdata() });
  set({ name: dropMap('spoofed'), flags: NFT_SET_OBJECT, keyType: NFT_TYPE_IFNAME, keyLen: IFNAME_LEN, objType: NFT_OBJECT_COUNTER, userdata: ifnameObjMapUserdata() });
  for (const r of DROP_REASONS) if (r !== 'spoofed') ipv4ObjMap(dropMap(r), NFT_OBJECT_COUNTER);
  // Last of the sets, so the ids nft gives the others (a rate-limit chain names drop_rate_limited by id) stay.
  set({ name: OUT_MAP, flags: NFT_SET_OBJECT, keyType: NFT_TYPE_IFNAME, keyLen: IFNAME_LEN, objType: NFT_OBJECT_COUNTER, userdata: ifnameObjMapUserdata() });
  const ref = (name: string): { name: string; id?: number } => ({ name, id: ids.get(name) });
  const rule = (chain: string, exprs: Expr[]): void => void b.addRule({ table: t, chain, exprs });

  // Every packet to P meets these before defragmentation and conntrack. One base chain, because each base chain costs
  // every packet (bench:edge: the same rules in three base chains forwarded 1-2% slower). Before conntrack also
  // means a flood over its rate limit never costs a conntrack lookup.
  rule(CHAINS.early, [daddr(), expr.objrefMap({ name: counterMap, id: ctrId })]);
  // Before defragmentation (-400), which would otherwise reassemble the fragments.
  rule(CHAINS.early, [
    expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_FRAG_OFF_OFFSET, 2),
    expr.bitwise(2, IPV4_FRAG_MASK, Uint8Array.of(0, 0), NFT_REG_1, NFT_REG_1, true),
    expr.cmp(NFT_CMP_NEQ, Uint8Array.of(0, 0)),
    daddr(),
    expr.lookup(ref(POLICY_SETS.fragments)),
    ...countedDrop('fragment', daddr(), ids),
  ]);
  rule(CHAINS.early, [daddr(), expr.lookup(ref(POLICY_SETS.rateLimits), NFT_REG_1, NFT_REG_VERDICT)]);
  // Conntrack must not see a SYN to a syn-proxied P: the proxy in forward answers it. A later fragment has no TCP
  // header (the rule does not match it); a first fragment too short to hold the flags is reassembled and tracked,
  // which the nat chain's first rule drops. A first fragment that holds them is untracked, so it is not reassembled:
  // the proxy answers it alone, or drops it (a checksum over the whole SYN), and its later fragments time out.
  rule(CHAINS.early, [...tcpSyn(), daddr(), expr.lookup(ref(POLICY_SETS.synproxied)), expr.notrack()]);
  // One exact lookup per block size, the port masked to it: a hit returns.
  for (const bits of PORT_BLOCK_BITS) {
    const port: Expr[] = bits === 16 ? [] : [expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TH_DPORT_OFFSET, 2, REG32(2))];
    if (bits !== 0 && bits !== 16) port.push(expr.bitwise(2, portMask(bits), Uint8Array.of(0, 0), REG32(2), REG32(2), true));
    rule(CHAINS.allowlist, [daddr(), expr.meta(NFT_META_L4PROTO, REG32(1)), ...port, expr.lookup(ref(allowedSet(bits))), expr.immediateVerdict(NFT_RETURN)]);
  }
  rule(CHAINS.allowlist, countedDrop('not_allowed', daddr(), ids));

  // A connection's first packet: a SYN to a syn-proxied P has no connection (`early` untracks it), unless it came as
  // fragments whose first is too short to hold the TCP flags: tracked, it would reach the origin past the proxy.
  rule(pre, [...tcpSyn(), daddr(), expr.lookup(ref(POLICY_SETS.synproxied)), ...countedDrop('invalid', daddr(), ids)]);
  // The kernel runs a nat chain for a connection's first packet only (and for none without a connection): the
  // allowlist's "first packet" test, for free. A drop here leaves the connection unconfirmed, so the next
  // packet is judged again. Packets without a connection meet the allowlist in guard_ct.
  rule(pre, [expr.immediateVerdict(NFT_JUMP, CHAINS.allowlist)]);
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
  rule(pre, [
    expr.meta(NFT_META_L4PROTO),
    expr.lookup({ name: '__set%d', id: anonId }),
    expr.counter(),
    daddr(),
    expr.lookup({ name: dnatMap, id: mapId }, NFT_REG_1, NFT_REG_1),
    expr.nat(NFT_NAT_DNAT, NFPROTO_IPV4, NFT_REG_1),
  ]);
  // The SYN proxy sends the origin its SYN from the edge itself (STACK.md): without DNAT here it never arrives.
  rule(CHAINS.natOut, [
    expr.meta(NFT_META_L4PROTO),
    expr.cmp(NFT_CMP_EQ, Uint8Array.of(IPPROTO_TCP)),
    daddr(),
    expr.lookup({ name: dnatMap, id: mapId }, NFT_REG_1, NFT_REG_1),
    expr.nat(NFT_NAT_DNAT, NFPROTO_IPV4, NFT_REG_1),
  ]);
  // TCP first: the other protocols leave the MSS clamp after one compare, not a name's.
  rule(CHAINS.guard, [
    expr.meta(NFT_META_L4PROTO),
    expr.cmp(NFT_CMP_EQ, Uint8Array.of(IPPROTO_TCP)),
    expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TCP_FLAGS_OFFSET, 1),
    expr.bitwise(1, Uint8Array.of(TCP_FLAG_SYN), Uint8Array.of(0)),
    expr.cmp(NFT_CMP_NEQ, Uint8Array.of(0)),
    expr.meta(NFT_META_OIFNAME),
    // A wildcard name compares only the prefix bytes (no NUL), which is how nft encodes "tg-*".
    expr.cmp(NFT_CMP_EQ, prefix),
    expr.rt(NFT_RT_TCPMSS),
    expr.byteorder(NFT_BYTEORDER_HTON, 2, 2),
    expr.exthdrTcpoptWrite(TCPOPT_MAXSEG, TCPOPT_MAXSEG_VALUE_OFFSET, 2),
  ]);
  // The common case, done: a connection DNAT-ed into a tunnel, from outside the tunnels (no connection at all, invalid
  // or untracked, ends this rule at its first test). What is left has each of the tests below to pass.
  rule(CHAINS.guard, [...ctDnat(NFT_CMP_NEQ), expr.meta(NFT_META_IIFNAME), expr.cmp(NFT_CMP_NEQ, prefix), accept()]);
  // From a tunnel before the SYN proxy: an origin's SYN to another tunnel's syn-proxied P is untracked, and the
  // proxy would otherwise answer it and open that origin a connection to the other tunnel.
  rule(CHAINS.guard, [expr.meta(NFT_META_IIFNAME), expr.cmp(NFT_CMP_EQ, prefix), expr.immediateVerdict(NFT_JUMP, CHAINS.fromTunnel)]);
  rule(CHAINS.guard, [...ctStateIn(NF_CT_STATE_INVALID | NF_CT_STATE_UNTRACKED), expr.immediateVerdict(NFT_JUMP, CHAINS.guardCt)]);
  rule(CHAINS.guard, [...ctDnat(NFT_CMP_EQ), expr.immediateVerdict(NFT_JUMP, CHAINS.guardNoDnat)]);
  // Invalid or untracked (no connection): judged by the allowlist (a syn-proxied SYN; a mid-stream packet of a
  // flushed connection, so a closed port counts it not_allowed), then the SYN proxy's (a syn-proxied P's handshake:
  // the client's ACK is invalid until the proxy takes it); whatever to P the proxy leaves is dropped.
  rule(CHAINS.guardCt, [expr.immediateVerdict(NFT_JUMP, CHAINS.allowlist)]);
  rule(CHAINS.guardCt, [daddr(), expr.objrefMap(ref(POLICY_SETS.synproxy))]);
  rule(CHAINS.guardCt, countedDrop('invalid', daddr(), ids));
  // Nor into a tunnel: a packet with no connection to an origin's inner address (an ACK or RST from outside, routed
  // to the edge) is none of the above, and guard_nodnat's test of ct status ends at once without a connection.
  rule(CHAINS.guardCt, [expr.meta(NFT_META_OIFNAME), expr.cmp(NFT_CMP_EQ, prefix), drop()]);
  // Not DNAT-ed: never into a tunnel, and never to P (counted when P is a tunnel's).
  rule(CHAINS.guardNoDnat, [expr.meta(NFT_META_OIFNAME), expr.cmp(NFT_CMP_EQ, prefix), drop()]);
  rule(CHAINS.guardNoDnat, countedDrop('invalid', daddr(), ids));
  const isReply = (): Expr[] => [
    expr.ct(NFT_CT_DIRECTION),
    expr.cmp(NFT_CMP_EQ, Uint8Array.of(IP_CT_DIR_REPLY)),
    ...ctDnat(NFT_CMP_NEQ),
    expr.meta(NFT_META_IIFNAME),
    saddr(NFT_REG_2),
    expr.ct(NFT_CT_DST_IP, REG32(5), IP_CT_DIR_ORIGINAL),
    expr.lookup(ref(POLICY_SETS.replies)),
  ];
  rule(CHAINS.fromTunnel, [...isReply(), expr.immediateVerdict(NFT_JUMP, CHAINS.tunnelReply)]);
  rule(CHAINS.fromTunnel, countedDrop('spoofed', expr.meta(NFT_META_IIFNAME), ids));
  rule(CHAINS.fromTunnel, [drop()]);
  // The `out` counter in a rule of its own, before the accept: a tunnel missing from tunnel_out (a table rebuilt
  // by an upgrade before the restore adds its counter, an element deleted by hand) ends only this rule, so its
  // replies go uncounted, never dropped. One `replies` lookup per reply, not one per rule.
  rule(CHAINS.tunnelReply, [expr.meta(NFT_META_IIFNAME), expr.objrefMap(ref(OUT_MAP))]);
  rule(CHAINS.tunnelReply, [accept()]);
  rule(CHAINS.localIn, [expr.meta(NFT_META_IIFNAME), expr.cmp(NFT_CMP_EQ, prefix), expr.immediateVerdict(NFT_JUMP, CHAINS.tunnelIn)]);
  rule(CHAINS.localIn, countedDrop('invalid', daddr(), ids));
  rule(CHAINS.tunnelIn, [...ctStateIn(NF_CT_STATE_ESTABLISHED | NF_CT_STATE_RELATED), expr.meta(NFT_META_IIFNAME), saddr(NFT_REG_2), expr.lookup(ref(POLICY_SETS.origins)), accept()]);
  rule(CHAINS.tunnelIn, countedDrop('spoofed', expr.meta(NFT_META_IIFNAME), ids));
  rule(CHAINS.tunnelIn, [drop()]);
}

/**
 * The chain and meter of one per-client limit value, created when the first tunnel uses it:
 *   set ratelimit_N { type ipv4_addr . ipv4_addr; size 65535; flags dynamic,timeout; timeout 1m; }
 *   chain ratelimit_N { update @ratelimit_N { ip daddr . ip saddr limit rate over N/second } counter name ip daddr map @drop_rate_limited drop }
 * A limit is a rule's, so tunnels with the same value share one chain (their meter elements are keyed by P and
 * the client address, so they never share a budget): the rule count grows with distinct values, never with tunnels.
 */
export function addRateLimitChain(b: NftBatch, table: string, pps: number, opts: { dropMapId?: number } = {}): void {
  const name = rateLimitName(pps);
  const id = b.addSet({
    table,
    name,
    flags: NFT_SET_TIMEOUT | NFT_SET_EVAL,
    keyType: concatType([NFT_TYPE_IPADDR, NFT_TYPE_IPADDR]),
    keyLen: 8,
    descSize: RATE_METER_SIZE,
    timeoutMs: RATE_METER_TIMEOUT_MS,
    userdata: concatSetUserdata(),
  });
  b.addChain({ table, name });
  b.addRule({ table, chain: name, exprs: [daddr(), saddr(REG32(1)), expr.dynsetUpdateLimit({ name, id }, pps), daddr(), expr.objrefMap({ name: dropMap('rate_limited'), id: opts.dropMapId }), drop()] });
}

/** The packet rate of a rate-limit chain's name; undefined for any other name. */
export function rateLimitOf(chain: string): number | undefined {
  const m = /^ratelimit_(\d+)$/.exec(chain);
  return m ? Number(m[1]) : undefined;
}

/** Removes a rate-limit chain and its meter (after the batch removed every rate_limits element jumping to it). */
export function deleteRateLimitChain(b: NftBatch, table: string, name: string): void {
  b.flushChain(table, name);
  b.deleteChain(table, name);
  b.deleteSet(table, name);
}

/** The SYN proxy for one MSS value (tunnel MTU - 40: STACK.md, the proxy's MSS is the one the client uses). */
export function addSynproxyObject(b: NftBatch, table: string, mss: number): void {
  b.addSynproxy({ table, name: synproxyName(mss), mss, wscale: SYNPROXY_WSCALE });
}
