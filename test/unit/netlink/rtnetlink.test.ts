// Byte-exact: our rtnetlink requests against what iproute2 6.1 sent for the same command (strace captures).
import { describe, expect, it } from 'vitest';
import { readU16 } from '../../../agent/netlink/attrs.ts';
import { NLM_F_REQUEST, parseMessages } from '../../../agent/netlink/message.ts';
import {
  GRE_KEY,
  RTEXT_FILTER_SKIP_STATS,
  RTEXT_FILTER_VF,
  RTM_DELADDR,
  RTM_DELLINK,
  RTM_DELROUTE,
  RTM_DELRULE,
  RTM_GETLINK,
  RTM_NEWADDR,
  RTM_NEWLINK,
  RTM_NEWROUTE,
  RTM_NEWRULE,
  decodeLink,
  encodeDelAddress,
  encodeDelLink,
  encodeDelRoute,
  encodeDelRule,
  encodeGetLink,
  encodeNewAddress,
  encodeNewGreLink,
  encodeNewRoute,
  encodeNewRule,
  encodeNewVeth,
  encodeReplaceRoute,
  encodeSetLinkMtu,
  encodeSetLinkGroup,
  encodeDelLinkGroup,
  encodeSetLinkUp,
} from '../../../agent/netlink/rtnetlink/index.ts';
import { lastOfType, loadCapture, norm } from './fixtures.ts';

// capture.sh creates the veth first; in the fresh namespace tgv0 got ifindex 3 (its peer tgv1 is 2).
const TGV0 = 3;

describe('GRE link (kernel here has no GRE: only strace saw these)', () => {
  it('with key: ip link add tg1 type gre local 192.0.2.1 remote 198.51.100.1 ttl 255 key 42', () => {
    const ours = encodeNewGreLink({ name: 'tg1', local: '192.0.2.1', remote: '198.51.100.1', ttl: 255, key: 42 }, 1);
    expect(norm(ours)).toBe(norm(lastOfType('link-gre-key', RTM_NEWLINK)));
  });
  it('without key', () => {
    const ours = encodeNewGreLink({ name: 'tg1', local: '192.0.2.1', remote: '198.51.100.1', ttl: 255 }, 1);
    expect(norm(ours)).toBe(norm(lastOfType('link-gre-nokey', RTM_NEWLINK)));
  });
  it('with mtu 1476 and the largest key (network byte order all the way)', () => {
    const ours = encodeNewGreLink({ name: 'tg1', local: '192.0.2.1', remote: '198.51.100.1', ttl: 255, key: 0xffffffff, mtu: 1476 }, 1);
    expect(norm(ours)).toBe(norm(lastOfType('link-gre-mtu', RTM_NEWLINK)));
  });
  it('key 42 is on the wire as 00 00 00 2a and GRE_KEY as 20 00', () => {
    const hex = encodeNewGreLink({ name: 'tg1', local: '192.0.2.1', remote: '198.51.100.1', key: 42 }, 1).toString('hex');
    expect(hex).toContain('080004000000002a'); // IFLA_GRE_IKEY
    expect(hex).toContain('0600020020000000'); // IFLA_GRE_IFLAGS
    expect(GRE_KEY).toBe(0x2000);
  });
  it('rejects a key that does not fit 32 bits', () => {
    expect(() => encodeNewGreLink({ name: 'x', local: '1.1.1.1', remote: '2.2.2.2', key: 2 ** 32 }, 1)).toThrow(RangeError);
    expect(() => encodeNewGreLink({ name: 'x', local: '1.1.1', remote: '2.2.2.2' }, 1)).toThrow(RangeError);
  });
});

