import { describe, expect, it } from 'vitest';
import { utcText } from '../../server/domain/tunnels/index.ts';

// The list reshapes PostgreSQL's `timestamp::text` (DateStyle ISO, trailing zeros of the fraction
// dropped) itself; views must match to_char(..., 'MS'), which truncates to milliseconds.
describe('utcText', () => {
  it('keeps microseconds for cursors and truncates to milliseconds for views', () => {
    expect(utcText('2026-11-21 02:25:01.123456')).toEqual({ millis: '2026-11-21T02:25:01.123Z', micros: '2026-11-21T02:25:01.123456Z' });
    expect(utcText('2026-11-21 02:25:01.999999').millis).toBe('2026-11-21T02:25:01.999Z');
  });

  it('pads a trimmed or missing fraction', () => {
    expect(utcText('2026-01-02 03:04:05.5')).toEqual({ millis: '2026-01-02T03:04:05.500Z', micros: '2026-01-02T03:04:05.500000Z' });
    expect(utcText('2026-01-02 03:04:05')).toEqual({ millis: '2026-01-02T03:04:05.000Z', micros: '2026-01-02T03:04:05.000000Z' });
  });

  it('agrees with Date for the millisecond form and refuses other shapes', () => {
    expect(new Date(utcText('2026-11-21 02:25:01.12').micros).toISOString()).toBe(utcText('2026-11-21 02:25:01.12').millis);
    for (const bad of ['2026-11-21T02:25:01Z', '21/11/2026 02:25:01', '2026-11-21 02:25:01+00']) expect(() => utcText(bad)).toThrow(/unexpected timestamp/);
  });
});
