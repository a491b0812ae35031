// Byte-exact: our nftables batches against what nft 1.0.6 sent for the same ruleset (strace captures),
// plus the element-list splitting and the decoders (fed with the kernel's own replies, captured too).
import { describe, expect, it } from 'vitest';
import { parseAttrs } from '../../../agent/netlink/attrs.ts';
import { NLM_F_ACK, parseMessages } from '../../../agent/netlink/message.ts';
import {
  NFNL_BATCH_GENID,
  NFNL_MSG_BATCH_BEGIN,
  NFNL_MSG_BATCH_END,
  NFT_MSG_GETSETELEM,
  NFT_MSG_NEWOBJ,
  NFT_MSG_NEWSETELEM,
  NFT_OBJECT_COUNTER,
  NftBatch,
  decodeIpv4MapElements,
  decodeObject,
  decodeSetElements,
  eachElementKeyRange,
  encodeGetSetElement,
  encodeGetSetElements,
  ipv4MapElement,
  nftType,
} from '../../../agent/netlink/nftables/index.ts';
import { addTunnelgateRuleset } from '../../../agent/netlink/ruleset-table.ts';
import { synproxyName } from '../../../agent/netlink/ruleset.ts';
import { addDynamicChain, addSynproxyObject, deleteDynamicChain } from '../../../agent/netlink/ruleset-chains.ts';
import { FASTPATH_PRIORITY, addFastPath } from '../../../agent/netlink/ruleset-fastpath.ts';
import type { SetElement } from '../../../agent/netlink/nftables/index.ts';
import { tunnelElements } from '../../../agent/dataplane/policy.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { capturedMessages, loadCapture, norm } from './fixtures.ts';
import { CAPTURED_RULESET } from '../../fixtures/netlink/ruleset.ts';
import { TEXT_CHAIN_SIZES, rulesetNftText } from '../../netns/ruleset-text.ts';

/** The sendmsg that carried nft's transaction: BATCH_BEGIN first, and something between it and END. */
function capturedBatch(name: string): Buffer {
  const call = loadCapture(name).calls.find((c) => {
    const m = parseMessages(c);
    return m.length > 2 && m[0]!.type === NFNL_MSG_BATCH_BEGIN && m.at(-1)!.type === NFNL_MSG_BATCH_END;
  });
  if (!call) throw new Error(`no batch in ${name}`);
  return call;
}

const encodeLikeNft = (b: NftBatch): Buffer => b.encode({ firstSeq: 0, ack: false }).data;

/**
 * The id nft sends with its reference to drop_rate_limited: its place among the table's sets (16th), after the ids
 * of the batch's new sets (one for a meter, two for the flow caps).
 */
const dropRateLimitedId = (newSets: number): number => 16 + newSets;

