// The table's named counters read back for the status op, the attack monitor and the health checks: one
// tunnel's drops by reason, every counter in one dump, or some by name. Read-only; errors are kernel_error.
import { DROP_REASONS, type DropReason } from '../../netlink/ruleset.ts';
import { dropCounterName } from '../policy.ts';
import { kernelError, type TunnelSpec } from '../types.ts';
import type { KernelContext } from './context.ts';

export async function readDropped(k: KernelContext, tunnel: Pick<TunnelSpec, 'tunnel_name'>): Promise<Record<DropReason, number>> {
  try {
    const counts = await Promise.all(DROP_REASONS.map((r) => k.nft.getCounter(k.table, dropCounterName(tunnel, r))));
    return Object.fromEntries(DROP_REASONS.map((r, i) => [r, Number(counts[i]?.packets ?? 0n)])) as Record<DropReason, number>;
  } catch (e) {
    throw kernelError('dropped', e);
  }
}

export async function readCounters(k: KernelContext): Promise<Map<string, { packets: bigint; bytes: bigint }>> {
  try {
    const out = new Map<string, { packets: bigint; bytes: bigint }>();
    for (const c of await k.nft.listCounters(k.table)) out.set(c.name, { packets: c.packets ?? 0n, bytes: c.bytes ?? 0n });
    return out;
  } catch (e) {
    throw kernelError('counters', e);
  }
}

export async function readCounterPackets(k: KernelContext, names: readonly string[]): Promise<Map<string, bigint>> {
  try {
    const out = new Map<string, bigint>();
    for (const [name, c] of await k.nft.getCounters(k.table, names)) if (c.packets !== undefined) out.set(name, c.packets);
    return out;
  } catch (e) {
    throw kernelError('counter', e);
  }
}
