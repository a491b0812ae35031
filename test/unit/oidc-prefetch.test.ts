// The read-ahead hand-over of server/oidc/prefetch.ts: one entry per read, taken once, never stale.
import { expect, it } from 'vitest';
import { Prefetched } from '../../server/oidc/prefetch.ts';

it('hands each read-ahead value over once, in order, per key', () => {
  const p = new Prefetched<string>(1000);
  p.put('g', 'a', 0);
  p.put('g', 'b', 0);
  p.put('h', 'c', 0);
  expect(p.take('g', 10)).toBe('a');
  expect(p.take('g', 10)).toBe('b');
  expect(p.take('g', 10)).toBeUndefined();
  expect(p.take('h', 10)).toBe('c');
});

it('never hands over an entry older than the maximum age', () => {
  const p = new Prefetched<string>(1000);
  p.put('g', 'old', 0);
  p.put('g', 'new', 900);
  expect(p.take('g', 1500)).toBe('new');
  p.put('g', 'stale', 0);
  expect(p.take('g', 1000)).toBeUndefined();
});

it('bounds the queue of a key that is read ahead but never taken', () => {
  const p = new Prefetched<number>(1000, 10, 3);
  for (let i = 0; i < 10; i++) p.put('g', i, 0);
  expect([p.take('g', 1), p.take('g', 1), p.take('g', 1), p.take('g', 1)]).toEqual([7, 8, 9, undefined]);
});
