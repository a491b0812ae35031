// The dataplane's kernel side (agent/dataplane/kernel/) without root: building the table, repairing a
// tampered one and reading the kernel back, over the stand-in kernel (test/helpers/netlink-kernel.ts)
// answering with replies recorded from the real kernel (test/fixtures/netlink). The same code runs against
// the real kernel in test/netns/dataplane*.test.ts.
import { describe, expect, it, vi } from 'vitest';
import { Nft, Rtnl } from '../../../agent/netlink/client.ts';
import { AttrTable, NlWriter } from '../../../agent/netlink/attrs.ts';
import { NLM_F_ACK, NLM_F_DUMP, NLM_F_DUMP_INTR, beginMessage, endMessage, parseMessages, type NlMsg } from '../../../agent/netlink/message.ts';
import {
  NFT_MSG_DELTABLE,
  NFT_MSG_GETGEN,
  NFT_MSG_GETOBJ,
  NFT_MSG_NEWGEN,
  NFT_MSG_GETRULE,
  NFT_MSG_GETSETELEM,
  NFT_MSG_GETTABLE,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWRULE,
  NFT_MSG_NEWSETELEM,
  NFT_MSG_NEWTABLE,
  NFNL_MSG_BATCH_BEGIN,
  NftBatch,
  decodeIpv4MapElements,
  decodeObject,
  decodeSetElements,
  nfgenmsg,
  nftType,
} from '../../../agent/netlink/nftables/index.ts';
import { IFLA_GROUP, RTM_DELADDR, RTM_DELLINK, RTM_GETADDR, RTM_GETLINK, RTM_NEWLINK, decodeLink } from '../../../agent/netlink/rtnetlink/index.ts';
import { NetlinkSocket } from '../../../agent/netlink/socket.ts';
import { addTunnelgateRuleset } from '../../../agent/netlink/ruleset-table.ts';
import type { KernelContext } from '../../../agent/dataplane/kernel/context.ts';
import { awaitReaping, deleteLinkUnlisted, deleteLinks } from '../../../agent/dataplane/kernel/links.ts';
import { EXPECTED_RULES, ensureTable } from '../../../agent/dataplane/kernel/table.ts';
import { readConsistently, readView } from '../../../agent/dataplane/kernel/read.ts';
import { WHOLE_PER_BATCH, applyPlan } from '../../../agent/dataplane/kernel/apply.ts';
import { diff } from '../../../agent/dataplane/diff.ts';
import type { KernelView, ObservedLink } from '../../../agent/dataplane/plan.ts';
import type { Conntrack } from '../../../agent/dataplane/conntrack.ts';
import { vethStandinDriver } from '../../../agent/dataplane/links.ts';
import { KernelStandIn, SlowSendKernelStandIn, type Handler } from '../../helpers/netlink-kernel.ts';
import { sharedNeeds, tunnelCounterNames, tunnelElements } from '../../../agent/dataplane/policy.ts';
import { CAPTURED_RULESET } from '../../fixtures/netlink/ruleset.ts';
import { benchTunnel } from '../../../bench/lib/tunnels.ts';
import { capturedMessages, loadCapture } from '../netlink/fixtures.ts';

const recorded = (name: string, type: number) => capturedMessages(name).filter((b) => b.readUInt16LE(4) === type);
const TABLE = recorded('reply-nft-list-counters', nftType(NFT_MSG_NEWTABLE));
const RULES = recorded('reply-nft-list-counters', nftType(NFT_MSG_NEWRULE));
const COUNTERS = recorded('reply-nft-list-counters', nftType(NFT_MSG_NEWOBJ));
const DNAT = recorded('reply-nft-list-map', nftType(NFT_MSG_NEWSETELEM));
const LINK = recorded('reply-link-get', RTM_NEWLINK)[0]!;

