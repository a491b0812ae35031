// Rtnl and Nft above the netlink socket's endpoint seam, without root: the stand-in kernel
// (test/helpers/netlink-kernel.ts) answers with the kernel's own recorded replies (test/fixtures/netlink)
// or with the errors a test picks, and records what the client sent. The socket's request machinery,
// the encoders, decoders and error mapping are the real ones.
import { constants as osConstants } from 'node:os';
import { describe, expect, it } from 'vitest';
import { Nft, NftBatchError, Rtnl } from '../../../agent/netlink/client.ts';
import { NLMSG_ERROR, NLM_F_ACK, NLM_F_DUMP_INTR, parseError, parseMessages } from '../../../agent/netlink/message.ts';
import { NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END, NFT_MSG_GETOBJ, NFT_MSG_GETSETELEM, NFT_MSG_NEWCHAIN, NFT_MSG_NEWOBJ, NFT_MSG_NEWSETELEM, NftBatch, nftType } from '../../../agent/netlink/nftables/index.ts';
import { IFF_UP, IFLA_EXT_MASK, IFLA_IFNAME, RTEXT_FILTER_SKIP_STATS, RTM_GETLINK, RTM_NEWLINK } from '../../../agent/netlink/rtnetlink/index.ts';
import { AttrTable } from '../../../agent/netlink/attrs.ts';
import { NetlinkSocket } from '../../../agent/netlink/socket.ts';
import { KernelStandIn, SlowSendKernelStandIn, type Handler } from '../../helpers/netlink-kernel.ts';
import { capturedMessages, lastOfType, norm } from './fixtures.ts';

const E = osConstants.errno;

const rtnlOver = (h?: Handler, timeoutMs?: number) => {
  const kernel = new KernelStandIn(h);
  return { kernel, rtnl: new Rtnl(new NetlinkSocket(kernel, { timeoutMs })) };
};
const nftOver = (h?: Handler) => {
  const kernel = new KernelStandIn(h);
  return { kernel, nft: new Nft(new NetlinkSocket(kernel)) };
};
/** The recorded kernel messages of one type in a reply capture. */
const recorded = (name: string, type: number) => capturedMessages(name).filter((b) => b.readUInt16LE(4) === type);

