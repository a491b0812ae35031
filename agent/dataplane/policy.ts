// A tunnel's isolation and policy as nftables elements (docs/CONTRACTS.md "Dataplane"): which element of which
// set or map each tunnel owns, its named objects (the traffic counter and one drop counter per reason), and the
// objects made by value (a synproxy per MSS; a meter chain per tunnel with a per-source limit, a flow-cap chain per
// max_flows value). Pure: the diff compares these with what the kernel has; the kernel code encodes them.
import { DEFAULT_MAX_FLOWS, DEFAULT_POLICY, mergeRanges, type PortRange, type TunnelPolicy } from '../../common/tunnel-policy.ts';
import { parseIPv4 } from '../../common/ipv4.ts';
import { IFNAME_LEN, IPPROTO_TCP, IPPROTO_UDP, NFT_JUMP, type ElementView, type SetElement } from '../netlink/nftables/index.ts';
import { ALLOWED_SETS, DROP_REASONS, OUT_MAP, PORT_BLOCK_BITS, POLICY_SETS, SPOOFED_IN_MAP, allowedSet, dropMap, flowsChainName, meterChainName, synproxyName, type DropReason, type PortBlockBits } from '../netlink/ruleset.ts';
import type { TunnelSpec } from './types.ts';

/** One element of one of the agent's sets; `id` names it (set, key, value) for comparing with a dump. */
export interface PolicyElement {
  set: string;
  el: SetElement;
  id: string;
}

/** The sets whose elements belong to tunnels (read back whole only by a reconcile). */
export const TUNNEL_SETS: readonly string[] = [...Object.values(POLICY_SETS), ...ALLOWED_SETS, ...DROP_REASONS.map(dropMap), OUT_MAP, SPOOFED_IN_MAP];

/**
 * The tunnel sets whose element keys start with the tunnel's link name (16 bytes, NUL-padded: tunnelElements);
 * every other tunnel set's start with its protected IP. A reconcile digests each tunnel's elements in two
 * buckets by these (ownerDigests, kernel/read.ts readElementIds).
 */
export const LINK_KEYED_SETS: ReadonlySet<string> = new Set([POLICY_SETS.replies, POLICY_SETS.origins, dropMap('spoofed'), OUT_MAP]);

const PORT_ALL: PortRange = [0, 65535];

/**
 * Port ranges as the aligned blocks the allowlist sets hold (agent/netlink/ruleset.ts PORT_BLOCK_BITS): each
 * range, once overlapping and adjacent ones are merged, cut from its start into the largest aligned block that
 * fits, so the blocks are disjoint and each port is in exactly one. [bits, first port] pairs, in port order.
 */
export function portBlocks(ranges: readonly PortRange[]): [PortBlockBits, number][] {
  const out: [PortBlockBits, number][] = [];
  for (const [from, to] of mergeRanges(ranges)) {
    for (let port = from; port <= to; ) {
      const bits = PORT_BLOCK_BITS.find((b) => port % (1 << b) === 0 && port + (1 << b) - 1 <= to)!;
      out.push([bits, port]);
      port += 1 << bits;
    }
  }
  return out;
}

const policyOf = (t: Pick<TunnelSpec, 'policy'>): TunnelPolicy => t.policy ?? DEFAULT_POLICY;

/** The named counter of one drop reason of a tunnel: `<tunnel_name>.<reason>`. (Joined into one flat string: see idOf.) */
export const dropCounterName = (t: Pick<TunnelSpec, 'tunnel_name'>, reason: DropReason): string => [t.tunnel_name, '.', reason].join('');

/** The named counter of a tunnel's replies leaving toward clients: `<tunnel_name>.out` (reached by OUT_MAP). */
export const outCounterName = (t: Pick<TunnelSpec, 'tunnel_name'>): string => [t.tunnel_name, '.out'].join('');

/**
 * Every named counter a tunnel owns: its traffic counter toward the origin (named as the tunnel), one per drop
 * reason, and its `out` counter (seven).
 */
