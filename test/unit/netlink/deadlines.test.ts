// Every wait on the kernel has a deadline (agent/netlink/socket.ts): over the endpoint seam, a stand-in kernel that
// never answers (test/helpers/netlink-kernel.ts, a test fake) turns each kind of wait into an error naming the
// request, and the event loop keeps turning meanwhile. No wall-clock assertion: the deadlines are short, and the
// tests assert what happened, not when.
import { constants as osConstants } from 'node:os';
import koffi from 'koffi';
import { afterEach, describe, expect, it } from 'vitest';
import { Nft, Rtnl } from '../../../agent/netlink/client.ts';
import { NftBatch } from '../../../agent/netlink/nftables/index.ts';
import { NetlinkSocket } from '../../../agent/netlink/socket.ts';
import { offThreadOverdue } from '../../../agent/netlink/observer.ts';
import { NETLINK_ROUTE } from '../../../agent/netlink/message.ts';
import { KernelStandIn, SlowSendKernelStandIn } from '../../helpers/netlink-kernel.ts';
import { until } from '../../helpers/wait.ts';

const E = osConstants.errno;
// include/uapi/linux/netlink.h
const NLMSG_NOOP = 1;
const NLM_F_REQUEST = 1;

/** Counts the turns of the event loop (setImmediate callbacks) until stopped. */
function turns(): { count: () => number; stop: () => void } {
  let n = 0;
  let on = true;
  const tick = () => {
    n++;
    if (on) setImmediate(tick);
  };
  setImmediate(tick);
  return { count: () => n, stop: () => void (on = false) };
}

const held: SlowSendKernelStandIn[] = [];
afterEach(() => {
  // Sends held by a test return now, so no call stays overdue for the next test.
  for (const k of held.splice(0)) while (k.holding > 0) k.release();
});

describe('netlink deadlines', () => {
  it('a kernel that never answers: the request fails naming itself, and the event loop turned while it waited', async () => {
    const kernel = new KernelStandIn(() => ({ silent: true }));
    const rtnl = new Rtnl(new NetlinkSocket(kernel, { timeoutMs: 50 }));
    const loop = turns();
    const err = await rtnl.setMtu(3, 1476).catch((e: unknown) => e);
    loop.stop();
    expect(err).toMatchObject({ name: 'NetlinkError', code: 'ETIMEDOUT', errno: E.ETIMEDOUT });
    expect((err as Error).message).toBe('set link 3 mtu 1476: no reply within 50 ms: ETIMEDOUT');
    expect(loop.count()).toBeGreaterThan(1);
    rtnl.close();
  });

  it('an nft batch never acknowledged fails naming the commit and its size', async () => {
    const kernel = new KernelStandIn(() => ({ silent: true }));
    const nft = new Nft(new NetlinkSocket(kernel));
    const err = await nft.commit(new NftBatch().addTable('t'), { timeoutMs: 30 }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/^nftables commit \(1 messages\): no reply within 30 ms: ETIMEDOUT$/);
    nft.close();
  });

  it('a send the kernel holds on a worker thread past its deadline fails the request and the socket, and is counted until it returns', async () => {
    const kernel = new SlowSendKernelStandIn();
    held.push(kernel);
    const sock = new NetlinkSocket(kernel, { timeoutMs: 30 });
    const rtnl = new Rtnl(sock);
    const loop = turns();
    const err = await rtnl.deleteLink(7).catch((e: unknown) => e);
    loop.stop();
    expect(err).toMatchObject({ code: 'ETIMEDOUT' });
    expect((err as Error).message).toBe('delete link 7: the kernel did not return from sendto within 30 ms: ETIMEDOUT');
    expect(loop.count()).toBeGreaterThan(1);
    // The thread is still in the kernel: the watchdog sees it (agent/housekeeping/activity.ts).
    expect(offThreadOverdue().map((c) => c.what)).toEqual(['sendto for delete link 7']);
    // The socket's fd is in that call: nothing more is sent on it.
    await expect(rtnl.setMtu(7, 1400)).rejects.toMatchObject({ code: 'EBADF' });
    kernel.release();
    await until('the overdue send to return', () => offThreadOverdue().length === 0, 10_000);
  });

  it('a real socket whose poll waits behind a full threadpool still fails at its deadline, before any thread is free', async () => {
    // Every thread of libuv's pool is taken by a call that sleeps (as calls the kernel holds would), then a request
    // the kernel never answers (NLMSG_NOOP without NLM_F_ACK: netlink_rcv_skb acks nothing) waits on the real
    // AF_NETLINK socket: its poll() can only queue. The wait's own timer on the event loop ends it.
    const threads = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
    const usleep = koffi.load('libc.so.6').func('int usleep(uint32_t usec)');
    let slept = 0;
    for (let i = 0; i < threads; i++) usleep.async(3_000_000, () => void slept++);
    const sock = NetlinkSocket.open(NETLINK_ROUTE, { timeoutMs: 100 });
    try {
      const seq = sock.allocSeq();
      const noop = Buffer.alloc(16);
      noop.writeUInt32LE(16, 0);
      noop.writeUInt16LE(NLMSG_NOOP, 4);
      noop.writeUInt16LE(NLM_F_REQUEST, 6);
      noop.writeUInt32LE(seq, 8);
      await expect(sock.request({ data: noop, seqs: [seq], what: 'a request nobody answers' })).rejects.toThrow(/^a request nobody answers: no reply within 100 ms: ETIMEDOUT$/);
      expect(slept).toBe(0);
    } finally {
      sock.close();
    }
    await until('the pool threads to be free again', () => slept === threads, 30_000);
  });
});
