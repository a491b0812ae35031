// The conntrack flush (agent/dataplane/conntrack.ts) against this machine's kernel, in a fresh namespace,
// with `conntrack` (conntrack-tools) as the oracle: entries of the flushed destinations go, all others stay,
// and on a kernel with ctnetlink's filtered flush (Linux 6.4+) the kernel deletes them in one request each
// (flushDestinations answers undefined: it did not dump and delete them itself).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Conntrack } from '../../agent/dataplane/conntrack.ts';
import { isRoot, TestNetns } from './netns.ts';
import { skipUnless } from '../helpers/requirements.ts';

describe.skipIf(skipUnless(isRoot, 'root (network namespaces)'))('conntrack flush in a fresh namespace', () => {
  let ns: TestNetns;
  let ct: Conntrack;

  /** One UDP entry from a client port to dst (inserted by hand: no traffic needed). */
  const insert = (dst: string, sport: number): void => {
    ns.run('conntrack', '-I', '-p', 'udp', '-s', '198.51.100.7', '-d', dst, '--sport', String(sport), '--dport', '53', '-t', '3600', '-u', 'ASSURED');
  };
  const entries = (dst: string): number => {
    const out = ns.run('bash', '-c', `conntrack -L -d ${dst} 2>/dev/null || true`);
    return out.split('\n').filter((l) => l.includes(`dst=${dst}`)).length;
  };

  beforeAll(() => {
    ns = new TestNetns();
    ct = Conntrack.open(ns.path);
  });
  afterAll(() => {
    ct?.close();
    ns?.delete();
  });

  it('deletes the entries of the given destinations only, by the kernel filtered flush on this kernel', async () => {
    for (const sport of [1001, 1002, 1003]) insert('203.0.113.1', sport);
    for (const sport of [2001, 2002]) insert('203.0.113.2', sport);
    insert('203.0.113.3', 3001);
    expect([entries('203.0.113.1'), entries('203.0.113.2'), entries('203.0.113.3')]).toEqual([3, 2, 1]);

    const answer = await ct.flushDestinations(['203.0.113.1', '203.0.113.3']);
    expect([entries('203.0.113.1'), entries('203.0.113.2'), entries('203.0.113.3')]).toEqual([0, 2, 0]);
    // undefined: the kernel flushed (one request per destination), not a dump of the whole table and a delete per entry.
    expect(answer).toBeUndefined();

    // Nothing to flush is no error; the other destination's entries are still there.
    await ct.flushDestinations(['203.0.113.9']);
    expect(entries('203.0.113.2')).toBe(2);
  });
});
