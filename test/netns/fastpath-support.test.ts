// The agent's question "can this kernel hold nftables flowtables" (agent/dataplane/fastpath-support.ts) asked of
// this machine's real kernel, in a fresh namespace, with nft as the oracle: a flowtable on `lo` either is made
// (a kernel with nf_flow_table, as Debian's in the VM) or is refused (none, as on this development host). The
// probe must agree with it and leave no table behind. Runs unchanged in the VM's kernel, where the answer is yes.
import { spawnSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Nft } from '../../agent/netlink/client.ts';
import { probeFastPathSupport } from '../../agent/dataplane/fastpath-support.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

/** What nft says of flowtables in `ns`: true when it made (and removed) one, false when the kernel refused it. */
function nftSaysFlowtables(ns: TestNetns): boolean {
  const text = 'table ip tg_oracle {\n  flowtable ft {\n    hook ingress priority 0; devices = { lo };\n  }\n}\n';
  const r = spawnSync('ip', ['netns', 'exec', ns.name, 'nft', '-f', '-'], { input: text, encoding: 'utf8' });
  if (r.status !== 0) {
    if (/No such file or directory|Operation not supported/.test(r.stderr)) return false;
    throw new Error(`nft: ${r.stderr}`);
  }
  ns.run('nft', 'delete', 'table', 'ip', 'tg_oracle');
  return true;
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('flowtable support asked of the real kernel', () => {
  let ns: TestNetns;
  let nft: Nft;

  beforeAll(() => {
    ns = new TestNetns();
    nft = Nft.open({ netns: ns.path });
  });
  afterAll(() => {
    nft?.close();
    ns?.delete();
  });

  const tables = () => ns.run('nft', 'list', 'tables');

  it('agrees with nft, and leaves the namespace as it found it', async () => {
    const before = tables();
    const found = await probeFastPathSupport(nft);
    expect(tables()).toBe(before);
    const has = nftSaysFlowtables(ns);
    process.stderr.write(`fastpath-support: this kernel ${has ? 'has' : 'has no'} flowtables; the probe said ${JSON.stringify(found)}\n`);
    if (has) expect(found).toEqual({ usable: true });
    else expect(found).toMatchObject({ usable: false, reason: expect.stringMatching(/ENOENT|EOPNOTSUPP/) });
    // Again (the module, if any, is loaded now): the same answer, still nothing left.
    expect(await probeFastPathSupport(nft)).toEqual(found);
    expect(tables()).toBe(before);
  });
});
