// The dataplane's links in the kernel: which ones exist and with what addresses (getLinks, readLinks), the
// sysctls every tunnel link gets, and their deletion (addresses first; a few each answered once unlisted, many
// by device group). Links have no nftables generation, so even a read that trusts the records reads them.
import { randomInt } from 'node:crypto';
import type { LinkInfo } from '../../netlink/rtnetlink/index.ts';
import type { TunnelSpec } from '../types.ts';
import type { KernelView, ObservedLink } from '../plan.ts';
import type { OwnedTunnel } from '../records.ts';
import { writeSysctls } from '../netns.ts';
import { ignoreCode, inChunks, type KernelContext } from './context.ts';

/** Links that loading ip_gre creates in every namespace: never ours, never looked at. */
export const FALLBACK_TUNNEL_LINKS: ReadonlySet<string> = new Set(['gre0', 'gretap0', 'erspan0']);

/**
 * What every tunnel link gets: loose reverse-path filtering (clients' source addresses route out the upstream),
 * and no IPv6 at all: the table is IPv4, so an origin's IPv6 through its GRE link would pass the isolation.
 */
export function tunnelLinkSysctls(netns: string | undefined, names: readonly string[]): void {
  writeSysctls(
    netns,
    names.map((n) => [['net', 'ipv4', 'conf', n, 'rp_filter'], '2'] as const),
  );
  writeSysctls(
    netns,
    names.map((n) => [['net', 'ipv6', 'conf', n, 'disable_ipv6'], '1'] as const),
    { skipMissing: true },
  );
}

/** New links whose sysctls applyPlan writes between two turns of the event loop. */
export const SYSCTL_SLICE = 1024;

/** Lists fewer links than this one by one; more with one dump. */
const LINK_GET_LIMIT = 16;

export async function getLinks(k: KernelContext, names: readonly string[]): Promise<Map<string, LinkInfo>> {
  const want = new Set(names.filter((n) => !FALLBACK_TUNNEL_LINKS.has(n)));
  const out = new Map<string, LinkInfo>();
  if (want.size === 0) return out;
  if (want.size < LINK_GET_LIMIT) {
    const found = await Promise.all([...want].map((n) => k.rtnl.findLink(n)));
    for (const l of found) if (l) out.set(l.name, l);
  } else {
    // keepName: the other links (a veth stand-in's peers, the host's own) are skipped before decoding.
    for (const l of await k.rtnl.listLinks({ skipStats: true, keepName: (n) => want.has(n) })) out.set(l.name, l);
  }
  return out;
}

/**
 * The links side of a view only (links and their addresses, no nftables read): what a reconcile checks when
 * the generation id proves the table unchanged since the agent's own last commit (index.ts, docs/CONTRACTS.md
 * "Dataplane"). One link dump and one address dump, whatever the number of tunnels.
 */
export async function readLinks(k: KernelContext, names: readonly string[], owned: ReadonlyMap<string, OwnedTunnel>): Promise<Map<string, ObservedLink>> {
  const links = await getLinks(k, names);
  const addrs = await readAddresses(k, links);
  const view: Pick<KernelView, 'links'> = { links: new Map() };
  const recordedByName = new Map<string, TunnelSpec>();
  for (const o of owned.values()) recordedByName.set(o.spec.tunnel_name, o.spec);
  observeLinks(k, view, links, addrs, recordedByName);
  return view.links;
}

/** The IPv4 addresses of these links, by index (other links' addresses are not decoded). */
export async function readAddresses(k: KernelContext, links: ReadonlyMap<string, LinkInfo>): Promise<Map<number, string[]>> {
  const addrs = new Map<number, string[]>();
  if (links.size === 0) return addrs;
  const indexes = new Set([...links.values()].map((l) => l.index));
  // A few links: one dump per link, filtered by the kernel (strict dumps), so a single job's read stays its own.
  const found =
    indexes.size < LINK_GET_LIMIT
      ? (await Promise.all([...indexes].map((i) => k.rtnl.listAddresses(i)))).flat()
      : await k.rtnl.listAddresses(undefined, { keepIndex: (i) => indexes.has(i) });
  for (const a of found) {
    if (!a.local) continue;
    let list = addrs.get(a.index);
    if (!list) addrs.set(a.index, (list = []));
    list.push(`${a.local}/${a.prefixLen}`);
  }
  return addrs;
}

