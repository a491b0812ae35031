// The agent's own repair of its table when another program touched it (docs/CONTRACTS.md "Dataplane", repair at
// once): the commit watch says so, and the desired state is reconciled shortly after, debounced and spaced, instead
// of at the gateway's next periodic reconcile. EdgeDataplane owns one; the repair itself is its restore().
import type { ReconcileResult } from './types.ts';

/**
 * A table touched by another program is repaired this long after the watch heard it (more commits of the same
 * program, an `nft -f` of several, come within it and cost one repair), and never sooner than HEAL_SPACING_MS after
 * the previous repair began: a program that touches the table in a loop costs a reconcile a second at most.
 */
const HEAL_DEBOUNCE_MS = 200;
const HEAL_SPACING_MS = 1_000;

export interface RepairOnTouchOptions {
  /** DataplaneOptions.healOnTouch: off, a touch waits for the gateway's reconcile. */
  enabled: boolean;
  /** Reconciles the desired state (EdgeDataplane.restore). */
  repair: () => Promise<ReconcileResult>;
  log: (event: string, fields?: Record<string, unknown>) => void;
}

export class RepairOnTouch {
  private timer?: ReturnType<typeof setTimeout>;
  /** When the last repair began. */
  private last = 0;
  private closed = false;

  constructor(private readonly o: RepairOnTouchOptions) {}

  /** The table was touched (or a touch cannot be ruled out: `why`); one repair is scheduled however many touches. */
  schedule(why: string): void {
    if (!this.o.enabled || this.closed || this.timer) return;
    const delay = Math.max(HEAL_DEBOUNCE_MS, this.last + HEAL_SPACING_MS - Date.now());
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.closed) return;
      this.last = Date.now();
      this.o.log('dataplane.heal', { why });
      this.o.repair().then(
        (r) => this.o.log('dataplane.healed', { added: r.added, changed: r.changed, removed: r.removed, unchanged: r.unchanged, failed: r.failed.length }),
        (e: unknown) => this.o.log('dataplane.heal_failed', { error: e instanceof Error ? e.message : String(e) }),
      );
    }, delay);
    this.timer.unref?.();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
  }
}