export function tunnelCounterNames(t: Pick<TunnelSpec, 'tunnel_name'>): string[] {
  return [t.tunnel_name, ...DROP_REASONS.map((r) => dropCounterName(t, r)), outCounterName(t)];
}

/** The SYN proxy's MSS for a tunnel: what fits its MTU (IPv4 and TCP headers, 40 bytes, without options). */
const synproxyMss = (t: Pick<TunnelSpec, 'mtu'>): number => t.mtu - 40;

/** The connections a tunnel may hold (DESIGN 3.11): its policy's max_flows, or the default when it names none. */
export const maxFlowsOf = (t: Pick<TunnelSpec, 'policy'>): number => t.policy?.max_flows ?? DEFAULT_MAX_FLOWS;

/**
 * The objects made by value that a tunnel needs: a synproxy object (by MSS), and the chains its elements jump to
 * (agent/netlink/ruleset-chains.ts addDynamicChain): its flow caps' (by max_flows, every tunnel) and its own meter's (by
 * link name and rate, with a source_pps_limit). Each is created with its first user and deleted with its last.
 */
export function sharedNeeds(t: Pick<TunnelSpec, 'mtu' | 'policy' | 'tunnel_name'>): { mss?: number; chains: string[] } {
  const p = policyOf(t);
  const chains = [flowsChainName(maxFlowsOf(t))];
  if (p.source_pps_limit !== null) chains.push(meterChainName(t.tunnel_name, p.source_pps_limit));
  return { ...(p.syn_proxy ? { mss: synproxyMss(t) } : {}), chains };
}

// Keys are built as hex strings: a reconcile compares ids of every tunnel's elements (eleven or so each), and a
// Buffer per key field was most of its time and garbage at 10,000 tunnels. Buffers are made only for the
// elements a batch actually carries (PolicyElement.el, parsed from the id on first use).
const hex2 = (n: number): string => n.toString(16).padStart(2, '0');
const ipHex = (ip: string): string => ip.split('.').map((o) => hex2(Number(o))).join('');
/** An interface name as a 16-byte, NUL-padded key. */
function ifnameHex(name: string): string {
  let h = '';
  for (let i = 0; i < name.length; i++) h += hex2(name.charCodeAt(i));
  return h.padEnd(IFNAME_LEN * 2, '0');
}
/** P . proto (. port) as a concatenation key: each field padded to 4 bytes, the port big-endian; no port for every port. */
const allowKeyHex = (p: string, proto: number, bits: PortBlockBits, port: number): string =>
  `${p}${hex2(proto)}000000${bits === 16 ? '' : `${port.toString(16).padStart(4, '0')}0000`}`;

const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

/** An element's value as its id spells it: an object's name, or a verdict (code and chain). */
function valueOf(e: ElementView | SetElement): string {
  if (e.data) return hex(e.data);
  if (e.objref !== undefined) return `obj:${e.objref}`;
  if (e.verdict) return `v:${e.verdict.code}:${e.verdict.chain ?? ''}`;
  return '';
}

/** The identity of an element: its set, key (and interval end) and value, as a dump decodes them too. */
export function elementId(set: string, e: ElementView | SetElement): string {
  return idOf(set, hex(e.key), e.keyEnd ? hex(e.keyEnd) : undefined, valueOf(e));
}

/**
 * Joined, not concatenated: `a + b` of 13 or more characters is a tree of V8 cons strings, and an id kept in a
 * Set stays one (28 MB against 10 MB for 100,000 ids; a reconcile keeps every kernel element's id, and with
 * port lists 10,000 tunnels have ~800,000). join() writes one flat string.
 */
const idOf = (set: string, key: string, keyEnd: string | undefined, value: string): string =>
  (keyEnd !== undefined ? [set, ' ', key, '-', keyEnd, ' ', value] : [set, ' ', key, ' ', value]).join('');

/**
 * An element named by its id, and nothing else: its set and SetElement (key Buffers, value) are built each
 * time they are asked for, by getters on the prototype. 10,000 tunnels own ~100,000 elements with a default
 * policy and ~800,000 with port lists (a range is several prefix blocks), and a batch encodes each once
 * (RSS; docs/CONTRACTS.md "Dataplane").
 */
