// test/netns/ruleset-text.ts is the command line's twin of the agent's table (the agent benchmark's
// baseline loads it, dataplane-partial builds a table by hand with it). A hand copy drifts silently, so
// here the kernel is the judge: the table the agent builds (agent/netlink/ruleset.ts) and the one `nft -f`
// builds from the text must list the same, in two fresh namespaces.
import { writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Nft, NftBatch, addTunnelgateRuleset } from '../../agent/netlink/client.ts';
import { skipUnless } from '../helpers/requirements.ts';
import { isRoot, TestNetns } from './netns.ts';
import { rulesetNftText } from './ruleset-text.ts';

const T = 'tunnelgate';
const PREFIX = 'tg-';

/** `nft -j list table`, without what differs between two equal tables (handles). */
function listed(ns: TestNetns): unknown[] {
  const json = JSON.parse(ns.run('nft', '-j', 'list', 'table', 'ip', T)) as { nftables: Record<string, Record<string, unknown>>[] };
  return json.nftables
    .filter((o) => !o.metainfo)
    .map((o) => {
      const [kind, body] = Object.entries(o)[0]!;
      const { handle: _h, ...rest } = body as { handle?: number };
      return { [kind]: rest };
    });
}

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('the nft -f twin of the agent table', () => {
  let ours: TestNetns;
  let theirs: TestNetns;

  beforeAll(() => {
    ours = new TestNetns();
    theirs = new TestNetns();
  });
  afterAll(() => {
    ours?.delete();
    theirs?.delete();
  });

  it('lists exactly as the table the agent builds', async () => {
    const nft = Nft.open({ netns: ours.path });
    try {
      const b = new NftBatch();
      addTunnelgateRuleset(b, { table: T, ifnamePrefix: PREFIX });
      await nft.commit(b);
    } finally {
      nft.close();
    }
    const file = join(mkdtempSync(join(tmpdir(), 'tg-ruleset-')), 'table.nft');
    writeFileSync(file, rulesetNftText({ table: T, ifnamePrefix: PREFIX }));
    theirs.run('nft', '-f', file);
    const a = listed(ours);
    expect(a.length).toBeGreaterThan(5); // table, two maps, three chains, their rules
    expect(listed(theirs)).toEqual(a);
  });
});
