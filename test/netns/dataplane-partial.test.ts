// An apply that fails half-way: its link is created, then the kernel refuses the nftables batch. The
// dataplane must not report the tunnel as applied (has() is false, the error surfaces), and the next
// apply must finish the job without disturbing what is already right. The refusal is a real one: the
// agent's `protected` map is rebuilt by hand with `size 1`, so the kernel answers ENFILE (set full).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KernelError, createDataplane, type DataplaneHandle, type TunnelSpec } from '../../agent/dataplane/index.ts';
import { isRoot, TestNetns } from './netns.ts';
import { rulesetNftText } from './ruleset-text.ts';
import { skipUnless } from '../helpers/requirements.ts';

const T = 'tunnelgate';
const EDGE = '192.0.2.2';

const tun = (i: number): TunnelSpec => ({
  id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
  tunnel_name: `tg-p${i}`,
  protected_ip: `203.0.113.${i}`,
  origin_ip: `198.18.0.${i}`,
  edge_ip: EDGE,
  edge_inner: `100.64.0.${4 * i + 1}/30`,
  origin_inner: `100.64.0.${4 * i + 2}/30`,
  mtu: 1476,
});

/** The agent's table as nft would print it, with the protected map optionally capped. */
const table = (mapSize?: number): string => rulesetNftText({ table: T, ifnamePrefix: 'tg-', mapSize });

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('a half-done apply (link created, nft batch refused)', () => {
  let edge: TestNetns;
  let stateDir: string;
  let dp: DataplaneHandle;
  const nftFile = (text: string): void => {
    const f = join(stateDir, 'hand.nft');
    writeFileSync(f, text);
    edge.run('nft', '-f', f);
  };
  const mapElems = (): string[] => {
    const j = JSON.parse(edge.run('nft', '-j', 'list', 'map', 'ip', T, 'protected')) as { nftables: { map?: { elem?: [string, string][] } }[] };
    return (j.nftables.find((o) => o.map)!.map!.elem ?? []).map(([k, v]) => `${k}:${v}`).sort();
  };
  const linkIndex = (name: string): number | undefined => edge.ipJson<{ ifname: string; ifindex: number }[]>('link', 'show').find((l) => l.ifname === name)?.ifindex;

  beforeAll(async () => {
    edge = new TestNetns();
    edge.run('ip', 'link', 'set', 'lo', 'up');
    edge.run('ip', 'addr', 'add', `${EDGE}/32`, 'dev', 'lo');
    stateDir = mkdtempSync(join(tmpdir(), 'tg-partial-'));
    dp = await createDataplane({ edgeIp: EDGE, nftTable: T, stateDir, netns: edge.name, linkKind: 'veth-standin' });
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  });

  it('the refused apply leaves the tunnel not applied; the next apply completes it and leaves the rest alone', async () => {
    expect(await dp.apply(tun(1))).toEqual({ added: 1, changed: 0, removed: 0, unchanged: 0 });
    // Same table, but the protected map holds at most the one element it has.
    edge.run('nft', 'delete', 'table', 'ip', T);
    nftFile(`${table(1)}add counter ip ${T} tg-p1\nadd element ip ${T} protected { 203.0.113.1 : 100.64.0.6 }\nadd element ip ${T} tunnel_counters { 203.0.113.1 : "tg-p1" }\n`);

    const err = await dp.apply(tun(2)).then(
      () => null,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(KernelError);
    expect(String((err as Error).message)).toMatch(/ENFILE|full|Too many open files/i);
    // Half-way: the link exists, the mapping does not, and the dataplane does not call it applied.
    const firstIndex = linkIndex('tg-p2');
    expect(firstIndex).toBeDefined();
    expect(mapElems()).toEqual(['203.0.113.1:100.64.0.6']);
    expect(await dp.has(tun(2).id)).toBe(false);
    expect(await dp.has(tun(1).id)).toBe(true);

    // The operator fixes the table (uncapped map, tunnel 1's elements kept); the next apply finishes tunnel 2.
    edge.run('nft', 'delete', 'table', 'ip', T);
    nftFile(`${table()}add counter ip ${T} tg-p1\nadd element ip ${T} protected { 203.0.113.1 : 100.64.0.6 }\nadd element ip ${T} tunnel_counters { 203.0.113.1 : "tg-p1" }\n`);
    const again = await dp.apply(tun(2));
    expect(again.added + again.changed).toBe(1);
    expect(await dp.has(tun(2).id)).toBe(true);
    expect(mapElems()).toEqual(['203.0.113.1:100.64.0.6', '203.0.113.2:100.64.0.10']);
    expect(linkIndex('tg-p2')).toBeDefined();
    // Applying once more changes nothing: the repaired tunnel is whole.
    expect(await dp.apply(tun(2))).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1 });
    // Tunnel 1 was restored by hand without its drop counters and isolation elements: its apply adds them, once.
    expect(await dp.apply(tun(1))).toEqual({ added: 0, changed: 1, removed: 0, unchanged: 0 });
    expect(await dp.apply(tun(1))).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 1 });
  });
});
