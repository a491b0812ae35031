// The agent's nftables table as a whole: the rules a correct one has (EXPECTED_RULES), and ensureTable(), which
// builds it when missing and rebuilds it in one batch, keeping every element and counter value, when its rules
// were tampered with (compared value for value with a dormant reference copy). Also the reads of what such a
// rebuild keeps: the policy elements, the counter map, the synproxy objects and chains made by value; and the
// `bogons` set kept as configured (ensureBogons).
import { NetlinkError, NftBatch, addTunnelgateRuleset, ipv4MapElement, ipv4ObjElement } from '../../netlink/client.ts';
import type { DecodedRule } from '../../netlink/nftables/index.ts';
import { NFPROTO_IPV4, NFT_OBJECT_SYNPROXY, ipv4IntervalElements } from '../../netlink/nftables/index.ts';
import { BOGONS_SET, NFT_TABLE_F_DORMANT, POLICY_SETS, synproxyMssOf } from '../../netlink/ruleset.ts';
import { DYNAMIC_CHAIN_RULES, addDynamicChain, addSynproxyObject, dynamicChainOf } from '../../netlink/ruleset-chains.ts';
import { LEGACY_ALLOWED_SET, TUNNEL_SETS, elementId, fromLegacyAllowed, type PolicyElement } from '../policy.ts';
import { COUNTER_MAP, DNAT_MAP, type KernelContext } from './context.ts';
import { addPolicyElements } from './batch.ts';
import { allowsConnection } from '../policy.ts';
import type { StateStore } from '../state.ts';

/**
 * The rules of a correctly built table, per chain, as expression-name lists (what listRules decodes). The
 * rate-limit chains (one per limit value in use) are the tunnels' and are left out of this comparison.
 */
export const EXPECTED_RULES = [
  'early: payload objref immediate',
  'inbound: meta cmp immediate',
  'inbound: payload lookup immediate',
  'inbound: payload lookup payload objref immediate',
  'inbound: payload bitwise cmp payload lookup payload objref immediate',
  'inbound: payload bitwise cmp immediate',
  'inbound: payload lookup',
  'inbound: meta cmp payload bitwise cmp payload lookup notrack',
  'vector: payload meta dynset',
  'vector: meta cmp payload payload dynset',
  'vector: meta cmp payload payload dynset',
  'tunnel_to_p: meta objref immediate',
  'tunnel_to_p: immediate',
  'allowlist: payload meta lookup immediate',
  'allowlist: payload meta payload lookup immediate',
  'allowlist: payload meta payload bitwise lookup immediate',
  'allowlist: payload meta payload bitwise lookup immediate',
  'allowlist: payload meta payload bitwise lookup immediate',
  'allowlist: payload objref immediate',
  'prerouting: meta cmp payload bitwise cmp payload lookup payload objref immediate',
  'prerouting: payload lookup',
  'prerouting: meta lookup counter payload lookup nat',
  'nat_out: payload lookup',
  'nat_out: meta cmp payload lookup nat',
  'guard: meta cmp payload bitwise cmp meta cmp rt byteorder exthdr',
  'guard: ct bitwise cmp meta cmp immediate',
  'guard: meta cmp immediate',
  'guard: ct bitwise cmp immediate',
  'guard: ct bitwise cmp immediate',
  'guard_ct: payload objref',
  'guard_ct: payload objref immediate',
  'guard_ct: meta cmp immediate',
  'guard_nodnat: meta cmp immediate',
  'guard_nodnat: payload objref immediate',
  'from_tunnel: ct cmp ct bitwise cmp meta payload ct lookup immediate',
  'from_tunnel: meta objref immediate',
  'from_tunnel: immediate',
  'tunnel_reply: meta objref',
  'tunnel_reply: immediate',
  'local_in: meta cmp immediate',
  'local_in: payload objref immediate',
  'tunnel_in: ct bitwise cmp meta payload lookup immediate',
  'tunnel_in: meta objref immediate',
  'tunnel_in: immediate',
];

/** The table's own rules of a listing: those of the chains made by value (tunnels' meters, flow caps) left out. */
const ownRules = (rules: readonly DecodedRule[]): DecodedRule[] => rules.filter((r) => dynamicChainOf(r.chain) === undefined);

/**
 * Of these rules (a whole table's listing, or some chains'), the chains made by value: those with exactly their rules
 * (by expression names, DYNAMIC_CHAIN_RULES) and those with other rules (one deleted or added by hand).
 */