/** Each message of a datagram as its own buffer. */
const messagesOf = (d: Buffer) => parseMessages(d).map((m) => Buffer.from(d.subarray(m.payload.byteOffset - d.byteOffset - 16, m.payload.byteOffset - d.byteOffset + m.payload.length)));

/** The set a GETSETELEM asks for (NFTA_SET_ELEM_LIST_SET). */
const setOf = (m: NlMsg) => new AttrTable(m.payload.subarray(4)).string(2);

function context(h: Handler): { k: KernelContext; kernel: KernelStandIn } {
  const kernel = new KernelStandIn(h);
  const sock = new NetlinkSocket(kernel);
  const k: KernelContext = {
    rtnl: new Rtnl(sock),
    nft: new Nft(sock),
    conntrack: () => {
      throw new Error('no conntrack in these tests');
    },
    table: 'tunnelgate',
    linkPrefix: 'tg-',
    sizes: { meterSources: 65_536, flowEntries: 262_144 },
    bogons: [],
    driver: vethStandinDriver,
  };
  return { k, kernel };
}

/** The messages of the one batch the client sent (between BEGIN and END). */
function batchOf(kernel: KernelStandIn): NlMsg[] {
  const batches = kernel.sent.map((d) => parseMessages(d)).filter((ms) => ms[0]!.type === NFNL_MSG_BATCH_BEGIN);
  expect(batches).toHaveLength(1);
  return batches[0]!.slice(1, -1);
}

describe('ensureTable over recorded replies', () => {
  it('builds a missing table in one batch: the messages `nft -f` sends for the same ruleset', async () => {
    const { k, kernel } = context(() => undefined); // no tables at all
    k.bogons = CAPTURED_RULESET.bogons;
    expect(await ensureTable(k)).toBe('created');
    const ours = batchOf(kernel);
    expect(ours.every((m) => m.flags & NLM_F_ACK)).toBe(true);
    // The capture also creates one named counter with the table; ensureTable creates none.
    const call = loadCapture('nft-setup').calls.map((c) => parseMessages(c)).find((ms) => ms[0]!.type === NFNL_MSG_BATCH_BEGIN)!;
    const theirs = call.slice(1, -1).filter((m) => m.type !== nftType(NFT_MSG_NEWOBJ));
    expect(ours.map((m) => m.type)).toEqual(theirs.map((m) => m.type));
    ours.forEach((m, i) => expect(m.payload.toString('hex'), `message ${i}`).toBe(theirs[i]!.payload.toString('hex')));
  });

  it('leaves a correctly built table alone: no batch touches it (only the reference copy it is compared with)', async () => {
    // The rules as the kernel lists them are the NEWRULE messages that built them (what `nft -f` and we send).
    const built = new NftBatch();
    addTunnelgateRuleset(built, { table: 'tunnelgate', ifnamePrefix: 'tg-' });
    const rules = messagesOf(built.encode({ firstSeq: 1, ack: false }).data).filter((b) => b.readUInt16LE(4) === nftType(NFT_MSG_NEWRULE));
    expect(rules).toHaveLength(EXPECTED_RULES.length);
    const { k, kernel } = context((m) => {
      if (m.type === nftType(NFT_MSG_GETTABLE)) return { messages: TABLE };
      if (m.type === nftType(NFT_MSG_GETRULE)) return { messages: rules };
      return undefined;
    });
    expect(await ensureTable(k)).toBe('present');
    // The stand-in lists the same rules for the reference copy: equal, so nothing is rebuilt.
    const batches = kernel.sent.map((d) => parseMessages(d)).filter((ms) => ms[0]!.type === NFNL_MSG_BATCH_BEGIN);
    expect(batches).toHaveLength(2);
    const tables = batches.flatMap((ms) => ms.slice(1, -1).filter((m) => m.type === nftType(NFT_MSG_NEWTABLE) || m.type === nftType(NFT_MSG_DELTABLE)).map((m) => new AttrTable(m.payload.subarray(4)).string(1)));
    expect(new Set(tables)).toEqual(new Set(['tunnelgate_reference']));
    expect(kernel.requests.filter((r) => r.type === nftType(NFT_MSG_GETRULE))).toHaveLength(2);
  });

  it('rebuilds a table of another shape in one batch, keeping its map elements and counter values', async () => {
    // Recorded from an older agent's table, whose counter rule sat in prerouting rather than in `count`.
    const { k, kernel } = context((m) => {
      if (m.type === nftType(NFT_MSG_GETTABLE)) return { messages: TABLE };
      if (m.type === nftType(NFT_MSG_GETRULE)) return { messages: RULES };
      if (m.type === nftType(NFT_MSG_GETSETELEM)) return setOf(m) === 'protected' ? { messages: DNAT } : undefined;
      if (m.type === nftType(NFT_MSG_GETOBJ)) return { messages: COUNTERS };
      return undefined;
    });
    expect(await ensureTable(k)).toBe('rebuilt');
    const batch = batchOf(kernel);
    expect(batch[0]!.type).toBe(nftType(NFT_MSG_DELTABLE));
    expect(batch.filter((m) => m.type === nftType(NFT_MSG_NEWOBJ)).map(decodeObject)).toMatchObject([{ name: 'tun-1', bytes: 0n, packets: 0n }]);
    const elements = decodeIpv4MapElements(batch.filter((m) => m.type === nftType(NFT_MSG_NEWSETELEM) && decodeSetElements(m).set === 'protected'));
    expect(Object.fromEntries(elements)).toEqual({ '203.0.113.1': '100.64.0.10', '203.0.113.2': '100.64.0.6' });
  });
});

