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

  /** One entry from a client port to dst (inserted by hand: no traffic needed), UDP to port 53 unless told. */
  const insert = (dst: string, sport: number, proto: 'udp' | 'tcp' = 'udp', dport = 53): void => {
    const state = proto === 'tcp' ? ['--state', 'ESTABLISHED'] : [];
    ns.run('conntrack', '-I', '-p', proto, '-s', '198.51.100.7', '-d', dst, '--sport', String(sport), '--dport', String(dport), ...state, '-t', '3600', '-u', 'ASSURED');
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

  it('flushDisallowed deletes only the connections its judge refuses, by protocol and destination port, of the given IPs', async () => {
    insert('203.0.113.4', 4001, 'udp', 53);
    insert('203.0.113.4', 4002, 'udp', 5353);
    insert('203.0.113.4', 4003, 'tcp', 443);
    insert('203.0.113.4', 4004, 'tcp', 22);
    insert('203.0.113.5', 5001, 'tcp', 22);
    const list = (dst: string): string[] =>
      ns
        .run('bash', '-c', `conntrack -L -d ${dst} 2>/dev/null || true`)
        .split('\n')
        .filter((l) => l.includes(`dst=${dst}`))
        .map((l) => `${l.split(/\s+/)[0]}:${/dport=(\d+)/.exec(l)?.[1]}`)
        .sort();
    expect(list('203.0.113.4')).toEqual(['tcp:22', 'tcp:443', 'udp:53', 'udp:5353']);
    const seen: string[] = [];
    // TCP 443 and UDP 53 still allowed: the others go.
    const deleted = await ct.flushDisallowed([
      {
        ip: '203.0.113.4',
        allows: (proto, port) => {
          seen.push(`${proto}:${port}`);
          return (proto === 6 && port === 443) || (proto === 17 && port === 53);
        },
      },
    ]);
    expect(deleted).toBe(2);
    expect(seen.sort()).toEqual(['17:53', '17:5353', '6:22', '6:443']);
    expect(list('203.0.113.4')).toEqual(['tcp:443', 'udp:53']);
    // Another IP's entry on a refused port is not this tunnel's to judge.
    expect(list('203.0.113.5')).toEqual(['tcp:22']);
    expect(await ct.flushDisallowed([])).toBe(0);
  });

  it('flushDisallowed over more IPs than it dumps one by one (an agent starting on a rebuilt table) judges one dump of the whole table', async () => {
    // Ten tunnels that allow only TCP 443; each has a connection on 443 and one on UDP 5353. An eleventh IP,
    // not among them, has one on 5353 too: not theirs to judge. The dump is streamed (only refused entries
    // are kept); what stays and what goes is the same as with per-IP dumps.
    const ips = Array.from({ length: 10 }, (_, i) => `203.0.113.${20 + i}`);
    for (const [i, ip] of ips.entries()) {
      insert(ip, 6000 + i, 'tcp', 443);
      insert(ip, 7000 + i, 'udp', 5353);
    }
    insert('203.0.113.40', 8000, 'udp', 5353);
    const deleted = await ct.flushDisallowed(ips.map((ip) => ({ ip, allows: (proto, port) => proto === 6 && port === 443 })));
    expect(deleted).toBe(10);
    expect(ips.map(entries)).toEqual(ips.map(() => 1));
    expect(entries('203.0.113.40')).toBe(1);
  });
});
