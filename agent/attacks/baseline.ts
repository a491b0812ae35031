// A tunnel's baseline of inbound packets per second (docs/CONTRACTS.md "Attacks"; DESIGN 3.11): the p95 of its
// last 600 calm one-second samples, ten minutes at the agent's one observation a second. Pure.
//
// Memory is what bounds the choice: an edge holds 10,000 tunnels, and the agent rests near 100 MB with them
// (docs/ARCHITECTURE.md). A ring of 600 float64 samples is 4.8 KB a tunnel (48 MB at 10,000); a ring of 600
// uint32 2.4 KB (24 MB). This ring keeps each sample as ONE byte: a code on a logarithmic scale (code k >= 1
// holds rates in [G^(k-1), G^k), G = 2^(32/254) ~ 1.091, so code 255 reaches 4.3 billion pps; code 0 is a
// rate below 1 pps), so 600 B a tunnel, 6 MB at 10,000 (with the typed array's own object and the rest of the
// detector's state, about 1.5 KB a tunnel: bench/attack-monitor.ts). The p95 comes back as the geometric middle of its
// code's range, within 4.5% of the true value: plenty for a threshold ten times as high. A histogram kept
// beside the ring (counts per code, to read the p95 without a pass over the ring) would cost another 512 B a
// tunnel (uint16 x 256) to save work the agent rarely does: the p95 is only needed when a tunnel's rate is
// above the automatic threshold's floor (5,000 pps, below which nothing can be an attack), and then a pass over
// 600 bytes and at most 256 counts costs about a microsecond.
//
// Only calm seconds go in (the detector's rule): a second above the threshold, or any second of an attack,
// would otherwise teach the baseline the flood, and within 30 seconds (5% of 600) the p95 would be the flood's
// own rate, ending the attack while it goes on.

/** Samples kept: ten minutes of one a second. */
export const BASELINE_SAMPLES = 600;
/** The percentile the baseline answers. */
const PERCENTILE = 0.95;
const CODES = 256;
const GROWTH = 2 ** (32 / 254);
const LN_GROWTH = Math.log(GROWTH);

/** A rate's one-byte code: 0 below 1 pps, else 1 + floor(log_G(pps)), at most 255. */
export function encodeRate(pps: number): number {
  if (!(pps >= 1)) return 0;
  const k = 1 + Math.floor(Math.log(pps) / LN_GROWTH);
  return k > CODES - 1 ? CODES - 1 : k;
}

/** The rate a code stands for: the geometric middle of its range (0 for code 0). */
export function decodeRate(code: number): number {
  return code === 0 ? 0 : GROWTH ** (code - 0.5);
}

/** One scratch histogram for every baseline's p95: the agent reads one at a time. */
const scratch = new Uint32Array(CODES);

export class RateBaseline {
  private readonly ring = new Uint8Array(BASELINE_SAMPLES);
  private size = 0;
  private next = 0;

  /** Adds one second's rate (the oldest of 600 goes). */
  add(pps: number): void {
    this.ring[this.next] = encodeRate(pps);
    this.next = this.next + 1 === BASELINE_SAMPLES ? 0 : this.next + 1;
    if (this.size < BASELINE_SAMPLES) this.size++;
  }

  /** How many samples it holds (at most BASELINE_SAMPLES). */
  get samples(): number {
    return this.size;
  }

  /**
   * The 95th percentile of the samples (nearest rank: the value at rank ceil(0.95 n), ascending), as
   * decodeRate gives it; 0 with no samples.
   */
  p95(): number {
    const n = this.size;
    if (n === 0) return 0;
    scratch.fill(0);
    const ring = this.ring;
    for (let i = 0; i < n; i++) scratch[ring[i]!]!++;
    // The value at rank ceil(0.95 n) has n - ceil(0.95 n) + 1 samples at or above it: walk down from the top.
    const fromTop = n - Math.ceil(PERCENTILE * n) + 1;
    let seen = 0;
    for (let k = CODES - 1; k >= 0; k--) {
      seen += scratch[k]!;
      if (seen >= fromTop) return decodeRate(k);
    }
    return 0;
  }
}