describe('readView over recorded replies', () => {
  it('reads links, the map, the counter names and addresses back into a KernelView', async () => {
    const { k, kernel } = context((m) => {
      if (m.type === RTM_GETLINK) return { messages: [LINK] };
      if (m.type === nftType(NFT_MSG_GETSETELEM)) return setOf(m) === 'protected' ? { messages: DNAT } : undefined;
      if (m.type === nftType(NFT_MSG_GETOBJ)) return { messages: COUNTERS };
      return undefined; // no addresses, an empty counter map
    });
    const view = await readView(k, ['tgv0'], new Map());
    expect(view.links.get('tgv0')).toMatchObject({ name: 'tgv0', up: false, mtu: 1476, addresses: [] });
    expect(Object.fromEntries(view.dnat)).toEqual({ '203.0.113.1': '100.64.0.10', '203.0.113.2': '100.64.0.6' });
    expect([...view.counters]).toEqual(['tun-1']);
    expect(view.counterMap.size).toBe(0);
    expect(kernel.requests.some((r) => r.type === RTM_GETADDR)).toBe(true);
  });

  it('a read whose dump the kernel marked interrupted is made again (readConsistently), at most 3 times', async () => {
    const flagged = DNAT.map((b) => {
      const c = Buffer.from(b);
      c.writeUInt16LE(c.readUInt16LE(6) | NLM_F_DUMP_INTR, 6);
      return c;
    });
    /** The `protected` map's dump is interrupted the first `times` times it is asked for. */
    const setUp = (times: number) => {
      let dumps = 0;
      const { k } = context((m) => {
        if (m.type === RTM_GETLINK) return { messages: [LINK] };
        if (m.type === nftType(NFT_MSG_GETSETELEM) && setOf(m) === 'protected') return { messages: ++dumps <= times ? flagged : DNAT };
        if (m.type === nftType(NFT_MSG_GETOBJ)) return { messages: COUNTERS };
        return undefined;
      });
      return { k, dumps: () => dumps };
    };
    const once = setUp(1);
    const view = await readConsistently(() => readView(once.k, ['tgv0'], new Map()));
    expect(Object.fromEntries(view.dnat)).toEqual({ '203.0.113.1': '100.64.0.10', '203.0.113.2': '100.64.0.6' });
    expect(once.dumps()).toBe(2);
    const always = setUp(Infinity);
    await expect(readConsistently(() => readView(always.k, ['tgv0'], new Map()))).rejects.toMatchObject({ code: 'EINTR' });
    expect(always.dumps()).toBe(3);
  });

  it('a scoped read asks for its keys and names only: no dump of any set, map or counter list', async () => {
    // The recorded `nft get element` answer for 203.0.113.1; every other key is ENOENT, as the kernel says.
    const [elem] = recorded('reply-nft-get-elem', nftType(NFT_MSG_NEWSETELEM)).filter((b) => (b.readUInt16LE(6) & 0x2) === 0);
    const { k, kernel } = context((m) => {
      if (m.type === RTM_GETLINK) return { messages: [LINK] };
      if (m.type === nftType(NFT_MSG_GETSETELEM)) return setOf(m) === 'protected' && m.payload.at(-1) === 1 ? { messages: [elem!] } : { errno: 2 };
      if (m.type === nftType(NFT_MSG_GETOBJ)) return { errno: 2 };
      return undefined;
    });
    const spec = { ...benchTunnel(1), protected_ip: '203.0.113.1' };
    const view = await readView(k, ['tgv0'], new Map(), false, {
      protectedIps: [spec.protected_ip],
      counterNames: tunnelCounterNames(spec),
      elements: tunnelElements(spec),
      synproxies: ['syn1436'],
      chains: sharedNeeds(spec).chains,
    });
    expect(Object.fromEntries(view.dnat)).toEqual({ '203.0.113.1': '100.64.0.10' });
    expect(view.counterMap.size).toBe(0);
    expect(view.elements?.size).toBe(0);
    expect(view.links.get('tgv0')).toMatchObject({ name: 'tgv0', mtu: 1476 });
    const nftRequests = kernel.requests.filter((r) => r.type !== RTM_GETLINK && r.type !== RTM_GETADDR);
    const dumps = nftRequests.filter((r) => (r.flags & NLM_F_DUMP) !== 0).map((r) => r.type);
    // Only the rules of the tunnel's own chains made by value (here its flow caps'), never the table's every rule.
    expect(dumps).toEqual([nftType(NFT_MSG_GETRULE)]);
    // One GET per key: two maps, the tunnel's elements, its six counters and the synproxy object.
    expect(nftRequests.filter((r) => r.type === nftType(NFT_MSG_GETSETELEM))).toHaveLength(2 + tunnelElements(spec).length);
    expect(nftRequests.filter((r) => r.type === nftType(NFT_MSG_GETOBJ))).toHaveLength(tunnelCounterNames(spec).length + 1);
  });
});

