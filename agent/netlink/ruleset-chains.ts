// The edge table's chains made by value (docs/CONTRACTS.md "Dataplane"): a tunnel's own per-source meter and the
// flow caps of one max_flows value, each with its set(s), added and deleted as tunnels come and go; and the SYN
// proxy objects, one per MSS. Pure, like ruleset-table.ts, which builds the table they hang from.
import {
  NFT_RETURN,
  NFT_SET_EVAL,
  NFT_SET_TIMEOUT,
  NFT_DYNSET_OP_ADD,
  NFT_DYNSET_OP_UPDATE,
  NFT_LOOKUP_F_INV,
  NFT_TYPE_MARK,
  concatSetUserdata,
  concatType,
  ipv4SetUserdata,
  type Expr,
  NFT_PAYLOAD_TRANSPORT_HEADER,
  NFT_REG_1,
  NFT_TYPE_IPADDR,
  expr,
  type NftBatch,
} from './nftables/index.ts';
import { TH_SPORT_OFFSET, REG32, daddr, saddr, drop } from './ruleset-exprs.ts';
import { dropMap, meterChainName, flowsChainName, synproxyName } from './ruleset.ts';

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

/**
 * How a max_flows value is enforced: its connections hashed by client address and port into `buckets` lists of at
 * most `perBucket` (buckets x perBucket <= maxFlows, so the tunnel never holds more), and at most `newPerSecond`
 * new connections a second (one second's worth at once).
 */
export function flowCapShape(maxFlows: number): { buckets: number; perBucket: number; newPerSecond: number } {
  const buckets = Math.ceil(maxFlows / FLOWS_PER_BUCKET);
  return { buckets, perBucket: Math.floor(maxFlows / buckets), newPerSecond: Math.max(NEW_FLOWS_MIN, Math.ceil(maxFlows / NEW_FLOWS_DIVISOR)) };
}

const newFlowsSetName = (maxFlows: number): string => `newflows_${maxFlows}`;
/** The SYN proxy's window scale (STACK.md: the recipe proven on this kernel). */
const SYNPROXY_WSCALE = 7;
/** A tunnel's new-flow bucket (one second of its rate) is full again 1 s after its last new flow: then it is forgotten. */
const NEW_FLOWS_TIMEOUT_MS = 1_000;

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
