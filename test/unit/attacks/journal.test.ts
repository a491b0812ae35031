// The attack journal (agent/attacks/journal.ts): what `status` carries, and its bound.
import { describe, expect, it } from 'vitest';
import { AttackJournal } from '../../../agent/attacks/journal.ts';
import type { AttackRecord } from '../../../common/attacks.ts';

const T0 = Date.parse('2026-12-01T10:00:00.000Z');
const MIN = 60_000;

function record(n: number, ended: boolean): AttackRecord {
  return {
    id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`,
    tunnel_id: `7d3c4b0e-2f7a-4c8e-9a51-${String(n).padStart(12, '0')}`,
    started_at: new Date(T0).toISOString(),
    ended_at: ended ? new Date(T0 + 5_000).toISOString() : null,
    peak_pps: 10_000,
    peak_bps: 8_000_000,
    vector: { protocol: null, ports: null, top_drop_reason: null },
    packets_dropped: 0,
    packets_passed: 20_000,
  };
}

describe('AttackJournal', () => {
  it('reports open records always, ended ones while they changed within the window, then forgets them', () => {
    const j = new AttackJournal({ windowMs: 10 * MIN });
    j.put(record(1, false), T0);
    j.put(record(2, true), T0);
    expect(j.report(T0 + 9 * MIN).map((r) => r.id.slice(-1))).toEqual(['1', '2']);
    expect(j.report(T0 + 11 * MIN).map((r) => r.id.slice(-1))).toEqual(['1']);
    expect(j.size).toBe(1);
    // An open record that ends now is reported again for a whole window from its end.
    j.put(record(1, true), T0 + 30 * MIN);
    expect(j.report(T0 + 39 * MIN).map((r) => r.ended_at)).toEqual([record(1, true).ended_at]);
    expect(j.report(T0 + 41 * MIN)).toEqual([]);
  });

  it('a record put again replaces the one held (one per id), latest last', () => {
    const j = new AttackJournal();
    j.put(record(1, false), T0);
    j.put(record(2, false), T0);
    j.put({ ...record(1, false), peak_pps: 99_000 }, T0 + 1_000);
    expect(j.report(T0 + 2_000).map((r) => [r.id.slice(-1), r.peak_pps])).toEqual([
      ['2', 10_000],
      ['1', 99_000],
    ]);
  });

  it('holds at most maxEnded ended records (the oldest change goes), and never drops an open one for them', () => {
    const j = new AttackJournal({ maxEnded: 3 });
    j.put(record(100, false), T0);
    for (let i = 1; i <= 10; i++) j.put(record(i, true), T0 + i);
    expect(j.size).toBe(4);
    expect(j.report(T0 + 20).map((r) => r.id.slice(-3))).toEqual(['100', '008', '009', '010']);
  });
});

describe('AttackJournal report bound', () => {
  it('an answer carries at most maxReported records: every open one first, then the latest ended', () => {
    const j = new AttackJournal({ maxReported: 4 });
    for (let i = 1; i <= 5; i++) j.put(record(i, true), T0 + i);
    j.put(record(100, false), T0 + 10);
    j.put(record(101, false), T0 + 11);
    expect(j.report(T0 + 20).map((r) => r.id.slice(-3))).toEqual(['100', '101', '004', '005']);
    // More open ones than fit: the latest changed of them, none ended.
    for (let i = 200; i < 206; i++) j.put(record(i, false), T0 + i);
    expect(j.report(T0 + 300).map((r) => r.id.slice(-3))).toEqual(['202', '203', '204', '205']);
  });
});
