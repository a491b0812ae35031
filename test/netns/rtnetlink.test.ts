// Our rtnetlink client against this machine's kernel, in a fresh network namespace, with `ip -j` as the oracle.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { NetlinkError, Rtnl } from '../../agent/netlink/client.ts';
import { NETLINK_ROUTE } from '../../agent/netlink/message.ts';
import { NetlinkSocket } from '../../agent/netlink/socket.ts';
import { RTM_NEWADDR, encodeDumpAddresses } from '../../agent/netlink/rtnetlink/index.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { until } from '../helpers/wait.ts';

interface IpLink {
  ifname: string;
  ifindex: number;
  mtu: number;
  flags: string[];
  linkinfo?: { info_kind: string; info_data?: Record<string, unknown> };
  stats64?: { rx: { packets: number; bytes: number }; tx: { packets: number; bytes: number } };
}

async function expectNetlinkError(p: Promise<unknown>, code: string): Promise<NetlinkError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e, `expected ${code}`).toBeInstanceOf(NetlinkError);
  expect((e as NetlinkError).code).toBe(code);
  return e as NetlinkError;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('rtnetlink in a fresh namespace', () => {
  let ns: TestNetns;
  let rtnl: Rtnl;

  beforeAll(() => {
    ns = new TestNetns();
    // No IPv6 on new links: its router solicitations and DAD would change the tx counters between our
    // read and ip's in the stats64 comparison below (seen on a busy machine).
    ns.run('sysctl', '-q', '-w', 'net.ipv6.conf.default.disable_ipv6=1');
    ns.run('sysctl', '-q', '-w', 'net.ipv6.conf.all.disable_ipv6=1');
    rtnl = Rtnl.open({ netns: ns.path });
  });
  afterAll(() => {
    rtnl?.close();
    ns?.delete();
  });

  it('the socket lives in the namespace, not in ours', async () => {
    const links = await rtnl.listLinks();
    expect(links.map((l) => l.name)).toEqual(['lo']);
  });

  it('veth pair: create, mtu, up, get with stats64 (ip -d -j link as oracle)', async () => {
    await rtnl.createVeth('tgv0', 'tgv1');
    await rtnl.setMtu('tgv0', 1476);
    await rtnl.setLinkUp('tgv0');
    await rtnl.setLinkUp('tgv1');
    const [ip] = ns.ipJson<IpLink[]>('-d', 'link', 'show', 'tgv0');
    expect(ip!.linkinfo!.info_kind).toBe('veth');
    expect(ip!.mtu).toBe(1476);
    expect(ip!.flags).toContain('UP');

    // make tgv0 transmit something: an ARP request for a neighbour that is not there
    await rtnl.addAddress('tgv0', '100.64.0.1/30');
    ns.run('bash', '-c', 'echo x > /dev/udp/100.64.0.2/9');
    const sending = await rtnl.getLink('tgv0');
    expect(sending.index).toBe(ip!.ifindex);
    expect(sending).toMatchObject({ name: 'tgv0', kind: 'veth', mtu: 1476, up: true });
    await until('tgv0 to have sent a packet', async () => (await rtnl.getLink('tgv0')).stats64!.txPackets > 0n);

    // A link that is up keeps sending (ARP retries, IPv6 router solicitations) between any two reads; a
    // link that is down sends nothing, so both readers then see the same frozen counters.
    await rtnl.setLinkUp('tgv0', false);
    expect(ns.ipJson<IpLink[]>('link', 'show', 'tgv0')[0]!.flags).not.toContain('UP');
    const ours = await rtnl.getLink('tgv0');
    const [ipS] = ns.ipJson<IpLink[]>('-s', 'link', 'show', 'tgv0');
    expect(ours.up).toBe(false);
    expect(ours.stats64!.txPackets).toBeGreaterThan(0n);
    expect(Number(ours.stats64!.txPackets)).toBe(ipS!.stats64!.tx.packets);
    expect(Number(ours.stats64!.txBytes)).toBe(ipS!.stats64!.tx.bytes);
    await rtnl.setLinkUp('tgv0', true);
  });

  it('addresses: add, list, EEXIST on duplicate, delete, EADDRNOTAVAIL on second delete', async () => {
    const addrs = ns.ipJson<{ addr_info: { local: string; prefixlen: number }[] }[]>('addr', 'show', 'dev', 'tgv0');
    expect(addrs[0]!.addr_info).toContainEqual(expect.objectContaining({ local: '100.64.0.1', prefixlen: 30 }));
    expect(await rtnl.listAddresses('tgv0')).toContainEqual(expect.objectContaining({ local: '100.64.0.1', prefixLen: 30 }));
    await expectNetlinkError(rtnl.addAddress('tgv0', '100.64.0.1/30'), 'EEXIST');
    await rtnl.addAddress('tgv1', '100.64.0.5/30');
    await rtnl.deleteAddress('tgv1', '100.64.0.5/30');
    expect(ns.ipJson<{ addr_info: unknown[] }[]>('addr', 'show', 'dev', 'tgv1')[0]!.addr_info.filter((a) => JSON.stringify(a).includes('100.64.0.5'))).toEqual([]);
    await expectNetlinkError(rtnl.deleteAddress('tgv1', '100.64.0.5/30'), 'EADDRNOTAVAIL');
  });

  it('routes in numbered tables (100 in rtm_table, 1000 in RTA_TABLE); replace is idempotent', async () => {
    await rtnl.replaceRoute({ dst: 'default', gateway: '100.64.0.2', dev: 'tgv0', table: 100 });
    await rtnl.replaceRoute({ dst: 'default', gateway: '100.64.0.2', dev: 'tgv0', table: 100 });
    await rtnl.addRoute({ dst: '10.0.0.0/8', dev: 'tgv0', table: 1000 });
    expect(ns.ipJson<{ dst: string; gateway?: string; dev: string }[]>('route', 'show', 'table', '100')).toEqual([
      expect.objectContaining({ dst: 'default', gateway: '100.64.0.2', dev: 'tgv0' }),
    ]);
    expect(ns.ipJson<{ dst: string; dev: string }[]>('route', 'show', 'table', '1000')).toEqual([expect.objectContaining({ dst: '10.0.0.0/8', dev: 'tgv0' })]);
    const t1000 = await rtnl.listRoutes(1000);
    expect(t1000).toEqual([expect.objectContaining({ table: 1000, dst: '10.0.0.0/8' })]);
    expect(await rtnl.listRoutes(100)).toEqual([expect.objectContaining({ table: 100, dst: 'default', gateway: '100.64.0.2' })]);
    await expectNetlinkError(rtnl.addRoute({ dst: '10.0.0.0/8', dev: 'tgv0', table: 1000 }), 'EEXIST');
    await rtnl.deleteRoute({ dst: '10.0.0.0/8', dev: 'tgv0', table: 1000 });
    expect(ns.ipJson<unknown[]>('route', 'show', 'table', '1000')).toEqual([]);
    await expectNetlinkError(rtnl.deleteRoute({ dst: '10.0.0.0/8', dev: 'tgv0', table: 1000 }), 'ESRCH');
  });

  it('policy rules: from X lookup 100 (and lookup 1000 with a priority), ENOENT on second delete', async () => {
    await rtnl.addRule({ src: '100.64.0.2', table: 100 });
    await rtnl.addRule({ src: '100.64.0.0/30', table: 1000, priority: 1000 });
    const rules = ns.ipJson<{ priority: number; src?: string; srclen?: number; table: string }[]>('rule', 'show');
    expect(rules).toContainEqual(expect.objectContaining({ src: '100.64.0.2', table: '100' }));
    expect(rules).toContainEqual(expect.objectContaining({ priority: 1000, src: '100.64.0.0', srclen: 30, table: '1000' }));
    const ours = await rtnl.listRules();
    expect(ours).toContainEqual(expect.objectContaining({ src: '100.64.0.2/32', table: 100 }));
    expect(ours).toContainEqual(expect.objectContaining({ src: '100.64.0.0/30', table: 1000, priority: 1000 }));
    await rtnl.deleteRule({ src: '100.64.0.2', table: 100 });
    expect(ns.ipJson<{ src?: string }[]>('rule', 'show').filter((r) => r.src === '100.64.0.2')).toEqual([]);
    await expectNetlinkError(rtnl.deleteRule({ src: '100.64.0.2', table: 100 }), 'ENOENT');
  });

  it('GRE: a typed error on a kernel without GRE, a correct link on one with it', async () => {
    const spec = { name: 'tg-gre1', local: '192.0.2.1', remote: '198.51.100.1', ttl: 255, key: 42, mtu: 1476 };
    let err: unknown;
    try {
      await rtnl.createGreLink(spec);
    } catch (e) {
      err = e;
    }
    if (err !== undefined) {
      expect(err).toBeInstanceOf(NetlinkError);
      const ne = err as NetlinkError;
      expect(ne.code).toBe('EOPNOTSUPP');
      expect(ne.extackMessage).toBe('Unknown device type');
      expect(ne.message).toContain('create GRE link tg-gre1');
    } else {
      const [l] = ns.ipJson<IpLink[]>('-d', 'link', 'show', 'tg-gre1');
      expect(l!.linkinfo!.info_kind).toBe('gre');
      expect(l!.linkinfo!.info_data).toMatchObject({ local: '192.0.2.1', remote: '198.51.100.1', ttl: 255, ikey: '0.0.0.42', okey: '0.0.0.42' });
      expect(l!.mtu).toBe(1476);
      expect((await rtnl.getLink('tg-gre1')).gre).toMatchObject({ ikey: 42, okey: 42, local: '192.0.2.1' });
    }
  });

  it('unknown links: ENODEV from get, findLink gives undefined, delete is ENODEV', async () => {
    await expectNetlinkError(rtnl.getLink('nope0'), 'ENODEV');
    expect(await rtnl.findLink('nope0')).toBeUndefined();
    await expectNetlinkError(rtnl.deleteLink('nope0'), 'ENODEV');
    await expectNetlinkError(rtnl.createVeth('tgv0', 'tgv9'), 'EEXIST');
  });

  it('survives 3,000 requests in flight at once (mixed adds and gets), all answered', async () => {
    const adds = Array.from({ length: 1500 }, (_, i) => rtnl.addAddress('tgv1', `10.9.${i >> 8}.${i & 255}/32`));
    const gets = Array.from({ length: 1500 }, () => rtnl.getLink('tgv1'));
    const dup = rtnl.addAddress('tgv1', '10.9.0.0/32'); // collides with the first add: exactly one EEXIST
    const results = await Promise.allSettled([...adds, ...gets, dup]);
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(3000);
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(rejected).toHaveLength(1);
    expect((rejected[0]!.reason as NetlinkError).code).toBe('EEXIST');
    expect((await rtnl.listAddresses('tgv1')).filter((a) => a.local?.startsWith('10.9.'))).toHaveLength(1500);
    // Filters applied before decoding: only tgv1's addresses, only the wanted link.
    const tgv1 = await rtnl.getLink('tgv1');
    const filtered = await rtnl.listAddresses(undefined, { keepIndex: (i) => i === tgv1.index });
    expect(filtered.length).toBeGreaterThanOrEqual(1500);
    expect(filtered.every((a) => a.index === tgv1.index)).toBe(true);
    expect((await rtnl.listLinks({ keepName: (n) => n === 'tgv1' })).map((l) => [l.name, l.index])).toEqual([['tgv1', tgv1.index]]);
    const ipCount = ns.run('ip', '-4', '-o', 'addr', 'show', 'dev', 'tgv1').trim().split('\n').length;
    expect(ipCount).toBe(1500);
  });

  it('strict dumps: the kernel itself sends one link\'s addresses only (not 1,500 of another link)', async () => {
    await rtnl.addAddress('tgv0', '100.64.7.1/32');
    const tgv0 = await rtnl.getLink('tgv0');
    const replies = async (strictDumps: boolean): Promise<number> => {
      const sock = NetlinkSocket.open(NETLINK_ROUTE, { netns: ns.path, strictDumps });
      try {
        const seq = sock.allocSeq();
        const res = await sock.request({ data: encodeDumpAddresses(seq, undefined, tgv0.index), seqs: [seq], dump: true });
        return res.replies.get(seq)!.messages.filter((m) => m.type === RTM_NEWADDR).length;
      } finally {
        sock.close();
      }
    };
    // Without strict checking the kernel ignores the index and sends every address (tgv1's 1,500 too).
    expect(await replies(false)).toBeGreaterThanOrEqual(1500);
    const own = ns.run('ip', '-4', '-o', 'addr', 'show', 'dev', 'tgv0').trim().split('\n').length;
    expect(await replies(true)).toBe(own);
    expect(own).toBeLessThan(10);
    expect((await rtnl.listAddresses('tgv0')).map((a) => a.local)).toContain('100.64.7.1');
    await rtnl.deleteAddress('tgv0', '100.64.7.1/32');
  });

  it('delete by name removes the pair', async () => {
    await rtnl.deleteLink('tgv0');
    expect(ns.ipJson<IpLink[]>('link', 'show').map((l) => l.ifname)).toEqual(['lo']);
  });
});
