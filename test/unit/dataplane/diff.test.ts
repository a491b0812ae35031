// The dataplane's pure diff (no kernel, no root): what a plan does for each shape of drift and scope.
// The kernel that the plan drives is tested in test/netns/dataplane*.test.ts.
// Policies (allowlists, protection, shared objects) are diff-policy.test.ts.
import { describe, expect, it } from 'vitest';
import { diff } from '../../../agent/dataplane/diff.ts';
import { PlanConflict, type KernelView } from '../../../agent/dataplane/plan.ts';
import { sameSpec } from '../../../agent/dataplane/spec-compare.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { LINK_KEYED_SETS, linkBucket, protectedKey, tunnelCounterNames, tunnelElements } from '../../../agent/dataplane/policy.ts';
import { benchTunnel } from '../../../bench/lib/tunnels.ts';
import { linkOf, ownedOf, t, viewOf } from './diff-fixtures.ts';
describe('dataplane diff', () => {
  it('a read by owner: a tunnel none of whose owners has an element in the kernel is added whole; one with a dirty owner element by element', () => {
    const [a, b] = [t(1), t(2)];
    const kept = tunnelElements(a)[0]!;
    const view: KernelView = {
      ...viewOf([]),
      elements: new Set([kept.id]),
      cleanOwners: { ips: new Set(), links: new Set() },
      dirtyOwners: { ips: LINK_KEYED_SETS.has(kept.set) ? new Set() : new Set([protectedKey(a.protected_ip)]), links: LINK_KEYED_SETS.has(kept.set) ? new Set([linkBucket(a.tunnel_name)]) : new Set() },
    };
    const p = diff({ desired: [a, b], owned: new Map(), view, scope: 'all' });
    expect(p.nft.addWhole.map((x) => x.id)).toEqual([b.id]);
    expect(p.nft.addElements.map((e) => e.id).sort()).toEqual(tunnelElements(a).filter((e) => e.id !== kept.id).map((e) => e.id).sort());
    expect(p.nft.delElements).toEqual([]);
  });

  it('a large plan paces its caller every 2,048 tunnels, and plans the same as without', () => {
    const specs = Array.from({ length: 4100 }, (_, i) => benchTunnel(i + 1));
    let paced = 0;
    const plain = diff({ desired: specs, owned: new Map(), view: viewOf([]), scope: 'all' });
    const p = diff({ desired: specs, owned: new Map(), view: viewOf([]), scope: 'all', pace: () => paced++ });
    expect(paced).toBe(2);
    expect(p.counts).toEqual(plain.counts);
    expect(p.counts.added).toBe(4100);
    expect(p.linkSteps.length).toBe(plain.linkSteps.length);
  });

  it('nothing to do when the kernel matches: unchanged, no steps, no flush', () => {
    const specs = [t(1), t(2)];
    const p = diff({ desired: specs, owned: ownedOf(specs), view: viewOf(specs), scope: 'all' });
    expect(p.counts).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 2 });
    expect(p.linkSteps).toEqual([]);
    expect(p.linkDeletes).toEqual([]);
    expect(p.flush).toEqual([]);
    expect(Object.values(p.nft).every((a) => a.length === 0)).toBe(true);
  });

  it('forwarding false (an origin that has not answered the activate probe): everything but the DNAT; turning it on adds the DNAT, off deletes it, both flush the IP', () => {
    const held = t(1, { forwarding: false });
    // A new tunnel held back: link, counters and elements, but no `protected` map element.
    const add = diff({ desired: [held], owned: new Map(), view: viewOf([]), scope: new Set(['id1']) });
    expect(add.counts.added).toBe(1);
    expect(add.linkSteps.map((s) => s.op)).toEqual(['create', 'addr-add', 'up']);
    expect(add.nft.addDnat).toEqual([]);
    expect(add.nft.addCounterMap).toEqual([[held.protected_ip, held.tunnel_name]]);
    expect(add.nft.addElements.length + add.nft.addWhole.length).toBeGreaterThan(0);
    // Held back and in the kernel without a DNAT: nothing to do.
    const still = diff({ desired: [held], owned: ownedOf([held]), view: { ...viewOf([held]), dnat: new Map() }, scope: new Set(['id1']) });
    expect(still.counts.unchanged).toBe(1);
    expect(Object.values(still.nft).every((a) => a.length === 0)).toBe(true);
    // Activated: the same spec with forwarding on adds the DNAT, and nothing else.
    const on = t(1);
    const activate = diff({ desired: [on], owned: ownedOf([held]), view: { ...viewOf([held]), dnat: new Map() }, scope: new Set(['id1']) });
    expect(activate.counts.changed).toBe(1);
    expect(activate.nft.addDnat).toEqual([[on.protected_ip, '100.64.0.6']]);
    expect(activate.nft.delDnat).toEqual([]);
    expect(activate.linkSteps).toEqual([]);
    expect(activate.flush).toEqual([on.protected_ip]);
    // A new origin arrives held back: the DNAT goes (and its connections) in the same change as the link.
    const moved = t(1, { origin_ip: '198.18.9.9', forwarding: false });
    const repoint = diff({ desired: [moved], owned: ownedOf([on]), view: viewOf([on]), scope: new Set(['id1']) });
    expect(repoint.nft.delDnat).toEqual([on.protected_ip]);
    expect(repoint.nft.addDnat).toEqual([]);
    expect(repoint.linkSteps.map((s) => s.op)).toEqual(['delete', 'create', 'addr-add', 'up']);
    expect(repoint.flush).toEqual([on.protected_ip]);
    // A reconcile sweeps a DNAT the kernel holds for a held-back tunnel too.
    const sweep = diff({ desired: [held], owned: ownedOf([held]), view: viewOf([held]), scope: 'all' });
    expect(sweep.nft.delDnat).toEqual([held.protected_ip]);
    expect(sweep.nft.addDnat).toEqual([]);
    // Forwarding is part of the spec: a record held back is not the same spec as one forwarding.
    expect(sameSpec(held, on)).toBe(false);
    expect(sameSpec(held, t(1, { forwarding: false }))).toBe(true);
    expect(sameSpec(on, t(1, { forwarding: true }))).toBe(true);
  });

  it('a new tunnel: create, address, up, counter and both elements; its IP is flushed', () => {
    const p = diff({ desired: [t(1)], owned: new Map(), view: viewOf([]), scope: new Set(['id1']) });
    expect(p.counts.added).toBe(1);
    expect(p.linkSteps.map((s) => s.op)).toEqual(['create', 'addr-add', 'up']);
    expect(p.nft).toMatchObject({ addDnat: [['203.0.113.1', '100.64.0.6']], addCounterMap: [['203.0.113.1', 'tg-1']], addCounters: tunnelCounterNames(t(1)) });
    expect(p.flush).toEqual(['203.0.113.1']);
  });

  it('a new origin recreates the link; a new inner subnet changes element (delete + add) and address only', () => {
    const old = t(1);
    let p = diff({ desired: [t(1, { origin_ip: '198.18.9.9' })], owned: ownedOf([old]), view: viewOf([old]), scope: new Set(['id1']) });
    expect(p.counts.changed).toBe(1);
    expect(p.linkSteps.map((s) => s.op)).toEqual(['delete', 'create', 'addr-add', 'up']);
    expect(p.flush).toEqual(['203.0.113.1']);
    p = diff({ desired: [t(1, { edge_inner: '100.64.9.1/30', origin_inner: '100.64.9.2/30' })], owned: ownedOf([old]), view: viewOf([old]), scope: new Set(['id1']) });
    expect(p.linkSteps).toEqual([
      { op: 'addr-del', name: 'tg-1', cidr: old.edge_inner },
      { op: 'addr-add', name: 'tg-1', cidr: '100.64.9.1/30' },
    ]);
    expect(p.nft.delDnat).toEqual(['203.0.113.1']);
    expect(p.nft.addDnat).toEqual([['203.0.113.1', '100.64.9.2']]);
    expect(p.flush).toEqual(['203.0.113.1']);
  });

  it('a GRE key set on one direction only never equals the wanted key', () => {
    const s = t(1, { gre_key: 7 });
    const view = viewOf([s]);
    view.links.set('tg-1', linkOf(s, 10, { params: { local: s.edge_ip, remote: s.origin_ip, ttl: 255, key: Number.NaN } }));
    const p = diff({ desired: [s], owned: ownedOf([s]), view, scope: 'all' });
    expect(p.linkSteps[0]).toEqual({ op: 'delete', name: 'tg-1' });
  });

  it('scoped operations leave other tunnels and stray elements alone; reconcile removes strays', () => {
    const specs = [t(1), t(2)];
    const view = viewOf(specs);
    view.dnat.set('203.0.113.99', '100.127.0.2');
    view.counters.add('stray');
    const scoped = diff({ desired: [t(1)], owned: ownedOf(specs), view, scope: new Set(['id1']) });
    expect(scoped.counts).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1 });
    expect(scoped.nft.delDnat).toEqual([]);
    const all = diff({ desired: [t(1)], owned: ownedOf(specs), view, scope: 'all' });
    expect(all.counts).toEqual({ added: 0, changed: 0, removed: 1, unchanged: 1 });
    expect(all.linkDeletes).toEqual(['tg-2']);
    expect(all.nft.delDnat.sort()).toEqual(['203.0.113.2', '203.0.113.99']);
    expect(all.nft.delCounters.sort()).toEqual(['stray', ...tunnelCounterNames(t(2))].sort());
    expect(all.flush).toEqual(['203.0.113.2']);
    expect([...all.owned.keys()]).toEqual(['id1']);
  });

  it('refuses a link it does not own and conflicting claims', () => {
    const view = viewOf([]);
    view.links.set('tg-1', linkOf(t(1), 3));
    expect(() => diff({ desired: [t(1)], owned: new Map(), view, scope: 'all' })).toThrow(PlanConflict);
    expect(() => diff({ desired: [t(1), t(2, { tunnel_name: 'tg-1' })], owned: new Map(), view: viewOf([]), scope: 'all' })).toThrow(/share tunnel_name/);
    // apply of a new tunnel onto a protected IP another recorded tunnel maps
    expect(() => diff({ desired: [t(3, { protected_ip: '203.0.113.1' })], owned: ownedOf([t(1)]), view: viewOf([t(1)]), scope: new Set(['id3']) })).toThrow(/mapped by tunnel id1/);
  });

  it('remove of a tunnel with no record cleans its elements only if there are any', () => {
    const view = viewOf([t(1)]);
    expect(diff({ desired: [], owned: new Map(), view, scope: new Set(['idX']), orphanProtectedIps: ['203.0.113.1'] }).counts.removed).toBe(1);
    expect(diff({ desired: [], owned: new Map(), view, scope: new Set(['idX']), orphanProtectedIps: ['203.0.113.50'] }).counts.removed).toBe(0);
  });
});