describe('nft batches, byte for byte', () => {
  // One text for the table: the capture below was taken of the text twin (test/netns/ruleset-text.ts), which
  // test/netns/ruleset-text.test.ts holds equal to the agent's table as the kernel lists it. Edit the twin,
  // and this fails until `TG_CAPTURE_ONLY=nft-setup bash test/fixtures/netlink/capture.sh` re-captures it.
  it('nft-setup.hex is a capture of the text twin as it is now', () => {
    expect(loadCapture('nft-setup').input).toBe(rulesetNftText(CAPTURED_RULESET));
  });

  it('the whole table: maps, chains, counter, the bogons interval set and its elements, objref counter rules, dnat rule with { tcp, udp }, MSS clamp', () => {
    const b = new NftBatch();
    addTunnelgateRuleset(b, { table: 'tunnelgate', ifnamePrefix: 'tg-', counters: ['tun-1'], bogons: CAPTURED_RULESET.bogons });
    const ours = parseMessages(encodeLikeNft(b));
    const theirs = parseMessages(capturedBatch('nft-setup'));
    // message by message first, for a readable failure, then the whole datagram
    expect(ours.map((m) => m.type)).toEqual(theirs.map((m) => m.type));
    ours.forEach((m, i) => expect(m.payload.toString('hex'), `message ${i}`).toBe(theirs[i]!.payload.toString('hex')));
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-setup')));
  });

  it('add two map elements', () => {
    const b = new NftBatch();
    b.addElements({ table: 'tunnelgate', set: 'protected', setId: 1, elements: [ipv4MapElement('203.0.113.1', '100.64.0.2'), ipv4MapElement('203.0.113.2', '100.64.0.6')] });
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-elem-add')));
  });

  it('change an element: delete + add in one batch', () => {
    const b = new NftBatch();
    b.deleteElements({ table: 'tunnelgate', set: 'protected', elements: [ipv4MapElement('203.0.113.1', '100.64.0.2')] });
    b.addElements({ table: 'tunnelgate', set: 'protected', setId: 1, elements: [ipv4MapElement('203.0.113.1', '100.64.0.10')] });
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-elem-change')));
  });

  it('named counter add and delete, table delete', () => {
    expect(norm(encodeLikeNft(new NftBatch().addCounter({ table: 'tunnelgate', name: 'tun-2' })))).toBe(norm(capturedBatch('nft-counter-add')));
    expect(norm(encodeLikeNft(new NftBatch().deleteCounter('tunnelgate', 'tun-2')))).toBe(norm(capturedBatch('nft-counter-del')));
    expect(norm(encodeLikeNft(new NftBatch().deleteTable('tunnelgate')))).toBe(norm(capturedBatch('nft-table-del')));
  });

  it("a tunnel's meter chain: its set (dynamic, timeout, size), the update with a limit, the inverted lookups, the rule's own limit", () => {
    const b = new NftBatch();
    // nft names the drop map by its cache id too; the kernel finds an existing set by name.
    addDynamicChain(b, 'tunnelgate', 'ratelimit_tg-t1_100', TEXT_CHAIN_SIZES, { dropMapId: dropRateLimitedId(1) });
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-meter-add')));
  });

  it('the flow caps of a max_flows value: two sets, a limit per protected IP, ct count per hash bucket (jhash of address and port)', () => {
    const b = new NftBatch();
    addDynamicChain(b, 'tunnelgate', 'flows_65536', TEXT_CHAIN_SIZES, { dropMapId: dropRateLimitedId(2) });
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-flows-add')));
  });

  it('a synproxy object (mss, wscale, timestamp and sack-perm)', () => {
    const b = new NftBatch();
    addSynproxyObject(b, 'tunnelgate', 1436);
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-synproxy-add')));
  });

  it("one tunnel's policy elements: concatenations with an ifname, port blocks, objrefs, a jump", () => {
    const spec: TunnelSpec = {
      id: '00000000-0000-4000-8000-000000000001',
      tunnel_name: 'tg-t1',
      protected_ip: '203.0.113.1',
      origin_ip: '198.18.0.1',
      edge_ip: '192.0.2.2',
      edge_inner: '100.64.0.1/30',
      origin_inner: '100.64.0.2/30',
      mtu: 1476,
      policy: { ports: [[80, 80]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 100, drop_fragments: true },
    };
    // 80 is a block of one port, 27008-27023 one of 16, "*" every port: three of the allowlist's five sets.
    const udp = tunnelElements({ ...spec, policy: { ...spec.policy!, ports: [[27008, 27023]], protocol: 'udp' } });
    const all = tunnelElements({ ...spec, policy: { ...spec.policy!, ports: '*', protocol: 'udp' } });
    const els = tunnelElements(spec);
    const one = (set: string, from = els): SetElement[] => from.filter((e) => e.set === set).map((e) => e.el);
    // The capture's drop maps point at the one counter that existed then.
    const ctr = (x: SetElement[]): SetElement[] => x.map((e) => ({ ...e, objref: 'tun-1.not_allowed' }));
    const b = new NftBatch();
    // nft sends each set's cache id with its elements; the kernel finds an existing set by name.
    b.addElements({ table: 'tunnelgate', set: 'replies', setId: 3, elements: one('replies') });
    b.addElements({ table: 'tunnelgate', set: 'origins', setId: 4, elements: one('origins') });
    expect(one('allowed_1')).toHaveLength(1);
    b.addElements({ table: 'tunnelgate', set: 'allowed_1', setId: 9, elements: one('allowed_1') });
    expect(one('allowed_16', udp)).toHaveLength(1);
    b.addElements({ table: 'tunnelgate', set: 'allowed_16', setId: 8, elements: one('allowed_16', udp) });
    b.addElements({ table: 'tunnelgate', set: 'allowed_all', setId: 5, elements: one('allowed_all', all) });
    b.addElements({ table: 'tunnelgate', set: 'fragments', setId: 10, elements: one('fragments') });
    b.addElements({ table: 'tunnelgate', set: 'syn_proxy', setId: 12, elements: one('syn_proxy') });
    b.addElements({ table: 'tunnelgate', set: 'rate_limits', setId: 13, elements: one('rate_limits') });
    b.addElements({ table: 'tunnelgate', set: 'flow_limits', setId: 20, elements: one('flow_limits') });
    b.addElements({ table: 'tunnelgate', set: 'drop_spoofed', setId: 14, elements: ctr(one('drop_spoofed')) });
    b.addElements({ table: 'tunnelgate', set: 'drop_not_allowed', setId: 15, elements: ctr(one('drop_not_allowed')) });
    b.addElements({ table: 'tunnelgate', set: 'drop_spoofed_in', setId: 21, elements: ctr(one('drop_spoofed_in')) });
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-policy-elements')));
    // Deleting sends the key alone.
    const d = new NftBatch();
    d.deleteElements({ table: 'tunnelgate', set: 'allowed_1', elements: one('allowed_1') });
    d.deleteElements({ table: 'tunnelgate', set: 'rate_limits', elements: one('rate_limits') });
    d.deleteElements({ table: 'tunnelgate', set: 'replies', elements: one('replies') });
    expect(norm(encodeLikeNft(d))).toBe(norm(capturedBatch('nft-policy-elements-del')));
  });

  it('the fast path: a flowtable on two links with the counter flag (devices in the reverse of their text order, as nft sends them), and the rule offloading into it', () => {
    const b = new NftBatch();
    // the capture's text: hook ingress priority -10; devices = { "up0", "up1" }
    expect(FASTPATH_PRIORITY).toBe(-10);
    addFastPath(b, { table: 'tunnelgate', devices: ['up1', 'up0'], ifnamePrefix: 'tg-', counter: true }, 'guard');
    const ours = parseMessages(encodeLikeNft(b));
    const theirs = parseMessages(capturedBatch('nft-flowtable-add'));
    expect(ours.map((m) => m.type)).toEqual(theirs.map((m) => m.type));
    ours.forEach((m, i) => expect(m.payload.toString('hex'), `message ${i}`).toBe(theirs[i]!.payload.toString('hex')));
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-flowtable-add')));
  });

  it('deleting the flowtable', () => {
    expect(norm(encodeLikeNft(new NftBatch().deleteFlowtable('tunnelgate', 'fastpath')))).toBe(norm(capturedBatch('nft-flowtable-del')));
  });

  it('removing chains made by value (flush, delete chain, delete its sets) and a synproxy object', () => {
    const b = new NftBatch();
    deleteDynamicChain(b, 'tunnelgate', 'ratelimit_tg-t1_100');
    deleteDynamicChain(b, 'tunnelgate', 'flows_65536');
    b.deleteSynproxy('tunnelgate', synproxyName(1436));
    expect(norm(encodeLikeNft(b))).toBe(norm(capturedBatch('nft-dynchains-del')));
  });

  it('GETSETELEM dump request as `nft list map` sends it', () => {
    const theirs = capturedMessages('nft-list-map').find((b) => b.readUInt16LE(4) === nftType(NFT_MSG_GETSETELEM));
    expect(theirs).toBeDefined();
    const ours = encodeGetSetElements('tunnelgate', 'protected', 0);
    // nft leaves its last alignment byte uninitialised (0x0e here); it lies outside every nla_len, so the
    // kernel never reads it. Everything up to the end of the last attribute must match exactly.
    const lastAttr = parseAttrs(parseMessages(ours)[0]!.payload.subarray(4)).at(-1)!;
    const end = lastAttr.data.byteOffset - ours.byteOffset + lastAttr.data.length;
    expect(end).toBe(ours.length - 1);
    expect(ours[end]).toBe(0);
    expect(ours.length).toBe(theirs!.length);
    expect(norm(ours).slice(0, end * 2)).toBe(norm(theirs!).slice(0, end * 2));
  });

  it('GETSETELEM of one key, not a dump, as `nft get element` sends it', () => {
    const theirs = capturedMessages('nft-get-elem').filter((b) => b.readUInt16LE(4) === nftType(NFT_MSG_GETSETELEM)).at(-1)!;
    // nft's request for the element (REQUEST | ACK, no DUMP), after its cache dumps of every set.
    expect(theirs.readUInt16LE(6)).toBe(0x5);
    const ours = encodeGetSetElement('tunnelgate', 'protected', ipv4MapElement('203.0.113.1', '0.0.0.0'), 0);
    // nft leaves the set name's two alignment bytes uninitialised (outside its nla_len, never read by the
    // kernel); ours are zero. Every other byte must match.
    expect(ours.length).toBe(theirs.length);
    const pad = 16 + 4 + 4 + 'protected'.length + 1; // nlmsghdr, nfgenmsg, attribute header, name and NUL
    expect([ours[pad], ours[pad + 1]]).toEqual([0, 0]);
    expect(norm(ours).slice(0, pad * 2)).toBe(norm(theirs).slice(0, pad * 2));
    expect(norm(ours).slice((pad + 2) * 2)).toBe(norm(theirs).slice((pad + 2) * 2));
  });
});

describe('batch framing', () => {
  it('ack mode sets NLM_F_ACK on every message but BEGIN/END, and seqs run consecutively', () => {
    const b = new NftBatch().addTable('t').addCounter({ table: 't', name: 'c' });
    const enc = b.encode({ firstSeq: 100, ack: true });
    const msgs = parseMessages(enc.data);
    expect(msgs.map((m) => m.seq)).toEqual([100, 101, 102, 103]);
    expect(msgs.map((m) => (m.flags & NLM_F_ACK) !== 0)).toEqual([false, true, true, false]);
    expect(enc.messages.map((m) => [m.index, m.seq])).toEqual([
      [0, 101],
      [1, 102],
    ]);
    expect(enc.beginSeq).toBe(100);
    expect(enc.endSeq).toBe(103);
  });
  it('genid goes in BATCH_BEGIN as NFNL_BATCH_GENID (be32)', () => {
    const enc = new NftBatch().addTable('t').encode({ firstSeq: 1, ack: true, genId: 0x1234 });
    const begin = parseMessages(enc.data)[0]!;
    expect(begin.payload.subarray(0, 4).toString('hex')).toBe('0000000a'); // AF_UNSPEC, v0, res_id NFTABLES
    const attrs = parseAttrs(begin.payload.subarray(4));
    expect(attrs).toHaveLength(1);
    expect(attrs[0]!.type).toBe(NFNL_BATCH_GENID);
    expect(attrs[0]!.data.toString('hex')).toBe('00001234');
  });
  it('encodes into a reused buffer byte for byte as into a fresh one, whatever that buffer held, growing past it if it must', () => {
    const build = (b: NftBatch) =>
      b
        .addTable('t')
        .addCounter({ table: 't', name: 'c' })
        .addElements({ table: 't', set: 's', elements: [{ key: Buffer.from([10, 0, 0, 1]) }, { key: Buffer.from([10, 0, 0, 2, 6]) }] })
        .encode({ firstSeq: 9, ack: true }).data;
    const fresh = Buffer.from(build(new NftBatch()));
    const dirty = Buffer.alloc(64 * 1024, 0xa5);
    const reused = new NftBatch({ storage: dirty });
    expect(Buffer.from(build(reused))).toEqual(fresh);
    expect(reused.storage).toBe(dirty);
    const small = new NftBatch({ storage: Buffer.alloc(40, 0xa5) });
    expect(Buffer.from(build(small))).toEqual(fresh);
    expect(small.storage.length).toBeGreaterThanOrEqual(fresh.length);
  });
  it('encodes in place: encoded again with other seqs, flags or genid, every message but the headers is the same', () => {
    const b = new NftBatch().addTable('t').addCounter({ table: 't', name: 'c' }).addChain({ table: 't', name: 'x' });
    const a = parseMessages(Buffer.from(b.encode({ firstSeq: 1, ack: false, genId: 7 }).data));
    const c = parseMessages(b.encode({ firstSeq: 500, ack: true }).data);
    expect(c.map((m) => m.seq)).toEqual([500, 501, 502, 503, 504]);
    expect(c.map((m) => (m.flags & NLM_F_ACK) !== 0)).toEqual([false, true, true, true, false]);
    expect(a.map((m) => (m.flags & NLM_F_ACK) !== 0)).toEqual([false, false, false, false, false]);
    expect(a.map((m) => m.type)).toEqual(c.map((m) => m.type));
    expect(a.slice(1).map((m) => m.payload.toString('hex'))).toEqual(c.slice(1).map((m) => m.payload.toString('hex')));
    // BEGIN lost its genid attribute, and the buffer starts at BEGIN either way
    expect(a[0]!.len - c[0]!.len).toBe(8);
    expect(() => b.addTable('late')).toThrow(/after encode/);
  });
});

describe('element lists split under 64 KiB', () => {
  const els = Array.from({ length: 10_000 }, (_, i) => ipv4MapElement(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, `100.64.${(i >> 8) & 255}.${i & 255}`));

  it('10,000 elements: every message under 64 KiB, nothing lost or reordered', () => {
    const b = new NftBatch().addElements({ table: 'tunnelgate', set: 'protected', elements: els });
    const enc = b.encode({ firstSeq: 1, ack: true });
    const msgs = parseMessages(enc.data).slice(1, -1);
    expect(msgs.length).toBeGreaterThan(1);
    for (const m of msgs) expect(m.len).toBeLessThan(65536);
    const back = decodeIpv4MapElements(msgs);
    expect(back.size).toBe(10_000);
    expect([...back.keys()]).toEqual(els.map((e) => `${e.key[0]}.${e.key[1]}.${e.key[2]}.${e.key[3]}`));
    expect(back.get('10.0.39.15')).toBe('100.64.39.15');
  });
  it('honours a smaller limit, filling each message as far as it goes', () => {
    const b = new NftBatch({ maxMessageBytes: 1000 }).addElements({ table: 'tunnelgate', set: 'protected', elements: els.slice(0, 100) });
    const msgs = parseMessages(b.encode({ firstSeq: 1, ack: true }).data).slice(1, -1);
    expect(msgs.length).toBeGreaterThan(3);
    msgs.forEach((m, i) => {
      expect(m.len).toBeLessThanOrEqual(1000);
      if (i < msgs.length - 1) expect(m.len).toBeGreaterThan(1000 - 28); // could not take one more element
    });
    expect(msgs.reduce((n, m) => n + decodeSetElements(m).elements.length, 0)).toBe(100);
    expect(msgs[0]!.type).toBe(nftType(NFT_MSG_NEWSETELEM));
  });
});

describe('decoders on the kernel replies', () => {
  it('lists the map back from `nft list map` replies', () => {
    const msgs = loadCapture('reply-nft-list-map').calls.flatMap((c) => parseMessages(c)).filter((m) => m.type === nftType(NFT_MSG_NEWSETELEM));
    const map = decodeIpv4MapElements(msgs);
    expect(Object.fromEntries(map)).toEqual({ '203.0.113.1': '100.64.0.10', '203.0.113.2': '100.64.0.6' });
  });
  it('decodes the named counter from `nft list counters`', () => {
    const msgs = loadCapture('reply-nft-list-counters').calls.flatMap((c) => parseMessages(c)).filter((m) => m.type === nftType(NFT_MSG_NEWOBJ));
    const objs = msgs.map(decodeObject);
    expect(objs).toHaveLength(1);
    expect(objs[0]).toMatchObject({ table: 'tunnelgate', name: 'tun-1', type: NFT_OBJECT_COUNTER, bytes: 0n, packets: 0n, use: 1 });
  });
  it('the allocation-free key walker finds the same keys as the decoder, in kernel replies and in our messages', () => {
    const keysOf = (m: Parameters<typeof eachElementKeyRange>[0]): string[] => {
      const out: string[] = [];
      eachElementKeyRange(m, (buf, from, to) => out.push(buf.toString('hex', from, to)));
      return out;
    };
    const reply = loadCapture('reply-nft-list-map').calls.flatMap((c) => parseMessages(c)).filter((m) => m.type === nftType(NFT_MSG_NEWSETELEM));
    expect(reply.length).toBeGreaterThan(0);
    for (const m of reply) expect(keysOf(m)).toEqual(decodeSetElements(m).elements.map((e) => Buffer.from(e.key).toString('hex')));
    // Elements with a value, an object reference and a concatenated key: only the key is visited.
    const els: SetElement[] = [
      { key: Buffer.from('cb007101', 'hex'), objref: 'tun-1' },
      { key: Buffer.from('cb00710206000000', 'hex'), data: Buffer.from([100, 64, 0, 2]) },
      { key: Buffer.from('cb0071030600000013880000', 'hex') },
    ];
    const msgs = parseMessages(new NftBatch().addElements({ table: 't', set: 's', elements: els }).encode({ firstSeq: 1, ack: true }).data).slice(1, -1);
    expect(msgs.flatMap(keysOf)).toEqual(['cb007101', 'cb00710206000000', 'cb0071030600000013880000']);
    // A truncated element list is an error, not a silent skip.
    const bad = { ...msgs[0]!, payload: msgs[0]!.payload.subarray(0, msgs[0]!.payload.length - 6) };
    expect(() => keysOf(bad)).toThrow();
  });

  it('object-map elements carry the counter name', () => {
    const msgs = loadCapture('reply-nft-list-counters').calls.flatMap((c) => parseMessages(c));
    expect(msgs.some((m) => m.type === nftType(NFT_MSG_NEWOBJ))).toBe(true);
    const b = new NftBatch().addElements({ table: 't', set: 'tunnel_counters', elements: [{ key: Buffer.from([203, 0, 113, 1]), objref: 'tun-1' }] });
    const [m] = parseMessages(b.encode({ firstSeq: 1, ack: true }).data).slice(1, -1);
    expect(decodeSetElements(m!).elements[0]!.objref).toBe('tun-1');
  });
});