describe('Rtnl over recorded kernel replies', () => {
  it('sends the GRE link request `ip` sends, and maps the kernel refusal with its extended ack', async () => {
    // The kernel's answer to the GRE request itself (not to iproute2's earlier lookups).
    const refusal = capturedMessages('reply-link-gre-err').filter((b) => {
      const [m] = parseMessages(b);
      if (m!.type !== NLMSG_ERROR) return false;
      const e = parseError(m!);
      return e.request.type === RTM_NEWLINK && e.errno !== 0 && e.request.seq !== 0;
    });
    expect(refusal).toHaveLength(1);
    const { kernel, rtnl } = rtnlOver((m) => (m.type === RTM_NEWLINK ? { messages: refusal, complete: true } : undefined));
    const err = await rtnl.createGreLink({ name: 'tg1', local: '192.0.2.1', remote: '198.51.100.1', ttl: 255, key: 42 }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: 'NetlinkError', code: 'EOPNOTSUPP', extackMessage: 'Unknown device type' });
    expect((err as Error).message).toContain('create GRE link tg1');
    // The request itself, byte for byte as iproute2 sent it (but our ack flag).
    const sent = kernel.sent[0]!;
    const flags = sent.readUInt16LE(6);
    expect(flags & NLM_F_ACK).toBe(NLM_F_ACK);
    expect(norm(sent)).toBe(norm(lastOfType('link-gre-key', RTM_NEWLINK)));
  });

  it('decodes a recorded link answer through the socket', async () => {
    const [newlink] = recorded('reply-link-get', RTM_NEWLINK);
    const { kernel, rtnl } = rtnlOver((m) => (m.type === RTM_GETLINK ? { messages: [newlink!] } : undefined));
    const link = await rtnl.getLink('tgv0');
    expect(link).toMatchObject({ name: 'tgv0', kind: 'veth', mtu: 1476, up: false });
    expect(kernel.requests.map((r) => r.type)).toEqual([RTM_GETLINK]);
  });

  it('a socket with a small receive buffer (a link deletion\'s own) takes its ack, and names a datagram that does not fit', async () => {
    const kernel = new KernelStandIn();
    await expect(new Rtnl(new NetlinkSocket(kernel, { receiveBytes: 16 * 1024 })).deleteLink(7)).resolves.toBeUndefined();
    const [newlink] = recorded('reply-link-get', RTM_NEWLINK);
    expect(newlink!.length).toBeGreaterThan(64);
    const tiny = new Rtnl(new NetlinkSocket(new KernelStandIn((m) => (m.type === RTM_GETLINK ? { messages: [newlink!] } : undefined)), { receiveBytes: 64, timeoutMs: 1_000 }));
    await expect(tiny.getLink('tgv0')).rejects.toThrow(/exceeds the 64-byte receive buffer/);
  });

  it('findLink turns ENODEV into undefined, and any other refusal into an error', async () => {
    const { rtnl } = rtnlOver((m) => (m.type === RTM_GETLINK ? { errno: E.ENODEV } : undefined));
    await expect(rtnl.findLink('nope')).resolves.toBeUndefined();
    const other = rtnlOver((m) => (m.type === RTM_GETLINK ? { errno: E.EPERM, extack: 'not allowed' } : undefined));
    await expect(other.rtnl.findLink('nope')).rejects.toMatchObject({ code: 'EPERM', extackMessage: 'not allowed' });
  });

  it('linkState (what a probe asks of its link) is one RTM_GETLINK by name without stats: index and IFF_UP from the answer, undefined for ENODEV', async () => {
    const [newlink] = recorded('reply-link-get', RTM_NEWLINK);
    const { kernel, rtnl } = rtnlOver((m) => (m.type === RTM_GETLINK ? { messages: [newlink!] } : undefined));
    // The recorded answer is tgv0, ifindex 3 and down (capture.sh made it and never set it up).
    await expect(rtnl.linkState('tgv0')).resolves.toEqual({ index: 3, up: false });
    const [req] = kernel.requests;
    const attrs = new AttrTable(req!.payload.subarray(16));
    expect([req!.type, attrs.string(IFLA_IFNAME), attrs.u32(IFLA_EXT_MASK)]).toEqual([RTM_GETLINK, 'tgv0', RTEXT_FILTER_SKIP_STATS]);
    // The same answer with IFF_UP set in ifi_flags (payload offset 8) reads as up.
    const upLink = Buffer.from(newlink!);
    upLink.writeUInt32LE(upLink.readUInt32LE(16 + 8) | IFF_UP, 16 + 8);
    await expect(rtnlOver((m) => (m.type === RTM_GETLINK ? { messages: [upLink] } : undefined)).rtnl.linkState('tgv0')).resolves.toEqual({ index: 3, up: true });
    await expect(rtnlOver((m) => (m.type === RTM_GETLINK ? { errno: E.ENODEV } : undefined)).rtnl.linkState('tg-missing')).resolves.toBeUndefined();
    await expect(rtnlOver((m) => (m.type === RTM_GETLINK ? { errno: E.EPERM } : undefined)).rtnl.linkState('tg-missing')).rejects.toMatchObject({ code: 'EPERM' });
  });

  it('coalesces requests queued behind one in flight into one datagram, and matches each answer by seq', async () => {
    const { kernel, rtnl } = rtnlOver((m, i) => (i === 2 ? { errno: E.EINVAL } : undefined));
    const results = await Promise.allSettled([1, 2, 3, 4].map((i) => rtnl.setMtu(i, 1476)));
    // The first goes alone (nothing else was queued yet); the three queued while it was in flight share one sendto().
    expect(kernel.sent.map((d) => parseMessages(d).length)).toEqual([1, 3]);
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
  });

  it('an endpoint that sends off the event loop: the socket awaits its send, timers run meanwhile, then the answer is matched', async () => {
    const kernel = new SlowSendKernelStandIn((m) => (m.type === RTM_GETLINK ? { errno: E.ENODEV } : undefined));
    const rtnl = new Rtnl(new NetlinkSocket(kernel));
    let settled = false;
    // Each step waits for a send to be held, never for a time: a loaded host's timers say nothing of it.
    const heldSend = async () => {
      while (kernel.holding === 0) await new Promise((r) => setImmediate(r));
    };
    const deleting = rtnl.deleteLink('tg-1').then(() => (settled = true));
    // The event loop goes on while the send is held (a worker thread inside the kernel).
    await heldSend();
    await new Promise((r) => setTimeout(r, 5));
    expect([kernel.holding, settled, kernel.sent.length]).toEqual([1, false, 0]);
    kernel.release();
    await deleting;
    expect([kernel.asyncSends, kernel.sent.length]).toEqual([1, 1]);
    // Requests queued while one is held coalesce behind it, as on any socket: three requests, two sends.
    const first = rtnl.findLink('a');
    await heldSend();
    const three = Promise.all([first, rtnl.findLink('b'), rtnl.findLink('c')]);
    kernel.release();
    await heldSend();
    kernel.release();
    await expect(three).resolves.toEqual([undefined, undefined, undefined]);
    expect(kernel.sent.slice(1).map((d) => parseMessages(d).length)).toEqual([1, 2]);
  });

  it('a request the kernel never answers fails with ETIMEDOUT; the socket stays usable', async () => {
    let answer = false;
    const { rtnl } = rtnlOver(() => (answer ? undefined : { silent: true }), 20);
    await expect(rtnl.setMtu(3, 1476)).rejects.toMatchObject({ code: 'ETIMEDOUT' });
    answer = true;
    await expect(rtnl.setMtu(3, 1476)).resolves.toBeUndefined();
  });

  it('replies the kernel dropped (ENOBUFS) fail the requests in flight, not later ones', async () => {
    const { kernel, rtnl } = rtnlOver();
    kernel.failNextReceive = E.ENOBUFS;
    await expect(rtnl.setMtu(3, 1476)).rejects.toMatchObject({ code: 'ENOBUFS' });
    await expect(rtnl.setMtu(3, 1476)).resolves.toBeUndefined();
  });
});

