// The agent's one nftables table (docs/CONTRACTS.md "Dataplane"), as a batch: built once, after which tunnels add
// and remove set and map elements and named objects (named in ruleset.ts), and two kinds of chains made by value
// (ruleset-chains.ts): a tunnel's own per-source meter (one chain per tunnel with a source_pps_limit: a meter's
// capacity is a set's, and a rule names its set) and the flow caps (one chain per distinct max_flows value). Pure;
// the same messages, in the same order, that `nft -f` sends for the equivalent ruleset file
// (see test/fixtures/netlink/nft-setup.hex).
import {
  IFNAME_LEN,
  IP_CT_DIR_ORIGINAL,
  IP_CT_DIR_REPLY,
  NFT_CT_DIRECTION,
  NFT_CT_DST_IP,
  NFT_DATA_VERDICT,
  NFT_JUMP,
  NFT_GOTO,
  NFT_RETURN,
  NFT_META_IIFNAME,
  NFT_OBJECT_SYNPROXY,
  NFT_REG_VERDICT,
  NFT_SET_INTERVAL,
  ipv4IntervalElements,
  NFT_TYPE_IFNAME,
  NFT_TYPE_INET_SERVICE,
  NF_CT_STATE_ESTABLISHED,
  NF_CT_STATE_INVALID,
  NF_CT_STATE_RELATED,
  NF_CT_STATE_UNTRACKED,
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
  NFT_SET_EVAL,
  NFT_DYNSET_OP_UPDATE,
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
import { IPV4_FRAG_OFF_OFFSET, TH_DPORT_OFFSET, TCP_FLAGS_OFFSET, TCPOPT_MAXSEG_VALUE_OFFSET, IPV4_FRAG_MASK, IPV4_FRAG_OFFSET_MASK, NFT_REG_2, REG32, portMask, daddr, saddr, drop, accept, ctStateIn, ctDnat, tcpSyn, countedDrop } from './ruleset-exprs.ts';
import { ALLOWLIST_ORDER, BOGONS_SET, DROP_REASONS, NFT_TABLE_F_DORMANT, OUT_MAP, POLICY_SETS, PORT_BLOCK_BITS, RULESET_DEFAULTS, SPOOFED_IN_MAP, VECTOR_SETS, VECTOR_SET_SIZE, allowedSet, dropMap } from './ruleset.ts';

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
  /**
   * The `bogons` set's prefixes (sources no genuine packet from upstream carries: bogonSources). Absent: the set is
   * made empty (the reference copy; dataplane/kernel/table.ts fills the agent's own with ensureBogons).
   */
  bogons?: readonly string[];
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
  vector: 'vector',
} as const;

// Hook priorities: before defragmentation (-400) and conntrack (-200), and filter (0).
const PRIO_BEFORE_DEFRAG = -450;
const PRIO_FILTER = 0;
const NF_INET_LOCAL_IN = 1;
const NF_INET_LOCAL_OUT = 3;


/**
 * table ip T {
 *   (maps and sets: see POLICY_SETS, dropMap, SPOOFED_IN_MAP, BOGONS_SET, and docs/CONTRACTS.md "Dataplane")
 *   chain early { type filter hook prerouting priority -450;
 *     counter name ip daddr map @tunnel_counters jump inbound }
 *   chain inbound {
 *     iifname "PREFIX*" goto tunnel_to_p
 *     ip daddr @vector_watch jump vector
 *     ip saddr @bogons counter name ip daddr map @drop_spoofed_in drop
 *     ip frag-off & 0x3fff != 0 ip daddr @fragments counter name ip daddr map @drop_fragment drop
 *     ip frag-off & 0x1fff == 0 jump allowlist
 *     ip daddr vmap @rate_limits
 *     tcp flags & (fin|syn|rst|ack) == syn ip daddr @synproxied notrack }
 *   chain vector {
 *     update @vector_protos { ip daddr . meta l4proto counter }
 *     update @vector_ports { ip daddr . tcp dport counter }
 *     update @vector_ports { ip daddr . udp dport counter } }
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
  b.addChain({ table: t, name: CHAINS.vector });
  b.addChain({ table: t, name: CHAINS.tunnelToP });
  b.addChain({ table: t, name: CHAINS.allowlist });
  base(pre, 'nat', NF_INET_PRE_ROUTING, NF_IP_PRI_NAT_DST);
  base(CHAINS.natOut, 'nat', NF_INET_LOCAL_OUT, NF_IP_PRI_NAT_DST);
  // One forward chain: a second base chain, and the guard testing ct state and ct status twice each, cost 2-4% of
  // the forwarding rate (measured by bench:edge); jumps test each once.
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
  set({ name: VECTOR_SETS.watch, flags: 0, keyType: NFT_TYPE_IPADDR, keyLen: 4, userdata: ipv4SetUserdata() });
  set({ name: VECTOR_SETS.protos, flags: NFT_SET_EVAL, keyType: concatType([NFT_TYPE_IPADDR, NFT_TYPE_INET_PROTOCOL]), keyLen: 8, descSize: VECTOR_SET_SIZE, userdata: concatSetUserdata() });
  set({ name: VECTOR_SETS.ports, flags: NFT_SET_EVAL, keyType: concatType([NFT_TYPE_IPADDR, NFT_TYPE_INET_SERVICE]), keyLen: 8, descSize: VECTOR_SET_SIZE, userdata: concatSetUserdata() });
  const ref = (name: string): { name: string; id?: number } => ({ name, id: ids.get(name) });
  const rule = (chain: string, exprs: Expr[]): void => void b.addRule({ table: t, chain, exprs });

  // Every packet to P, and nothing else, goes through `inbound`: before defragmentation and conntrack, in the one
  // base chain of the hook (each base chain costs every packet, as bench:edge measured).
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
  // The vector of an attack going on (VECTOR_SETS), before any drop: a flood to a closed port names its port too.
  rule(CHAINS.inbound, [daddr(), expr.lookup(ref(VECTOR_SETS.watch)), expr.immediateVerdict(NFT_JUMP, CHAINS.vector)]);
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
  // A later fragment has no transport header: the port rules end at it (it is counted by protocol only).
  rule(CHAINS.vector, [daddr(), expr.meta(NFT_META_L4PROTO, REG32(1)), expr.dynset(ref(VECTOR_SETS.protos), NFT_DYNSET_OP_UPDATE, expr.counter())]);
  for (const proto of [IPPROTO_TCP, IPPROTO_UDP]) {
    rule(CHAINS.vector, [
      expr.meta(NFT_META_L4PROTO),
      expr.cmp(NFT_CMP_EQ, Uint8Array.of(proto)),
      daddr(),
      expr.payload(NFT_PAYLOAD_TRANSPORT_HEADER, TH_DPORT_OFFSET, 2, REG32(1)),
      expr.dynset(ref(VECTOR_SETS.ports), NFT_DYNSET_OP_UPDATE, expr.counter()),
    ]);
  }
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