export function observeLinks(k: KernelContext, view: Pick<KernelView, 'links'>, links: ReadonlyMap<string, LinkInfo>, addrs: ReadonlyMap<number, string[]>, recordedByName: ReadonlyMap<string, TunnelSpec>): void {
  for (const l of links.values()) {
    const o: ObservedLink = { name: l.name, index: l.index, up: l.up, mtu: l.mtu ?? 0, addresses: addrs.get(l.index) ?? [] };
    const p = k.driver.params(l, recordedByName.get(l.name));
    if (p) o.params = p;
    view.links.set(l.name, o);
  }
}

/**
 * Deletes these links (names the read-back saw in `view`), each one's IPv4 addresses first. A link going down
 * with an address on it makes the kernel mark the address's routes dead and then walk the whole routing table
 * to drop them (fib_flush): O(links) per deletion, 7-11 ms of a one-tunnel remove at 10,000 tunnels here.
 * Deleting the address first removes its routes by key, and the link then goes with none (unlisted after
 * ~3 ms). A few links (a remove, or an apply recreating its link) are each answered once unlisted
 * (deleteLinkUnlisted). More go in slices of GROUP_DELETE_SLICE, each slice put in one device group and
 * deleted in one request: the kernel unregisters them together and waits out one RCU barrier for all, not
 * ~20 ms for each (a reconcile removing 1,000 tunnels: 0.96 s instead of 22.6 s). docs/CONTRACTS.md "Dataplane".
 */
export async function deleteLinks(k: KernelContext, names: readonly string[], view: KernelView): Promise<void> {
  const seen: ObservedLink[] = [];
  const unseen: string[] = [];
  for (const name of names) {
    const l = view.links.get(name);
    if (l) seen.push(l);
    else unseen.push(name);
  }
  // The diff deletes only links its view saw; by name, as before, should a plan ever name another.
  await inChunks(unseen, (name) => k.rtnl.deleteLink(name).catch(ignoreCode('ENODEV')));
  if (seen.length <= UNLISTED_DELETES_MAX) {
    await Promise.all(seen.map((l) => deleteLinkUnlisted(k, l)));
    return;
  }
  await inChunks(
    seen.flatMap((l) => l.addresses.map((a) => ({ index: l.index, a }))),
    (x) => dropAddress(k, x.index, x.a),
  );
  for (let i = 0; i < seen.length; i += GROUP_DELETE_SLICE) await deleteGroup(k, seen.slice(i, i + GROUP_DELETE_SLICE));
}

/** A doomed link's address deleted before it (deleteLinks); already gone, or the link with it, is no error. */
function dropAddress(k: KernelContext, index: number, cidr: string): Promise<void> {
  return k.rtnl.deleteAddress(index, cidr).catch(ignoreCode('EADDRNOTAVAIL', 'ENODEV'));
}

/**
 * Links deleted in one request, at most: the request holds RTNL while the kernel unregisters them (~0.25 s per
 * 1,000 here), and every other RTNL user on the host (`ip`, routing daemons) waits that long.
 */
const GROUP_DELETE_SLICE = 1024;

/**
 * Puts these links in a device group of their own and deletes the group. The group number is one no
 * administrator picks (theirs are small: /etc/iproute2/group), drawn for each deletion; a link created meanwhile
 * starts in group 0, so nothing but these links is in it. A link gone meanwhile (ENODEV) is simply not in it.
 * When grouping fails halfway, the links already grouped are still deleted before the error is thrown, so none
 * is left up, without its address, in a stray group.
 */
