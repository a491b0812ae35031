// The watch over other programs' nftables commits (agent/dataplane/commit-watch.ts): the notifications the
// kernel sent `nft monitor` for six commits (test/fixtures/netlink/notify-commits.hex), judged for the table
// `tunnelgate`, and the listening socket's overflow over a stand-in endpoint.
import { constants } from 'node:os';
import { describe, expect, it } from 'vitest';
import { CommitWatch, judgeCommits } from '../../../agent/dataplane/commit-watch.ts';
import { parseMessages } from '../../../agent/netlink/message.ts';
import { decodeNotification, type NftNotification } from '../../../agent/netlink/nftables/notification.ts';
import { NetlinkSubscription } from '../../../agent/netlink/subscription.ts';
import type { NetlinkEndpoint } from '../../../agent/netlink/endpoint.ts';
import { loadCapture } from '../netlink/fixtures.ts';

const T = 'tunnelgate';

/** Every nftables notification of the capture after the monitor's own start-up (its GETGENs answered generation 1). */
function captured(): NftNotification[] {
  const all = loadCapture('notify-commits').calls.flatMap((c) => parseMessages(c).map(decodeNotification));
  const first = all.findIndex((n) => n.kind === 'change');
  expect(all[first - 1]).toMatchObject({ kind: 'generation', genId: 1 });
  return all.slice(first);
}
/** The notifications of the commits that produced generations (from, to]. */
const commits = (from: number, to: number): NftNotification[] => {
  const out: NftNotification[] = [];
  let gen = 1;
  for (const n of captured()) {
    if (gen >= from && gen < to) out.push(n);
    if (n.kind === 'generation') gen = n.genId;
  }
  return out;
};

describe('ruleset notifications, decoded', () => {
  it('one message per changed object naming its table and family, then NEWGEN per commit', () => {
    const n = captured();
    expect(n.filter((x) => x.kind === 'generation').map((x) => (x as { genId: number }).genId)).toEqual([2, 3, 4, 5, 6, 7]);
    const changes = n.filter((x): x is Extract<NftNotification, { kind: 'change' }> => x.kind === 'change');
    // The set's two elements are a message each.
    expect(changes.map((c) => [c.table, c.family])).toEqual([
      ['someone_else', 2],
      ['someone_else', 2],
      ['someone_else', 2],
      ['someone_else', 2],
      [T, 2],
      [T, 1],
      [T, 2],
    ]);
  });
});

describe('judgeCommits', () => {
  it('commits to other tables only, every generation heard: clean through the last', () => {
    expect(judgeCommits(1, commits(1, 4), 'drained', T, 4)).toEqual({ clean: true, generation: 4 });
    // Commits after the kernel's id was read and before the drain are heard too.
    expect(judgeCommits(1, commits(1, 4), 'drained', T, 2)).toEqual({ clean: true, generation: 4 });
    expect(judgeCommits(4, [], 'drained', T, 4)).toEqual({ clean: true, generation: 4 });
  });
  it('a commit naming the table, in any family: touched', () => {
    // The NEWGEN after the touch names who committed it.
    expect(judgeCommits(1, commits(1, 7), 'drained', T, 7)).toEqual({ clean: false, why: 'touched', by: { pid: expect.any(Number), proc: 'nft' } });
    expect(judgeCommits(4, commits(4, 5), 'drained', T, 5)).toMatchObject({ clean: false, why: 'touched' });
    expect(judgeCommits(5, commits(5, 6), 'drained', T, 6)).toMatchObject({ clean: false, why: 'touched' });
  });
  it('a generation not heard, or the kernel\'s id past the last heard: a gap', () => {
    const withoutThird = commits(1, 4).filter((n) => !(n.kind === 'generation' && n.genId === 3));
    expect(judgeCommits(1, withoutThird, 'drained', T, 4)).toEqual({ clean: false, why: 'gap' });
    expect(judgeCommits(1, commits(1, 3), 'drained', T, 4)).toEqual({ clean: false, why: 'gap' });
    expect(judgeCommits(2, commits(1, 4), 'drained', T, 4)).toEqual({ clean: false, why: 'gap' });
  });
  it('an overflowed socket, a datagram not from the kernel or a message naming no table proves nothing', () => {
    expect(judgeCommits(1, commits(1, 4), 'overflow', T, 4)).toEqual({ clean: false, why: 'overflow' });
    expect(judgeCommits(1, commits(1, 4), 'forged', T, 4)).toEqual({ clean: false, why: 'forged' });
    expect(judgeCommits(1, [{ kind: 'change', msgType: 0, family: 2, table: undefined }, { kind: 'generation', genId: 2 }], 'drained', T, 2)).toEqual({ clean: false, why: 'unnamed' });
  });
  it('the kernel\'s id wraps past 0xffffffff to 1', () => {
    expect(judgeCommits(0xffffffff, [{ kind: 'generation', genId: 1 }], 'drained', T, 1)).toEqual({ clean: true, generation: 1 });
    expect(judgeCommits(0xfffffffe, [{ kind: 'generation', genId: 0xffffffff }, { kind: 'generation', genId: 1 }], 'drained', T, 0xffffffff)).toEqual({ clean: true, generation: 1 });
    expect(judgeCommits(0xffffffff, [{ kind: 'generation', genId: 0 }], 'drained', T, 0)).toEqual({ clean: false, why: 'gap' });
  });
});

