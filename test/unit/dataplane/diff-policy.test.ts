// The dataplane's pure diff for tunnels' policies (no kernel, no root): allowlists and protection as set
// elements, the shared synproxy objects, flow-cap chains and per-tunnel meters, and which connections a narrowed policy cuts.
// The rest of the diff is diff.test.ts.
import { describe, expect, it } from 'vitest';
import { diff } from '../../../agent/dataplane/diff.ts';
import { PlanConflict, type KernelView } from '../../../agent/dataplane/plan.ts';
import { OwnedIndex, intentOver, type OwnedTunnel } from '../../../agent/dataplane/records.ts';
import type { TunnelSpec } from '../../../agent/dataplane/types.ts';
import { LINK_KEYED_SETS, isAllowedId, linkBucket, protectedKey, sharedNeeds, tunnelCounterNames, tunnelElements } from '../../../agent/dataplane/policy.ts';
import { flowsChainName, meterChainName, synproxyName } from '../../../agent/netlink/ruleset.ts';
import { DEFAULT_POLICY, type TunnelPolicy } from '../../../common/tunnel-policy.ts';
import { linkOf, ownedOf, t, viewOf } from './diff-fixtures.ts';
describe('dataplane diff', () => {
  describe('policies', () => {
    const policy = (over: Partial<TunnelPolicy> = {}): TunnelPolicy => ({ ...DEFAULT_POLICY, ...over });
    const ids = (els: { id: string }[]): string[] => els.map((e) => e.id).sort();
    /** The kernel holding exactly these tunnels' elements and shared objects too (a reconcile's full view). */
    const fullView = (specs: TunnelSpec[]): KernelView => {
      const v = viewOf(specs);
      v.elements = new Set(specs.flatMap(tunnelElements).map((e) => e.id));
      for (const s of specs) {
        const n = sharedNeeds(s);
        if (n.mss !== undefined) v.synproxies.add(synproxyName(n.mss));
        for (const c of n.chains) v.chains.add(c);
      }
      return v;
    };

    it('a new port list is a delete and an add of allowlist elements in the one plan, with no conntrack flush', () => {
      const old = t(1, { policy: policy({ ports: [[80, 80]] }) });
      const now = t(1, { policy: policy({ ports: [[80, 80], [443, 443]] }) });
      const p = diff({ desired: [now], owned: ownedOf([old]), view: viewOf([old]), scope: new Set(['id1']) });
      expect(p.counts.changed).toBe(1);
      expect(p.flush).toEqual([]);
      const added = ids(p.nft.addElements);
      expect(added).toEqual(ids(tunnelElements(now).filter((e) => !tunnelElements(old).some((o) => o.id === e.id))));
      expect(added.length).toBe(2); // 443 for tcp and for udp
      expect(p.nft.delElements).toEqual([]);
      const back = diff({ desired: [old], owned: ownedOf([now]), view: viewOf([now]), scope: new Set(['id1']) });
      expect(ids(back.nft.delElements)).toEqual(added);
      // A scoped delete first adds what it deletes: a record the kernel lost cannot fail the batch.
      expect(ids(back.nft.ensureElements)).toEqual(added);
    });

    it('tunnels with nothing in the kernel are added whole: named in addWhole, their counters and elements not listed', () => {
      const a = t(1, { policy: policy({ ports: [[80, 80]] }) });
      const b = t(2, { policy: policy({ ports: [[443, 443]] }) });
      const cold = diff({ desired: [a, b], owned: new Map(), view: fullView([]), scope: 'all' });
      expect(cold.nft.addWhole).toEqual([a, b]);
      expect([cold.nft.addCounters, cold.nft.addElements]).toEqual([[], []]);
      expect(cold.counts.added).toBe(2);
      // One element of b already there (a half-done earlier apply): b's missing ones are listed one by one.
      const view = fullView([]);
      view.elements!.add(tunnelElements(b)[0]!.id);
      const half = diff({ desired: [a, b], owned: new Map(), view, scope: 'all' });
      expect(half.nft.addWhole).toEqual([a]);
      expect(ids(half.nft.addElements)).toEqual(ids(tunnelElements(b).slice(1)));
      expect(half.nft.addCounters).toEqual(tunnelCounterNames(b));
    });

    it('a protected IP handed to a new tunnel in the same reconcile keeps the allowlist elements both want', () => {
      const gone = t(1, { policy: policy({ ports: [[80, 80], [443, 443]] }) });
      // Another id and name, the same protected IP and ports: its allowlist elements are the same kernel elements.
      const heir = t(2, { protected_ip: gone.protected_ip, policy: policy({ ports: [[443, 443]] }) });
      const view = fullView([gone]);
      const shared = tunnelElements(heir).filter((e) => view.elements!.has(e.id));
      const p = diff({ desired: [heir], owned: ownedOf([gone]), view, scope: 'all' });
      expect(p.actions.get('id1')).toBe('removed');
      expect(shared.length).toBeGreaterThan(0);
      // The removed tunnel's delete and the sweep leave them; what only the removed one wanted goes.
      const deleted = new Set(ids(p.nft.delElements));
      expect(shared.filter((e) => deleted.has(e.id))).toEqual([]);
      const onlyGone = tunnelElements(gone).filter((e) => !tunnelElements(heir).some((h) => h.id === e.id));
      expect(onlyGone.every((e) => deleted.has(e.id))).toBe(true);
      expect(ids(p.nft.addElements).filter((id) => shared.some((e) => e.id === id))).toEqual([]);
    });

    it('a reconcile trusts the elements of owners their digest found clean, and reads the others element by element', () => {
      const a = t(1, { policy: policy({ ports: [[80, 80], [5000, 5100]] }) });
      const b = t(2, { policy: policy({ ports: [[443, 443]] }) });
      const allowed = (s: TunnelSpec): string[] => tunnelElements(s).filter((e) => isAllowedId(e.id)).map((e) => e.id);
      expect(allowed(a).length).toBeGreaterThan(2);
      // As kernel/read.ts reads it: a's protected IP and link matched their digests, so none of its ids are listed;
      // b's IP did not (one allowlist element missing), so what the kernel has of it is listed exactly.
      const view = (): KernelView => {
        const v = fullView([a, b]);
        for (const e of tunnelElements(a)) v.elements!.delete(e.id);
        v.elements!.delete(allowed(b)[0]!);
        v.cleanOwners = { ips: new Set([protectedKey(a.protected_ip)]), links: new Set([linkBucket(a.tunnel_name)]) };
        return v;
      };
      const p = diff({ desired: [a, b], owned: ownedOf([a, b]), view: view(), scope: 'all' });
      expect(ids(p.nft.addElements)).toEqual([allowed(b)[0]]);
      expect(p.nft.delElements).toEqual([]);
      expect(p.actions.get('id1')).toBe('unchanged');
      // a's IP clean but its link's elements not (one of them lost): only that one is looked at, and put back.
      const lost = tunnelElements(a).find((e) => LINK_KEYED_SETS.has(e.set))!;
      const v2 = fullView([a, b]);
      for (const e of tunnelElements(a)) if (!LINK_KEYED_SETS.has(e.set) || e.id === lost.id) v2.elements!.delete(e.id);
      v2.cleanOwners = { ips: new Set([protectedKey(a.protected_ip)]), links: new Set() };
      const p2 = diff({ desired: [a, b], owned: ownedOf([a, b]), view: v2, scope: 'all' });
      expect(ids(p2.nft.addElements)).toEqual([lost.id]);
      expect(p2.nft.delElements).toEqual([]);
      // A removed tunnel whose protected IP another one took over, with the same allowlist (so clean): kept.
      const heir = t(3, { protected_ip: a.protected_ip, policy: a.policy });
      const q = diff({ desired: [heir, b], owned: ownedOf([a, b]), view: view(), scope: 'all' });
      expect(q.actions.get('id1')).toBe('removed');
      expect(ids(q.nft.delElements).filter((id) => isAllowedId(id))).toEqual([]);
      expect(ids(q.nft.addElements).filter((id) => allowed(heir).includes(id))).toEqual([]);
      // Not clean: the same removal deletes a's allowlist (nobody wants it), and a tunnel not added whole is
      // refused the shortcut.
      const r = diff({ desired: [b], owned: ownedOf([a, b]), view: fullView([a, b]), scope: 'all' });
      expect(ids(r.nft.delElements).filter((id) => isAllowedId(id)).sort()).toEqual(allowed(a).sort());
    });

    it('ports or a protocol taken away name the tunnel in narrowed (its disallowed connections go); added ones do not', () => {
      const wide = t(1, { policy: policy({ ports: [[80, 80], [443, 443]] }) });
      const narrow = t(1, { policy: policy({ ports: [[443, 443]] }) });
      const scope = new Set(['id1']);
      expect(diff({ desired: [wide], owned: ownedOf([narrow]), view: viewOf([narrow]), scope }).narrowed).toEqual([]);
      const p = diff({ desired: [narrow], owned: ownedOf([wide]), view: viewOf([wide]), scope });
      expect(p.narrowed).toEqual([narrow]);
      expect(p.flush).toEqual([]);
      const tcpOnly = t(1, { policy: policy({ ports: [[80, 80], [443, 443]], protocol: 'tcp' }) });
      expect(diff({ desired: [tcpOnly], owned: ownedOf([wide]), view: viewOf([wide]), scope }).narrowed).toEqual([tcpOnly]);
      // A new mapping flushes the whole IP: nothing to pick one by one.
      const moved = { ...narrow, origin_inner: '100.64.9.2/30', edge_inner: '100.64.9.1/30' };
      const m = diff({ desired: [moved], owned: ownedOf([wide]), view: viewOf([wide]), scope });
      expect(m.flush).toEqual([moved.protected_ip]);
      expect(m.narrowed).toEqual([]);
      // A reconcile sweeping an allowlist element nobody wants for a desired tunnel's IP narrows it too.
      const view = fullView([narrow]);
      for (const e of tunnelElements(wide)) if (e.set.startsWith('allowed_')) view.elements!.add(e.id);
      expect(diff({ desired: [narrow], owned: ownedOf([narrow]), view, scope: 'all' }).narrowed).toEqual([narrow]);
      expect(diff({ desired: [narrow], owned: ownedOf([narrow]), view: fullView([narrow]), scope: 'all' }).narrowed).toEqual([]);
      // The element of the port taken away was already lost from the kernel (drift): nothing to delete, but a
      // connection it let in may still be open, so the tunnel is narrowed all the same, scoped or reconciled.
      const lost = fullView([wide]);
      for (const e of tunnelElements(wide)) if (e.set.startsWith('allowed_') && !tunnelElements(narrow).some((n) => n.id === e.id)) lost.elements!.delete(e.id);
      const scoped = diff({ desired: [narrow], owned: ownedOf([wide]), view: lost, scope });
      expect(scoped.nft.delElements).toEqual([]);
      expect(scoped.narrowed).toEqual([narrow]);
      expect(diff({ desired: [narrow], owned: ownedOf([wide]), view: lost, scope: 'all' }).narrowed).toEqual([narrow]);
      // An unconfirmed record (a failed apply) flushes the whole IP instead.
      const pending = new Map([['id1', { spec: wide, pending: true }]]);
      const retried = diff({ desired: [narrow], owned: pending, view: lost, scope });
      expect([retried.narrowed, retried.flush]).toEqual([[], [narrow.protected_ip]]);
    });

    it('a meter chain per tunnel with a limit (two tunnels of one limit never share one); a flow-cap chain per max_flows value and a synproxy object per MSS come with their first user and go with their last', () => {
      const a = t(1, { policy: policy({ source_pps_limit: 500, syn_proxy: true }) });
      const b = t(2, { policy: policy({ source_pps_limit: 500 }) });
      const [meterA, meterB, flows] = [meterChainName(a.tunnel_name, 500), meterChainName(b.tunnel_name, 500), flowsChainName(65_536)];
      let p = diff({ desired: [a], owned: new Map(), view: viewOf([]), scope: new Set(['id1']) });
      expect(p.nft.addChains.sort()).toEqual([flows, meterA].sort());
      expect(p.nft.addSynproxies).toEqual([1436]);
      // the second user of the same limit gets a meter of its own; the flow caps of the same max_flows are there
      p = diff({ desired: [b], owned: ownedOf([a]), view: fullView([a]), scope: new Set(['id2']) });
      expect(p.nft.addChains).toEqual([meterB]);
      // removing one user deletes its meter and keeps the shared flow caps; removing the last deletes those too
      p = diff({ desired: [], owned: ownedOf([a, b]), view: fullView([a, b]), scope: new Set(['id1']) });
      expect(p.nft.delChains).toEqual([meterA]);
      expect(p.nft.delSynproxies).toEqual([synproxyName(1436)]);
      p = diff({ desired: [], owned: ownedOf([b]), view: fullView([b]), scope: new Set(['id2']) });
      expect(p.nft.delChains.sort()).toEqual([flows, meterB].sort());
      expect(p.nft.delElements.some((e) => e.el.verdict?.chain === meterB)).toBe(true);
      expect(p.nft.delElements.some((e) => e.el.verdict?.chain === flows)).toBe(true);
      // a new limit, or a new max_flows, is another chain: the old one goes in the same plan
      const faster = t(1, { policy: policy({ source_pps_limit: 900, max_flows: 2_000 }) });
      p = diff({ desired: [faster], owned: ownedOf([{ ...a, policy: policy({ source_pps_limit: 500 }) }]), view: fullView([{ ...a, policy: policy({ source_pps_limit: 500 }) }]), scope: new Set(['id1']) });
      expect(p.nft.addChains.sort()).toEqual([flowsChainName(2_000), meterChainName(a.tunnel_name, 900)].sort());
      expect(p.nft.delChains.sort()).toEqual([flows, meterA].sort());
      // a damaged chain that is still wanted is built again; one nobody wants goes
      const damaged = fullView([a]);
      damaged.chains.delete(meterA);
      damaged.damagedChains = new Set([meterA, meterB]);
      p = diff({ desired: [a], owned: ownedOf([a]), view: damaged, scope: 'all' });
      expect(p.nft.addChains).toEqual([meterA]);
      expect(p.nft.delChains).toEqual([meterB]);
    });

    it('a change of max_flows alone is a change: the tunnel jumps to the flow caps of its new value, its connections kept', () => {
      const was = t(1, { policy: policy({}) });
      const now = t(1, { policy: policy({ max_flows: 2_000 }) });
      const p = diff({ desired: [now], owned: ownedOf([was]), view: fullView([was]), scope: 'all' });
      expect(p.counts.changed).toBe(1);
      expect(p.flush).toEqual([]);
      expect(p.nft.addChains).toEqual([flowsChainName(2_000)]);
      expect(p.nft.delChains).toEqual([flowsChainName(65_536)]);
      expect(p.nft.addElements.map((e) => e.el.verdict?.chain)).toContain(flowsChainName(2_000));
      // The default spelled out is no change.
      expect(diff({ desired: [t(1, { policy: policy({ max_flows: 65_536 }) })], owned: ownedOf([was]), view: fullView([was]), scope: 'all' }).counts.unchanged).toBe(1);
    });

    it('a single-tunnel change with the records\' index never walks the records, and plans as without it', () => {
      // A job must not grow with the node: at 10,000 tunnels a walk of every record per job is what made a job grow with the node.
      const a = t(1, { policy: policy({ source_pps_limit: 500, syn_proxy: true }) });
      const b = t(2, { policy: policy({ source_pps_limit: 500, syn_proxy: true }) });
      const c = t(3);
      const records = ownedOf([a, b, c]);
      const walked: string[] = [];
      /** The records, refusing every walk (a lookup by id is all a scoped change may do). */
      class NoWalk extends Map<string, OwnedTunnel> {
        override entries(): MapIterator<[string, OwnedTunnel]> {
          walked.push('entries');
          return super.entries();
        }
        override values(): MapIterator<OwnedTunnel> {
          walked.push('values');
          return super.values();
        }
        override keys(): MapIterator<string> {
          walked.push('keys');
          return super.keys();
        }
        override [Symbol.iterator](): MapIterator<[string, OwnedTunnel]> {
          walked.push('iterator');
          return super[Symbol.iterator]();
        }
        override forEach(): void {
          walked.push('forEach');
        }
      }
      const index = OwnedIndex.of(records);
      const owned = new NoWalk(records);
      walked.length = 0;
      // A view serves one diff (it takes the claimed elements out): each call reads the kernel afresh.
      const view = (): KernelView => fullView([a, b, c]);
      const changes = [
        // remove one of two users: the shared chain and synproxy stay
        { desired: [], scope: new Set(['id1']) },
        // a changed policy (no rate limit any more): the other user keeps the chain
        { desired: [t(2, { policy: policy({ syn_proxy: true }) })], scope: new Set(['id2']) },
        // a new tunnel next to the others; and a new one taking tunnel 3's name, which must be refused
        { desired: [t(4, { policy: policy({ source_pps_limit: 500 }) })], scope: new Set(['id4']) },
      ];
      for (const ch of changes) {
        const withIndex = diff({ ...ch, owned, index, view: view() });
        const plain = diff({ ...ch, owned: records, view: view() });
        expect(walked).toEqual([]);
        expect({ ...withIndex, owned: undefined }).toEqual({ ...plain, owned: undefined });
        expect([...withIndex.owned]).toEqual([...plain.owned]);
        walked.length = 0;
      }
      expect(() => diff({ desired: [t(4, { tunnel_name: 'tg-3' })], scope: new Set(['id4']), owned, index, view: view() })).toThrow(PlanConflict);
      expect(() => diff({ desired: [t(4, { protected_ip: '203.0.113.3' })], scope: new Set(['id4']), owned, index, view: view() })).toThrow(PlanConflict);
      expect(walked).toEqual([]);
    });

    it('a reconcile puts back a policy element deleted by hand and deletes one nobody owns', () => {
      const a = t(1, { policy: policy({ ports: [[22, 22]], drop_fragments: true }) });
      const view = fullView([a]);
      const lost = tunnelElements(a).find((e) => e.set === 'fragments')!;
      view.elements!.delete(lost.id);
      const stray = tunnelElements(t(9))[0]!;
      view.elements!.add(stray.id);
      const p = diff({ desired: [a], owned: ownedOf([a]), view, scope: 'all' });
      expect(p.counts).toMatchObject({ changed: 1 });
      expect(ids(p.nft.addElements)).toEqual([lost.id]);
      expect(ids(p.nft.delElements)).toEqual([stray.id]);
      expect(p.nft.ensureElements).toEqual([]);
      expect(diff({ desired: [a], owned: ownedOf([a]), view: fullView([a]), scope: 'all' }).counts).toMatchObject({ unchanged: 1 });
    });

    describe('a refused change keeps the spec it replaces (OwnedTunnel.was)', () => {
      // Confirmed as `a`; a change to `b` (another name, protected IP, port list and no SYN proxy) refused by the
      // kernel after its link was created: the kernel holds a's elements and both links.
      const a = t(1, { policy: policy({ ports: [[80, 80]], syn_proxy: true }) });
      const b = t(1, { tunnel_name: 'tg-1b', protected_ip: '203.0.113.101', policy: policy({ ports: [[443, 443]] }) });
      const refused = (): Map<string, OwnedTunnel> => new Map([['id1', intentOver({ spec: a }, b)]]);
      /** The kernel after the refusal: a whole, and b's link. */
      const afterRefusal = (extra: TunnelSpec[] = []): KernelView => {
        const v = fullView([a, ...extra]);
        v.links.set(b.tunnel_name, linkOf(b, 99));
        return v;
      };

      it('intentOver keeps every earlier spec the kernel may hold, once, and none equal to the new one', () => {
        expect(intentOver(undefined, a)).toEqual({ spec: a, pending: true });
        expect(intentOver({ spec: a }, a)).toEqual({ spec: a, pending: true });
        expect(intentOver({ spec: a }, b)).toEqual({ spec: b, pending: true, was: [a] });
        const c = t(1, { mtu: 1400 });
        // refused again: the first refusal's spec stays, and so does its own; back to `a`, only b is extra
        expect(intentOver(intentOver({ spec: a }, b), c)).toEqual({ spec: c, pending: true, was: [b, a] });
        expect(intentOver(intentOver({ spec: a }, b), a)).toEqual({ spec: a, pending: true, was: [b] });
        expect(intentOver({ spec: c, pending: true, was: [b, a] }, b)).toEqual({ spec: b, pending: true, was: [c, a] });
      });

      it('a reconcile keeping the refused tunnel keeps everything of both specs: links, mappings, counters, elements, synproxy', () => {
        const other = t(2);
        const owned = new Map([...refused(), ['id2', { spec: other }]]);
        const p = diff({ desired: [other], owned, view: afterRefusal([other]), scope: 'all', keep: new Set(['id1']) });
        expect(p.counts).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1 });
        expect(p.linkDeletes).toEqual([]);
        expect(p.nft.delElements).toEqual([]);
        expect([p.nft.delDnat, p.nft.delCounterMap, p.nft.delCounters, p.nft.delSynproxies]).toEqual([[], [], [], []]);
        expect(p.flush).toEqual([]);
      });

      it('the next scoped change removes what the earlier spec left: its link, mapping, counters, ports and synproxy', () => {
        const owned = refused();
        const c = t(1, { tunnel_name: 'tg-1b', protected_ip: '203.0.113.101', policy: policy({ ports: [[8443, 8443]] }) });
        const p = diff({ desired: [c], owned, index: OwnedIndex.of(owned), view: afterRefusal(), scope: new Set(['id1']) });
        expect(p.linkDeletes).toEqual([a.tunnel_name]);
        expect(p.nft.delDnat).toEqual([a.protected_ip]);
        expect(p.nft.delCounterMap).toEqual([a.protected_ip]);
        expect(p.nft.delCounters.sort()).toEqual(tunnelCounterNames(a).sort());
        expect(ids(p.nft.delElements)).toEqual(ids(tunnelElements(a)));
        expect(p.nft.delSynproxies).toEqual([synproxyName(sharedNeeds(a).mss!)]);
        expect(p.flush.sort()).toEqual([a.protected_ip, c.protected_ip].sort());
        // Without the earlier spec (a record that forgot it) none of it would go.
        const forgot = diff({ desired: [c], owned: new Map([['id1', { spec: b, pending: true }]]), view: afterRefusal(), scope: new Set(['id1']) });
        expect([forgot.linkDeletes, forgot.nft.delElements, forgot.nft.delDnat]).toEqual([[], [], []]);
      });

      it('removing the refused tunnel removes both specs\' links, mappings and elements', () => {
        const p = diff({ desired: [], owned: refused(), view: afterRefusal(), scope: new Set(['id1']) });
        expect(p.counts.removed).toBe(1);
        expect(p.linkDeletes.sort()).toEqual([a.tunnel_name, b.tunnel_name].sort());
        expect(p.nft.delDnat).toEqual([a.protected_ip]);
        expect(ids(p.nft.delElements)).toEqual(ids(tunnelElements(a)));
        expect(p.nft.delSynproxies).toEqual([synproxyName(sharedNeeds(a).mss!)]);
      });

      it('the records\' index claims the earlier spec\'s name and IP for the tunnel, and counts its shared objects', () => {
        const ix = OwnedIndex.of(refused());
        expect([...(ix.byName(a.tunnel_name) ?? [])]).toEqual(['id1']);
        expect([...(ix.byIp(a.protected_ip) ?? [])]).toEqual(['id1']);
        expect([...(ix.byName(b.tunnel_name) ?? [])]).toEqual(['id1']);
        expect([...ix.mssUsers().keys()]).toEqual([sharedNeeds(a).mss]);
        ix.delete(refused().get('id1')!);
        expect([ix.byName(a.tunnel_name), ix.byName(b.tunnel_name), ix.mssUsers().size]).toEqual([undefined, undefined, 0]);
        // Another tunnel cannot take the old name or IP while the kernel may still hold them for tunnel 1.
        const owned = refused();
        for (const over of [{ tunnel_name: a.tunnel_name }, { protected_ip: a.protected_ip }])
          expect(() => diff({ desired: [t(5, over)], owned, index: OwnedIndex.of(owned), view: afterRefusal(), scope: new Set(['id5']) })).toThrow(PlanConflict);
      });

      it('in one scoped plan, a tunnel moving off a protected IP never deletes the elements of the tunnel taking it', () => {
        // isolate() applies groups of tunnels: t1 (refused before) moves from a's IP to another; n takes a's IP, ports included.
        const owned = refused();
        const n = t(7, { protected_ip: a.protected_ip, policy: a.policy });
        const moved = t(1, { protected_ip: '203.0.113.102', policy: a.policy });
        const nIds = new Set(tunnelElements(n).map((e) => e.id));
        for (const order of [[moved, n], [n, moved]]) {
          const p = diff({ desired: order, owned, index: OwnedIndex.of(owned), view: afterRefusal(), scope: new Set(['id1', 'id7']) });
          expect(p.nft.delElements.filter((e) => nIds.has(e.id))).toEqual([]);
          // The mapping of a's IP is replaced by n's (a delete and an add in one batch), not dropped.
          expect(p.nft.addDnat).toContainEqual([a.protected_ip, n.origin_inner.split('/')[0]]);
        }
      });

      it('a reconcile keeps a kept tunnel\'s earlier protected IP mapped and its link, whatever else changes', () => {
        const owned = refused();
        const p = diff({ desired: [], owned, view: afterRefusal(), scope: 'all', keep: new Set(['id1']) });
        expect([p.nft.delDnat, p.nft.delCounterMap, p.linkDeletes, p.nft.delElements]).toEqual([[], [], [], []]);
      });
    });
  });
});
