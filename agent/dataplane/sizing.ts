// How large the edge's connection table and its tunnels' meters are (DESIGN 3.11; docs/CONTRACTS.md "Dataplane",
// "Capacity"): sized from the host's memory, the tunnels' max_flows and the packet rate the edge is rated for, so
// that one tunnel's flood neither fills another's meter nor the connection table. Pure, apart from
// readConntrackLimits/applyConntrackLimits, which read and write the kernel's two settings.
import { readFileSync, writeFileSync } from 'node:fs';
import { DEFAULT_MAX_FLOWS } from '../../common/tunnel-policy.ts';
import { METER_TIMEOUT_MS } from '../netlink/ruleset-chains.ts';
import { activity } from '../housekeeping/activity.ts';
import { inNetns, writeSysctls } from './netns.ts';

/** The conntrack hash table's size: a module parameter, writable by the host's root (it resizes the table). */
const HASHSIZE_FILE = '/sys/module/nf_conntrack/parameters/hashsize';

/**
 * Kernel memory per tracked connection, rounded up: the conntrack entry (256 B slab objects here), its extensions
 * (NAT, the SYN proxy's sequence adjustment), its `ct count` tuple in its tunnel's flows list, a share of its flows
 * set element and its hash bucket. 356 B measured here per DNAT-ed, counted UDP flow (100,000 of them).
 */
export const CONNTRACK_ENTRY_BYTES = 512;
/** Kernel memory per meter element (a source's limit and its timeout): 158 B measured (200,000 sources), rounded up. */
export const METER_ENTRY_BYTES = 192;
/** The share of the host's memory the connection table may take at most. */
const CONNTRACK_MEMORY_SHARE = 1 / 4;
/** The share of the host's memory every meter together may take at most (only under a flood of new sources). */
const METER_MEMORY_SHARE = 1 / 8;
/** Connections kept for the edge's own traffic (the agent's SSH, probes, whatever else runs on the router). */
export const EDGE_OWN_FLOWS = 65_536;
/** AGENT_EDGE_PPS's default: what one edge router forwards at most, packets a second (10 Gbit/s at ~600-byte packets). */
export const DEFAULT_EDGE_PPS = 2_000_000;
/**
 * How long a meter element lives in the set after its last packet: its timeout, then up to one pass of the set's
 * garbage collection (every second), during which an expired element still takes a place.
 */
const METER_ELEMENT_LIFE_S = METER_TIMEOUT_MS / 1000 + 1;
/** The kernel sizes a new set's first hash table from its size's low 16 bits: a multiple of this starts small. */
const SET_SIZE_STEP = 65_536;

const roundUpTo = (n: number, step: number): number => Math.max(step, Math.ceil(n / step) * step);

export interface Sizing {
  /** nf_conntrack_max the agent wants: the tunnels' max_flows and its own, within its memory share, never below the kernel's at start. */
  conntrackMax: number;
  /** nf_conntrack_buckets (the hash table, one bucket per entry), never below the kernel's at start. */
  conntrackBuckets: number;
  /** The sources one tunnel's meter holds: what the edge's rate brings within an element's life, within memory. */
  meterSources: number;
  /** Elements one flows set may hold (each a non-empty bucket of connections): as many as the table's memory share. */
  flowEntries: number;
}

export interface SizingInput {
  /** The host's memory, bytes (os.totalmem()). */
  memoryBytes: number;
  /** AGENT_EDGE_PPS. */
  edgePps: number;
  /** Each tunnel's max_flows (absent: the default), the desired state's. */
  maxFlows: Iterable<number | undefined>;
  /** nf_conntrack_max and nf_conntrack_buckets as the kernel had them when the agent started: never lowered. */
  kernel: { max: number; buckets: number };
}

/**
 * The sizes, for these tunnels on this host. A tunnel's meter must hold every source one tunnel can meet at the edge's
 * rate (a flood of new sources at the whole edge's rate aimed at it), each for an element's life: edgePps x 2 s, but
 * never more than the meters' memory share (all meters together hold no more than that either, as every element is
 * a packet of the last two seconds). The connection table holds every tunnel's max_flows when memory allows; when not
 * (10,000 tunnels of 65,536), it holds what the memory share does, and each tunnel still takes at most its max_flows.
 */
export function sizing(i: SizingInput): Sizing {
  const memoryEntries = Math.floor((i.memoryBytes * CONNTRACK_MEMORY_SHARE) / CONNTRACK_ENTRY_BYTES);
  let wanted = EDGE_OWN_FLOWS;
  for (const m of i.maxFlows) wanted += m ?? DEFAULT_MAX_FLOWS;
  const conntrackMax = Math.max(i.kernel.max, Math.min(wanted, memoryEntries));
  const meterMemory = Math.floor((i.memoryBytes * METER_MEMORY_SHARE) / METER_ENTRY_BYTES);
  return {
    conntrackMax,
    conntrackBuckets: Math.max(i.kernel.buckets, conntrackMax),
    meterSources: roundUpTo(Math.min(i.edgePps * METER_ELEMENT_LIFE_S, meterMemory), SET_SIZE_STEP),
    flowEntries: roundUpTo(memoryEntries, SET_SIZE_STEP),
  };
}

/** nf_conntrack_max and nf_conntrack_buckets as the kernel has them (the module loaded: after the table's first ct rule). */
export function readConntrackLimits(netns: string | undefined): { max: number; buckets: number } {
  return inNetns(netns, () => ({
    max: Number(readFileSync('/proc/sys/net/netfilter/nf_conntrack_max', 'utf8').trim()),
    buckets: Number(readFileSync('/proc/sys/net/netfilter/nf_conntrack_buckets', 'utf8').trim()),
  }));
}

/**
 * Writes the wanted sizes where they differ from the kernel's. Both settings belong to the host (the kernel lets only
 * its first network namespace change them): an agent in another namespace (the tests') reports them and writes
 * nothing. The hash table is only ever grown, and only when the wanted one is at least twice as large (a resize
 * rehashes every entry under a lock).
 */
export function applyConntrackLimits(netns: string | undefined, s: Sizing): { applied: boolean; reason?: string } {
  if (netns !== undefined) return { applied: false, reason: 'not the host network namespace: nf_conntrack_max and its hash table are the host kernel\'s' };
  const now = readConntrackLimits(undefined);
  if (now.max !== s.conntrackMax) writeSysctls(undefined, [[['net', 'netfilter', 'nf_conntrack_max'], String(s.conntrackMax)]]);
  if (s.conntrackBuckets >= 2 * now.buckets) activity.syscall(`write ${HASHSIZE_FILE}`, () => writeFileSync(HASHSIZE_FILE, `${s.conntrackBuckets}\n`));
  return { applied: true };
}