/**
 * A stand-in endpoint (a mock of the kernel socket): the kernel's datagrams reach it only while it is a member of a
 * group, as multicast does; `ENOBUFS` stands for the kernel dropping what the receive buffer could not hold.
 */
class MulticastEndpoint implements NetlinkEndpoint {
  readonly portId = 1;
  closed = false;
  member = false;
  private readonly queue: (Buffer | number | { from: number; data: Buffer })[] = [];
  deliver(...items: (Buffer | number | { from: number; data: Buffer })[]): void {
    if (this.member) this.queue.push(...items);
  }
  send(): number {
    return 0;
  }
  receive(buf: Buffer, from?: { pid: number }): number {
    const next = this.queue.shift();
    if (next === undefined) return -constants.errno.EAGAIN;
    if (typeof next === 'number') return -next;
    const [pid, data] = Buffer.isBuffer(next) ? [0, next] : [next.from, next.data];
    if (from) from.pid = pid;
    data.copy(buf);
    return data.length;
  }
  setMembership(_group: number, member: boolean): void {
    this.member = member;
  }
  async wait(): Promise<void> {}
  close(): void {
    this.closed = true;
  }
}

/** A watch of table T whose socket is `ep`. */
const watchOver = (ep: MulticastEndpoint): CommitWatch => new CommitWatch({ table: T, open: () => new NetlinkSubscription(ep) });