describe('links', () => {
  it('veth pair', () => {
    expect(norm(encodeNewVeth('tgv0', 'tgv1', 1))).toBe(norm(lastOfType('link-veth', RTM_NEWLINK)));
  });
  it('up, down, mtu, delete', () => {
    expect(norm(encodeSetLinkUp(TGV0, true, 1))).toBe(norm(lastOfType('link-up', RTM_NEWLINK)));
    expect(norm(encodeSetLinkUp(TGV0, false, 1))).toBe(norm(lastOfType('link-down', RTM_NEWLINK)));
    expect(norm(encodeSetLinkMtu(TGV0, 1476, 1))).toBe(norm(lastOfType('link-mtu', RTM_NEWLINK)));
    expect(norm(encodeDelLink(TGV0, 1))).toBe(norm(lastOfType('link-del', RTM_DELLINK)));
  });
  it('device group: set on one link, delete the group', () => {
    // capture.sh: tgv2 is ifindex 5 in its namespace; group 4660 is 0x1234
    expect(norm(encodeSetLinkGroup(5, 4660, 1))).toBe(norm(lastOfType('link-group', RTM_NEWLINK)));
    expect(norm(encodeDelLinkGroup(4660, 1))).toBe(norm(lastOfType('link-del-group', RTM_DELLINK)));
  });
  it('get by name, as ip resolves it (ext mask VF|SKIP_STATS, no ack)', () => {
    const ours = encodeGetLink({ name: 'tgv0' }, 1, { extMask: RTEXT_FILTER_VF | RTEXT_FILTER_SKIP_STATS, flags: NLM_F_REQUEST });
    // the first GETLINK of `ip link del tgv0` is the name lookup
    expect(norm(ours)).toBe(norm(lastOfType('link-del', RTM_GETLINK)));
  });
  it('decodes the kernel reply to `ip -s -s link show`: name, mtu, kind veth, stats64', () => {
    const replies = loadCapture('reply-link-get').calls.flatMap((c) => parseMessages(c));
    const links = replies.filter((m) => m.type === RTM_NEWLINK).map(decodeLink);
    const tgv0 = links.find((l) => l.name === 'tgv0');
    expect(tgv0).toBeDefined();
    expect(tgv0!.index).toBe(TGV0);
    expect(tgv0!.kind).toBe('veth');
    expect(tgv0!.mtu).toBe(1476); // capture.sh set it before this capture
    expect(tgv0!.up).toBe(false);
    expect(tgv0!.stats64).toBeDefined();
    expect(typeof tgv0!.stats64!.rxBytes).toBe('bigint');
  });
  it('decodes GRE attributes from our own encoding (ikey, flags, addresses)', () => {
    const enc = encodeNewGreLink({ name: 'tg9', local: '192.0.2.1', remote: '198.51.100.1', ttl: 64, key: 7, mtu: 1476 }, 5);
    const l = decodeLink(parseMessages(enc)[0]!);
    expect(l).toMatchObject({ name: 'tg9', mtu: 1476, kind: 'gre', gre: { local: '192.0.2.1', remote: '198.51.100.1', ttl: 64, ikey: 7, okey: 7, iflags: GRE_KEY, oflags: GRE_KEY } });
  });
});

describe('addresses, routes, rules', () => {
  it('ip addr add/del 100.64.0.1/30 dev tgv0', () => {
    const spec = { index: TGV0, address: '100.64.0.1', prefixLen: 30 };
    expect(norm(encodeNewAddress(spec, 1))).toBe(norm(lastOfType('addr-add', RTM_NEWADDR)));
    expect(norm(encodeDelAddress(spec, 1))).toBe(norm(lastOfType('addr-del', RTM_DELADDR)));
  });
  it('ip route add 10.0.0.0/8 dev tgv0 table 100', () => {
    expect(norm(encodeNewRoute({ dst: '10.0.0.0/8', oif: TGV0, table: 100 }, 1))).toBe(norm(lastOfType('route-add-t100', RTM_NEWROUTE)));
  });
  it('ip route replace default via 100.64.0.2 dev tgv0 table 100', () => {
    expect(norm(encodeReplaceRoute({ dst: 'default', gateway: '100.64.0.2', oif: TGV0, table: 100 }, 1))).toBe(norm(lastOfType('route-replace-t100', RTM_NEWROUTE)));
  });
  it('ip route replace 10.0.0.0/8 dev tgv0 table 1000 (RTA_TABLE above 255)', () => {
    expect(norm(encodeReplaceRoute({ dst: '10.0.0.0/8', oif: TGV0, table: 1000 }, 1))).toBe(norm(lastOfType('route-replace-t1000', RTM_NEWROUTE)));
  });
  it('ip route del 10.0.0.0/8 dev tgv0 table 100', () => {
    expect(norm(encodeDelRoute({ dst: '10.0.0.0/8', oif: TGV0, table: 100 }, 1))).toBe(norm(lastOfType('route-del-t100', RTM_DELROUTE)));
  });
  it('ip rule add/del from 100.64.0.2 lookup 100', () => {
    expect(norm(encodeNewRule({ src: '100.64.0.2', table: 100 }, 1))).toBe(norm(lastOfType('rule-add', RTM_NEWRULE)));
    expect(norm(encodeDelRule({ src: '100.64.0.2', table: 100 }, 1))).toBe(norm(lastOfType('rule-del', RTM_DELRULE)));
  });
  it('ip rule add from 100.64.0.0/30 lookup 1000 pref 1000', () => {
    expect(norm(encodeNewRule({ src: '100.64.0.0/30', table: 1000, priority: 1000 }, 1))).toBe(norm(lastOfType('rule-add-pref', RTM_NEWRULE)));
  });
  it('the seq we pass is the seq on the wire', () => {
    const b = encodeNewRule({ src: '100.64.0.2', table: 100 }, 0xdeadbeef);
    expect(parseMessages(b)[0]!.seq).toBe(0xdeadbeef);
    expect(readU16(b.subarray(4))).toBe(RTM_NEWRULE);
  });
});
