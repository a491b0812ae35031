// The agent's one nftables table (docs/CONTRACTS.md "Dataplane"), as a batch: built once, after which tunnels add
// and remove set and map elements and named objects, and two kinds of chains made by value (addDynamicChain): a
// tunnel's own per-source meter (one chain per tunnel with a source_pps_limit: a meter's capacity is a set's, and
// a rule names its set) and the flow caps (one chain per distinct max_flows value). Pure; the same messages, in
// the same order, that `nft -f` sends for the equivalent ruleset file (see test/fixtures/netlink/nft-setup.hex).
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
  NFT_GOTO,
  NFT_RETURN,
  NFT_META_IIFNAME,
  NFT_OBJECT_SYNPROXY,
  NFT_REG32_00,
  NFT_REG_VERDICT,
  NFT_SET_EVAL,
  NFT_SET_INTERVAL,
  NFT_SET_TIMEOUT,
  NFT_DYNSET_OP_ADD,
  NFT_DYNSET_OP_UPDATE,
  NFT_LOOKUP_F_INV,
  NFT_TYPE_MARK,
  ipv4IntervalElements,
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
  /** A dormant table: its chains hook nothing (the tamper check's reference copy: dataplane/kernel.ts ensureTable). */
  dormant?: boolean;
  /**
   * The `bogons` set's prefixes (sources no genuine packet from upstream carries: bogonSources). Absent: the set is
   * made empty (the reference copy; dataplane/kernel/table.ts fills the agent's own with ensureBogons).
   */
  bogons?: readonly string[];
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
  /** P → jump to the tunnel's own meter chain (meterChainName), for a tunnel with a source_pps_limit. */
  rateLimits: 'rate_limits',
  /** P → jump to the flow-cap chain of its max_flows (flowsChainName): every tunnel. */
  flowLimits: 'flow_limits',
} as const;

/**
 * P → the tunnel's `spoofed` counter, for packets to P from upstream whose source cannot be genuine (the `bogons`
 * set). drop_spoofed is keyed by link name (from a tunnel); this one by P, as a packet from upstream names P.
 */
export const SPOOFED_IN_MAP = 'drop_spoofed_in';

/** Sources that no genuine packet to a protected IP carries from upstream (an interval set, a few prefixes). */
export const BOGONS_SET = 'bogons';

/**
 * Martian sources (RFC 6890's special-purpose blocks that never appear as a source on the Internet): "this network",
 * the shared address space (RFC 6598, also the tunnels' inner pool), loopback, link-local, multicast and the
 * reserved block up to the limited broadcast. The documentation and benchmarking blocks are left out: tests and
 * labs use them as clients. Private blocks too: a private network may sit in front of an edge.
 */