class IdElement implements PolicyElement {
  constructor(readonly id: string) {}

  /** A getter too: a kept slice would be a second string per element (set names are short, so copied). */
  get set(): string {
    return this.id.slice(0, this.id.indexOf(' '));
  }

  get el(): SetElement {
    const [, key = '', value = ''] = this.id.split(' ');
    const [from = '', to] = key.split('-');
    const el: SetElement = { key: Buffer.from(from, 'hex') };
    if (to !== undefined) el.keyEnd = Buffer.from(to, 'hex');
    if (value.startsWith('obj:')) el.objref = value.slice(4);
    else if (value.startsWith('v:')) {
      const [, code, chain] = value.split(':');
      el.verdict = { code: Number(code), ...(chain ? { chain } : {}) };
    } else if (value !== '') el.data = Buffer.from(value, 'hex');
    return el;
  }
}

/** The element an id names: set, key, interval end and value (objref or verdict). */
export function elementFromId(id: string): PolicyElement {
  return new IdElement(id);
}

const element = (set: string, key: string, value = '', keyEnd?: string): PolicyElement => elementFromId(idOf(set, key, keyEnd, value));

/**
 * Every element the tunnel owns, in every set of the isolation and the policy. A default policy still owns
 * the isolation (replies, origins, spoofed), the allowlist of every port, and its drop counters' map entries.
 */
export function tunnelElements(t: TunnelSpec): PolicyElement[] {
  return elementsOf(t, true);
}

/** tunnelElements() but the allowlist's: for a tunnel whose allowlist a reconcile found clean by its digest. */
export function tunnelElementsButAllowlist(t: TunnelSpec): PolicyElement[] {
  return elementsOf(t, false);
}

/**
 * Where a tunnel's elements other than the allowlist's go, one call each: the set, the value as its id spells it,
 * and the key as up to three hex parts (concatenated, the key). One walk for the element list and the digests.
 */
type ElementSink = (set: string, value: string, key1: string, key2?: string, key3?: string) => void;

/** The isolation's elements and the drop counters' map entries (`head`), or the policy's others (`tail`). */
function eachElementButAllowlist(t: TunnelSpec, part: 'head' | 'tail', sink: ElementSink): void {
  const P = ipHex(t.protected_ip);
  if (part === 'head') {
    const O = ipHex(t.origin_inner.split('/')[0]!);
    const N = ifnameHex(t.tunnel_name);
    sink(POLICY_SETS.replies, '', N, O, P);
    sink(POLICY_SETS.origins, '', N, O);
    sink(dropMap('spoofed'), `obj:${dropCounterName(t, 'spoofed')}`, N);
    sink(OUT_MAP, `obj:${outCounterName(t)}`, N);
    for (const r of DROP_REASONS) if (r !== 'spoofed') sink(dropMap(r), `obj:${dropCounterName(t, r)}`, P);
    sink(SPOOFED_IN_MAP, `obj:${dropCounterName(t, 'spoofed')}`, P);
    return;
  }
  if (policyOf(t).drop_fragments) sink(POLICY_SETS.fragments, '', P);
  const need = sharedNeeds(t);
  if (need.mss !== undefined) {
    sink(POLICY_SETS.synproxied, '', P);
    sink(POLICY_SETS.synproxy, `obj:${synproxyName(need.mss)}`, P);
  }
  const pps = policyOf(t).source_pps_limit;
  if (pps !== null) sink(POLICY_SETS.rateLimits, `v:${NFT_JUMP}:${meterChainName(t.tunnel_name, pps)}`, P);
  sink(POLICY_SETS.flowLimits, `v:${NFT_JUMP}:${flowsChainName(maxFlowsOf(t))}`, P);
}

function elementsOf(t: TunnelSpec, allowlist: boolean): PolicyElement[] {
  const out: PolicyElement[] = [];
  const push: ElementSink = (set, value, k1, k2 = '', k3 = '') => void out.push(element(set, k1 + k2 + k3, value));
  eachElementButAllowlist(t, 'head', push);
  if (allowlist) for (const id of allowlistIds(t)) out.push(elementFromId(id));
  eachElementButAllowlist(t, 'tail', push);
  return out;
}