describe('the watch over a listening socket', () => {
  /** The capture's datagrams from the first commit on: a commit is [its objects' datagram, its NEWGEN's]. */
  const notifications = (): Buffer[] => {
    const calls = loadCapture('notify-commits').calls;
    return calls.slice(calls.findIndex((c) => parseMessages(c).some((m) => decodeNotification(m).kind === 'change')));
  };

  it('starts only when the kernel is still at the generation it starts from, and proves later ones', async () => {
    const ep = new MulticastEndpoint();
    const n = notifications();
    const watch = watchOver(ep);
    expect(await watch.start(1, async () => 2)).toBe(false);
    expect(ep.member).toBe(false);
    expect(watch.cleanThrough(2)).toBeUndefined();
    expect(await watch.start(1, async () => 1)).toBe(true);
    expect(ep.member).toBe(true);
    ep.deliver(...n.slice(0, 6));
    expect(watch.cleanThrough(4)).toEqual({ clean: true, generation: 4 });
    expect(watch.cleanThrough(4)).toEqual({ clean: true, generation: 4 });
    // Stopped for the agent's own commits: nothing reaches it, and the socket stays open.
    watch.stop();
    expect([ep.member, ep.closed]).toEqual([false, false]);
    ep.deliver(...n.slice(6));
    expect(watch.cleanThrough(7)).toBeUndefined();
  });

  it('what was queued before a stop is thrown away at the next start', async () => {
    const ep = new MulticastEndpoint();
    const n = notifications();
    const watch = watchOver(ep);
    expect(await watch.start(1, async () => 1)).toBe(true);
    // Commits 2-4 heard, never drained, then the agent's own operation (stop, its commit 5, start from 5).
    ep.deliver(...n.slice(0, 6), constants.errno.ENOBUFS);
    watch.stop();
    expect(await watch.start(5, async () => 5)).toBe(true);
    ep.deliver(...n.slice(8, 10));
    expect(watch.cleanThrough(6)).toMatchObject({ clean: false, why: 'touched' });
    expect(ep.member).toBe(false);
  });

  it('a receive buffer that overflowed proves nothing, and ends the watch', async () => {
    const ep = new MulticastEndpoint();
    const n = notifications();
    const watch = watchOver(ep);
    expect(await watch.start(1, async () => 1)).toBe(true);
    ep.deliver(n[0]!, constants.errno.ENOBUFS, n[1]!);
    expect(watch.cleanThrough(2)).toEqual({ clean: false, why: 'overflow' });
    expect(watch.cleanThrough(2)).toBeUndefined();
    watch.close();
    expect(ep.closed).toBe(true);
  });

  it('a NEWGEN sent by a process, not the kernel, proves nothing: a forged one cannot cover a touch', async () => {
    const ep = new MulticastEndpoint();
    const n = notifications();
    const watch = watchOver(ep);
    expect(await watch.start(1, async () => 1)).toBe(true);
    // Commit 2 heard; then a process multicasts a NEWGEN 3 of its own, as if commit 3 had touched nothing.
    ep.deliver(n[0]!, n[1]!, { from: 4242, data: n[3]! });
    expect(watch.cleanThrough(2)).toEqual({ clean: false, why: 'forged' });
    expect(ep.member).toBe(false);
  });

  it('a socket that cannot join is tried once, and said so once', async () => {
    const said: string[] = [];
    let opened = 0;
    const watch = new CommitWatch({
      table: T,
      open: () => {
        opened++;
        throw new Error('EPERM');
      },
      unavailable: (e) => said.push(e),
    });
    expect(await watch.start(1, async () => 1)).toBe(false);
    expect(await watch.start(2, async () => 2)).toBe(false);
    expect([opened, said]).toEqual([1, ['EPERM']]);
  });

  it('a generation that cannot be read leaves the watch off, without failing the agent\'s operation', async () => {
    const ep = new MulticastEndpoint();
    const watch = watchOver(ep);
    expect(await watch.start(1, () => Promise.reject(new Error('EIO')))).toBe(false);
    expect(ep.member).toBe(false);
    expect(await watch.start(1, async () => 1)).toBe(true);
  });

  it('between operations a poll judges what was heard: after a touch it leaves the group, and tells the next reader', async () => {
    const ep = new MulticastEndpoint();
    const n = notifications();
    const watch = watchOver(ep);
    expect(await watch.start(1, async () => 1)).toBe(true);
    ep.deliver(...n.slice(0, 6));
    watch.poll();
    expect(ep.member).toBe(true);
    ep.deliver(...n.slice(6, 8));
    watch.poll();
    // Commit 5 named the table: nothing more is heard, and the kernel builds no notification for this socket.
    expect(ep.member).toBe(false);
    expect(watch.cleanThrough(5)).toMatchObject({ clean: false, why: 'touched' });
    expect(watch.cleanThrough(5)).toBeUndefined();
    watch.close();
  });

  it('a datagram larger than the receive buffer counts as lost', () => {
    const ep = new MulticastEndpoint();
    ep.member = true;
    ep.deliver(Buffer.alloc(200));
    const sub = new NetlinkSubscription(ep, Buffer.alloc(128));
    expect(sub.drain(() => undefined)).toBe('overflow');
  });
});
