// A change the kernel refuses must leave its tunnel exactly as it was, and the next change must still clean up
// what the old spec left (agent/dataplane/records.ts OwnedTunnel.was, docs/CONTRACTS.md "Dataplane"). The refusal is
// real: the agent's table is built by hand before the dataplane opens, the same as the agent builds it (its start
// check finds it `present`) but with `allowed_1` capped at two elements, so a port list needing a third single
// port is refused with ENFILE. Production dataplane, fresh namespace, veth stand-in for GRE; `nft` and `ip` are
// the oracles.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DataplaneHandle, TunnelSpec } from '../../agent/dataplane/index.ts';
import { DEFAULT_POLICY, type PortRange } from '../../common/tunnel-policy.ts';
import { DataplaneEdge, NFT_TABLE as T, numberedTunnels } from './dataplane-edge.ts';
import { isRoot } from './netns.ts';
import { rulesetNftText } from './ruleset-text.ts';
import { skipUnless } from '../helpers/requirements.ts';

const tun = numberedTunnels('tg-r');
/** Tunnel 1 allowing these single TCP ports (each one `allowed_1` element), optionally renamed. */
const one = (ports: PortRange[], over: Partial<TunnelSpec> = {}): TunnelSpec => tun(1, { policy: { ...DEFAULT_POLICY, protocol: 'tcp', ports }, ...over });

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('a change the kernel refuses', () => {
  let edge: DataplaneEdge;
  let dp: DataplaneHandle;
  /** The TCP ports `allowed_1` holds for tunnel 1's protected IP. */
  const singlePorts = (): number[] =>
    [...edge.run('nft', 'list', 'set', 'ip', T, 'allowed_1').matchAll(new RegExp(`${tun(1).protected_ip.replaceAll('.', '\\.')} \\. tcp \\. (\\d+)`, 'g'))].map((m) => Number(m[1])).sort((a, b) => a - b);
  const links = (): string[] => [...edge.linkIndexes().keys()].filter((n) => n.startsWith('tg-r')).sort();

  beforeAll(async () => {
    edge = new DataplaneEdge('tg-refused');
    const f = join(edge.stateDir, 'capped.nft');
    writeFileSync(f, rulesetNftText({ table: T, ifnamePrefix: 'tg-', sizes: { allowed_1: 2 } }));
    edge.run('nft', '-f', f);
    dp = await edge.openDataplane();
    expect(dp.table).toBe('present');
  });
  afterAll(async () => {
    await dp?.close();
    edge?.delete();
  });

  it('a reconcile keeps the refused tunnel as it was (link, ports, mapping); the next apply replaces all of it', async () => {
    expect(await dp.reconcile([one([[80, 80]]), tun(2)])).toMatchObject({ added: 2, failed: [] });
    expect(singlePorts()).toEqual([80]);

    // Renamed, and three single ports where the set has room for two: refused, after its new link was created.
    const refused = one([[443, 443], [8443, 8443], [9443, 9443]], { tunnel_name: 'tg-r1b' });
    const r = await dp.reconcile([refused, tun(2), tun(3)]);
    expect(r.failed.map((f) => f.id)).toEqual([tun(1).id]);
    expect(r.failed[0]!.error_description).toMatch(/ENFILE/);
    expect({ added: r.added, unchanged: r.unchanged, removed: r.removed }).toEqual({ added: 1, unchanged: 1, removed: 0 });
    // Left as it was: its port, its mapping, its old link (and the new one the refused change made: the agent's).
    expect(singlePorts()).toEqual([80]);
    expect(edge.protectedMap().map(([ip]) => ip)).toContain(tun(1).protected_ip);
    expect(links()).toEqual(['tg-r1', 'tg-r1b', 'tg-r2', 'tg-r3']);
    expect(await dp.has(tun(1).id)).toBe(false);

    // A change that fits: port 80 goes (it is the old spec's, which the records still name), the two new ones
    // come, and the old link goes; nothing else is touched.
    const fits = one([[443, 443], [8443, 8443]], { tunnel_name: 'tg-r1b' });
    const before = edge.linkIndexes();
    expect(await dp.apply(fits)).toEqual({ added: 1, changed: 0, removed: 0, unchanged: 0 });
    expect(singlePorts()).toEqual([443, 8443]);
    expect(links()).toEqual(['tg-r1b', 'tg-r2', 'tg-r3']);
    expect(edge.linkIndexes().get('tg-r2')).toBe(before.get('tg-r2'));
    expect(await dp.has(tun(1).id)).toBe(true);
    // And the whole set again is no change at all.
    expect(await dp.reconcile([fits, tun(2), tun(3)])).toEqual({ added: 0, changed: 0, removed: 0, unchanged: 3, failed: [] });
  }, 60_000);
});
