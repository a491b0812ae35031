// Password hashing (server/auth/passwords.ts): Argon2id with the OWASP parameters in a
// standard PHC string; hashes of the previous scrypt format still verify and are flagged for re-hashing,
// as are Argon2id hashes with weaker parameters. Expected values are computed here with node:crypto
// directly from the parameters the test reads out of the string, not through the module under test.
import { argon2Sync, randomBytes, scryptSync } from 'node:crypto';
import { expect, it } from 'vitest';
import { hashPassword, needsRehash, verifyPassword } from '../../server/auth/passwords.ts';

const PHC = /^\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$([A-Za-z0-9+/]+)\$([A-Za-z0-9+/]+)$/;

it('hashes with Argon2id m=19456 KiB, t=2, p=1 in a PHC string that an independent derivation reproduces', async () => {
  const stored = await hashPassword('correct horse battery staple');
  const m = PHC.exec(stored);
  expect(m).not.toBeNull();
  expect([Number(m![1]), Number(m![2]), Number(m![3])]).toEqual([19456, 2, 1]);
  const salt = Buffer.from(m![4]!, 'base64');
  const hash = Buffer.from(m![5]!, 'base64');
  expect(salt.length).toBeGreaterThanOrEqual(16);
  expect(hash.length).toBe(32);
  const again = argon2Sync('argon2id', { message: 'correct horse battery staple', nonce: salt, parallelism: 1, tagLength: 32, memory: 19456, passes: 2 });
  expect(again.equals(hash)).toBe(true);
  expect(await verifyPassword('correct horse battery staple', stored)).toBe(true);
  expect(await verifyPassword('correct horse battery stapler', stored)).toBe(false);
  expect(needsRehash(stored)).toBe(false);
  // Salted: the same password hashes differently each time.
  expect(await hashPassword('correct horse battery staple')).not.toBe(stored);
});

it('the previous scrypt format (N=2^15) still verifies and asks to be re-hashed', async () => {
  const salt = randomBytes(16);
  const key = scryptSync('old password 1', salt, 32, { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
  const old = `scrypt$32768$8$1$${salt.toString('base64url')}$${key.toString('base64url')}`;
  expect(await verifyPassword('old password 1', old)).toBe(true);
  expect(await verifyPassword('old password 2', old)).toBe(false);
  expect(needsRehash(old)).toBe(true);
});

it('an Argon2id hash with weaker parameters verifies and asks to be re-hashed', async () => {
  const salt = randomBytes(16);
  const key = argon2Sync('argon2id', { message: 'weak params', nonce: salt, parallelism: 1, tagLength: 32, memory: 4096, passes: 1 });
  const weak = `$argon2id$v=19$m=4096,t=1,p=1$${salt.toString('base64').replace(/=+$/, '')}$${key.toString('base64').replace(/=+$/, '')}`;
  expect(await verifyPassword('weak params', weak)).toBe(true);
  expect(needsRehash(weak)).toBe(true);
});

it('malformed or absurd stored values never verify (and never allocate what they ask for)', async () => {
  for (const bad of ['', 'plain', 'scrypt$3$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', `$argon2id$v=19$m=999999999,t=2,p=1$${'A'.repeat(22)}$${'A'.repeat(43)}`, `$argon2i$v=19$m=19456,t=2,p=1$${'A'.repeat(22)}$${'A'.repeat(43)}`]) {
    expect(await verifyPassword('anything', bad)).toBe(false);
    expect(needsRehash(bad)).toBe(true);
  }
});
