import { describe, expect, it } from 'vitest';
import { AttrTable, NLA_F_NESTED, NetlinkParseError, NlWriter, bytesToIpv4, ipv4ToBytes, parseAttrs, readString, readU32be } from '../../../agent/netlink/attrs.ts';
import {
  NLMSG_DONE,
  NLMSG_ERROR,
  NLM_F_ACK_TLVS,
  NLM_F_CAPPED,
  NLMSGERR_ATTR_MSG,
  NLMSGERR_ATTR_OFFS,
  NetlinkError,
  beginMessage,
  endMessage,
  errnoName,
  normaliseSeq,
  parseError,
  parseMessages,
} from '../../../agent/netlink/message.ts';
import { RTM_NEWLINK } from '../../../agent/netlink/rtnetlink/index.ts';
import { loadCapture } from './fixtures.ts';

describe('attributes', () => {
  it('pads to 4 bytes but keeps nla_len unpadded', () => {
    const w = new NlWriter(8); // small on purpose: growth must copy correctly
    w.attrString(3, 'tg1x').attrU8(8, 255).attrU16be(2, 0x2000).attrU32be(4, 42);
    const b = w.toBuffer();
    expect(b.toString('hex')).toBe('0900030074673178000000000500080' + '0ff000000' + '0600020020000000' + '080004000000002a');
  });
  it('nests with and without NLA_F_NESTED, and parses them back', () => {
    const w = new NlWriter();
    w.nest(1, (n) => n.attrU32be(2, 7).nest(3, (m) => m.attrStringNoNul(1, 'gre'), false));
    const [outer] = parseAttrs(w.toBuffer());
    expect(outer!.nested).toBe(true);
    expect(outer!.type).toBe(1);
    const inner = new AttrTable(outer!.data);
    expect(inner.u32be(2)).toBe(7);
    expect(inner.nested(3)!.string(1)).toBe('gre');
    expect(w.toBuffer().readUInt16LE(2)).toBe(1 | NLA_F_NESTED);
  });
  it('refuses an attribute running past its buffer', () => {
    expect(() => parseAttrs(Buffer.from('08000100aabb', 'hex'))).toThrow(NetlinkParseError);
    expect(() => parseAttrs(Buffer.from('02000100', 'hex'))).toThrow(NetlinkParseError);
  });
  it('refuses an attribute over 64 KiB (nla_len is a u16)', () => {
    expect(() => new NlWriter().attrBytes(1, Buffer.alloc(70_000))).toThrow(RangeError);
  });
  it('big-endian vs host-endian helpers', () => {
    const w = new NlWriter();
    w.u32(1).u32be(1).u64be(0x0102030405060708n);
    expect(w.toBuffer().toString('hex')).toBe('01000000' + '00000001' + '0102030405060708');
    expect(readU32be(Buffer.from('0000002a', 'hex'))).toBe(42);
    expect(readString(Buffer.from('tg1\0\0', 'latin1'))).toBe('tg1');
    expect(bytesToIpv4(ipv4ToBytes('198.51.100.1'))).toBe('198.51.100.1');
    for (const bad of ['256.1.1.1', '1.2.3', '1.2.3.4.5', '1..2.3', 'a.b.c.d', '1.2.3.4 ', '', '1.2.3.0004']) {
      expect(() => ipv4ToBytes(bad), bad).toThrow(RangeError);
    }
    expect([...ipv4ToBytes('255.0.10.1')]).toEqual([255, 0, 10, 1]);
  });
});

describe('messages', () => {
  it('frames, pads and parses several messages in one buffer', () => {
    const w = new NlWriter();
    let s = beginMessage(w, 16, 5, 7);
    w.bytes(Buffer.from([1, 2, 3]));
    endMessage(w, s);
    s = beginMessage(w, NLMSG_DONE, 2, 8);
    endMessage(w, s);
    const msgs = parseMessages(w.toBuffer());
    expect(msgs.map((m) => [m.type, m.flags, m.seq, m.len])).toEqual([
      [16, 5, 7, 19],
      [NLMSG_DONE, 2, 8, 16],
    ]);
    expect([...msgs[0]!.payload]).toEqual([1, 2, 3]);
    expect(parseMessages(normaliseSeq(w.toBuffer(), 0)).map((m) => m.seq)).toEqual([0, 0]);
  });
  it('refuses a truncated message', () => {
    expect(() => parseMessages(Buffer.from('40000000100005000000000000000000', 'hex'))).toThrow(NetlinkParseError);
  });

  it('decodes the kernel’s real extack for `ip link add … type gre` (not capped: request echoed)', () => {
    const replies = loadCapture('reply-link-gre-err').calls.flatMap((c) => parseMessages(c));
    const err = replies.filter((m) => m.type === NLMSG_ERROR).map(parseError).find((e) => e.request.type === RTM_NEWLINK && e.errno !== 0 && e.request.seq !== 0);
    expect(err).toBeDefined();
    expect(errnoName(err!.errno)).toBe('EOPNOTSUPP');
    expect(err!.extack.message).toBe('Unknown device type');
    expect(err!.request.len).toBe(168);
  });

  it('decodes a capped error with message and offset TLVs', () => {
    const w = new NlWriter();
    const s = beginMessage(w, NLMSG_ERROR, NLM_F_CAPPED | NLM_F_ACK_TLVS, 42);
    w.i32(-17); // -EEXIST
    w.u32(60).u16(0xa0c).u16(0x405).u32(42).u32(0); // original header only
    w.attrString(NLMSGERR_ATTR_MSG, 'Set element exists').attrU32(NLMSGERR_ATTR_OFFS, 36);
    endMessage(w, s);
    const e = parseError(parseMessages(w.toBuffer())[0]!);
    expect(e).toEqual({ errno: 17, request: { len: 60, type: 0xa0c, flags: 0x405, seq: 42, pid: 0 }, extack: { message: 'Set element exists', offset: 36 } });
    const ne = new NetlinkError({ errno: e.errno, seq: 42, index: 3, extack: e.extack, operation: 'add element' });
    expect(ne).toBeInstanceOf(Error);
    expect(ne.code).toBe('EEXIST');
    expect(ne.extackMessage).toBe('Set element exists');
    expect(ne.message).toBe('add element: EEXIST (Set element exists) [batch message 3]');
  });
  it('an ack is errno 0', () => {
    const w = new NlWriter();
    const s = beginMessage(w, NLMSG_ERROR, NLM_F_CAPPED, 9);
    w.i32(0).u32(16).u16(16).u16(5).u32(9).u32(0);
    endMessage(w, s);
    expect(parseError(parseMessages(w.toBuffer())[0]!).errno).toBe(0);
  });
});