/** What a tunnel's allowlist holds: its protocols, and its ports as aligned blocks (each in both protocols). */
function allowlistBlocks(t: Pick<TunnelSpec, 'policy'>): { protos: number[]; blocks: [PortBlockBits, number][] } {
  const p = policyOf(t);
  const protos = p.protocol === 'both' ? [IPPROTO_TCP, IPPROTO_UDP] : [p.protocol === 'tcp' ? IPPROTO_TCP : IPPROTO_UDP];
  return { protos, blocks: portBlocks(p.ports === '*' ? [PORT_ALL] : p.ports) };
}

/** The ids of the tunnel's allowlist elements (its ports' blocks, per protocol), without building the elements. */
function allowlistIds(t: Pick<TunnelSpec, 'protected_ip' | 'policy'>): string[] {
  const P = ipHex(t.protected_ip);
  const { protos, blocks } = allowlistBlocks(t);
  const out: string[] = [];
  for (const proto of protos) for (const [bits, port] of blocks) out.push(idOf(allowedSet(bits), allowKeyHex(P, proto, bits, port), undefined, ''));
  return out;
}

/**
 * Whether the tunnel's allowlist lets a connection of this protocol to this destination port in: the same
 * answer as its elements in the allowed sets (tcp and udp only; every port is 0-65535, as `*` is stored).
 */
export function allowsConnection(t: Pick<TunnelSpec, 'policy'>, proto: number, port: number | undefined): boolean {
  const p = policyOf(t);
  if (proto !== IPPROTO_TCP && proto !== IPPROTO_UDP) return false;
  if (p.protocol !== 'both' && proto !== (p.protocol === 'tcp' ? IPPROTO_TCP : IPPROTO_UDP)) return false;
  if (p.ports === '*') return true;
  return port !== undefined && p.ports.some(([from, to]) => port >= from && port <= to);
}

/** Whether an element id is an allowlist element's (one of ALLOWED_SETS; not the legacy `allowed` set). */
export const isAllowedId = (id: string): boolean => id.startsWith('allowed_');

/** A protected IP as a uint32: how a reconcile keys allowlist digests (the first four bytes of their elements' keys). */
export const protectedKey = (ip: string): number => parseIPv4(ip) ?? -1;

/**
 * A digest of a set of element ids, the same whatever their order: how many, and two independent 32-bit sums of
 * a hash of each. A reconcile compares the kernel's allowlist elements with the wanted ones per protected IP
 * by these, rather than holding every id: with port lists that is ~70 elements per tunnel (kernel/read.ts).
 */
export interface IdDigest {
  n: number;
  a: number;
  b: number;
}

export const emptyDigest = (): IdDigest => ({ n: 0, a: 0, b: 0 });

// FNV-1a and a murmur-style mix over the same characters: two 32-bit hashes per id, summed mod 2^32. The state
// is the module's, so hashing allocates nothing (a reconcile hashes ~800,000 ids).
let h1 = 0;
let h2 = 0;
const hashStart = (): void => {
  h1 = 0x811c9dc5;
  h2 = 0x9747b28c;
};
const hashChar = (c: number): void => {
  h1 = Math.imul(h1 ^ c, 0x01000193);
  h2 = Math.imul(h2 ^ c, 0x5bd1e995);
  h2 ^= h2 >>> 15;
};
const hashInto = (d: IdDigest): void => {
  d.n++;
  d.a = (d.a + (h1 >>> 0)) >>> 0;
  d.b = (d.b + (h2 >>> 0)) >>> 0;
};
const HEX_CHARS = [...'0123456789abcdef'].map((c) => c.charCodeAt(0));
const SPACE = 32;
const DASH = 45;

