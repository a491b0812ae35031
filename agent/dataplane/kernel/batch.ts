// Adding the tunnels' nftables state to a batch: policy elements grouped by set, the two maps' elements, and the
// counters and elements of tunnels added whole, each built a slice at a time and encoded as it comes, so a first
// apply of 10,000 tunnels never holds all its element objects at once (RSS). The table's rebuild (table.ts) and
// the apply (apply.ts) both fill batches through these.
import { ipv4MapElement, ipv4ObjElement, type NftBatch } from '../../netlink/client.ts';
import { tunnelCounterNames, tunnelElements, type PolicyElement } from '../policy.ts';
import type { TunnelSpec } from '../types.ts';
import { COUNTER_MAP, DNAT_MAP } from './context.ts';

/**
 * How many elements' objects (key Buffers) exist at once while a batch is built: the batch encodes each slice
 * as it comes (nftables/batch.ts), so 100,000 elements of 10,000 tunnels are never all objects together (RSS).
 */
const ELEMENT_SLICE = 4096;
/**
 * Tunnels whose elements are built at once when added whole (~10 elements each, ~80 with a port list): few, so
 * few of them are still alive at a young collection and promoted (the old generation is RSS).
 */
const WHOLE_SLICE = 32;

/** Adds policy elements to the batch, grouped by set, a slice at a time. */
export function addPolicyElements(b: NftBatch, table: string, els: readonly PolicyElement[], op: 'add' | 'delete'): void {
  const bySet = new Map<string, PolicyElement[]>();
  for (const e of els) {
    let list = bySet.get(e.set);
    if (!list) bySet.set(e.set, (list = []));
    list.push(e);
  }
  for (const [set, list] of bySet) {
    for (let i = 0; i < list.length; i += ELEMENT_SLICE) {
      const elements = list.slice(i, i + ELEMENT_SLICE).map((e) => e.el);
      if (op === 'add') b.addElements({ table, set, elements });
      else b.deleteElements({ table, set, elements });
    }
  }
}

/** Protected IP → origin inner address, and → counter name, as the `protected` and `tunnel_counters` maps hold them. */
export function addMapElements(b: NftBatch, table: string, dnat: readonly (readonly [string, string])[], counters: readonly (readonly [string, string])[]): void {
  if (dnat.length) b.addElements({ table, set: DNAT_MAP, elements: dnat.map(([a, v]) => ipv4MapElement(a, v)) });
  if (counters.length) b.addElements({ table, set: COUNTER_MAP, elements: counters.map(([a, c]) => ipv4ObjElement(a, c)) });
}

/** The counters of tunnels added whole: before anything that refers to them. */
export function addWholeCounters(b: NftBatch, table: string, tunnels: readonly TunnelSpec[]): void {
  for (const x of tunnels) for (const c of tunnelCounterNames(x)) b.addCounter({ table, name: c });
}

/** The policy elements of tunnels added whole: built a slice of tunnels at a time, encoded, and dropped. */
export function addWholeElements(b: NftBatch, table: string, tunnels: readonly TunnelSpec[]): void {
  for (let i = 0; i < tunnels.length; i += WHOLE_SLICE) addPolicyElements(b, table, tunnels.slice(i, i + WHOLE_SLICE).flatMap(tunnelElements), 'add');
}
