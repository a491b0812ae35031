// The attacks section's pure parts (panel/src/pages/tunnel/attacks/attacks.ts): the order it lists attacks in,
// an attack's vector as words (every key in both catalogues), and the page's live events that make it read the
// list again.
import { describe, expect, it } from 'vitest';
import { newestFirst, tunnelEvents, vectorWords, type AttackLike } from '../../panel/src/pages/tunnel/attacks/attacks.ts';
import { en } from '../../panel/src/i18n/en.ts';
import { ru } from '../../panel/src/i18n/ru.ts';
import { ATTACK_PROTOCOLS } from '../../common/attacks.ts';
import { DROP_REASONS } from '../../common/drop-reasons.ts';

const attack = (id: string, startedAt: string, vector: AttackLike['vector'] = {}): AttackLike => ({ id, startedAt, endedAt: null, vector });

describe('the attacks section', () => {
  it('lists the newest start first (the API answers oldest first); a tie is ordered by id, the same way every time', () => {
    const list = [attack('a', '2026-11-28T10:00:00.000Z'), attack('c', '2026-11-28T12:00:00.000Z'), attack('b', '2026-11-28T12:00:00.000Z'), attack('d', '2026-11-27T23:59:59.000Z')];
    expect(newestFirst(list).map((a) => a.id)).toEqual(['c', 'b', 'a', 'd']);
    expect(newestFirst([...list].reverse()).map((a) => a.id)).toEqual(['c', 'b', 'a', 'd']);
    // The list given is not reordered in place.
    expect(list.map((a) => a.id)).toEqual(['a', 'c', 'b', 'd']);
  });

  it('says the vector in words: the protocol, the ports, and the protection that dropped most; null is "not known"', () => {
    expect(vectorWords({ protocol: 'UDP', ports: [27015], topDropReason: 'RATE_LIMITED' })).toEqual({
      protocol: 'attacks.protocol.udp',
      ports: { key: 'attacks.ports.one', params: { ports: '27015' } },
      drop: 'attacks.drop.rateLimited',
    });
    expect(vectorWords({ protocol: 'MIXED', ports: [80, 443], topDropReason: 'NOT_ALLOWED' }).ports).toEqual({ key: 'attacks.ports.many', params: { ports: '80, 443' } });
    // Today's edge meters neither protocol nor port (common/attacks.ts): both null, and nothing dropped.
    expect(vectorWords({ protocol: null, ports: null, topDropReason: null })).toEqual({ protocol: 'attacks.protocol.unknown', ports: { key: 'attacks.ports.unknown' }, drop: 'attacks.drop.none' });
  });

  it("has words for every protocol and drop reason the gateway stores, in both languages", () => {
    for (const p of ATTACK_PROTOCOLS) {
      const key = vectorWords({ protocol: p.toUpperCase() as never }).protocol;
      expect(key).not.toBe('attacks.protocol.unknown');
      expect([en[key], ru[key]].every((s) => typeof s === 'string' && s.length > 0)).toBe(true);
    }
    for (const r of DROP_REASONS) {
      const key = vectorWords({ topDropReason: r.toUpperCase() as never }).drop;
      expect(key).not.toBe('attacks.drop.none');
      expect([en[key], ru[key]].every((s) => typeof s === 'string' && s.length > 0)).toBe(true);
    }
  });

  it("a live event of the tunnel makes its section read again; another tunnel's does not, nor one after it unsubscribed", () => {
    const seen: string[] = [];
    const off = tunnelEvents.on('t1', () => seen.push('t1'));
    const off2 = tunnelEvents.on('t2', () => seen.push('t2'));
    tunnelEvents.fire('t1');
    tunnelEvents.fire('t3');
    off();
    tunnelEvents.fire('t1');
    tunnelEvents.fire('t2');
    off2();
    expect(seen).toEqual(['t1', 't2']);
  });
});
