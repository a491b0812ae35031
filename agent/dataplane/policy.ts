// A tunnel's isolation and policy as nftables elements (docs/CONTRACTS.md "Dataplane"): which element of which
// set or map each tunnel owns, its named objects (the traffic counter and one drop counter per reason), and the
// objects tunnels share by value (a synproxy per MSS, a rate-limit chain per packet rate). Pure: the diff
// compares these with what the kernel has; the kernel code encodes them.
import { DEFAULT_POLICY, type TunnelPolicy } from '../../common/tunnel-policy.ts';
import { ipv4ToBytes } from '../netlink/attrs.ts';
import { IFNAME_LEN, IPPROTO_TCP, IPPROTO_UDP, NFT_JUMP, type ElementView, type SetElement } from '../netlink/nftables/index.ts';
import { DROP_REASONS, POLICY_SETS, dropMap, rateLimitName, synproxyName, type DropReason } from '../netlink/ruleset.ts';
import type { TunnelSpec } from './types.ts';

/** One element of one of the agent's sets; `id` names it (set, key, value) for comparing with a dump. */
export interface PolicyElement {
  set: string;
  el: SetElement;
  id: string;
}

/** The sets whose elements belong to tunnels (read back whole only by a reconcile). */
export const TUNNEL_SETS: readonly string[] = [...Object.values(POLICY_SETS), ...DROP_REASONS.map(dropMap)];

const PORT_ALL: [number, number] = [0, 65535];

export const policyOf = (t: Pick<TunnelSpec, 'policy'>): TunnelPolicy => t.policy ?? DEFAULT_POLICY;

/** The named counter of one drop reason of a tunnel: `<tunnel_name>.<reason>`. */
export const dropCounterName = (t: Pick<TunnelSpec, 'tunnel_name'>, reason: DropReason): string => `${t.tunnel_name}.${reason}`;

/** Every named counter a tunnel owns: its traffic counter (named as the tunnel) and one per drop reason. */
export function tunnelCounterNames(t: Pick<TunnelSpec, 'tunnel_name'>): string[] {
  return [t.tunnel_name, ...DROP_REASONS.map((r) => dropCounterName(t, r))];
}

/** The SYN proxy's MSS for a tunnel: what fits its MTU (IPv4 and TCP headers, 40 bytes, without options). */
export const synproxyMss = (t: Pick<TunnelSpec, 'mtu'>): number => t.mtu - 40;

/** The shared objects a tunnel needs: a synproxy object (by MSS) and a rate-limit chain (by packets per second). */
export function sharedNeeds(t: TunnelSpec): { mss?: number; pps?: number } {
  const p = policyOf(t);
  return { ...(p.syn_proxy ? { mss: synproxyMss(t) } : {}), ...(p.source_pps_limit !== null ? { pps: p.source_pps_limit } : {}) };
}

function ifnameKey(name: string): Buffer {
  const b = Buffer.alloc(IFNAME_LEN);
  b.write(name, 'utf8');
  return b;
}

/** P . proto . port as a concatenation key: each field padded to 4 bytes, the port big-endian. */
function allowKey(p: Uint8Array, proto: number, port: number): Buffer {
  const b = Buffer.alloc(12);
  Buffer.from(p).copy(b, 0);
  b[4] = proto;
  b.writeUInt16BE(port, 8);
  return b;
}

const hex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');

/** The identity of an element: its set, key (and interval end) and value, as a dump decodes them too. */
export function elementId(set: string, e: ElementView | SetElement): string {
  let value = '';
  if (e.data) value = hex(e.data);
  else if (e.objref !== undefined) value = `obj:${e.objref}`;
  else if (e.verdict) value = `v:${e.verdict.code}:${e.verdict.chain ?? ''}`;
  return `${set} ${hex(e.key)}${e.keyEnd ? `-${hex(e.keyEnd)}` : ''} ${value}`;
}

const element = (set: string, el: SetElement): PolicyElement => ({ set, el, id: elementId(set, el) });

/**
 * An element to delete, from its id: its set and key are all a delete sends (a reconcile keeps only the ids of
 * what it read back, not an object per element). The value part of the id is kept for elementNeeds.
 */
export function elementFromId(id: string): PolicyElement {
  const [set = '', key = '', value = ''] = id.split(' ');
  const el: SetElement = { key: Buffer.from(key.split('-')[0]!, 'hex') };
  if (value.startsWith('obj:')) el.objref = value.slice(4);
  else if (value.startsWith('v:')) {
    const [, code, chain] = value.split(':');
    el.verdict = { code: Number(code), ...(chain ? { chain } : {}) };
  }
  return { set, el, id };
}

/**
 * Every element the tunnel owns, in every set of the isolation and the policy. A default policy still owns
 * the isolation (replies, origins, spoofed), the allowlist of every port, and its drop counters' map entries.
 */
export function tunnelElements(t: TunnelSpec): PolicyElement[] {
  const p = policyOf(t);
  const P = ipv4ToBytes(t.protected_ip);
  const O = ipv4ToBytes(t.origin_inner.split('/')[0]!);
  const N = ifnameKey(t.tunnel_name);
  const out: PolicyElement[] = [
    element(POLICY_SETS.replies, { key: Buffer.concat([N, O, P]) }),
    element(POLICY_SETS.origins, { key: Buffer.concat([N, O]) }),
    element(dropMap('spoofed'), { key: N, objref: dropCounterName(t, 'spoofed') }),
  ];
  for (const r of DROP_REASONS) if (r !== 'spoofed') out.push(element(dropMap(r), { key: P, objref: dropCounterName(t, r) }));
  const protos = p.protocol === 'both' ? [IPPROTO_TCP, IPPROTO_UDP] : [p.protocol === 'tcp' ? IPPROTO_TCP : IPPROTO_UDP];
  const ranges = p.ports === '*' ? [PORT_ALL] : p.ports;
  for (const proto of protos) for (const [from, to] of ranges) out.push(element(POLICY_SETS.allowed, { key: allowKey(P, proto, from), keyEnd: allowKey(P, proto, to) }));
  if (p.drop_fragments) out.push(element(POLICY_SETS.fragments, { key: P }));
  const need = sharedNeeds(t);
  if (need.mss !== undefined) {
    out.push(element(POLICY_SETS.synproxied, { key: P }));
    out.push(element(POLICY_SETS.synproxy, { key: P, objref: synproxyName(need.mss) }));
  }
  if (need.pps !== undefined) out.push(element(POLICY_SETS.rateLimits, { key: P, verdict: { code: NFT_JUMP, chain: rateLimitName(need.pps) } }));
  return out;
}

/** What an element depends on existing first: a named counter, a synproxy object or a rate-limit chain. */
export function elementNeeds(e: PolicyElement): { counter?: string; synproxy?: string; chain?: string } {
  if (e.el.objref !== undefined) return e.set === POLICY_SETS.synproxy ? { synproxy: e.el.objref } : { counter: e.el.objref };
  if (e.el.verdict?.chain !== undefined) return { chain: e.el.verdict.chain };
  return {};
}
