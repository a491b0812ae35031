// An apply that fails half-way: its link is created, then the kernel refuses the nftables batch. The
// dataplane must not report the tunnel as applied (has() is false, the error surfaces), and the next
// apply must finish the job without disturbing what is already right. The refusal is a real one: the
// agent's `protected` map is rebuilt by hand with `size 1`, so the kernel answers ENFILE (set full).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KernelError, type DataplaneHandle } from '../../agent/dataplane/index.ts';
import { DataplaneEdge, NFT_TABLE as T, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';
import { rulesetNftText } from './ruleset-text.ts';
import { skipUnless } from '../helpers/requirements.ts';

const tun = numberedTunnels('tg-p');

/** The agent's table as nft would print it, with the protected map optionally capped. */
const table = (mapSize?: number): string => rulesetNftText({ table: T, ifnamePrefix: 'tg-', ...(mapSize ? { sizes: { protected: mapSize } } : {}) });

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('a half-done apply (link created, nft batch refused)', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle;
  const nftFile = (text: string): void => {
    const f = join(edge.stateDir, 'hand.nft');
    writeFileSync(f, text);
    edge.run('nft', '-f', f);
  };
  const mapElems = (): string[] => edge.protectedMap().map(([k, v]) => `${k}:${v}`).sort();
  const linkIndex = (name: string): number | undefined => edge.linkIndexes().get(name);

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-partial');
    dp = await edge.openDataplane();
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
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