const hashText = (text: string): void => {
  for (let i = 0; i < text.length; i++) hashChar(text.charCodeAt(i));
};
/** The characters of bytes[from, to) in lower-case hex, as an id spells a key. */
const hashHex = (bytes: Uint8Array, from = 0, to = bytes.length): void => {
  for (let i = from; i < to; i++) {
    hashChar(HEX_CHARS[bytes[i]! >> 4]!);
    hashChar(HEX_CHARS[bytes[i]! & 15]!);
  }
};

export function addToDigest(d: IdDigest, id: string): void {
  hashStart();
  hashText(id);
  hashInto(d);
}

/** addToDigest of the id `<set> <key1><key2><key3> <value>`, without the id. */
function addPartsToDigest(d: IdDigest, set: string, value: string, key1: string, key2 = '', key3 = ''): void {
  hashStart();
  hashText(set);
  hashChar(SPACE);
  hashText(key1);
  hashText(key2);
  hashText(key3);
  hashChar(SPACE);
  hashText(value);
  hashInto(d);
}

/**
 * addToDigest of the id of an allowlist element of `set` whose key is buf[from, to), without the id: its
 * characters (`<set> <key in hex> `: allowlist elements have no value) hashed from the bytes.
 */
export function addKeyToDigest(d: IdDigest, set: string, buf: Uint8Array, from: number, to: number): void {
  hashStart();
  hashText(set);
  hashChar(SPACE);
  hashHex(buf, from, to);
  hashChar(SPACE);
  hashInto(d);
}

export const sameDigest = (x: IdDigest | undefined, y: IdDigest | undefined): boolean =>
  x !== undefined && y !== undefined && x.n === y.n && x.a === y.a && x.b === y.b;

/** Each allowed set's name by block size, made once (the digests below name a set per element). */
const ALLOWED_SET_NAMES = new Map(PORT_BLOCK_BITS.map((bits) => [bits, allowedSet(bits)]));
/** One allowlist key at a time (`P . proto . port`, allowKeyHex's bytes), reused: the digests allocate nothing per element. */
const KEY = Buffer.alloc(12);

/**
 * addToDigest(d, elementId(set, e)) without the id: the same characters (set, key and interval end in hex,
 * value) hashed from the decoded element as a dump delivers it.
 */
export function addElementToDigest(d: IdDigest, set: string, e: ElementView): void {
  hashStart();
  hashText(set);
  hashChar(SPACE);
  hashHex(e.key);
  if (e.keyEnd) {
    hashChar(DASH);
    hashHex(e.keyEnd);
  }
  hashChar(SPACE);
  if (e.data) hashHex(e.data);
  else if (e.objref !== undefined) {
    hashText('obj:');
    hashText(e.objref);
  } else if (e.verdict) hashText(`v:${e.verdict.code}:${e.verdict.chain ?? ''}`);
  hashInto(d);
}

/**
 * The bucket of a link name: a 32-bit hash of the 16 NUL-padded bytes it is keyed by. The wanted side (from the
 * name) and the kernel's (from key bytes: linkBucketOfKey) bucket alike, so a collision only merges two buckets.
 */
export function linkBucket(name: string): number {
  hashStart();
  for (let i = 0; i < IFNAME_LEN; i++) hashChar(i < name.length ? name.charCodeAt(i) : 0);
  return h1 >>> 0;
}

export function linkBucketOfKey(key: Uint8Array): number {
  hashStart();
  for (let i = 0; i < IFNAME_LEN; i++) hashChar(key[i] ?? 0);
  return h1 >>> 0;
}

/** Digests by owner: a protected IP's elements (protectedKey), and a link name's (linkBucket; LINK_KEYED_SETS). */
export interface OwnerDigests {
  ips: Map<number, IdDigest>;
  links: Map<number, IdDigest>;
}

export const digestIn = (m: Map<number, IdDigest>, key: number): IdDigest => {
  let d = m.get(key);
  if (!d) m.set(key, (d = emptyDigest()));
  return d;
};

/**
 * The digests these tunnels' elements make, by owner. The allowlist's (~70 of a tunnel's ~80 elements with a
 * port list) are hashed from key bytes written into one scratch buffer, as the kernel's are (addKeyToDigest),
 * with no id string: a reconcile of 10,000 tunnels would otherwise make ~800,000 of them before its read-back
 * even starts (~60 MB of RSS the allocator kept until the operation's first release).
 */
