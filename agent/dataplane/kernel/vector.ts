// An attack's vector as the edge table meters it (agent/netlink/ruleset.ts VECTOR_SETS; docs/CONTRACTS.md
// "Attacks"): which protected IPs are watched, and the per-protocol and per-port counters of the watched ones.
// The attack monitor (agent/attacks/monitor.ts) decides what to watch; this module only reads and writes the sets.
import { NftBatch } from '../../netlink/client.ts';
import { type SetElement } from '../../netlink/nftables/index.ts';
import { VECTOR_SETS } from '../../netlink/ruleset.ts';
import { kernelError } from '../types.ts';
import type { KernelContext } from './context.ts';

/** One watched protected IP's inbound packets since it was watched: by IP protocol number, and by destination port (TCP and UDP). */
export interface VectorCounts {
  protocols: Map<number, number>;
  ports: Map<number, number>;
}

/** Elements per deletion message: one message stays far below the socket's limit (a port element is ~60 bytes). */
const DELETE_CHUNK = 1_000;

const ipOf = (key: Buffer): string => `${key[0]}.${key[1]}.${key[2]}.${key[3]}`;
const ipKey = (ip: string): Buffer => Buffer.from(ip.split('.').map(Number));

/** What the table meters: every watched IP's counts, by protected IP (an IP whose packets made no element yet is absent). */
export interface VectorRead {
  counts: Map<string, VectorCounts>;
  /** The IPs in the watch set (a table rebuilt, by `nft flush ruleset` and the repair, has none). */
  watched: Set<string>;
}

export async function readVector(k: KernelContext): Promise<VectorRead> {
  const out = new Map<string, VectorCounts>();
  const watched = new Set<string>();
  const of = (ip: string): VectorCounts => {
    let v = out.get(ip);
    if (!v) out.set(ip, (v = { protocols: new Map(), ports: new Map() }));
    return v;
  };
  try {
    await k.nft.eachSetElement(k.table, VECTOR_SETS.watch, (e) => void watched.add(ipOf(e.key)));
    // Keys: P (4 bytes) . l4proto (1 byte, padded to 4); P . port (2 bytes, network order, padded to 4).
    await k.nft.eachSetElement(k.table, VECTOR_SETS.protos, (e) => {
      if (e.counter && e.key.length >= 5) of(ipOf(e.key)).protocols.set(e.key[4]!, Number(e.counter.packets));
    });
    await k.nft.eachSetElement(k.table, VECTOR_SETS.ports, (e) => {
      if (e.counter && e.key.length >= 6) of(ipOf(e.key)).ports.set(e.key.readUInt16BE(4), Number(e.counter.packets));
    });
  } catch (e) {
    throw kernelError('vector', e);
  }
  return { counts: out, watched };
}

/**
 * Makes `watch` the watched IPs (one batch: the set emptied and filled, so no packet sees it empty). With `clean`,
 * then deletes the counters of every IP not watched: after the first commit, so no packet adds one back between
 * the read and the deletion, and an IP watched again counts from zero. Returns the commits made (1 or 2): the
 * caller runs it as one of the agent's own operations (edge-dataplane.ts), not to be heard as another's touch.
 */
export async function watchVector(k: KernelContext, watch: ReadonlySet<string>, clean: boolean): Promise<number> {
  try {
    const b = new NftBatch();
    b.flushSet(k.table, VECTOR_SETS.watch);
    if (watch.size > 0) b.addElements({ table: k.table, set: VECTOR_SETS.watch, elements: [...watch].map((ip) => ({ key: ipKey(ip) })) });
    await k.nft.commit(b);
    if (!clean) return 1;
    const stale = new Map<string, SetElement[]>([
      [VECTOR_SETS.protos, []],
      [VECTOR_SETS.ports, []],
    ]);
    for (const [set, list] of stale) {
      await k.nft.eachSetElement(k.table, set, (e) => {
        if (!watch.has(ipOf(e.key))) list.push({ key: Buffer.from(e.key) });
      });
    }
    if ([...stale.values()].every((l) => l.length === 0)) return 1;
    const del = new NftBatch();
    for (const [set, list] of stale) for (let i = 0; i < list.length; i += DELETE_CHUNK) del.deleteElements({ table: k.table, set, elements: list.slice(i, i + DELETE_CHUNK) });
    await k.nft.commit(del);
    return 2;
  } catch (e) {
    throw kernelError('vector watch', e);
  }
}
