// The edge dataplane (docs/CONTRACTS.md "Dataplane"): createDataplane() wires the pure diff, the state journal, the link
// driver (GRE, or the veth stand-in on kernels without GRE), the netlink clients, conntrack and the probe.
//
// Every operation is: validate → read the kernel back → diff against the desired state → record intent →
// apply (links, one atomic nft batch, removed links, conntrack) → record the result. Operations run one
// at a time. Neither creating nor closing the dataplane tears anything down. What the gateway asked for
// is journaled apart (DESIRED_FILE) before each change, and restore() brings it back after a reboot.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { Nft, NetlinkError, Rtnl } from '../netlink/client.ts';
import { Conntrack } from './conntrack.ts';
import type { KernelContext, LazySockets } from './kernel/context.ts';
import { readConsistently, readView } from './kernel/read.ts';
import { tunnelLinkSysctls } from './kernel/links.ts';
import { ensureBogons, ensureTable, flushDisallowed } from './kernel/table.ts';
import { linkDriver } from './links.ts';
import { netnsPath, writeSysctls } from './netns.ts';
import { DESIRED_FILE, StateStore } from './state.ts';
import { kernelError } from './types.ts';
import { EdgeDataplane } from './edge-dataplane.ts';
import { DEFAULT_EDGE_PPS, readConntrackLimits, sizing } from './sizing.ts';
import { bogonSources } from '../netlink/ruleset.ts';
import { totalmem } from 'node:os';
import type { DataplaneHandle, DataplaneOptions } from './handle.ts';

export { KernelError } from './types.ts';
export type { ChangeCounts, Dataplane, ProbeResult, ReconcileResult, TunnelFailure, TunnelRef, TunnelSpec } from './types.ts';
export type { LinkKind } from './links.ts';
export { standinPeerName } from './links.ts';
export { tunnelCounterNames, dropCounterName } from './policy.ts';
export { DROP_REASONS, type DropReason } from '../netlink/ruleset.ts';
export type { Capacity, DataplaneHandle, DataplaneOptions } from './handle.ts';

export async function createDataplane(opts: DataplaneOptions): Promise<DataplaneHandle> {
  const netns = opts.netns ? netnsPath(opts.netns) : undefined;
  const linkPrefix = opts.linkPrefix ?? 'tg-';
  const log = opts.log ?? (() => undefined);
  let rtnl: Rtnl | undefined;
  let nft: Nft | undefined;
  const ct: LazySockets = { reaping: new Set() };
  let state: StateStore | undefined;
  let desired: StateStore | undefined;
  try {
    rtnl = Rtnl.open({ netns });
    nft = Nft.open({ netns });
    state = StateStore.open(opts.stateDir);
    // An agent upgraded from a version without the desired-state journal starts from what it created.
    const firstDesired = !existsSync(join(opts.stateDir, DESIRED_FILE));
    desired = StateStore.open(opts.stateDir, DESIRED_FILE);
    if (firstDesired && state.tunnels.size > 0) desired.commit([...state.tunnels.values()].map((o) => ({ spec: o.spec })), []);
    // The chains' sizes depend on the host only (its memory, its rate): the same for the table's whole life.
    const chainSizes = sizing({ memoryBytes: totalmem(), edgePps: opts.edgePps ?? DEFAULT_EDGE_PPS, maxFlows: [], kernel: { max: 0, buckets: 0 } });
    const k: KernelContext = {
      rtnl,
      nft,
      conntrack: () => (ct.sock ??= Conntrack.open(netns)),
      // One request (a link's deletion) and its ack: a small receive buffer (NetlinkSocketOptions.receiveBytes).
      reaper: () => Rtnl.open({ netns, sendOffThread: true, receiveBytes: 16 * 1024 }),
      reaping: ct.reaping,
      table: opts.nftTable,
      linkPrefix,
      sizes: { meterSources: opts.meterSources ?? chainSizes.meterSources, flowEntries: chainSizes.flowEntries },
      bogons: bogonSources({ protectedPools: opts.protectedPools, edgeIp: opts.edgeIp }),
      driver: linkDriver(opts.linkKind ?? 'gre'),
      netns,
      ...(opts.testOnlyHang ? { testOnlyHang: opts.testOnlyHang } : {}),
    };
    // Forwarding on; loose rp_filter and no IPv6 on the links we own (new ones get them when created).
    writeSysctls(netns, [[['net', 'ipv4', 'ip_forward'], '1']]);
    // The table first: after a reboot it is gone, and reading the links back reads its maps too.
    const table = await ensureTable(k);
    const bogonsChanged = table === 'present' && (await ensureBogons(k));
    // The SYN proxy's prerequisites (STACK.md), once the table's ct expressions loaded conntrack: a mid-stream
    // packet without a connection is invalid (not picked up as established), and the proxy's cookies and
    // timestamps are on. Conntrack's sysctls exist only once it is loaded, hence after the table.
    writeSysctls(netns, [
      [['net', 'netfilter', 'nf_conntrack_tcp_loose'], '0'],
      [['net', 'ipv4', 'tcp_syncookies'], '1'],
      [['net', 'ipv4', 'tcp_timestamps'], '1'],
    ]);
    // A rebuilt table kept its elements, so the restore finds no mapping that appeared and flushes nothing; the
    // allowlist judges only a connection's first packet, so what the tampered rules let in would live on.
    // Best effort: a failure here is logged, never a start that fails (and restarts, and fails) on it.
    const disallowed = table === 'rebuilt' ? await flushDisallowed(k, state) : 0;
    const ownedNames = [...state.tunnels.values()].map((o) => o.spec.tunnel_name);
    const records = state.tunnels;
    const present = ownedNames.length ? await readConsistently(() => readView(k, ownedNames, records)) : undefined;
    if (present) tunnelLinkSysctls(netns, [...present.links.keys()]);
    log('dataplane.start', { table: opts.nftTable, tableState: table, conntrackDisallowed: disallowed, tunnels: state.tunnels.size, linkKind: k.driver.kind, netns, bogonsChanged });
    // Conntrack's settings exist once the table's ct rules loaded it: read now, as the floor the agent never goes below.
    // Unreadable (a kernel without them): the agent sizes nothing of the kernel's, and says so in status.
    let limits: { max: number; buckets: number } | undefined;
    try {
      limits = readConntrackLimits(netns);
    } catch (e) {
      log('dataplane.conntrack_limits_unreadable', { error: e instanceof Error ? e.message : String(e) });
    }
    return new EdgeDataplane(k, state, desired, opts, table, log, ct, limits);
  } catch (e) {
    ct.sock?.close();
    nft?.close();
    rtnl?.close();
    state?.close();
    desired?.close();
    throw kernelError('dataplane start', e);
  }
}

// Re-exported for the job layer's error mapping and for tests.
export { InvalidTunnel } from './validate.ts';
export { PlanConflict } from './plan.ts';
export { NetlinkError };
