// The socket layer itself: timeouts without blocking the event loop, seq matching, use after close.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NlWriter } from '../../agent/netlink/attrs.ts';
import { NETLINK_ROUTE, NLM_F_ACK, NLM_F_REQUEST, NetlinkError, beginMessage, endMessage } from '../../agent/netlink/message.ts';
import { RTM_GETLINK, decodeLink, encodeGetLink } from '../../agent/netlink/rtnetlink/index.ts';
import { NetlinkSocket } from '../../agent/netlink/socket.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

/** RTM_NEWLINK "set lo up" without NLM_F_ACK: the kernel applies it and answers nothing. */
function silentRequest(seq: number): Buffer {
  const w = new NlWriter();
  const s = beginMessage(w, 16, NLM_F_REQUEST, seq);
  w.u8(0).u8(0).u16(0).i32(1).u32(1).u32(1);
  endMessage(w, s);
  return w.toBuffer();
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('netlink socket', () => {
  let ns: TestNetns;
  let sock: NetlinkSocket;
  beforeAll(() => {
    ns = new TestNetns();
    sock = NetlinkSocket.open(NETLINK_ROUTE, { netns: ns.path });
  });
  afterAll(() => {
    sock?.close();
    ns?.delete();
  });

  it('gets a large receive buffer (SO_RCVBUFFORCE) and a kernel-assigned port id', () => {
    expect(sock.receiveBufferSize()).toBeGreaterThanOrEqual(32 * 1024 * 1024);
    expect(sock.portId).toBeGreaterThan(0);
  });

  it('times out a request nobody answers, while the event loop keeps running; the socket stays usable', async () => {
    // The test drives the socket's clock: the request may time out only once the clock passes its deadline,
    // however long the host takes, and must time out once it has.
    let now = 1_000_000;
    let reads = 0;
    const clocked = NetlinkSocket.open(NETLINK_ROUTE, { netns: ns.path, clock: () => (reads++, now) });
    try {
      const seq = clocked.allocSeq();
      let settled = false;
      const pending = clocked.request({ data: silentRequest(seq), seqs: [seq], timeoutMs: 400 }).then(
        () => undefined,
        (e: unknown) => e,
      ).finally(() => (settled = true));
      // While the request waits, timers keep firing (the wait does not block the event loop) and the socket
      // keeps looking at its clock: several looks, all before the deadline, and the request is still pending.
      let ticks = 0;
      const timer = setInterval(() => ticks++, 5);
      await until('the socket to check its deadline while timers run', () => reads >= 5 && ticks >= 5);
      clearInterval(timer);
      now += 399;
      const looked = reads;
      await until('one more look at the clock', () => reads > looked + 1);
      expect(settled).toBe(false);
      // Past the deadline: the next look ends it with ETIMEDOUT.
      now += 2;
      const err = await pending;
      expect(err).toBeInstanceOf(NetlinkError);
      expect((err as NetlinkError).code).toBe('ETIMEDOUT');

      // The silent request did take effect, and the same socket's next request is matched to its own reply.
      const seq2 = clocked.allocSeq();
      const res = await clocked.request({ data: encodeGetLink({ index: 1 }, seq2), seqs: [seq2] });
      const reply = res.replies.get(seq2)!;
      expect(reply.errno).toBe(0);
      expect(decodeLink(reply.messages.find((m) => m.type === 16)!)).toMatchObject({ name: 'lo', up: true });
    } finally {
      clocked.close();
    }
  });

  it('coalesced requests each get their own reply (seq matching), errors included', async () => {
    const seqs = Array.from({ length: 600 }, () => sock.allocSeq());
    const rs = await Promise.all(seqs.map((s, i) => sock.request({ data: encodeGetLink(i % 2 ? { index: 1 } : { name: `none${i}` }, s), seqs: [s] })));
    rs.forEach((r, i) => {
      const rep = r.replies.get(seqs[i]!)!;
      expect(rep.errno).toBe(i % 2 ? 0 : 19); // ENODEV for the names that do not exist
      if (i % 2) expect(rep.messages).toHaveLength(1);
    });
    expect(RTM_GETLINK).toBe(18);
    expect(NLM_F_ACK).toBe(4);
  });

  it('refuses requests after close with a typed error', async () => {
    const s2 = NetlinkSocket.open(NETLINK_ROUTE, { netns: ns.path });
    s2.close();
    const seq = s2.allocSeq();
    await expect(s2.request({ data: encodeGetLink({ index: 1 }, seq), seqs: [seq] })).rejects.toBeInstanceOf(NetlinkError);
  });
});
