// The agent's question "can this kernel make GRE links" (agent/dataplane/link-support.ts) asked of this
// machine's real kernel, in a fresh namespace, with iproute2 as the oracle: `ip link add ... type gre`
// either works (GRE here) or is refused as not supported (no GRE, as on this development host and CI).
// The probe must agree with it and leave nothing behind. The veth stand-in reports itself, usable.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Rtnl } from '../../agent/netlink/client.ts';
import { probeGreSupport } from '../../agent/dataplane/link-support.ts';
import { createDataplane } from '../../agent/dataplane/index.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

/** What iproute2 says of GRE in `ns`: true when it made (and removed) a GRE link, false when the kernel has none. */
function ipSaysGre(ns: TestNetns): boolean {
  try {
    ns.run('ip', 'link', 'add', 'tgoracle', 'type', 'gre', 'local', '192.0.2.2', 'remote', '198.51.100.2');
  } catch (e) {
    const stderr = String((e as { stderr?: unknown }).stderr ?? '');
    if (/not supported|Unknown device type/i.test(stderr)) return false;
    throw e;
  }
  ns.run('ip', 'link', 'del', 'tgoracle');
  return true;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('GRE support asked of the real kernel', () => {
  let ns: TestNetns;
  let rtnl: Rtnl;
  let stateDir: string;

  beforeAll(() => {
    ns = new TestNetns();
    rtnl = Rtnl.open({ netns: ns.path });
    stateDir = mkdtempSync(join(tmpdir(), 'tg-link-support-'));
  });
  afterAll(() => {
    rtnl?.close();
    ns?.delete();
    if (stateDir) rmSync(stateDir, { recursive: true, force: true });
  });

  const links = () => ns.ipJson<{ ifname: string }[]>('link', 'show').map((l) => l.ifname);

  it('agrees with iproute2, and leaves the namespace as it found it', async () => {
    const before = links();
    const found = await probeGreSupport(rtnl);
    expect(links()).toEqual(before);
    const gre = ipSaysGre(ns);
    process.stderr.write(`link-support: this kernel ${gre ? 'has' : 'has no'} GRE; the probe said ${JSON.stringify(found)}\n`);
    if (gre) expect(found).toEqual({ kind: 'gre', usable: true });
    else expect(found).toMatchObject({ kind: 'gre', usable: false, reason: expect.stringMatching(/EOPNOTSUPP/) });
    // Again (the module, if any, is loaded now): the same answer, still nothing made.
    expect(await probeGreSupport(rtnl)).toEqual(found);
    expect(links()).toEqual(before);
    // Nor in the host's own namespace (the probe's socket is the namespace's).
    expect(execFileSync('ip', ['-o', 'link', 'show'], { encoding: 'utf8' })).not.toMatch(/\btgq[0-9a-f]{10}\b/);
  });

  it("the dataplane's tunnelLinks(): the GRE driver probes; the veth stand-in names itself, usable", async () => {
    const gre = await createDataplane({ edgeIp: '192.0.2.2', nftTable: 'tg_links', stateDir, netns: ns.name, linkKind: 'gre' });
    try {
      expect(await gre.tunnelLinks()).toEqual(await probeGreSupport(rtnl));
    } finally {
      await gre.close();
    }
    const standin = await createDataplane({ edgeIp: '192.0.2.2', nftTable: 'tg_links', stateDir, netns: ns.name, linkKind: 'veth-standin' });
    try {
      expect(await standin.tunnelLinks()).toEqual({ kind: 'veth-standin', usable: true });
    } finally {
      await standin.close();
    }
  });
});