export const MARTIAN_SOURCES: readonly string[] = ['0.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '224.0.0.0/3'];

/** The `bogons` prefixes of an agent: the martians, its protected pools (AGENT_PROTECTED_POOLS) and its own edge address. */
export function bogonSources(opts: { protectedPools?: readonly string[]; edgeIp?: string }): string[] {
  return [...MARTIAN_SOURCES, ...(opts.protectedPools ?? []), ...(opts.edgeIp ? [`${opts.edgeIp}/32`] : [])];
}

/**
 * The port allowlist, as exact hash lookups (issue 10 item 6: an interval set of concatenations is the pipapo
 * backend, whose lookup cost grows with its element count, so with the number of tunnels). Each allowed range
 * of P is split into aligned blocks of 16^k ports (k = 4 .. 0: every port, 4096, 256, 16, 1), and a block of
 * 16^k ports is the element `P . proto . first port` of the set for that size (`P . proto` for every port).
 * A packet's port, masked to each block size in turn, is looked up in each of the five sets: at most five
 * hash lookups, whatever the number of tunnels. A range costs at most 2 x 15 elements per block size (typically a
 * few: 5000-10000 is 36).
 */
export const PORT_BLOCK_BITS = [16, 12, 8, 4, 0] as const;
/**
 * The order the allowlist looks the sets up in, now that every packet holding its ports is judged (`inbound`), not
 * only a connection's first: "every port" (the default) first, then single ports (what most port lists are: 22,
 * 80, 443), then ever wider blocks. A default tunnel costs one lookup a packet, a port named alone two.
 */
export const ALLOWLIST_ORDER: readonly PortBlockBits[] = [16, 0, 4, 8, 12];
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

/**
 * A tunnel's per-source meter: its chain and its meter set, named by link and packet rate (a change of either is
 * another chain, created with the change and the old one deleted in the same batch).
 */
export const meterChainName = (link: string, pps: number): string => `ratelimit_${link}_${pps}`;
/** The flow caps of one max_flows value: its chain and its connection-count set (and `newflows_<max>`, its rate). */
export const flowsChainName = (maxFlows: number): string => `flows_${maxFlows}`;
const newFlowsSetName = (maxFlows: number): string => `newflows_${maxFlows}`;
/** The synproxy object for one MSS value. */
export const synproxyName = (mss: number): string => `synproxy_${mss}`;

/** The MSS of a synproxy object's name; undefined for any other name. */
export function synproxyMssOf(name: string): number | undefined {
  const m = /^synproxy_(\d+)$/.exec(name);
  return m ? Number(m[1]) : undefined;
}

/** The SYN proxy's window scale (STACK.md: the recipe proven on this kernel). */
const SYNPROXY_WSCALE = 7;
/**
 * A source's meter element expires this long after its last packet. Its bucket (5 packets, refilled at the limit,
 * at least 10 a second) is full again after 0.5 s of silence at most, so forgetting a source after 1 s changes no
 * verdict, and the meter only has to hold the sources of the last second or two (docs/CONTRACTS.md "Dataplane").
 */
export const METER_TIMEOUT_MS = 1_000;
/**
 * Connections counted per hash bucket of a tunnel's flows: a new connection makes the kernel walk its bucket's list
 * (one conntrack lookup per entry), so a bucket is kept short; a tunnel's max_flows is cut into enough of them.
 */
export const FLOWS_PER_BUCKET = 64;
/** New connections a second a tunnel may open: max_flows / this, at least NEW_FLOWS_MIN (docs/CONTRACTS.md "Dataplane"). */
export const NEW_FLOWS_DIVISOR = 16;
export const NEW_FLOWS_MIN = 1_000;
/** A tunnel's new-flow bucket (one second of its rate) is full again 1 s after its last new flow: then it is forgotten. */
const NEW_FLOWS_TIMEOUT_MS = 1_000;

/**
 * How a max_flows value is enforced: its connections hashed by client address and port into `buckets` lists of at
 * most `perBucket` (buckets x perBucket <= maxFlows, so the tunnel never holds more), and at most `newPerSecond`
 * new connections a second (one second's worth at once).
 */
export function flowCapShape(maxFlows: number): { buckets: number; perBucket: number; newPerSecond: number } {
  const buckets = Math.ceil(maxFlows / FLOWS_PER_BUCKET);
  return { buckets, perBucket: Math.floor(maxFlows / buckets), newPerSecond: Math.max(NEW_FLOWS_MIN, Math.ceil(maxFlows / NEW_FLOWS_DIVISOR)) };
}

// Chain names. `fwd`, `frag`, `raw`, `policy`, `input` and `output` are nft keywords: a file using them does not parse,
// and the text twin (test/netns/ruleset-text.ts) must stay loadable with `nft -f`.
const CHAINS = {
  early: 'early',
  inbound: 'inbound',
  tunnelToP: 'tunnel_to_p',
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
const TH_SPORT_OFFSET = 0;
const TH_DPORT_OFFSET = 2;
const TCP_FLAGS_OFFSET = 13;
const TCPOPT_MAXSEG_VALUE_OFFSET = 2;
/** IP_MF | IP_OFFSET: any fragment, first or later. */
const IPV4_FRAG_MASK = Uint8Array.of(0x3f, 0xff);
/** IP_OFFSET: a fragment after the first (no transport header). */
const IPV4_FRAG_OFFSET_MASK = Uint8Array.of(0x1f, 0xff);
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
/** `counter name KEY map @<map> drop`: a key missing from the map ends the rule (no count, no drop). */
const countedDrop = (map: string, key: Expr, ids: Map<string, number>): Expr[] => [key, expr.objrefMap({ name: map, id: ids.get(map) }), drop()];

/**
 * table ip T {
 *   (maps and sets: see POLICY_SETS, dropMap, SPOOFED_IN_MAP, BOGONS_SET, and docs/CONTRACTS.md "Dataplane")
 *   chain early { type filter hook prerouting priority -450;
 *     counter name ip daddr map @tunnel_counters jump inbound }
 *   chain inbound {
 *     iifname "PREFIX*" goto tunnel_to_p
 *     ip saddr @bogons counter name ip daddr map @drop_spoofed_in drop
 *     ip frag-off & 0x3fff != 0 ip daddr @fragments counter name ip daddr map @drop_fragment drop
 *     ip frag-off & 0x1fff == 0 jump allowlist
 *     ip daddr vmap @rate_limits
 *     tcp flags & (fin|syn|rst|ack) == syn ip daddr @synproxied notrack }
 *   chain tunnel_to_p {
 *     counter name iifname map @drop_spoofed drop
 *     drop }
 *   chain allowlist {
 *     ip daddr . meta l4proto @allowed_all return
 *     ip daddr . meta l4proto . th dport @allowed_1 return
 *     ip daddr . meta l4proto . th dport & 0xfff0 @allowed_16 return
 *     ip daddr . meta l4proto . th dport & 0xff00 @allowed_256 return
 *     ip daddr . meta l4proto . th dport & 0xf000 @allowed_4096 return
 *     counter name ip daddr map @drop_not_allowed drop }
 *   chain prerouting { type nat hook prerouting priority dstnat;
 *     tcp flags & (fin|syn|rst|ack) == syn ip daddr @synproxied counter name ip daddr map @drop_invalid drop
 *     ip daddr vmap @flow_limits
 *     meta l4proto { tcp, udp } counter dnat to ip daddr map @protected }
 *   chain nat_out { type nat hook output priority -100;
 *     ip daddr vmap @flow_limits
 *     meta l4proto tcp dnat to ip daddr map @protected }
 *   chain guard { type filter hook forward priority filter;
 *     tcp flags syn oifname "PREFIX*" tcp option maxseg size set rt mtu
 *     ct status & dnat != 0 iifname != "PREFIX*" accept
 *     iifname "PREFIX*" jump from_tunnel
 *     ct state invalid,untracked jump guard_ct
 *     ct status & dnat == 0 jump guard_nodnat }
 *   chain guard_ct {
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
 * Everything the policy refuses without a connection is refused in `inbound`, before defragmentation and
 * conntrack (-450 < -400 < -200), so a refused flood costs no conntrack lookup and leaves no entry: sources that
 * cannot be genuine, fragments (when dropped), ports and protocols not allowed, and the per-source limit. It is
 * reached by ONE lookup, the per-tunnel traffic counter's (every packet to P, counted before any drop): every packet
 * to somewhere else (the replies toward clients, the edge's own traffic) leaves the prerouting hook after it.
 * What needs a connection stays after conntrack: the flow caps (on a connection's first packet: the nat chains,
 * which the kernel runs for nothing else), the SYN proxy, the invalid drops and the isolation of the tunnels.
 * Why each rule is there, and why where it is: docs/CONTRACTS.md "Dataplane".
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
  b.addChain({ table: t, name: CHAINS.inbound });
  b.addChain({ table: t, name: CHAINS.tunnelToP });
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
  const ipv4Vmap = (name: string): number => set({ name, flags: NFT_SET_MAP, keyType: NFT_TYPE_IPADDR, keyLen: 4, dataType: NFT_DATA_VERDICT, dataLen: 0, userdata: vmapUserdata() });
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
  ipv4Vmap(POLICY_SETS.rateLimits);
  set({ name: dropMap('spoofed'), flags: NFT_SET_OBJECT, keyType: NFT_TYPE_IFNAME, keyLen: IFNAME_LEN, objType: NFT_OBJECT_COUNTER, userdata: ifnameObjMapUserdata() });
  for (const r of DROP_REASONS) if (r !== 'spoofed') ipv4ObjMap(dropMap(r), NFT_OBJECT_COUNTER);
  // After the sets of earlier agents, so the ids nft gives those stay (a meter or flows chain names
  // drop_rate_limited by id in a capture: test/fixtures/netlink).
  set({ name: OUT_MAP, flags: NFT_SET_OBJECT, keyType: NFT_TYPE_IFNAME, keyLen: IFNAME_LEN, objType: NFT_OBJECT_COUNTER, userdata: ifnameObjMapUserdata() });
  ipv4Vmap(POLICY_SETS.flowLimits);
  ipv4ObjMap(SPOOFED_IN_MAP, NFT_OBJECT_COUNTER);
  const bogonsId = set({ name: BOGONS_SET, flags: NFT_SET_INTERVAL, keyType: NFT_TYPE_IPADDR, keyLen: 4, userdata: ipv4SetUserdata() });
  if (o.bogons?.length) b.addElements({ table: t, set: BOGONS_SET, setId: bogonsId, elements: ipv4IntervalElements(o.bogons) });
  const ref = (name: string): { name: string; id?: number } => ({ name, id: ids.get(name) });
  const rule = (chain: string, exprs: Expr[]): void => void b.addRule({ table: t, chain, exprs });

  // Every packet to P, and nothing else, goes through `inbound`: before defragmentation and conntrack, in the one
  // base chain of the hook (each base chain costs every packet: bench:edge, issue 10 item 6).
  // The tunnel's traffic counter is the door: its map holds every P, so one lookup counts a packet to P and leads it
  // into `inbound`, and ends the rule for every other packet. (Not `ip daddr @protected`: a kernel before 6.x, Debian
  // 12's 6.1 among them, refuses a map as a plain set: EINVAL.) A P whose counter element was deleted by hand skips
  // inbound until the repair, which the agent starts at once (docs/CONTRACTS.md "Dataplane").
  rule(CHAINS.early, [daddr(), expr.objrefMap({ name: counterMap, id: ctrId }), expr.immediateVerdict(NFT_JUMP, CHAINS.inbound)]);
  // Out of a tunnel to a protected IP: never genuine (an origin answers clients, and may open nothing), and dropped
  // here, counted spoofed by its link, before it could take anything of that IP's tunnel: its meter, its overflow
  // budget, its new flows a second (another tenant's origin flooding it from inside its own tunnel, spoofed sources
  // and all, would otherwise spend them).
  rule(CHAINS.inbound, [expr.meta(NFT_META_IIFNAME), expr.cmp(NFT_CMP_EQ, prefix), expr.immediateVerdict(NFT_GOTO, CHAINS.tunnelToP)]);
  // From upstream, a source that cannot be genuine: a martian, one of our own protected pools, the edge itself.
  rule(CHAINS.inbound, [saddr(), expr.lookup(ref(BOGONS_SET)), ...countedDrop(SPOOFED_IN_MAP, daddr(), ids)]);
  // Before defragmentation (-400), which would otherwise reassemble the fragments.
  rule(CHAINS.inbound, [
    expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_FRAG_OFF_OFFSET, 2),
    expr.bitwise(2, IPV4_FRAG_MASK, Uint8Array.of(0, 0), NFT_REG_1, NFT_REG_1, true),
    expr.cmp(NFT_CMP_NEQ, Uint8Array.of(0, 0)),
    daddr(),
    expr.lookup(ref(POLICY_SETS.fragments)),
    ...countedDrop(dropMap('fragment'), daddr(), ids),
  ]);
  // Every packet that holds its ports (all but a datagram's later fragments, which are held for reassembly and never
  // reach conntrack unless their first fragment passed here). A closed port's flood costs no conntrack entry.
  rule(CHAINS.inbound, [
    expr.payload(NFT_PAYLOAD_NETWORK_HEADER, IPV4_FRAG_OFF_OFFSET, 2),
    expr.bitwise(2, IPV4_FRAG_OFFSET_MASK, Uint8Array.of(0, 0), NFT_REG_1, NFT_REG_1, true),
    expr.cmp(NFT_CMP_EQ, Uint8Array.of(0, 0)),
    expr.immediateVerdict(NFT_JUMP, CHAINS.allowlist),
  ]);
  // After the allowlist: a flood to a closed port fills no meter.
  rule(CHAINS.inbound, [daddr(), expr.lookup(ref(POLICY_SETS.rateLimits), NFT_REG_1, NFT_REG_VERDICT)]);
  // Conntrack must not see a SYN to a syn-proxied P: the proxy in forward answers it. A later fragment has no TCP
  // header (the rule does not match it); a first fragment too short to hold the flags is reassembled and tracked,
  // which the nat chain's first rule drops. A first fragment that holds them is untracked, so it is not reassembled:
  // the proxy answers it alone, or drops it (a checksum over the whole SYN), and its later fragments time out.
  rule(CHAINS.inbound, [...tcpSyn(), daddr(), expr.lookup(ref(POLICY_SETS.synproxied)), expr.notrack()]);
  // A link missing from drop_spoofed (drift) ends the counted drop: the second drops it all the same.
  rule(CHAINS.tunnelToP, countedDrop(dropMap('spoofed'), expr.meta(NFT_META_IIFNAME), ids));
  rule(CHAINS.tunnelToP, [drop()]);
  // One exact lookup per block size, the port masked to it: a hit returns.
  for (const bits of ALLOWLIST_ORDER) {
    const port: Expr[] = bits === 16 ? [] : [expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TH_DPORT_OFFSET, 2, REG32(2))];
    if (bits !== 0 && bits !== 16) port.push(expr.bitwise(2, portMask(bits), Uint8Array.of(0, 0), REG32(2), REG32(2), true));
    rule(CHAINS.allowlist, [daddr(), expr.meta(NFT_META_L4PROTO, REG32(1)), ...port, expr.lookup(ref(allowedSet(bits))), expr.immediateVerdict(NFT_RETURN)]);
  }
  rule(CHAINS.allowlist, countedDrop(dropMap('not_allowed'), daddr(), ids));

  // A connection's first packet: a SYN to a syn-proxied P has no connection (`inbound` untracks it), unless it came
  // as fragments whose first is too short to hold the TCP flags: tracked, it would reach the origin past the proxy.
  rule(pre, [...tcpSyn(), daddr(), expr.lookup(ref(POLICY_SETS.synproxied)), ...countedDrop(dropMap('invalid'), daddr(), ids)]);
  // The flow caps: the kernel runs a nat chain for a connection's first packet only, so a connection is counted
  // once, when it is about to be made (a drop here frees its unconfirmed entry: it never enters the table).
  rule(pre, [daddr(), expr.lookup(ref(POLICY_SETS.flowLimits), NFT_REG_1, NFT_REG_VERDICT)]);
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
  // The SYN proxy opens the connection to the origin from the edge itself (STACK.md): it is counted here, and
  // without DNAT here its SYN never arrives.
  rule(CHAINS.natOut, [daddr(), expr.lookup(ref(POLICY_SETS.flowLimits), NFT_REG_1, NFT_REG_VERDICT)]);
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
  // Invalid or untracked (no connection; its port was judged in `inbound`): the SYN proxy's (a syn-proxied P's
  // handshake: the client's ACK is invalid until the proxy takes it); whatever to P the proxy leaves is dropped.
  rule(CHAINS.guardCt, [daddr(), expr.objrefMap(ref(POLICY_SETS.synproxy))]);
  rule(CHAINS.guardCt, countedDrop(dropMap('invalid'), daddr(), ids));
  // Nor into a tunnel: a packet with no connection to an origin's inner address (an ACK or RST from outside, routed
  // to the edge) is none of the above, and guard_nodnat's test of ct status ends at once without a connection.
  rule(CHAINS.guardCt, [expr.meta(NFT_META_OIFNAME), expr.cmp(NFT_CMP_EQ, prefix), drop()]);
  // Not DNAT-ed: never into a tunnel, and never to P (counted when P is a tunnel's).
  rule(CHAINS.guardNoDnat, [expr.meta(NFT_META_OIFNAME), expr.cmp(NFT_CMP_EQ, prefix), drop()]);
  rule(CHAINS.guardNoDnat, countedDrop(dropMap('invalid'), daddr(), ids));
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
  rule(CHAINS.fromTunnel, countedDrop(dropMap('spoofed'), expr.meta(NFT_META_IIFNAME), ids));
  rule(CHAINS.fromTunnel, [drop()]);
  // The `out` counter in a rule of its own, before the accept: a tunnel missing from tunnel_out (a table rebuilt
  // by an upgrade before the restore adds its counter, an element deleted by hand) ends only this rule, so its
  // replies go uncounted, never dropped. One `replies` lookup per reply, not one per rule.
  rule(CHAINS.tunnelReply, [expr.meta(NFT_META_IIFNAME), expr.objrefMap(ref(OUT_MAP))]);
  rule(CHAINS.tunnelReply, [accept()]);
  rule(CHAINS.localIn, [expr.meta(NFT_META_IIFNAME), expr.cmp(NFT_CMP_EQ, prefix), expr.immediateVerdict(NFT_JUMP, CHAINS.tunnelIn)]);
  rule(CHAINS.localIn, countedDrop(dropMap('invalid'), daddr(), ids));
  rule(CHAINS.tunnelIn, [...ctStateIn(NF_CT_STATE_ESTABLISHED | NF_CT_STATE_RELATED), expr.meta(NFT_META_IIFNAME), saddr(NFT_REG_2), expr.lookup(ref(POLICY_SETS.origins)), accept()]);
  rule(CHAINS.tunnelIn, countedDrop(dropMap('spoofed'), expr.meta(NFT_META_IIFNAME), ids));
  rule(CHAINS.tunnelIn, [drop()]);
}

/** What the chains made by value are sized by: the agent's (dataplane/sizing.ts), the same for every chain of a kind. */
export interface DynamicChainSizes {
  /** The sources one tunnel's meter holds at most. */
  meterSources: number;
  /** The hash buckets of tunnels' flows one flows set holds at most (each holds at least one connection). */
  flowEntries: number;
}

/** A chain made by value: a tunnel's meter, or the flow caps of a max_flows value. */
export type DynamicChain = { kind: 'meter'; link: string; pps: number } | { kind: 'flows'; maxFlows: number };

/** What a chain's name says it is; undefined for the table's own chains (and for those of older agents). */
export function dynamicChainOf(name: string): DynamicChain | undefined {
  // The rate is the last `_<digits>`: a link name may hold `_` and digits itself.
  const m = /^ratelimit_(.+)_(\d+)$/.exec(name);
  if (m) return { kind: 'meter', link: m[1]!, pps: Number(m[2]) };
  const f = /^flows_(\d+)$/.exec(name);
  if (f) return { kind: 'flows', maxFlows: Number(f[1]) };
  return undefined;
}

/** The expression names of each rule of a chain made by value, as listRules decodes them: how a damaged one is told. */
export const DYNAMIC_CHAIN_RULES: Readonly<Record<DynamicChain['kind'], readonly string[]>> = {
  meter: ['payload dynset immediate', 'payload lookup limit payload objref immediate', 'payload lookup immediate', 'payload objref immediate'],
  flows: ['payload dynset payload objref immediate', 'payload payload payload hash dynset payload objref immediate'],
};

/**
 * A chain made by value, with its set(s). `repair`: the chain exists with other rules (a rule deleted by hand): they
 * are flushed first, in the same batch, so the chain ends with exactly its rules.
 */
export function addDynamicChain(b: NftBatch, table: string, name: string, sizes: DynamicChainSizes, opts: { repair?: boolean; dropMapId?: number } = {}): void {
  const c = dynamicChainOf(name);
  if (!c) throw new Error(`not a chain made by value: ${name}`);
  if (c.kind === 'meter') addMeterChain(b, table, c.link, c.pps, sizes.meterSources, opts);
  else addFlowsChain(b, table, c.maxFlows, sizes.flowEntries, opts);
}

/**
 * A tunnel's per-source meter: its sources' own buckets, in a set of its own, so no other tunnel's flood fills it.
 *   set ratelimit_N_R { type ipv4_addr; size S; flags dynamic,timeout; timeout 1s; }
 *   chain ratelimit_N_R {
 *     update @ratelimit_N_R { ip saddr limit rate R/second } return
 *     ip saddr != @ratelimit_N_R limit rate over R/second counter name ip daddr map @drop_rate_limited drop
 *     ip saddr != @ratelimit_N_R return
 *     counter name ip daddr map @drop_rate_limited drop }
 * A source under its limit leaves at the first rule (one hash lookup: the common path). A source the meter holds
 * but over its limit fails the first and is in the set: dropped by the last. A source the full meter could not take
 * (the update adds nothing, the rule ends) is not in the set: it shares the tunnel's one overflow budget, the
 * second rule's own limit (R a second between them all), never unlimited. (`ip saddr @set` cannot tell "held":
 * a lookup also runs the element's limit.) S is a multiple of 65,536: the kernel sizes a set's first hash table
 * from the low 16 bits of its size, so such a set starts at a few hundred bytes and grows only with a flood.
 */
function addMeterChain(b: NftBatch, table: string, link: string, pps: number, sources: number, opts: { repair?: boolean; dropMapId?: number }): void {
  const name = meterChainName(link, pps);
  const id = b.addSet({ table, name, flags: NFT_SET_TIMEOUT | NFT_SET_EVAL, keyType: NFT_TYPE_IPADDR, keyLen: 4, descSize: sources, timeoutMs: METER_TIMEOUT_MS, userdata: ipv4SetUserdata() });
  b.addChain({ table, name });
  if (opts.repair) b.flushChain(table, name);
  const meter = { name, id };
  const counted = (): Expr[] => [daddr(), expr.objrefMap({ name: dropMap('rate_limited'), id: opts.dropMapId }), drop()];
  const rule = (exprs: Expr[]): void => void b.addRule({ table, chain: name, exprs });
  rule([saddr(), expr.dynset(meter, NFT_DYNSET_OP_UPDATE, expr.limit(pps)), expr.immediateVerdict(NFT_RETURN)]);
  rule([saddr(), expr.lookup(meter, NFT_REG_1, undefined, NFT_LOOKUP_F_INV), expr.limit(pps, { over: true }), ...counted()]);
  rule([saddr(), expr.lookup(meter, NFT_REG_1, undefined, NFT_LOOKUP_F_INV), expr.immediateVerdict(NFT_RETURN)]);
  rule(counted());
}

/**
 * The flow caps of one max_flows value M, for every tunnel with it (each tunnel's own elements, keyed by P):
 *   set newflows_M { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 1s; }
 *   set flows_M { type ipv4_addr . mark; size E; flags dynamic; }
 *   chain flows_M {
 *     update @newflows_M { ip daddr limit rate over F/second burst F packets } counter name ip daddr map @drop_rate_limited drop
 *     add @flows_M { ip daddr . jhash ip saddr . th sport mod K ct count over C } counter name ip daddr map @drop_rate_limited drop }
 * The first caps new connections at F a second (flowCapShape), so the second's walk is paid F times a second at
 * most. The second counts P's connections in K lists by client address and port, C at most each: K x C <= M.
 * `ct count` walks its list on every new connection (a conntrack lookup per entry: 4 ms at 65,536 here, 0.07 ms
 * at 64), hence the buckets. An element goes when its list empties (the kernel collects it); E bounds them all.
 */
function addFlowsChain(b: NftBatch, table: string, maxFlows: number, entries: number, opts: { repair?: boolean; dropMapId?: number }): void {
  const name = flowsChainName(maxFlows);
  const shape = flowCapShape(maxFlows);
  const rate = newFlowsSetName(maxFlows);
  const flowsId = b.addSet({ table, name, flags: NFT_SET_EVAL, keyType: concatType([NFT_TYPE_IPADDR, NFT_TYPE_MARK]), keyLen: 8, descSize: entries, userdata: concatSetUserdata() });
  const rateId = b.addSet({ table, name: rate, flags: NFT_SET_TIMEOUT | NFT_SET_EVAL, keyType: NFT_TYPE_IPADDR, keyLen: 4, descSize: 65_536, timeoutMs: NEW_FLOWS_TIMEOUT_MS, userdata: ipv4SetUserdata() });
  b.addChain({ table, name });
  if (opts.repair) b.flushChain(table, name);
  const counted = (): Expr[] => [daddr(), expr.objrefMap({ name: dropMap('rate_limited'), id: opts.dropMapId }), drop()];
  b.addRule({ table, chain: name, exprs: [daddr(), expr.dynset({ name: rate, id: rateId }, NFT_DYNSET_OP_UPDATE, expr.limit(shape.newPerSecond, { over: true, burst: shape.newPerSecond })), ...counted()] });
  b.addRule({
    table,
    chain: name,
    exprs: [
      daddr(),
      saddr(REG32(2)),
      expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TH_SPORT_OFFSET, 2, REG32(3)),
      expr.jhash(REG32(2), 8, shape.buckets, REG32(1)),
      expr.dynset({ name, id: flowsId }, NFT_DYNSET_OP_ADD, expr.connlimitOver(shape.perBucket)),
      ...counted(),
    ],
  });
}

/** Removes a chain made by value and its set(s) (after the batch removed every map element jumping to it). */
export function deleteDynamicChain(b: NftBatch, table: string, name: string): void {
  b.flushChain(table, name);
  b.deleteChain(table, name);
  b.deleteSet(table, name);
  const c = dynamicChainOf(name);
  if (c?.kind === 'flows') b.deleteSet(table, newFlowsSetName(c.maxFlows));
}

/** The SYN proxy for one MSS value (tunnel MTU - 40: STACK.md, the proxy's MSS is the one the client uses). */
export function addSynproxyObject(b: NftBatch, table: string, mss: number): void {
  b.addSynproxy({ table, name: synproxyName(mss), mss, wscale: SYNPROXY_WSCALE });
}
