// The port allowlist as aligned blocks (agent/dataplane/policy.ts portBlocks, docs/CONTRACTS.md "Dataplane"):
// the kernel looks a packet's port up in one set per block size, so the blocks must hold exactly the allowed
// ports, each once. Checked port by port against the ranges, for edge cases and for seeded random lists.
import { describe, expect, it } from 'vitest';
import type { PortRange } from '../../../common/tunnel-policy.ts';
import type { ElementView, SetElement } from '../../../agent/netlink/nftables/index.ts';
import { LINK_KEYED_SETS, addElementToDigest, addKeyToDigest, addToDigest, allowedElementIp, allowsConnection, elementId, linkBucket, linkBucketOfKey, ownerDigests, tunnelElementsButAllowlist, emptyDigest, isAllowedId, portBlocks, protectedKey, sameDigest, tunnelElements } from '../../../agent/dataplane/policy.ts';
import { BENCH_POLICY } from '../../../bench/lib/tunnels.ts';
import { ALLOWED_SETS, PORT_BLOCK_BITS } from '../../../agent/netlink/ruleset.ts';
import { benchTunnel } from '../../../bench/lib/tunnels.ts';

/** The digest of these ids (the definition the others must agree with). */
function of(list: readonly string[]) {
  const d = emptyDigest();
  for (const id of list) addToDigest(d, id);
  return d;
}

/** Which ports the blocks cover, and how often (a port in two blocks would be an element twice). */
function coverage(blocks: [number, number][]): Uint8Array {
  const seen = new Uint8Array(65536);
  for (const [bits, start] of blocks) {
    expect(PORT_BLOCK_BITS).toContain(bits);
    expect(start % (1 << bits)).toBe(0); // aligned: the rule masks the port to the block's first port
    for (let p = start; p < start + (1 << bits); p++) seen[p]!++;
  }
  return seen;
}

function expectExact(ranges: PortRange[]): [number, number][] {
  const blocks = portBlocks(ranges);
  const seen = coverage(blocks);
  const want = new Uint8Array(65536);
  for (const [a, b] of ranges) for (let p = a; p <= b; p++) want[p] = 1;
  for (let p = 0; p < 65536; p++) if (seen[p] !== want[p]) throw new Error(`port ${p}: covered ${seen[p]} times, allowed ${want[p]}`);
  return blocks;
}