describe('deleteLinkUnlisted: a one-tunnel job waits for its link to leave the lists, not for the kernel to return', () => {
  /** The route socket answers GETLINK from `listed`; the reaper's sends are held until released (a worker in the kernel). */
  function setUp(reaperAnswer: Handler = () => undefined) {
    const state = { listed: true };
    const { k, kernel } = context((m) => (m.type === RTM_GETLINK ? (state.listed ? { messages: [LINK] } : { errno: 19 }) : undefined));
    const reaper = new SlowSendKernelStandIn(reaperAnswer);
    const reaperRtnl = new Rtnl(new NetlinkSocket(reaper));
    k.reaper = () => reaperRtnl;
    k.reaping = new Set();
    return { k, reaper, state, kernel };
  }
  const turn = (): Promise<void> => new Promise((r) => setTimeout(r, 2));
  /** The link as the job's read-back saw it. */
  const SEEN = { name: 'tgv0', index: decodeLink(parseMessages(LINK)[0]!).index };

  it('answers once the link is unlisted while the deletion is still in the kernel; the deletion stays tracked until it returns', async () => {
    const { k, reaper, state } = setUp();
    let done = false;
    const deleting = deleteLinkUnlisted(k, SEEN).then(() => (done = true));
    await turn();
    expect([done, reaper.holding, k.reaping!.size]).toEqual([false, 1, 1]);
    state.listed = false; // the kernel's part under RTNL is over
    await deleting;
    // Answered with the deletion still held in the kernel (its RCU barrier), and tracked for close().
    expect([reaper.holding, k.reaping!.size]).toEqual([1, 1]);
    reaper.release();
    await turn();
    expect(reaper.requests.map((r) => r.type)).toEqual([RTM_DELLINK]);
    expect(k.reaping!.size).toBe(0);
  });

  it('deletes by index, and a link of that name with another index is a new one: ours is gone', async () => {
    const { k, reaper } = setUp();
    // The name is listed again, under another index: someone deleted ours and a new link took the name.
    const deleting = deleteLinkUnlisted(k, { name: SEEN.name, index: SEEN.index + 1 });
    await deleting;
    expect(reaper.holding).toBe(1);
    reaper.release();
    await turn();
    const [del] = reaper.requests;
    // ifinfomsg: family, pad, type, then ifi_index; and no IFLA_IFNAME: the late request cannot take the new link
    expect(del!.payload.readInt32LE(4)).toBe(SEEN.index + 1);
    expect(del!.payload.length).toBe(16);
  });

  it('deletes the link\'s addresses first (its routes by key), then the link', async () => {
    const { k, reaper, state, kernel } = setUp();
    const deleting = deleteLinkUnlisted(k, { ...SEEN, addresses: ['100.64.0.1/30'] });
    await turn();
    // The address went on the route socket before the reaper was sent the link's deletion.
    expect(kernel.requests.filter((r) => r.type === RTM_DELADDR)).toHaveLength(1);
    expect(reaper.holding).toBe(1);
    state.listed = false;
    await deleting;
    reaper.release();
  });

  it("a refused deletion (the link still listed) fails with the kernel's error; a link already gone is no error", async () => {
    const refused = setUp((m) => (m.type === RTM_DELLINK ? { errno: 1, extack: 'not permitted' } : undefined));
    const failing = deleteLinkUnlisted(refused.k, SEEN).catch((e: unknown) => e);
    await turn();
    refused.reaper.release();
    expect(await failing).toMatchObject({ name: 'NetlinkError', code: 'EPERM' });
    const gone = setUp((m) => (m.type === RTM_DELLINK ? { errno: 19 } : undefined));
    const ok = deleteLinkUnlisted(gone.k, SEEN);
    await turn();
    gone.reaper.release();
    await expect(ok).resolves.toBeUndefined();
  });
});