describe('Nft over recorded kernel replies', () => {
  it('getSetElement: one key per GET (no dump), the recorded answer decoded; ENOENT is undefined', async () => {
    const [present] = recorded('reply-nft-get-elem', nftType(NFT_MSG_NEWSETELEM)).filter((b) => (b.readUInt16LE(6) & 0x2) === 0);
    const missing = capturedMessages('reply-nft-get-elem-missing').flatMap((c) => parseMessages(c)).find((m) => m.type === NLMSG_ERROR && parseError(m).errno === E.ENOENT);
    expect(missing).toBeDefined();
    const { kernel, nft } = nftOver((m) => {
      if (m.type !== nftType(NFT_MSG_GETSETELEM)) return undefined;
      // The key's last byte tells the two recorded answers apart: 203.0.113.1 is there, 203.0.113.9 is not.
      return m.payload.at(-1) === 1 ? { messages: [present!] } : { errno: E.ENOENT };
    });
    const el = await nft.getSetElement('tunnelgate', 'protected', { key: Buffer.from([203, 0, 113, 1]) });
    expect(el && [...el.key]).toEqual([203, 0, 113, 1]);
    expect(el && [...el.data!]).toEqual([100, 64, 0, 10]);
    await expect(nft.getSetElement('tunnelgate', 'protected', { key: Buffer.from([203, 0, 113, 9]) })).resolves.toBeUndefined();
    expect(kernel.requests.map((r) => r.flags & 0x300)).toEqual([0, 0]);
    const other = nftOver((m) => (m.type === nftType(NFT_MSG_GETSETELEM) ? { errno: E.EPERM } : undefined));
    await expect(other.nft.getSetElement('tunnelgate', 'protected', { key: Buffer.from([203, 0, 113, 1]) })).rejects.toMatchObject({ code: 'EPERM' });
  });

  it('getSetElement of an object map: the counter name the kernel answers', async () => {
    const [present] = recorded('reply-nft-get-objmap-elem', nftType(NFT_MSG_NEWSETELEM)).filter((b) => (b.readUInt16LE(6) & 0x2) === 0);
    const { nft } = nftOver((m) => (m.type === nftType(NFT_MSG_GETSETELEM) ? { messages: [present!] } : undefined));
    await expect(nft.getSetElement('tunnelgate', 'tunnel_counters', { key: Buffer.from([203, 0, 113, 1]) })).resolves.toMatchObject({ objref: 'tun-1' });
  });

  it("an attack's vector: each element's own counter, as the kernel dumps a set whose elements carry one", async () => {
    const parts = recorded('reply-nft-list-vector-ports', nftType(NFT_MSG_NEWSETELEM));
    expect(parts.length).toBeGreaterThan(0);
    const { nft } = nftOver((m) => (m.type === nftType(NFT_MSG_GETSETELEM) ? { messages: parts } : undefined));
    const seen: [string, bigint | undefined, bigint | undefined][] = [];
    await nft.eachSetElement('tunnelgate', 'vector_ports', (e) => seen.push([e.key.toString('hex'), e.counter?.packets, e.counter?.bytes]));
    // Key: P (4 bytes) . port (2 bytes, network order, padded to 4).
    expect(seen.sort()).toEqual([
      ['cb0071011b580000', 1200n, 50400n],
      ['cb00710169870000', 300n, 12600n],
    ]);
  });

  it('lists a map from the recorded dump (several datagrams, then NLMSG_DONE)', async () => {
    const parts = recorded('reply-nft-list-map', nftType(NFT_MSG_NEWSETELEM));
    const { kernel, nft } = nftOver((m) => (m.type === nftType(NFT_MSG_GETSETELEM) ? { messages: parts } : undefined));
    const map = await nft.listIpv4Map('tunnelgate', 'protected');
    expect(Object.fromEntries(map)).toEqual({ '203.0.113.1': '100.64.0.10', '203.0.113.2': '100.64.0.6' });
    // nft's last alignment byte is uninitialised memory (see nftables.test.ts): compare the rest.
    const ours = norm(kernel.sent[0]!);
    const nfts = norm(capturedMessages('nft-list-map').find((b) => b.readUInt16LE(4) === nftType(NFT_MSG_GETSETELEM))!);
    expect(ours.slice(0, -2)).toBe(nfts.slice(0, -2));
  });

  it('a long dump lets the event loop turn between its datagrams: timers and sockets are not held for all of it', async () => {
    // A stand-in kernel that takes 5 ms to hand over each datagram, as a dump of 380,000 set elements does
    // (the kernel builds each part inside recv()): 40 datagrams, ~200 ms of one promise chain.
    class SlowDumpStandIn extends KernelStandIn {
      override receive(buf: Buffer): number {
        const until = performance.now() + 5;
        while (performance.now() < until);
        return super.receive(buf);
      }
    }
    const parts = recorded('reply-nft-list-map', nftType(NFT_MSG_NEWSETELEM));
    const kernel = new SlowDumpStandIn((m) => (m.type === nftType(NFT_MSG_GETSETELEM) ? { messages: Array.from({ length: 20 }, () => parts).flat() } : undefined));
    const nft = new Nft(new NetlinkSocket(kernel));
    let turns = 0;
    let done = false;
    const spin = (): void => {
      if (done) return;
      turns++;
      setImmediate(spin);
    };
    setImmediate(spin);
    const map = await nft.listIpv4Map('tunnelgate', 'protected');
    done = true;
    expect(map.size).toBe(2);
    // Without the socket's turns the whole dump is one stretch of microtasks, and `spin` never runs before it ends.
    expect(turns).toBeGreaterThanOrEqual(2);
  });

  it('a dump the kernel marks interrupted (NLM_F_DUMP_INTR: the list changed meanwhile) fails with EINTR; unmarked, it is read', async () => {
    const parts = recorded('reply-nft-list-map', nftType(NFT_MSG_NEWSETELEM));
    // The same recorded parts, the first one flagged as the kernel flags a dump a commit interrupted.
    const flagged = parts.map((b, i) => {
      const c = Buffer.from(b);
      if (i === 0) c.writeUInt16LE(c.readUInt16LE(6) | NLM_F_DUMP_INTR, 6);
      return c;
    });
    const interrupted = nftOver((m) => (m.type === nftType(NFT_MSG_GETSETELEM) ? { messages: flagged } : undefined));
    await expect(interrupted.nft.listIpv4Map('tunnelgate', 'protected')).rejects.toMatchObject({ name: 'NetlinkError', code: 'EINTR' });
    const whole = nftOver((m) => (m.type === nftType(NFT_MSG_GETSETELEM) ? { messages: parts } : undefined));
    expect((await whole.nft.listIpv4Map('tunnelgate', 'protected')).size).toBe(2);
  });

  it('lists named counters with their values from the recorded dump', async () => {
    const parts = recorded('reply-nft-list-counters', nftType(NFT_MSG_NEWOBJ));
    const { nft } = nftOver((m) => (m.type === nftType(NFT_MSG_GETOBJ) ? { messages: parts } : undefined));
    expect(await nft.listCounters('tunnelgate')).toMatchObject([{ table: 'tunnelgate', name: 'tun-1', bytes: 0n, packets: 0n }]);
    expect(await nft.listCounters('other')).toEqual([]);
  });

  it('sends a batch as one datagram and names the message the kernel refused', async () => {
    const { kernel, nft } = nftOver((m) => (m.type === nftType(NFT_MSG_NEWCHAIN) ? { errno: E.EEXIST, extack: 'Chain exists' } : undefined));
    const b = new NftBatch().addTable('t').addChain({ table: 't', name: 'c' }).addCounter({ table: 't', name: 'x' });
    const err = await nft.commit(b).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NftBatchError);
    expect((err as NftBatchError).failures).toMatchObject([{ index: 1, code: 'EEXIST', extackMessage: 'Chain exists', description: 'add chain t/c' }]);
    expect(kernel.sent).toHaveLength(1);
    const types = parseMessages(kernel.sent[0]!).map((m) => m.type);
    expect(types[0]).toBe(NFNL_MSG_BATCH_BEGIN);
    expect(types.at(-1)).toBe(NFNL_MSG_BATCH_END);
    expect(types).toHaveLength(5);
  });

  it('a bulk message the kernel refused is named from its own bytes: a counter, an element list and its size', async () => {
    const refuse = (t: number) => (m: { type: number }) => (m.type === nftType(t) ? { errno: E.ENOENT } : undefined);
    const els = Array.from({ length: 3 }, (_, i) => ({ key: Buffer.from([10, 0, 0, i]) }));
    for (const [type, description] of [
      [NFT_MSG_NEWOBJ, 'add counter t/x'],
      [NFT_MSG_NEWSETELEM, 'add element t/s (3 elements)'],
    ] as const) {
      const { nft } = nftOver(refuse(type));
      const b = new NftBatch().addTable('t').addCounter({ table: 't', name: 'x' }).addElements({ table: 't', set: 's', elements: els });
      const err = (await nft.commit(b).catch((e: unknown) => e)) as NftBatchError;
      expect(err.failures).toMatchObject([{ index: type === NFT_MSG_NEWOBJ ? 1 : 2, code: 'ENOENT', description }]);
      expect(err.requestType).toBe(nftType(type));
    }
  });

  it('a batch of 5,000 messages keeps only the refused acks: one failure named, the rest acknowledged without a reply each', async () => {
    const { nft } = nftOver((_m, i) => (i === 4_001 ? { errno: E.EINVAL, extack: 'bad counter' } : undefined));
    const b = new NftBatch();
    for (let i = 0; i < 5_000; i++) b.addCounter({ table: 't', name: `c${i}` });
    const err = (await nft.commit(b).catch((e: unknown) => e)) as NftBatchError;
    // request 0 is BATCH_BEGIN: the refused one is the batch's message 4,000
    expect(err.failures).toEqual([expect.objectContaining({ index: 4_000, code: 'EINVAL', extackMessage: 'bad counter', description: 'add counter t/c4000' })]);
  });

  it('an ack range must be alone in its datagram', async () => {
    const sock = new NetlinkSocket(new KernelStandIn());
    await expect(sock.request({ data: Buffer.alloc(16), seqs: [], ackRange: { first: 10, count: 2 } })).rejects.toThrow(/exclusive/);
  });

  it('an accepted batch resolves once every message is acknowledged', async () => {
    const { kernel, nft } = nftOver();
    await nft.commit(new NftBatch().addTable('t').addCounter({ table: 't', name: 'x' }));
    expect(kernel.requests.filter((m) => m.flags & NLM_F_ACK)).toHaveLength(2);
  });
});
