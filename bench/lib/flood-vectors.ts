// bench:flood's attack vectors and the arithmetic of its figures (docs/BENCHMARKS.md "Flood"). Pure: the lab, the
// generator and the kernel live in bench/flood.ts and bench/lib/flood-lab.ts.

/** The generator's packet kinds (bench/lib/raw-flood.c). */
export type PacketKind = 'udp' | 'syn' | 'frag';

export interface Vector {
  /** Short name, used in TG_BENCH_VECTORS and the rows. */
  name: VectorName;
  /** What the row says it is. */
  title: string;
  kind: PacketKind;
  /** Which flood target of the lab it hits (bench/lib/flood-lab.ts FLOOD_TARGETS). */
  target: 'proxied' | 'limited';
  dport: number;
  /** The generator's first source and how many it cycles through (1: the attacker's own address). */
  src: string;
  sources: number;
}

export const VECTOR_NAMES = ['closed', 'syn', 'overlimit', 'frag'] as const;
export type VectorName = (typeof VECTOR_NAMES)[number];

/** The attacker's own address on its link to the edge (bench/lib/flood-lab.ts). */
export const ATTACKER = '198.51.101.10';

/**
 * The four vectors of the attack work. The closed port and the fragments come from one source (nothing on their
 * path keeps per-source state); the spoofed SYNs from 65,536 sources (11.0.0.0/16, no bogon: a SYN proxy answers
 * each with a cookie); the over-limit flood from 16 sources, each far over its tunnel's per-source limit.
 */
export const VECTORS: readonly Vector[] = [
  { name: 'closed', title: 'closed port (UDP to a port the tunnel does not allow)', kind: 'udp', target: 'proxied', dport: 9999, src: ATTACKER, sources: 1 },
  { name: 'syn', title: 'spoofed SYN on a SYN-proxied port', kind: 'syn', target: 'proxied', dport: 8080, src: '11.0.0.1', sources: 65_536 },
  { name: 'overlimit', title: 'over-limit sources (16 sources over the per-source limit)', kind: 'udp', target: 'limited', dport: 7000, src: '12.0.0.1', sources: 16 },
  { name: 'frag', title: 'fragments (first and later UDP fragments)', kind: 'frag', target: 'proxied', dport: 8080, src: ATTACKER, sources: 1 },
];

/** TG_BENCH_VECTORS ("closed,syn", or unset for all) as vectors, in the table's order; an unknown name throws. */
export function pickVectors(spec: string | undefined): Vector[] {
  if (spec === undefined || spec.trim() === '') return [...VECTORS];
  const names = spec.split(',').map((s) => s.trim()).filter(Boolean);
  const unknown = names.filter((n) => !(VECTOR_NAMES as readonly string[]).includes(n));
  if (unknown.length) throw new Error(`TG_BENCH_VECTORS: unknown vector ${unknown.join(', ')} (known: ${VECTOR_NAMES.join(', ')})`);
  return VECTORS.filter((v) => names.includes(v.name));
}

/** The median (the upper one of an even count); NaN for none. */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
}

/** Packets dropped per CPU-second; NaN when no CPU time was seen (a window shorter than one tick). */
export const perCpuSecond = (dropped: number, cpuSeconds: number): number => (cpuSeconds > 0 ? dropped / cpuSeconds : NaN);

/**
 * One round's ratio of a vector to the ceiling, each as drops per CPU-second. The ratio of medians is reported, and
 * the median of per-round ratios beside it: rounds are interleaved, so each round's pair met the same noise.
 */
export const ratio = (rate: number, ceiling: number): number => (ceiling > 0 ? rate / ceiling : NaN);

/** Whether a measured ratio meets an "at least" target (NaN never does). */
export const meets = (r: number, atLeast: number): boolean => Number.isFinite(r) && r >= atLeast;