describe('deleteLinks: a step deleting many links deletes them by device group', () => {
  /** `n` links as a read-back saw them, each with its inner address. */
  function viewOf(n: number): { view: KernelView; names: string[] } {
    const links = new Map<string, ObservedLink>();
    for (let i = 0; i < n; i++) links.set(`tg-${i}`, { name: `tg-${i}`, index: 100 + i, up: true, mtu: 1476, addresses: [`100.64.${i >> 6}.${(i & 63) * 4 + 1}/30`] });
    return { view: { links } as KernelView, names: [...links.keys()] };
  }
  /** The group a RTM_NEWLINK sets, or a RTM_DELLINK deletes (IFLA_GROUP after the 16-byte ifinfomsg). */
  const groupOf = (m: NlMsg): number | undefined => new AttrTable(m.payload.subarray(16)).u32(IFLA_GROUP);

  it('addresses first, then every link into one new group, then one deletion of that group; no deletion per link', async () => {
    const { k, kernel } = context(() => undefined);
    const { view, names } = viewOf(20);
    await deleteLinks(k, names, view);
    const types = kernel.requests.map((r) => r.type);
    expect(types).toEqual([...Array<number>(20).fill(RTM_DELADDR), ...Array<number>(20).fill(RTM_NEWLINK), RTM_DELLINK]);
    const groups = new Set(kernel.requests.filter((r) => r.type === RTM_NEWLINK).map(groupOf));
    expect(groups.size).toBe(1);
    const [group] = groups;
    // Far above the groups administrators name (/etc/iproute2/group), and what the deletion names.
    expect(group).toBeGreaterThanOrEqual(1 << 24);
    expect(group).toBeLessThan(2 ** 31);
    const del = kernel.requests.at(-1)!;
    expect(del.payload.readInt32LE(4)).toBe(0); // by group, not by index
    expect(groupOf(del)).toBe(group);
    // Each link by the index the read-back saw.
    expect(kernel.requests.filter((r) => r.type === RTM_NEWLINK).map((r) => r.payload.readInt32LE(4))).toEqual(names.map((_, i) => 100 + i));
  });

  it('at most 1,024 links a group: 2,100 links are three deletions, of three different groups', async () => {
    const { k, kernel } = context(() => undefined);
    const { view, names } = viewOf(2100);
    await deleteLinks(k, names, view);
    const dels = kernel.requests.filter((r) => r.type === RTM_DELLINK);
    expect(dels).toHaveLength(3);
    expect(new Set(dels.map(groupOf)).size).toBe(3);
    const sizes = dels.map((d) => kernel.requests.filter((r) => r.type === RTM_NEWLINK && groupOf(r) === groupOf(d)).length);
    expect(sizes).toEqual([1024, 1024, 52]);
  });

  it('a link the kernel refuses to group: the others grouped are still deleted, then the refusal is the error', async () => {
    const { k, kernel } = context((m) => (m.type === RTM_NEWLINK && m.payload.readInt32LE(4) === 105 ? { errno: 1, extack: 'not permitted' } : undefined));
    const { view, names } = viewOf(20);
    const err = await deleteLinks(k, names, view).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'NetlinkError', code: 'EPERM' });
    expect(kernel.requests.filter((r) => r.type === RTM_DELLINK)).toHaveLength(1);
  });

  it('8 links or fewer: each deleted on its own (answered once unlisted), none by group', async () => {
    const { k, kernel } = context((m) => (m.type === RTM_GETLINK ? { errno: 19 } : undefined));
    const { view, names } = viewOf(8);
    await deleteLinks(k, names, view);
    const dels = kernel.requests.filter((r) => r.type === RTM_DELLINK);
    expect(dels.map((d) => d.payload.readInt32LE(4))).toEqual(names.map((_, i) => 100 + i));
    expect(kernel.requests.some((r) => r.type === RTM_NEWLINK)).toBe(false);
  });
});

