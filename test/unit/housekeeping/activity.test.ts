// The watchdog over dataplane operations (agent/housekeeping/activity.ts), with the test's own clock and no timer:
// an operation without progress is given up naming its step and the netlink request it waits on, what it asks of
// the kernel afterwards is refused, the status op sees it until it settles, and one that never settles is what the
// agent restarts for. The netlink requests are the real socket's over the stand-in kernel (a test fake).
import { afterEach, describe, expect, it } from 'vitest';
import { Activity, OperationStuck, UNSETTLED_FACTOR, activity as processActivity } from '../../../agent/housekeeping/activity.ts';
import { Rtnl } from '../../../agent/netlink/client.ts';
import { NetlinkSocket } from '../../../agent/netlink/socket.ts';
import { observeNetlink } from '../../../agent/netlink/observer.ts';
import { KernelStandIn } from '../../helpers/netlink-kernel.ts';
import { RTM_GETLINK, RTM_NEWLINK } from '../../../agent/netlink/rtnetlink/index.ts';
import { capturedMessages } from '../netlink/fixtures.ts';
import { until } from '../../helpers/wait.ts';

const LIMIT = 60_000;

function rig() {
  let now = 1_000_000;
  const logs: { event: string; fields: Record<string, unknown> }[] = [];
  const gaveUp: string[] = [];
  const a = new Activity();
  a.configure({ stuckAfterMs: LIMIT, now: () => now, timer: false, log: (event, fields) => logs.push({ event, fields }), onUnrecoverable: (why) => gaveUp.push(why) });
  observeNetlink(a.observer);
  return { a, logs, gaveUp, advance: (ms: number) => void (now += ms), now: () => now };
}

afterEach(() => observeNetlink(processActivity.observer));

