// A reconcile that failed as a whole, taken tunnel by tunnel: one broken tunnel must not block its node (the others
// are paid for and must run), so the tunnels the kernel refuses are found and reported (a reconcile's `failed`:
// docs/CONTRACTS.md "Results"), and everything else is applied.
// EdgeDataplane (edge-dataplane.ts) runs it inside the failed reconcile's operation, with its own steps.
import { activity } from '../housekeeping/activity.ts';
import type { ChangeCounts, ReconcileResult, TunnelFailure, TunnelSpec } from './types.ts';

export interface IsolationSteps {
  /** A scoped apply of these tunnels (a change of them alone). */
  applyScoped(group: TunnelSpec[]): Promise<ChangeCounts>;
  /** The last pass: `rest` as the whole set, the `failed` tunnels kept exactly as they are. */
  reconcileRest(rest: TunnelSpec[], failed: ReadonlySet<string>): Promise<ChangeCounts>;
  log(event: string, fields?: Record<string, unknown>): void;
}

/**
 * Groups are applied as scoped applies, and a group that fails is halved until the tunnels the kernel refuses
 * stand alone (k broken tunnels among n cost about 2·k·log2(n) scoped applies, not n). Those are reported in
 * `failed` and left exactly as they were; then one pass with the rest as the whole set removes what is no longer
 * desired and cleans the table. A failure of that last pass (a removal the kernel refuses) still fails the
 * reconcile as a whole.
 */
export async function isolateRefused(desired: TunnelSpec[], steps: IsolationSteps): Promise<ReconcileResult> {
  const counts: ChangeCounts = { added: 0, changed: 0, removed: 0, unchanged: 0 };
  const failed: TunnelFailure[] = [];
  const applyGroup = async (group: TunnelSpec[]): Promise<void> => {
    try {
      const c = await steps.applyScoped(group);
      counts.added += c.added;
      counts.changed += c.changed;
      counts.unchanged += c.unchanged;
    } catch (e) {
      if (activity.givenUp()) throw e;
      if (group.length > 1) {
        const mid = group.length >> 1;
        await applyGroup(group.slice(0, mid));
        await applyGroup(group.slice(mid));
        return;
      }
      const t = group[0]!;
      const text = e instanceof Error ? e.message : String(e);
      steps.log('dataplane.tunnel.error', { op: 'reconcile', id: t.id, tunnel_name: t.tunnel_name, error: text });
      failed.push({ id: t.id, error: 'kernel_error', error_description: text });
    }
  };
  // The whole set just failed: start from its halves.
  if (desired.length > 1) {
    const mid = desired.length >> 1;
    await applyGroup(desired.slice(0, mid));
    await applyGroup(desired.slice(mid));
  } else if (desired.length === 1) {
    await applyGroup(desired);
  }
  const failedIds = new Set(failed.map((f) => f.id));
  const rest = desired.filter((t) => !failedIds.has(t.id));
  counts.removed += (await steps.reconcileRest(rest, failedIds)).removed;
  return { ...counts, failed };
}