/** A small deterministic generator (mulberry32), so a failure names its seed. */
function rng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('port blocks', () => {
  it('cover exactly the allowed ports, each once, with the fewest blocks for the edge cases', () => {
    expect(expectExact([[0, 65535]])).toEqual([[16, 0]]);
    expect(expectExact([[80, 80]])).toEqual([[0, 80]]);
    expect(expectExact([[4096, 8191]])).toEqual([[12, 4096]]);
    expect(expectExact([[27008, 27023]])).toEqual([[4, 27008]]);
    expect(expectExact([[65535, 65535], [0, 0]])).toEqual([[0, 0], [0, 65535]]);
    // Overlapping and adjacent ranges are merged first: no port twice, 80-81 and 81-90 are one range.
    expectExact([[80, 81], [81, 90], [91, 91], [1, 65534]]);
    // 5000-10000 (the benchmark's range): 36 blocks, at most 2 x 15 per size.
    expect(expectExact([[5000, 10000]])).toHaveLength(36);
  });

  it('cover exactly the allowed ports for random lists (seeded)', () => {
    for (let seed = 1; seed <= 40; seed++) {
      const r = rng(seed);
      const ranges: PortRange[] = Array.from({ length: 1 + Math.floor(r() * 6) }, () => {
        const a = Math.floor(r() * 65536);
        return [a, Math.min(65535, a + Math.floor(r() * (r() < 0.5 ? 40 : 20000)))];
      });
      const blocks = expectExact(ranges);
      for (const bits of PORT_BLOCK_BITS) expect(blocks.filter(([b]) => b === bits).length, `seed ${seed}`).toBeLessThanOrEqual(2 * 15 * ranges.length);
    }
  });

  it("a tunnel's allowlist elements: one per block and protocol, in the set of the block's size", () => {
    const t = { ...benchTunnel(1), policy: { ports: [[22, 22], [4096, 8191]] as PortRange[], protocol: 'both' as const, syn_proxy: false, source_pps_limit: null, drop_fragments: false } };
    const els = tunnelElements(t).filter((e) => ALLOWED_SETS.includes(e.set));
    expect(els.map((e) => e.set).sort()).toEqual(['allowed_1', 'allowed_1', 'allowed_4096', 'allowed_4096']);
    // P . proto . first port, each field padded to 4 bytes; "every port" is P . proto alone.
    const key = Buffer.from(els.find((e) => e.set === 'allowed_4096')!.el.key);
    expect(key).toHaveLength(12);
    expect(key.readUInt16BE(8)).toBe(4096);
    const all = tunnelElements({ ...t, policy: { ...t.policy, ports: '*' } }).filter((e) => ALLOWED_SETS.includes(e.set));
    expect(all.map((e) => [e.set, Buffer.from(e.el.key).length])).toEqual([['allowed_all', 8], ['allowed_all', 8]]);
  });

  it('allowsConnection says what the elements say, for every port of both protocols; allowedElementIp reads P back', () => {
    const base = { ...benchTunnel(3), policy: { ports: [[22, 22], [4096, 8191], [65535, 65535]] as PortRange[], protocol: 'udp' as const, syn_proxy: false, source_pps_limit: null, drop_fragments: false } };
    for (const t of [base, { ...base, policy: { ...base.policy, protocol: 'both' as const } }, { ...base, policy: { ...base.policy, ports: '*' as const } }]) {
      const els = tunnelElements(t).filter((e) => ALLOWED_SETS.includes(e.set));
      for (const e of els) expect(allowedElementIp(e)).toBe(t.protected_ip);
      // Which (proto, port) pairs the elements let in, from their keys: P . proto [. first port of a block].
      const inSets = new Set<string>();
      for (const e of els) {
        const key = Buffer.from(e.el.key);
        const bits = Number(e.set.slice('allowed_'.length).replace('all', '65536'));
        const first = key.length === 12 ? key.readUInt16BE(8) : 0;
        for (let p = first; p < first + bits; p++) inSets.add(`${key[4]}:${p}`);
      }
      for (const proto of [6, 17])
        for (let port = 0; port < 65536; port++) if (allowsConnection(t, proto, port) !== inSets.has(`${proto}:${port}`)) throw new Error(`${t.policy.protocol} ${proto}:${port}`);
      expect(allowsConnection(t, 1, undefined)).toBe(false); // ICMP: the allowlist is tcp and udp only
    }
    expect(tunnelElements(base).filter((e) => !ALLOWED_SETS.includes(e.set)).map(allowedElementIp)).toSatisfy((ips: unknown[]) => ips.every((ip) => ip === undefined));
  });

  it('an allowlist digest is the same in any order and differs when an element is missing, extra or changed', () => {
    const t = { ...benchTunnel(7), policy: BENCH_POLICY };
    const ids = tunnelElements(t).map((e) => e.id).filter(isAllowedId);
    expect(ids.length).toBe(2 * portBlocks(BENCH_POLICY.ports as PortRange[]).length);
    expect(new Set(tunnelElements(t).filter((e) => isAllowedId(e.id)).map(allowedElementIp))).toEqual(new Set([t.protected_ip]));
    const wanted = of(ids);
    expect(sameDigest(of([...ids].reverse()), wanted)).toBe(true);
    expect(sameDigest(of(ids.slice(1)), wanted)).toBe(false);
    expect(sameDigest(of([...ids, tunnelElements({ ...t, policy: { ...BENCH_POLICY, ports: [[23, 23]] } }).map((e) => e.id).filter(isAllowedId)[0]!]), wanted)).toBe(false);
    // The same count with one element swapped for another (a port moved): the sums differ.
    const moved = tunnelElements({ ...t, policy: { ...BENCH_POLICY, ports: [[21, 21], [80, 80], [443, 443], [5000, 10000]] } }).map((e) => e.id).filter(isAllowedId);
    expect(moved.length).toBe(ids.length);
    expect(sameDigest(of(moved), wanted)).toBe(false);
    expect(sameDigest(undefined, wanted)).toBe(false);
    // What a reconcile sums from the kernel's key bytes (kernel/read.ts readElementIds) is what the ids sum to.
    const fromBytes = emptyDigest();
    for (const e of tunnelElements(t).filter((x) => isAllowedId(x.id))) {
      const key = Buffer.concat([Buffer.from([9, 9]), Buffer.from(e.el.key), Buffer.from([9])]);
      addKeyToDigest(fromBytes, e.set, key, 2, key.length - 1);
    }
    expect(fromBytes).toEqual(wanted);
  });

  it('owner digests: a protected IP\'s elements and a link name\'s, each hashed from a dump\'s elements as from their ids', () => {
    const t = { ...benchTunnel(7), policy: BENCH_POLICY };
    const all = tunnelElements(t);
    const linkKeyed = all.filter((e) => LINK_KEYED_SETS.has(e.set));
    // The link's: replies, origins, the spoofed drop map and the out map; every other one is the protected IP's.
    expect(linkKeyed.map((e) => e.set).sort()).toEqual(['drop_spoofed', 'origins', 'replies', 'tunnel_out'].sort());
    const digests = ownerDigests([t]);
    expect(digests.ips.get(protectedKey(t.protected_ip))).toEqual(of(all.filter((e) => !LINK_KEYED_SETS.has(e.set)).map((e) => e.id)));
    expect(digests.links.get(linkBucket(t.tunnel_name))).toEqual(of(linkKeyed.map((e) => e.id)));
    expect([...digests.ips.keys(), ...digests.links.keys()]).toHaveLength(2);
    // As decoded from a dump (objects, verdicts, plain keys, an interval end): the id's characters, hashed.
    const withEnd: SetElement = { key: Buffer.from([1, 2]), keyEnd: Buffer.from([3, 4]), data: Buffer.from([5]) };
    for (const [set, el] of [...all.map((e): [string, SetElement] => [e.set, e.el]), ['allowed', withEnd] as [string, SetElement]]) {
      const view: ElementView = { key: Buffer.from(el.key) };
      if (el.keyEnd) view.keyEnd = Buffer.from(el.keyEnd);
      if (el.data) view.data = Buffer.from(el.data);
      if (el.objref !== undefined) view.objref = el.objref;
      if (el.verdict) view.verdict = el.verdict;
      const d = emptyDigest();
      addElementToDigest(d, set, view);
      expect(d, elementId(set, el)).toEqual(of([elementId(set, el)]));
    }
    expect(all.some((e) => e.el.objref !== undefined) && all.some((e) => e.el.verdict !== undefined)).toBe(true);
    // The link bucket from its name is the one from its elements' key bytes.
    for (const e of linkKeyed) expect(linkBucketOfKey(Buffer.from(e.el.key))).toBe(linkBucket(t.tunnel_name));
    expect(linkBucket('tg-b8')).not.toBe(linkBucket(t.tunnel_name));
    // The elements but the allowlist: what a reconcile builds for a tunnel whose protected IP is clean.
    expect(tunnelElementsButAllowlist(t).map((e) => e.id)).toEqual(all.filter((e) => !isAllowedId(e.id)).map((e) => e.id));
  });

  it('owner digests of many tunnels: each its own, whatever policies they share (port blocks are cut once per allowlist)', () => {
    const tunnels = [
      { ...benchTunnel(1), policy: BENCH_POLICY },
      { ...benchTunnel(2), policy: { ...BENCH_POLICY, ports: [[22, 22]] as [number, number][] } },
      { ...benchTunnel(3), policy: { ...BENCH_POLICY, protocol: 'udp' as const } },
      { ...benchTunnel(4), policy: BENCH_POLICY },
      benchTunnel(5),
    ];
    const digests = ownerDigests(tunnels);
    for (const t of tunnels) {
      const all = tunnelElements(t);
      expect(digests.ips.get(protectedKey(t.protected_ip)), t.tunnel_name).toEqual(of(all.filter((e) => !LINK_KEYED_SETS.has(e.set)).map((e) => e.id)));
      expect(digests.links.get(linkBucket(t.tunnel_name)), t.tunnel_name).toEqual(of(all.filter((e) => LINK_KEYED_SETS.has(e.set)).map((e) => e.id)));
    }
  });
});