describe('activity watchdog', () => {
  it('gives up an operation without progress, naming its step and the request it waits on; it is refused the kernel from then on', async () => {
    const { a, logs, gaveUp, advance } = rig();
    // A kernel that never answers the first request (its own deadline is far off), and answers the rest.
    let first = true;
    const rtnl = new Rtnl(
      new NetlinkSocket(
        new KernelStandIn(() => {
          if (!first) return undefined;
          first = false;
          return { silent: true };
        }),
        { timeoutMs: 3_600_000 },
      ),
    );
    // Another socket, open and answering: what a given-up operation asks is refused before any socket sends it.
    const other = new Rtnl(new NetlinkSocket(new KernelStandIn()));
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    let after: unknown;
    const op = a.run('reconcile', async () => {
      a.step('links');
      await rtnl.setMtu(4, 1400).catch(() => undefined); // never answered until the socket is closed
      await released;
      after = await other.setMtu(4, 1400).catch((e: unknown) => e);
    });
    const outcome = op.catch((e: unknown) => e);
    // The request is on its way (the client's own awaits come first).
    await new Promise((r) => setImmediate(r));
    advance(LIMIT - 1);
    a.check();
    expect(a.stuck()).toBeUndefined();
    advance(1);
    a.check();
    const err = await outcome;
    expect(err).toBeInstanceOf(OperationStuck);
    expect((err as Error).message).toBe('links did not finish within 60 s (waiting on the kernel for: set link 4 mtu 1400)');
    expect(logs).toEqual([{ event: 'watchdog.stuck', fields: { op: 'reconcile', step: 'links', netlink_request: 'set link 4 mtu 1400', since: new Date(1_000_000).toISOString(), stuck_s: 60 } }]);
    expect(a.stuck()).toEqual({ op: 'reconcile', step: 'links', since: new Date(1_000_000).toISOString(), call: 'set link 4 mtu 1400' });
    // The stuck request ends (its socket closed), and the operation goes on: its next request never reaches the kernel.
    rtnl.close();
    release();
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    expect(after).toBeInstanceOf(OperationStuck);
    expect((after as Error).message).toBe('reconcile was given up as stuck; "set link 4 mtu 1400" was not sent');
    // Settled: no longer reported, and nothing to restart for.
    expect(a.stuck()).toBeUndefined();
    advance(UNSETTLED_FACTOR * LIMIT);
    a.check();
    expect(gaveUp).toEqual([]);
    other.close();
  });

  it('a settled request and a new step are progress', async () => {
    const { a, advance } = rig();
    const rtnl = new Rtnl(new NetlinkSocket(new KernelStandIn()));
    let go!: () => void;
    const gate = new Promise<void>((r) => (go = r));
    const op = a.run('apply', async () => {
      a.step('read back the kernel');
      await gate;
      await rtnl.setMtu(4, 1400);
      await new Promise<never>(() => undefined);
    });
    void op.catch(() => undefined);
    advance(LIMIT - 10);
    go();
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    advance(LIMIT - 10);
    a.check();
    expect(a.stuck()).toBeUndefined();
    advance(10);
    a.check();
    expect(a.stuck()).toMatchObject({ op: 'apply', step: 'read back the kernel' });
    rtnl.close();
  });

  it('a long dump whose datagrams keep coming is progress, though it settles only at its end', async () => {
    const { a, advance } = rig();
    const [newlink] = capturedMessages('reply-link-get').filter((b) => b.readUInt16LE(4) === RTM_NEWLINK);
    // Every datagram of the dump waits for the test's go (a kernel producing a long dump slowly).
    let allowed = 0;
    const kernel = new KernelStandIn((m) => (m.type === RTM_GETLINK ? { messages: [newlink!, newlink!, newlink!] } : undefined));
    const receive = kernel.receive.bind(kernel);
    kernel.receive = (buf) => (allowed > 0 ? (allowed--, receive(buf)) : -11);
    const rtnl = new Rtnl(new NetlinkSocket(kernel, { timeoutMs: 3_600_000 }));
    let links: unknown[] | undefined;
    const op = a.run('reconcile', async () => {
      a.step('read back the kernel');
      links = await rtnl.listLinks();
    });
    for (let i = 0; i < 4; i++) {
      advance(LIMIT - 1);
      a.check();
      expect(a.stuck()).toBeUndefined();
      allowed = 1;
      await until(`datagram ${i} taken`, () => allowed === 0, 10_000);
    }
    await op;
    expect(links).toHaveLength(3);
    rtnl.close();
  });

  it('an operation that never settles once given up is what the agent restarts for, said once', async () => {
    const { a, logs, gaveUp, advance } = rig();
    void a.run('apply', async () => {
      a.step('nftables commit');
      await new Promise<never>(() => undefined);
    }).catch(() => undefined);
    advance(LIMIT);
    a.check();
    advance(UNSETTLED_FACTOR * LIMIT - 1);
    a.check();
    expect(gaveUp).toEqual([]);
    advance(1);
    a.check();
    a.check();
    expect(gaveUp).toEqual(['apply stuck in nftables commit did not settle within 180 s after it was given up']);
    expect(logs.map((l) => l.event)).toEqual(['watchdog.stuck', 'watchdog.unrecoverable']);
  });

  it('names the synchronous call the event loop is in, for the watchdog thread, in shared memory', () => {
    const { a } = rig();
    const slots = new Int32Array(a.shared, 0, 8);
    const read = (off: number, len: number) => Buffer.from(new Uint8Array(a.shared, off, len)).toString('utf8');
    let inside: string | undefined;
    a.syscall('fdatasync of /var/lib/tunnel-agent/tunnels.jsonl', () => {
      inside = Atomics.load(slots, 1) === 1 ? read(64, Atomics.load(slots, 2)) : undefined;
    });
    expect(inside).toBe('fdatasync of /var/lib/tunnel-agent/tunnels.jsonl');
    expect(Atomics.load(slots, 1)).toBe(0);
    const beat = Atomics.load(slots, 0);
    a.beat();
    expect(Atomics.load(slots, 0)).toBe(beat + 1);
  });
});
