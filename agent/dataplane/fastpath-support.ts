// Whether this kernel can run the fast path (docs/FLOWTABLE.md): nftables flowtables (nf_flow_table, and
// nf_flow_table_inet for the ip and inet families; Debian's kernels have them as modules, loaded on demand). A
// kernel without them (this development machine's 6.18 build) refuses a flowtable with ENOENT, so the agent asks
// once at start and keeps today's path, the classic forwarding path, where the answer is no: every packet of
// every connection through prerouting, conntrack and forward, exactly as before.
//
// How it asks: one batch that creates a dormant scratch table, a flowtable in it on `lo` (every namespace has
// it), and deletes the table again. The kernel looks up the flowtable type (loading the module on demand) when
// it meets the flowtable, and the batch commits nothing that outlives it: a kernel with flowtables leaves no
// trace, one without refuses the flowtable (ENOENT) and rolls the whole batch back. Rejected: reading
// /proc/modules or /sys/module misses a module not loaded yet and what is built in.
import { randomBytes } from 'node:crypto';
import { constants as osConstants } from 'node:os';
import type { Nft } from '../netlink/client.ts';
import { NFPROTO_IPV4, NftBatch } from '../netlink/nftables/index.ts';
import { errnoName } from '../netlink/message.ts';

const E = osConstants.errno;

/** What the agent found: the fast path usable, or not, or unknown (with why: status and the start log carry it). */
export type FastPathSupport = { usable: true } | { usable: false | null; reason: string };

/** What the kernel's answer to the probe says (errno 0: the batch committed, so the kernel has flowtables). */
export function fastPathSupport(errno: number): FastPathSupport {
  if (errno === 0) return { usable: true };
  if (errno === E.ENOENT || errno === E.EOPNOTSUPP) {
    return {
      usable: false,
      reason: `this kernel has no nftables flowtables (${errnoName(errno)} for a flowtable): established connections take the classic forwarding path; load nf_flow_table_inet (modprobe nf_flow_table_inet) or run on a kernel with CONFIG_NF_FLOW_TABLE_INET`,
    };
  }
  if (errno === E.EPERM || errno === E.EACCES) return { usable: null, reason: `could not ask the kernel for flowtables (${errnoName(errno)}): the agent needs CAP_NET_ADMIN` };
  return { usable: null, reason: `could not tell whether this kernel has flowtables: the probe got ${errnoName(errno)}` };
}

/** A scratch table name no one else uses (outside the agent's own table's name, so no repair reads it as a touch). */
export function probeTableName(): string {
  return `tg_ftprobe_${randomBytes(4).toString('hex')}`;
}

/** The probe's batch: a dormant scratch table, a flowtable on `lo` in it, and the table deleted again. */
export function flowtableProbeBatch(table: string): NftBatch {
  const b = new NftBatch({ family: NFPROTO_IPV4 });
  b.addTable(table, 1 /* NFT_TABLE_F_DORMANT: its hooks are never active */);
  b.addFlowtable({ table, name: 'probe', priority: 0, devices: ['lo'] });
  b.deleteTable(table);
  return b;
}

/** Asks the kernel behind `nft` (the dataplane's namespace) whether it can hold flowtables. */
export async function probeFastPathSupport(nft: Pick<Nft, 'commit'>): Promise<FastPathSupport> {
  try {
    await nft.commit(flowtableProbeBatch(probeTableName()));
    return fastPathSupport(0);
  } catch (e) {
    const errno = typeof (e as { errno?: unknown }).errno === 'number' ? (e as { errno: number }).errno : undefined;
    if (errno !== undefined) return fastPathSupport(errno);
    return { usable: null, reason: `could not tell whether this kernel has flowtables: ${e instanceof Error ? e.message : String(e)}` };
  }
}