export function dynamicChains(rules: readonly DecodedRule[]): { chains: Set<string>; damagedChains: Set<string> } {
  const byChain = new Map<string, string[]>();
  for (const r of rules) {
    if (dynamicChainOf(r.chain) === undefined) continue;
    let list = byChain.get(r.chain);
    if (!list) byChain.set(r.chain, (list = []));
    list.push(r.exprs.join(' '));
  }
  const chains = new Set<string>();
  const damagedChains = new Set<string>();
  for (const [name, got] of byChain) {
    const want = DYNAMIC_CHAIN_RULES[dynamicChainOf(name)!.kind];
    (got.length === want.length && got.every((x, i) => x === want[i]) ? chains : damagedChains).add(name);
  }
  return { chains, damagedChains };
}


/** The policy sets' elements by id (a whole read: reconcile, and the rebuild of a tampered table). */
async function readElements(k: KernelContext): Promise<Map<string, PolicyElement>> {
  const out = new Map<string, PolicyElement>();
  for (const set of TUNNEL_SETS) {
    // A table of an older agent lacks the newer sets (tunnel_out, the `out` counters of health checks): keep what the others hold.
    await k.nft
      .eachSetElement(k.table, set, (e) => {
        const el = { key: Buffer.from(e.key), ...(e.keyEnd ? { keyEnd: Buffer.from(e.keyEnd) } : {}), ...(e.data ? { data: Buffer.from(e.data) } : {}), ...(e.objref !== undefined ? { objref: e.objref } : {}), ...(e.verdict ? { verdict: e.verdict } : {}) };
        const id = elementId(set, el);
        out.set(id, { set, el, id });
      })
      .catch((err: unknown) => {
        if (!(err instanceof NetlinkError && err.code === 'ENOENT')) throw err;
      });
  }
  // A table of an agent before the port blocks: its interval allowlist, as the blocks allowing the same ports.
  await k.nft
    .eachSetElement(k.table, LEGACY_ALLOWED_SET, (e) => {
      for (const b of fromLegacyAllowed(e)) out.set(b.id, b);
    })
    .catch((err: unknown) => {
      if (!(err instanceof NetlinkError && err.code === 'ENOENT')) throw err;
    });
  return out;
}

/**
 * The synproxy objects (one per MSS in use) and the chains made by value present (one per tunnel with a per-source
 * limit, one per max_flows value in use), from one dump of the table's rules: a chain without a rule (its rules
 * deleted by hand) is as good as missing, and is built again.
 */
export async function readShared(k: KernelContext): Promise<{ synproxies: Set<string>; chains: Set<string>; damagedChains: Set<string> }> {
  const [synproxies, rules] = await Promise.all([k.nft.listObjectNames(k.table, NFT_OBJECT_SYNPROXY), k.nft.listRules(k.table)]);
  return { synproxies, ...dynamicChains(rules) };
}

/**
 * Builds the table when it is missing; leaves it alone when it has the expected rules; rebuilds it in one
 * atomic batch, keeping every element and counter value, when its rules were tampered with.
 */
export async function ensureTable(k: KernelContext): Promise<'created' | 'present' | 'rebuilt'> {
  const tables = await k.nft.listTables();
  const exists = tables.some((t) => t.name === k.table && t.family === NFPROTO_IPV4);
  if (exists) {
    const listed = ownRules(await k.nft.listRules(k.table));
    const rules = listed.map((r) => `${r.chain}: ${r.exprs.join(' ')}`);
    if (rules.length === EXPECTED_RULES.length && rules.every((r, i) => r === EXPECTED_RULES[i]) && (await sameAsBuilt(k, listed))) return 'present';
  }
  const b = new NftBatch();
  let elements:
    | { dnat: Map<string, string>; ctrMap: Map<string, string>; counters: { name: string; bytes?: bigint; packets?: bigint }[]; policy: Map<string, PolicyElement>; shared: { synproxies: Set<string>; chains: Set<string> } }
    | undefined;
  if (exists) {
    // A table of an older agent lacks some sets: what cannot be read is rebuilt by the next reconcile (restore).
    elements = {
      dnat: await k.nft.listIpv4Map(k.table, DNAT_MAP).catch(() => new Map<string, string>()),
      ctrMap: await counterMap(k).catch(() => new Map<string, string>()),
      counters: await k.nft.listCounters(k.table),
      policy: await readElements(k).catch(() => new Map<string, PolicyElement>()),
      // A damaged chain is built whole like the others (the table is made anew); an older agent's chains (a rate-limit
      // chain per limit value) are no chains made by value: they and the elements jumping to them go, and the
      // restore's reconcile adds the tunnels' own.
      shared: await readShared(k)
        .then((x) => ({ synproxies: x.synproxies, chains: new Set([...x.chains, ...x.damagedChains]) }))
        .catch(() => ({ synproxies: new Set<string>(), chains: new Set<string>() })),
    };
    b.deleteTable(k.table);
  }
  addTunnelgateRuleset(b, { table: k.table, ifnamePrefix: k.linkPrefix, bogons: k.bogons });
  if (elements) {
    for (const c of elements.counters) b.addCounter({ table: k.table, name: c.name, bytes: c.bytes, packets: c.packets });
    if (elements.dnat.size) b.addElements({ table: k.table, set: DNAT_MAP, elements: [...elements.dnat].map(([a, v]) => ipv4MapElement(a, v)) });
    const names = new Set(elements.counters.map((c) => c.name));
    const refs = [...elements.ctrMap].filter(([, n]) => names.has(n));
    if (refs.length) b.addElements({ table: k.table, set: COUNTER_MAP, elements: refs.map(([a, n]) => ipv4ObjElement(a, n)) });
    const { synproxies, chains } = elements.shared;
    for (const n of synproxies) {
      const mss = synproxyMssOf(n);
      if (mss !== undefined) addSynproxyObject(b, k.table, mss);
    }
    for (const c of chains) addDynamicChain(b, k.table, c, k.sizes);
    const keep = [...elements.policy.values()].filter((e) => {
      const el = e.el;
      const o = el.objref;
      if (o !== undefined) return e.set === POLICY_SETS.synproxy ? synproxies.has(o) : names.has(o);
      return el.verdict?.chain === undefined || chains.has(el.verdict.chain);
    });
    addPolicyElements(b, k.table, keep, 'add');
  }
  await k.nft.commit(b);
  return exists ? 'rebuilt' : 'created';
}

