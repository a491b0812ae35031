// The no-change reconcile's short cut (agent/dataplane/edge-dataplane.ts unchangedSince, docs/CONTRACTS.md "Dataplane"):
// while the nftables generation id is the one the agent's own last operation left, a reconcile reads only the
// links back; an `nft` command by hand moves the id, and the next reconcile reads everything back and repairs
// what the hand changed. In a fresh namespace, with `nft` and `ip` by hand as the drift and as the oracle.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDataplane, type DataplaneHandle } from '../../agent/dataplane/index.ts';
import { DataplaneEdge, EDGE_IP, NFT_TABLE as T, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

const tun = numberedTunnels('tg-g', 120);

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('no-change reconcile by generation id', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle;
  const events: string[] = [];
  /** The fields of every `dataplane.commits_heard` event: what the watch made of other programs' commits. */
  const heard: Record<string, unknown>[] = [];
  /** Where each change read its table side from (the `dataplane.planned` event's `read`). */
  const reads: string[] = [];
  /** Run synchronously at the next plan read from the records: between its generation check and its commit. */
  let betweenPlanAndCommit: (() => void) | undefined;
  const desired = [tun(1), tun(2), tun(3, { policy: { ports: [[80, 80], [1000, 1999]], protocol: 'tcp', syn_proxy: true, source_pps_limit: 1000, drop_fragments: true } })];

  /** The reconcile's result, and whether it took the short cut (its log event). */
  const reconcile = async (): Promise<{ added: number; unchanged: number; changed: number; shortCut: boolean }> => {
    events.length = 0;
    const r = await dp.reconcile(desired);
    expect(r.failed).toEqual([]);
    return { added: r.added, unchanged: r.unchanged, changed: r.changed, shortCut: events.includes('dataplane.reconcile.unchanged') };
  };
  const protectedIps = (): string[] => edge.protectedMap().map(([ip]) => ip).sort();
  const setElements = (set: string): number => {
    const j = JSON.parse(edge.run('nft', '-j', 'list', 'set', 'ip', T, set)) as { nftables: { set?: { elem?: unknown[] } }[] };
    return j.nftables.find((o) => o.set)!.set!.elem?.length ?? 0;
  };

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-dpgen');
    // What the next reconcile makes of another program's commits: the repair the agent starts by itself when it hears
    // one touch the table (test/netns/edge-heal.test.ts) would come first.
    dp = await createDataplane({ edgeIp: EDGE_IP, nftTable: T, stateDir: edge.stateDir, netns: edge.name, linkKind: 'veth-standin', healOnTouch: false, log: (e, fields) => {
        events.push(e);
        if (e === 'dataplane.commits_heard') heard.push(fields ?? {});
        if (e !== 'dataplane.planned') return;
        reads.push(String(fields?.read));
        if (fields?.read !== 'records' || !betweenPlanAndCommit) return;
        const hook = betweenPlanAndCommit;
        betweenPlanAndCommit = undefined;
        hook();
      },
    });
    const r = await dp.reconcile(desired);
    expect(r.added).toBe(3);
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  it('nothing changed since the agent\'s own commit: unchanged, without reading the table back', async () => {
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('an element deleted with `nft` by hand moves the generation: the full reconcile repairs it', async () => {
    edge.run('nft', 'delete', 'element', 'ip', T, 'protected', `{ ${tun(2).protected_ip} }`);
    expect(protectedIps()).toEqual([tun(1).protected_ip, tun(3).protected_ip].sort());
    expect(await reconcile()).toEqual({ added: 0, unchanged: 2, changed: 1, shortCut: false });
    expect(protectedIps()).toEqual(desired.map((t) => t.protected_ip).sort());
    // The repair was the agent's own commit: the next reconcile may take the short cut again.
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('a policy element flushed by hand is restored (every set is read back once the id moved)', async () => {
    const before = setElements('allowed_1');
    expect(before).toBeGreaterThan(0);
    edge.run('nft', 'flush', 'set', 'ip', T, 'allowed_1');
    expect(await reconcile()).toEqual({ added: 0, unchanged: 2, changed: 1, shortCut: false });
    expect(setElements('allowed_1')).toBe(before);
  });

  it('allowlist elements added by hand go, whether for a tunnel\'s protected IP or for one nobody has; the rest are kept', async () => {
    // A reconcile compares each protected IP's allowlist with the wanted one by digest, and reads the exact
    // elements again only where they differ (agent/dataplane/kernel/read.ts readElementIds).
    const before = ['allowed_1', 'allowed_16', 'allowed_256', 'allowed_all'].map(setElements);
    edge.run('nft', 'add', 'element', 'ip', T, 'allowed_1', `{ ${tun(3).protected_ip} . tcp . 22, 203.0.113.250 . udp . 53 }`);
    edge.run('nft', 'add', 'element', 'ip', T, 'allowed_all', `{ ${tun(3).protected_ip} . udp }`);
    expect(setElements('allowed_1')).toBe(before[0]! + 2);
    // Swept, as elements no tunnel claims are: no tunnel of ours changed.
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: false });
    expect(['allowed_1', 'allowed_16', 'allowed_256', 'allowed_all'].map(setElements)).toEqual(before);
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('elements keyed by link name are digested per link: one deleted by hand comes back, one for a link nobody has goes', async () => {
    const origins = (): string => edge.run('nft', 'list', 'set', 'ip', T, 'origins');
    const inner = tun(2).origin_inner.split('/')[0]!;
    expect(origins()).toContain(`"${tun(2).tunnel_name}" . ${inner}`);
    const before = setElements('origins');
    edge.run('nft', 'delete', 'element', 'ip', T, 'origins', `{ "${tun(2).tunnel_name}" . ${inner} }`);
    edge.run('nft', 'add', 'element', 'ip', T, 'origins', '{ "tg-nobody" . 100.64.99.2 }');
    expect(await reconcile()).toEqual({ added: 0, unchanged: 2, changed: 1, shortCut: false });
    expect(origins()).toContain(`"${tun(2).tunnel_name}" . ${inner}`);
    expect(origins()).not.toContain('tg-nobody');
    expect(setElements('origins')).toBe(before);
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('other programs\' commits to their own tables are heard between operations: the short cut holds', async () => {
    // The agent's watch (agent/dataplane/commit-watch.ts) heard a NEWGEN for each, and no notification named its table.
    edge.run('nft', 'add', 'table', 'ip', 'someone_else');
    edge.run('nft', 'add', 'set', 'ip', 'someone_else', 'banned', '{ type ipv4_addr; }');
    edge.run('nft', 'add', 'element', 'ip', 'someone_else', 'banned', '{ 192.0.2.7, 192.0.2.8 }');
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
    expect(heard.at(-1)).toMatchObject({ untouched: true });
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('a commit naming a table of the agent\'s name, in any family, reads everything back', async () => {
    edge.run('nft', 'add', 'table', 'inet', T);
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: false });
    expect(heard.at(-1)).toMatchObject({ untouched: false, why: 'touched' });
    edge.run('nft', 'delete', 'table', 'inet', T);
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: false });
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('a commit of more notifications than the listening socket holds proves nothing: everything is read back', async () => {
    // 200,000 elements are a notification each: ~13 MB of them, 3 times what the socket's receive buffer holds.
    const elements = Array.from({ length: 200_000 }, (_, i) => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`).join(', ');
    edge.nft(`add element ip someone_else banned { ${elements} }\n`);
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: false });
    expect(heard.at(-1)).toMatchObject({ untouched: false, why: 'overflow' });
    // The full read started the watch again: the next commit elsewhere is heard.
    edge.run('nft', 'delete', 'table', 'ip', 'someone_else');
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
    expect(heard.at(-1)).toMatchObject({ untouched: true });
  });

  it('`nft flush ruleset` (as nftables.service runs at every start) deletes the table: the next reconcile builds it again, whole', async () => {
    const before = { protectedIps: protectedIps(), allowed: setElements('allowed_1'), rules: edge.run('nft', 'list', 'chain', 'ip', T, 'guard') };
    edge.run('nft', 'flush', 'ruleset');
    expect(edge.run('nft', 'list', 'tables')).not.toContain(T);
    events.length = 0;
    const r = await dp.reconcile(desired);
    expect(r.failed).toEqual([]);
    expect(events).toContain('dataplane.table_restored');
    expect({ protectedIps: protectedIps(), allowed: setElements('allowed_1'), rules: edge.run('nft', 'list', 'chain', 'ip', T, 'guard') }).toEqual(before);
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('a rule deleted by hand is put back by the next reconcile, the elements kept', async () => {
    const guard = edge.run('nft', 'list', 'chain', 'ip', T, 'guard');
    const elements = setElements('origins');
    // The isolation of traffic from the tunnels, gone.
    edge.run('nft', 'flush', 'chain', 'ip', T, 'guard');
    expect(edge.run('nft', 'list', 'chain', 'ip', T, 'guard')).not.toContain('jump from_tunnel');
    events.length = 0;
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: false });
    expect(events).toContain('dataplane.table_restored');
    expect(edge.run('nft', 'list', 'chain', 'ip', T, 'guard')).toBe(guard);
    expect(setElements('origins')).toBe(elements);
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('links have no generation id: one deleted or set down by hand is found and repaired', async () => {
    const index = edge.linkIndexes();
    edge.run('ip', 'link', 'del', tun(1).tunnel_name);
    edge.run('ip', 'link', 'set', tun(2).tunnel_name, 'down');
    expect(await reconcile()).toEqual({ added: 0, unchanged: 1, changed: 2, shortCut: false });
    const after = edge.linkIndexes();
    expect(after.get(tun(1).tunnel_name)).toBeDefined();
    expect(after.get(tun(2).tunnel_name)).toBe(index.get(tun(2).tunnel_name));
    expect(edge.ipJson<{ flags: string[] }[]>('link', 'show', tun(2).tunnel_name)[0]!.flags).toContain('UP');
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
  });

  it('single-tunnel jobs keep the generation the agent\'s own; a different desired set takes the full path', async () => {
    await dp.apply(tun(4));
    await dp.remove(tun(4));
    expect(await reconcile()).toEqual({ added: 0, unchanged: 3, changed: 0, shortCut: true });
    events.length = 0;
    const r = await dp.reconcile([tun(1), tun(2)]);
    expect(r).toEqual({ added: 0, changed: 0, removed: 1, unchanged: 2, failed: [] });
    expect(events).not.toContain('dataplane.reconcile.unchanged');
    expect(protectedIps()).toEqual([tun(1).protected_ip, tun(2).protected_ip].sort());
    expect(await reconcile()).toEqual({ added: 1, unchanged: 2, changed: 0, shortCut: false });
    expect(protectedIps()).toEqual(desired.map((t) => t.protected_ip).sort());
  });
  describe('one-tunnel jobs on the agent\'s own generation', () => {
    const heavy = { ports: [[22, 22], [4096, 4351]] as [number, number][], protocol: 'both' as const, syn_proxy: true, source_pps_limit: 500, drop_fragments: true };
    /** Every element of the agent's allowlist sets whose key starts with this protected IP. */
    const allowlistOf = (ip: string): number =>
      ['allowed_1', 'allowed_16', 'allowed_256', 'allowed_all'].reduce((n, set) => n + (edge.run('nft', 'list', 'set', 'ip', T, set).match(new RegExp(`\\b${ip.replaceAll('.', '\\.')} \\.`, 'g'))?.length ?? 0), 0);
    const job = async (f: () => Promise<unknown>): Promise<string[]> => {
      reads.length = 0;
      events.length = 0;
      await f();
      return [...reads];
    };

    it('take the table from the records and read only the links; the result is the one read from the kernel', async () => {
      expect((await reconcile()).shortCut).toBe(true);
      const t = tun(5, { policy: heavy });
      expect(await job(() => dp.apply(t))).toEqual(['records']);
      expect(protectedIps()).toContain(t.protected_ip);
      // Port 22 and the aligned block 4096-4351, for TCP and for UDP.
      expect(allowlistOf(t.protected_ip)).toBe(4);
      // A change of the tunnel (its ports) too: its intent keeps the spec it replaces (see the ERESTART tests).
      const wider = { ...t, policy: { ...heavy, ports: [[22, 22], [80, 80], [4096, 4351]] as [number, number][] } };
      expect(await job(() => dp.apply(wider))).toEqual(['records']);
      expect(allowlistOf(t.protected_ip)).toBe(6);
      expect(await job(() => dp.apply(wider))).toEqual(['records']);
      expect(await job(() => dp.remove(t))).toEqual(['records']);
      expect(allowlistOf(t.protected_ip)).toBe(0);
      expect(protectedIps()).not.toContain(t.protected_ip);
      // Another program's commit to its own table is heard, and changes nothing of that.
      edge.run('nft', 'add', 'table', 'ip', 'someone_else_2');
      expect(await job(() => dp.apply(t))).toEqual(['records']);
      expect(await job(() => dp.remove(t))).toEqual(['records']);
      edge.run('nft', 'delete', 'table', 'ip', 'someone_else_2');
      // Once anyone committed to the agent's table (here a counter added and deleted in one commit), a job reads its
      // tunnel from the kernel by key, and builds the same.
      edge.nft(`add counter ip ${T} stray\ndelete counter ip ${T} stray\n`);
      expect(await job(() => dp.apply(t))).toEqual(['keys']);
      expect(allowlistOf(t.protected_ip)).toBe(4);
      // Until a reconcile has read the whole table again, every job does.
      expect(await job(() => dp.remove(t))).toEqual(['keys']);
      expect(allowlistOf(t.protected_ip)).toBe(0);
    });

    it('a commit by anyone between the generation check and the batch refuses the batch; the job runs again from the kernel', async () => {
      expect((await reconcile()).shortCut).toBe(false);
      const t = tun(6, { policy: heavy });
      expect(await job(() => dp.apply(t))).toEqual(['records']);
      const port22 = `${t.protected_ip} . tcp . 22`;
      expect(edge.run('nft', 'list', 'set', 'ip', T, 'allowed_1')).toContain(port22);
      // By hand, one of the elements the remove is about to delete goes: a batch built on the records and sent
      // without the generation would fail on that delete.
      betweenPlanAndCommit = () => edge.run('nft', 'delete', 'element', 'ip', T, 'allowed_1', `{ ${port22} }`);
      expect(await job(() => dp.remove(t))).toEqual(['records', 'keys']);
      expect(events).toContain('dataplane.generation_moved');
      expect(betweenPlanAndCommit).toBeUndefined();
      expect(allowlistOf(t.protected_ip)).toBe(0);
      expect(protectedIps()).not.toContain(t.protected_ip);
      expect(dp.tunnels().some((x) => x.id === t.id)).toBe(false);
    });

    it('a change refused that way runs again knowing the spec it replaces: the old link, counters and ports go', async () => {
      const t = tun(7, { policy: heavy });
      await reconcile();
      expect(await job(() => dp.apply(t))).toEqual(['records']);
      // Renamed, and port 22 only: the old link (already replaced by a new one when the batch is refused), its
      // counters and the 4096-4351 block must go in the run again, which reads the kernel by key.
      const moved = { ...t, tunnel_name: 'tg-g7x', policy: { ...heavy, ports: [[22, 22]] as [number, number][] } };
      betweenPlanAndCommit = () => edge.run('nft', 'add', 'table', 'ip', 'someone_else_3');
      expect(await job(() => dp.apply(moved))).toEqual(['records', 'keys']);
      expect(events).toContain('dataplane.generation_moved');
      const links = edge.linkIndexes();
      expect([links.has(t.tunnel_name), links.has(moved.tunnel_name)]).toEqual([false, true]);
      expect(allowlistOf(t.protected_ip)).toBe(2);
      const counters = edge.run('nft', 'list', 'counters', 'table', 'ip', T);
      // Named `<name>`, `<name>.out` and so on (quoted or not): tg-g7x's are there, none of tg-g7's.
      const of = (name: string): RegExp => new RegExp(`counter "?${name}[ ."]`);
      expect(counters).toMatch(of(moved.tunnel_name));
      expect(counters).not.toMatch(of(t.tunnel_name));
      expect(await dp.has(t.id)).toBe(true);
      expect(await job(() => dp.remove(moved))).toEqual(['keys']);
      expect(edge.linkIndexes().has(moved.tunnel_name)).toBe(false);
      edge.run('nft', 'delete', 'table', 'ip', 'someone_else_3');
    });
  });
});
