// The events stream's line codec (common/edge-events.ts; docs/CONTRACTS.md "Events stream"): what the agent writes
// decodes to the same event, and every line that breaks the contract is refused with a reason that names what is
// wrong, as the gateway logs it.
import { describe, expect, it } from 'vitest';
import { LineSplitter, MAX_EVENT_LINE, decodeEventLine, encodeEventLine, type EdgeEvent } from '../../../common/edge-events.ts';
import type { AttackRecord } from '../../../common/attacks.ts';

const TUNNEL = '6f1c2a4e-8b7d-4c3e-9a2f-1d5e7b9c0a11';
const attack = (over: Partial<AttackRecord> = {}): AttackRecord => ({
  id: '0b6c1e2a-3d4f-4a5b-8c6d-7e8f9a0b1c2d',
  tunnel_id: TUNNEL,
  started_at: '2026-11-29T02:00:00.000Z',
  ended_at: null,
  peak_pps: 20_000,
  peak_bps: 16_000_000,
  vector: { protocol: null, ports: null, top_drop_reason: null },
  packets_dropped: 0,
  packets_passed: 40_000,
  ...over,
});

const refused = (line: string): string => {
  const d = decodeEventLine(line);
  if (d.ok) throw new Error(`accepted: ${line}`);
  return d.reason;
};

describe('event lines', () => {
  it('each event type encodes to one line and decodes to the same event', () => {
    const events: EdgeEvent[] = [
      { type: 'attack_started', attack: attack() },
      { type: 'attack_ended', attack: attack({ ended_at: '2026-11-29T02:00:05.000Z' }) },
      { type: 'health_changed', tunnel_id: TUNNEL, health: 'down', checked_at: '2026-11-29T02:00:01.000Z' },
      { type: 'keepalive', at: '2026-11-29T02:00:02.000Z' },
    ];
    for (const e of events) {
      const line = encodeEventLine(e);
      expect(line.endsWith('\n')).toBe(true);
      expect(line.indexOf('\n')).toBe(line.length - 1);
      expect(decodeEventLine(line.slice(0, -1))).toEqual({ ok: true, event: e });
    }
  });

  it('the encoder refuses what the decoder would: the agent never writes a bad line', () => {
    expect(() => encodeEventLine({ type: 'attack_started', attack: attack({ ended_at: '2026-11-29T02:00:05.000Z' }) })).toThrow(/has ended/);
    expect(() => encodeEventLine({ type: 'keepalive', at: 'now' })).toThrow(/at must be an ISO 8601 time/);
  });

  it('bad lines are refused with the reason', () => {
    expect(refused('not json')).toBe('the line is not JSON');
    expect(refused('[1]')).toBe('an event line must be a JSON object');
    expect(refused('{"type":"reboot"}')).toBe('type must be one of attack_started, attack_ended, health_changed, keepalive, got "reboot"');
    expect(refused('{}')).toBe('type must be one of attack_started, attack_ended, health_changed, keepalive, got null');
    expect(refused(JSON.stringify({ type: 'attack_started', attack: { ...attack(), id: 'x' } }))).toBe('attack.id must be a UUID');
    expect(refused(JSON.stringify({ type: 'attack_started', attack: { ...attack(), peak_pps: -1 } }))).toBe('attack.peak_pps must be a non-negative integer');
    expect(refused(JSON.stringify({ type: 'attack_ended', attack: attack() }))).toBe('attack_ended carries an attack without ended_at');
    expect(refused(JSON.stringify({ type: 'attack_started', attack: attack({ ended_at: '2026-11-29T02:00:05.000Z' }) }))).toMatch(/has ended/);
    expect(refused(JSON.stringify({ type: 'health_changed', tunnel_id: 'x', health: 'up', checked_at: '2026-11-29T02:00:01Z' }))).toBe('tunnel_id must be a UUID');
    expect(refused(JSON.stringify({ type: 'health_changed', tunnel_id: TUNNEL, health: 'sick', checked_at: '2026-11-29T02:00:01Z' }))).toBe('health must be one of up, down, unknown');
    expect(refused(JSON.stringify({ type: 'health_changed', tunnel_id: TUNNEL, health: 'up', checked_at: 12 }))).toBe('checked_at must be an ISO 8601 time');
    expect(refused(JSON.stringify({ type: 'keepalive' }))).toBe('at must be an ISO 8601 time');
    expect(refused(JSON.stringify({ type: 'keepalive', at: '2026-11-29T02:00:01Z', pad: 'x'.repeat(MAX_EVENT_LINE) }))).toBe(`the line is longer than ${MAX_EVENT_LINE} bytes`);
  });

  it("the agent's refusal of the job is told apart, with its code", () => {
    expect(decodeEventLine(JSON.stringify({ ok: false, jti: TUNNEL, error: 'expired', error_description: 'exp has passed' }))).toEqual({
      ok: false,
      refused: 'expired',
      reason: 'the agent refused the stream: expired: exp has passed',
    });
  });

  it('extra keys from a newer agent are allowed', () => {
    expect(decodeEventLine(JSON.stringify({ type: 'keepalive', at: '2026-11-29T02:00:01Z', seq: 4 })).ok).toBe(true);
  });
});

describe('LineSplitter', () => {
  it('joins lines split across chunks and keeps a partial line for the next chunk', () => {
    const s = new LineSplitter();
    expect(s.push('{"a":1}\n{"b"')).toEqual({ lines: ['{"a":1}'], overflow: false });
    expect(s.push(':2}\n\n{"c":3}')).toEqual({ lines: ['{"b":2}', ''], overflow: false });
    expect(s.push('\n')).toEqual({ lines: ['{"c":3}'], overflow: false });
  });

  it('a line that grows past the limit without a newline is reported once and dropped, and the next line is whole', () => {
    const s = new LineSplitter();
    expect(s.push('x'.repeat(MAX_EVENT_LINE + 1))).toEqual({ lines: [], overflow: true });
    expect(s.push('y'.repeat(MAX_EVENT_LINE + 1))).toEqual({ lines: [], overflow: false });
    expect(s.push('tail\n{"ok":1}\n')).toEqual({ lines: ['{"ok":1}'], overflow: false });
  });
});