/**
 * Whether the table's rules are, value for value, the ones the agent builds: a rule with the same expressions
 * but another value (a verdict turned from drop to accept, a port, a prefix) is tampering too. Compared with the
 * rules the kernel lists for a fresh copy built beside it, dormant (its chains hook nothing) and deleted right
 * after, so both sides are in the kernel's own encoding (attribute order, NUL-terminated names, set names for
 * set ids); an anonymous counter's values are the only ones that differ by right.
 */
async function sameAsBuilt(k: KernelContext, listed: readonly DecodedRule[]): Promise<boolean> {
  const ref = `${k.table}_reference`;
  const build = new NftBatch();
  // A copy left behind (a kill in between) goes first: added dormant, so it is neither woken up for the length of
  // this batch nor missing for the delete.
  build.addTable(ref, NFT_TABLE_F_DORMANT).deleteTable(ref);
  addTunnelgateRuleset(build, { table: ref, ifnamePrefix: k.linkPrefix, dormant: true });
  try {
    await k.nft.commit(build);
  } catch {
    // No reference to compare with: the rebuild, which keeps every element and counter value, is the safe side.
    return false;
  }
  try {
    const want = ownRules(await k.nft.listRules(ref));
    const body = (r: DecodedRule): string => `${r.chain}: ${r.exprs.map((e, i) => (e === 'counter' ? e : `${e}(${r.exprData[i]})`)).join(' ')}`;
    return want.length === listed.length && want.every((r, i) => body(r) === body(listed[i]!));
  } catch {
    return false;
  } finally {
    // A copy that stays is dormant (it hooks nothing) and goes at the next start.
    await k.nft.commit(new NftBatch().deleteTable(ref)).catch(() => undefined);
  }
}

export function counterMap(k: KernelContext): Promise<Map<string, string>> {
  return k.nft.listIpv4ObjMap(k.table, COUNTER_MAP);
}

/**
 * Makes the `bogons` set hold exactly the agent's prefixes (a configuration changed between runs, an element
 * deleted by hand): read back (a few elements), and when they differ, flushed and filled in one batch. At start
 * and with every full reconcile; true when it changed anything.
 */
export async function ensureBogons(k: KernelContext): Promise<boolean> {
  const want = ipv4IntervalElements(k.bogons).map((e) => `${Buffer.from(e.key).toString('hex')}:${e.flags ?? 0}`);
  const have: string[] = [];
  await k.nft.eachSetElement(k.table, BOGONS_SET, (e) => void have.push(`${e.key.toString('hex')}:${e.flags ?? 0}`));
  const sorted = (x: string[]): string => [...x].sort().join(' ');
  if (sorted(have) === sorted(want)) return false;
  const b = new NftBatch().flushSet(k.table, BOGONS_SET);
  if (k.bogons.length) b.addElements({ table: k.table, set: BOGONS_SET, elements: ipv4IntervalElements(k.bogons) });
  await k.nft.commit(b);
  return true;
}

/** After a rebuild of tampered rules: the connections the records' policies would not have let in (a count, or why not). */
export async function flushDisallowed(k: KernelContext, state: StateStore): Promise<number | string> {
  const tunnels = [...state.tunnels.values()].map(({ spec }) => ({ ip: spec.protected_ip, allows: (proto: number, port: number | undefined) => allowsConnection(spec, proto, port) }));
  return k.conntrack().flushDisallowed(tunnels).catch((e: unknown) => `failed: ${e instanceof Error ? e.message : String(e)}`);
}