describe('applyPlan: a first apply of many tunnels', () => {
  /** The kernel's NEWGEN answer: the generation id, moved on by each batch the stand-in was sent. */
  function newGen(id: number): Buffer {
    const w = new NlWriter(64);
    const start = beginMessage(w, nftType(NFT_MSG_NEWGEN), 0, 0);
    nfgenmsg(w, 0, 0);
    w.attrU32be(1, id);
    endMessage(w, start);
    return w.take();
  }

  it('commits in batches of WHOLE_PER_BATCH tunnels, each tunnel whole in one, counters before what refers to them', async () => {
    let batches = 0;
    const { k, kernel } = context((m) => {
      if (m.type === NFNL_MSG_BATCH_BEGIN) batches++;
      if (m.type === nftType(NFT_MSG_GETGEN)) return { messages: [newGen(100 + batches)] };
      return undefined;
    });
    // A fake standing in for conntrack: nothing to flush in a first apply.
    const conntrack = { flushDestinations: async () => 0, flushDisallowed: async () => 0 } as unknown as Conntrack;
    k.conntrack = () => conntrack;
    const tunnels = Array.from({ length: 2 * WHOLE_PER_BATCH + 3 }, (_, i) => benchTunnel(i + 1));
    const view = { links: new Map(), dnat: new Map(), counterMap: new Map(), counters: new Set<string>(), synproxies: new Set<string>(), chains: new Set<string>(), elements: new Set<string>() };
    const plan = diff({ desired: tunnels, owned: new Map(), view, scope: 'all' });
    expect(plan.nft.addWhole).toHaveLength(tunnels.length);
    // The links are another test's (test/netns): here the nft side alone.
    const result = await applyPlan(k, { ...plan, linkSteps: [], flush: [] }, view);
    expect(result).toMatchObject({ commits: 3, generation: 103 });

    const sent = kernel.sent.map((d) => parseMessages(d)).filter((ms) => ms[0]!.type === NFNL_MSG_BATCH_BEGIN).map((ms) => ms.slice(1, -1));
    expect(sent.map((b) => new Set(b.filter((m) => m.type === nftType(NFT_MSG_NEWOBJ)).map((m) => decodeObject(m).name)).size)).toEqual([
      WHOLE_PER_BATCH * tunnelCounterNames(tunnels[0]!).length,
      WHOLE_PER_BATCH * tunnelCounterNames(tunnels[0]!).length,
      3 * tunnelCounterNames(tunnels[0]!).length,
    ]);
    const wantBySet = new Map<string, number>();
    for (const t of tunnels) for (const e of tunnelElements(t)) wantBySet.set(e.set, (wantBySet.get(e.set) ?? 0) + 1);
    const gotBySet = new Map<string, number>();
    sent.forEach((batch, i) => {
      const mine = tunnels.slice(i * WHOLE_PER_BATCH, (i + 1) * WHOLE_PER_BATCH);
      const ips = mine.map((t) => t.protected_ip).sort();
      const elements = batch.filter((m) => m.type === nftType(NFT_MSG_NEWSETELEM));
      // Its own tunnels' map elements, and no other's.
      expect([...decodeIpv4MapElements(elements.filter((m) => decodeSetElements(m).set === 'protected')).keys()].sort()).toEqual(ips);
      expect(elements.filter((m) => decodeSetElements(m).set === 'tunnel_counters').flatMap((m) => decodeSetElements(m).elements.map((e) => e.objref))).toEqual(expect.arrayContaining(mine.map((t) => t.tunnel_name)));
      // Every counter of the batch comes before its first element (the counter map and drop maps refer to them).
      const lastCounter = batch.findLastIndex((m) => m.type === nftType(NFT_MSG_NEWOBJ));
      expect(lastCounter).toBeLessThan(batch.findIndex((m) => m.type === nftType(NFT_MSG_NEWSETELEM)));
      for (const m of elements) {
        const d = decodeSetElements(m);
        if (d.set === 'protected' || d.set === 'tunnel_counters') continue;
        gotBySet.set(d.set, (gotBySet.get(d.set) ?? 0) + d.elements.length);
      }
    });
    // Together, every policy element of every tunnel.
    expect(gotBySet).toEqual(wantBySet);
  });
});

describe('awaitReaping: what close() waits for', () => {
  it('waits for deletions that finish, and gives up on one the kernel holds past the limit, saying how many were left', async () => {
    expect(await awaitReaping(new Set(), 10)).toBe(0);
    let finish!: () => void;
    const quick = new Promise<void>((r) => (finish = r));
    const waiting = awaitReaping(new Set([quick]), 1_000);
    finish();
    expect(await waiting).toBe(0);
    vi.useFakeTimers();
    try {
      // Each deletion leaves the set when it returns, as deleteLinkUnlisted's do.
      const stuck = new Set<Promise<void>>();
      for (const p of [new Promise<void>(() => undefined), Promise.resolve()]) {
        stuck.add(p);
        void p.then(() => stuck.delete(p));
      }
      const giving = awaitReaping(stuck, 5_000);
      await vi.advanceTimersByTimeAsync(4_999);
      let settled = false;
      void giving.then(() => (settled = true));
      await Promise.resolve();
      expect(settled).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(await giving).toBe(1);
    } finally {
      vi.useRealTimers();
    }
  });
});