async function deleteGroup(k: KernelContext, links: readonly ObservedLink[]): Promise<void> {
  const group = randomInt(1 << 24, 2 ** 31 - 1);
  let failure: unknown;
  await inChunks(links, (l) =>
    k.rtnl
      .setLinkGroup(l.index, group)
      .catch(ignoreCode('ENODEV'))
      .catch((e: unknown) => void (failure ??= e)),
  );
  // Off the event loop when it can be: the request blocks its sender until every link is unregistered.
  const rtnl = k.reaper?.() ?? k.rtnl;
  try {
    await rtnl.deleteLinkGroup(group).catch(ignoreCode('ENODEV'));
  } finally {
    if (rtnl !== k.rtnl) rtnl.close();
  }
  if (failure !== undefined) throw failure;
}

/** A plan deleting at most this many links (a one-tunnel job) waits for each only until it is unlisted. */
const UNLISTED_DELETES_MAX = 8;
/** Polls of a deletion's link that are not a timer tick apart (deleteLinkUnlisted). */
const UNLISTED_FAST_POLLS = 16;

/**
 * Deletes a link, returning once the kernel no longer lists it (its name is free, `ip link` shows nothing)
 * rather than once the kernel's deletion returns. In rtnetlink a deletion releases RTNL and then waits for an
 * RCU barrier before acking (netdev_run_todo; ~20 ms here against ~2 ms until the link is unlisted), blocking
 * whichever thread sent it: the reaper's sends run on a worker thread, so the job answers after ~2 ms and the
 * event loop (SSH, probes) never waits out the barrier (a job must not grow with the node: docs/CONTRACTS.md "Dataplane"). The
 * route socket's own requests show when the link is gone: each takes RTNL, so it answers after the deletion's
 * part under RTNL, or before it started. A refusal (the link still listed) surfaces as the deletion's error.
 */
export async function deleteLinkUnlisted(k: KernelContext, link: { name: string; index: number; addresses?: readonly string[] }): Promise<void> {
  // Its addresses first, by key, so the link goes down with no route left to flush (deleteLinks).
  await Promise.all((link.addresses ?? []).map((a) => dropAddress(k, link.index, a)));
  if (!k.reaper) return k.rtnl.deleteLink(link.index).catch(ignoreCode('ENODEV'));
  let outcome: { error?: unknown } | undefined;
  const reaper = k.reaper();
  // By index, not by name: the request may still wait for a worker thread when the poll below finds the name
  // gone (the link deleted by someone else meanwhile); a later job may then create the name again, and a
  // deletion by name arriving late would take that new link. The kernel gives a new link the next free index,
  // never this one back, unless someone asks for it (`ip link add ... index N`, or a device moved into the
  // namespace keeping its index): that needs CAP_NET_ADMIN here, which could delete the link anyway.
  const deleting = reaper
    .deleteLink(link.index)
    .catch(ignoreCode('ENODEV'))
    .then(
      () => void (outcome = {}),
      (error: unknown) => void (outcome = { error }),
    )
    .finally(() => reaper.close());
  k.reaping?.add(deleting);
  void deleting.then(() => k.reaping?.delete(deleting));
  // The link leaves the lists ~1 ms after the request (one expedited RCU grace period under RTNL): the first
  // polls follow each other at once (each is one RTM_GETLINK round trip), later ones a timer tick apart.
  for (let polls = 0; ; polls++) {
    if (outcome) {
      if (outcome.error !== undefined) throw outcome.error;
      return;
    }
    if ((await k.rtnl.findLink(link.name))?.index !== link.index) return;
    await new Promise((r) => (polls < UNLISTED_FAST_POLLS ? setImmediate(r) : setTimeout(r, 1)));
  }
}

/**
 * Waits for the link deletions still finishing on their threads (deleteLinkUnlisted), for at most `ms`: a
 * deletion the kernel never finishes (a device whose references never drop: "unregister_netdevice: waiting
 * for ... to become free") must not hold the agent's shutdown forever. Resolves with how many were left.
 */
export async function awaitReaping(reaping: ReadonlySet<Promise<void>>, ms: number): Promise<number> {
  if (reaping.size === 0) return 0;
  let timer: NodeJS.Timeout | undefined;
  const timedOut = await Promise.race([
    Promise.all(reaping).then(() => false),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(true), ms);
    }),
  ]);
  clearTimeout(timer);
  return timedOut ? reaping.size : 0;
}
