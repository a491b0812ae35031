// Brute-force buckets of the login form (server/oidc/login-limits.ts): only failures count, per
// (account, address) and per address, never per account alone; IPv6 counts per /64.
import { expect, it } from 'vitest';
import { addressKey, LoginLimiter } from '../../server/oidc/login-limits.ts';

it('counts IPv6 per /64 and IPv4 (also IPv4-mapped) per address', () => {
  expect(addressKey('203.0.113.7')).toBe('203.0.113.7');
  expect(addressKey('::ffff:203.0.113.7')).toBe('203.0.113.7');
  expect(addressKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
  expect(addressKey('2001:db8:1:2:bbbb:cccc:dddd:eeee')).toBe('2001:db8:1:2::/64');
  expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
  expect(addressKey('2001:0db8:0001:0003::1')).toBe('2001:db8:1:3::/64');
});

it('blocks an (account, address) pair after its burst, refills over time, and spares other addresses', () => {
  const l = new LoginLimiter({ accountAddress: { burst: 3, refillSeconds: 60 }, address: { burst: 100, refillSeconds: 1 } });
  for (let i = 0; i < 3; i++) {
    expect(l.blocked('a@x.test', '198.51.100.1', 0)).toBe(0);
    l.failed('a@x.test', '198.51.100.1', 0);
  }
  expect(l.blocked('a@x.test', '198.51.100.1', 0)).toBe(60);
  expect(l.blocked('A@X.test ', '198.51.100.1', 0)).toBe(60);
  expect(l.blocked('a@x.test', '192.0.2.1', 0)).toBe(0);
  expect(l.blocked('b@x.test', '198.51.100.1', 0)).toBe(0);
  expect(l.blocked('a@x.test', '198.51.100.1', 60_000)).toBe(0);
});

it('blocks an address that fails across many accounts, and a whole IPv6 /64 at once', () => {
  const l = new LoginLimiter({ accountAddress: { burst: 100, refillSeconds: 1 }, address: { burst: 5, refillSeconds: 10 } });
  for (let i = 0; i < 5; i++) l.failed(`u${i}@x.test`, `2001:db8:1:2::${i + 1}`, 0);
  expect(l.blocked('new@x.test', '2001:db8:1:2::99', 0)).toBe(10);
  expect(l.blocked('new@x.test', '2001:db8:1:3::1', 0)).toBe(0);
});

it('a success clears that account\'s failures from that address', () => {
  const l = new LoginLimiter({ accountAddress: { burst: 2, refillSeconds: 60 }, address: { burst: 100, refillSeconds: 1 } });
  l.failed('a@x.test', '198.51.100.1', 0);
  l.failed('a@x.test', '198.51.100.1', 0);
  expect(l.blocked('a@x.test', '198.51.100.1', 0)).toBeGreaterThan(0);
  l.succeeded('a@x.test', '198.51.100.1');
  expect(l.blocked('a@x.test', '198.51.100.1', 0)).toBe(0);
});

it('attempt() checks and charges in one step: of many attempts started together only the burst goes on', () => {
  const l = new LoginLimiter({ accountAddress: { burst: 3, refillSeconds: 60 }, address: { burst: 100, refillSeconds: 1 } });
  // Every attempt is decided before any password check finishes: nothing is reported back in between.
  const waits = Array.from({ length: 10 }, () => l.attempt('a@x.test', '198.51.100.1', 0));
  expect(waits.filter((w) => w === 0)).toHaveLength(3);
  expect(waits.slice(3).every((w) => w === 60)).toBe(true);
});

it('a successful attempt gives the address its token back and clears the pair', () => {
  const l = new LoginLimiter({ accountAddress: { burst: 100, refillSeconds: 60 }, address: { burst: 2, refillSeconds: 60 } });
  expect(l.attempt('a@x.test', '198.51.100.1', 0)).toBe(0);
  l.succeeded('a@x.test', '198.51.100.1', 0);
  expect(l.attempt('b@x.test', '198.51.100.1', 0)).toBe(0);
  l.succeeded('b@x.test', '198.51.100.1', 0);
  // Two successes cost nothing: two failures still fit in the burst of 2.
  expect(l.attempt('c@x.test', '198.51.100.1', 0)).toBe(0);
  expect(l.attempt('d@x.test', '198.51.100.1', 0)).toBe(0);
  expect(l.attempt('e@x.test', '198.51.100.1', 0)).toBe(60);
});