export function ownerDigests(tunnels: Iterable<TunnelSpec>): OwnerDigests {
  const out: OwnerDigests = { ips: new Map(), links: new Map() };
  // Tunnels share a few policies: their port blocks are cut once per distinct allowlist, not once per tunnel.
  const blocksOf = new Map<string, ReturnType<typeof allowlistBlocks>>();
  for (const t of tunnels) {
    const k = protectedKey(t.protected_ip);
    const link = linkBucket(t.tunnel_name);
    // The ids' characters hashed as they are made: no id, element or key string per element (RSS at 10,000 tunnels).
    const sink: ElementSink = (set, value, k1, k2, k3) => addPartsToDigest(LINK_KEYED_SETS.has(set) ? digestIn(out.links, link) : digestIn(out.ips, k), set, value, k1, k2, k3);
    eachElementButAllowlist(t, 'head', sink);
    eachElementButAllowlist(t, 'tail', sink);
    const p = policyOf(t);
    const allowKey = `${p.protocol} ${p.ports === '*' ? '*' : p.ports.join(' ')}`;
    let allow = blocksOf.get(allowKey);
    if (!allow) blocksOf.set(allowKey, (allow = allowlistBlocks(t)));
    const { protos, blocks } = allow;
    if (blocks.length === 0) continue;
    const d = digestIn(out.ips, k);
    KEY.fill(0);
    KEY.writeUInt32BE(k >>> 0, 0);
    for (const proto of protos) {
      KEY[4] = proto;
      for (const [bits, port] of blocks) {
        if (bits === 16) addKeyToDigest(d, ALLOWED_SET_NAMES.get(bits)!, KEY, 0, 8);
        else {
          KEY.writeUInt16BE(port, 8);
          addKeyToDigest(d, ALLOWED_SET_NAMES.get(bits)!, KEY, 0, 12);
        }
      }
    }
  }
  return out;
}

/** The protected IP an allowed-set element's id keys (its first four key bytes), or undefined for other sets. */
export function allowedElementIp(e: PolicyElement): string | undefined {
  if (!isAllowedId(e.id)) return undefined;
  const key = e.id.slice(e.set.length + 1, e.set.length + 9);
  return [0, 2, 4, 6].map((i) => parseInt(key.slice(i, i + 2), 16)).join('.');
}

/**
 * The interval set an agent before the port blocks kept its allowlist in (`P . proto . from-to`). Read only when
 * a newer agent rebuilds such a table, so the allowlist carries over into the block sets in the same batch and
 * no allowed port is closed between the rebuild and the restore's reconcile.
 */
export const LEGACY_ALLOWED_SET = 'allowed';

/** A legacy `allowed` interval element as the block elements that allow the same ports. */
export function fromLegacyAllowed(e: Pick<SetElement, 'key' | 'keyEnd'>): PolicyElement[] {
  const key = Buffer.from(e.key.buffer, e.key.byteOffset, e.key.byteLength);
  if (key.length !== 12 || !e.keyEnd || e.keyEnd.byteLength !== 12) return [];
  const end = Buffer.from(e.keyEnd.buffer, e.keyEnd.byteOffset, e.keyEnd.byteLength);
  const P = key.subarray(0, 4).toString('hex');
  const proto = key[4]!;
  return portBlocks([[key.readUInt16BE(8), end.readUInt16BE(8)]]).map(([bits, port]) => element(allowedSet(bits), allowKeyHex(P, proto, bits, port)));
}

/** What an element depends on existing first: a named counter, a synproxy object or a chain made by value. */
export function elementNeeds(e: PolicyElement): { counter?: string; synproxy?: string; chain?: string } {
  const el = e.el;
  if (el.objref !== undefined) return e.set === POLICY_SETS.synproxy ? { synproxy: el.objref } : { counter: el.objref };
  if (el.verdict?.chain !== undefined) return { chain: el.verdict.chain };
  return {};
}