describe('sameSpec: what a reconcile calls unchanged and the desired record keeps', () => {
  const policy = { ports: [[22, 22], [5000, 10000]] as [number, number][], protocol: 'both' as const, syn_proxy: true, source_pps_limit: 1000, drop_fragments: true };
  const base: TunnelSpec = { ...t(1), policy };
  it('tells apart every field of the policy, a port range, and a policy from none', () => {
    expect(sameSpec(base, { ...base, policy: { ...policy, ports: [[22, 22], [5000, 10000]] } })).toBe(true);
    const others = [
      { ...policy, ports: [[22, 22], [5000, 10001]] as [number, number][] },
      { ...policy, ports: [[22, 22]] as [number, number][] },
      { ...policy, ports: '*' as const },
      { ...policy, protocol: 'tcp' as const },
      { ...policy, syn_proxy: false },
      { ...policy, source_pps_limit: null },
      { ...policy, source_pps_limit: 1001 },
      { ...policy, drop_fragments: false },
      { ...policy, max_flows: 2_000 },
      { ...policy, alert_pps: 300 },
    ];
    for (const p of others) expect(sameSpec(base, { ...base, policy: p }), JSON.stringify(p)).toBe(false);
    const { policy: _none, ...without } = base;
    expect(sameSpec(base, without)).toBe(false);
    expect(sameSpec(without, { ...without })).toBe(true);
    expect(sameSpec(base, { ...base, mtu: 1400 })).toBe(false);
  });
  it('a change of alert_pps alone is a change of the record that touches nothing in the kernel (max_flows moves the flow caps: diff-policy.test.ts)', () => {
    const now: TunnelSpec = { ...base, policy: { ...policy, alert_pps: 300 } };
    const p = diff({ desired: [now], owned: ownedOf([base]), view: viewOf([base]), scope: new Set(['id1']) });
    expect(p.counts).toEqual({ added: 0, changed: 1, removed: 0, unchanged: 0 });
    expect(p.flush).toEqual([]);
    expect(p.nft.addElements).toEqual([]);
    expect(p.nft.delElements).toEqual([]);
    expect(p.linkSteps).toEqual([]);
    expect(p.narrowed).toEqual([]);
  });
});
