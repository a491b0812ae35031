// A password stored in the previous format (scrypt, N=2^15) still signs in through
// the real login page, and that successful sign-in replaces it with an Argon2id hash at today's
// parameters; a failed sign-in changes nothing.
import { randomBytes, scryptSync } from 'node:crypto';
import { expect, it } from 'vitest';
import { issuerRig } from '../helpers/issuer-rig.ts';
import { exchange, newUser, signIn } from '../helpers/oidc-login.ts';

const rig = issuerRig();

/** The previous format, computed here with node:crypto, not by the module under test. */
function oldHash(password: string): string {
  const salt = randomBytes(16);
  const key = scryptSync(password.normalize('NFKC'), salt, 32, { N: 2 ** 15, r: 8, p: 1, maxmem: 64 * 1024 * 1024 });
  return `scrypt$32768$8$1$${salt.toString('base64url')}$${key.toString('base64url')}`;
}

const storedHash = async (id: string) => (await rig.gw.testDb.raw.query('select password_hash from app_user where id = $1', [id])).rows[0].password_hash as string;

it('an old scrypt hash signs in and is upgraded to Argon2id on that sign-in; a wrong password changes nothing', async () => {
  const u = await newUser(rig.gw.testDb.db);
  const old = oldHash(u.password);
  await rig.gw.testDb.raw.query('update app_user set password_hash = $1 where id = $2', [old, u.id]);

  // A failed attempt keeps the old hash (the password is not known).
  await expect(signIn(rig.gw.url, rig.client, { email: u.email, password: 'not the password' })).rejects.toThrow(/did not reach the client|without a form|401/);
  expect(await storedHash(u.id)).toBe(old);

  const first = await signIn(rig.gw.url, rig.client, u);
  expect((await exchange(rig.gw.url, rig.client, first.code, first.verifier)).status).toBe(200);
  const upgraded = await storedHash(u.id);
  expect(upgraded).toMatch(/^\$argon2id\$v=19\$m=19456,t=2,p=1\$[A-Za-z0-9+/]{22,}\$[A-Za-z0-9+/]{43}$/);

  // The new hash works, and is not upgraded again.
  const second = await signIn(rig.gw.url, rig.client, u);
  expect((await exchange(rig.gw.url, rig.client, second.code, second.verifier)).status).toBe(200);
  expect(await storedHash(u.id)).toBe(upgraded);
}, 60_000);
