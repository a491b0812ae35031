// Password hashing: Argon2id from node:crypto (Node 24; no native add-on), with the OWASP Password
// Storage Cheat Sheet's parameters (m = 19 MiB, t = 2, p = 1), stored as a standard PHC string
// (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`) so the parameters travel with the hash and can be
// raised later (the stored format says which). Hashes of the previous format (`scrypt$N$r$p$salt$hash`, N = 2^15)
// still verify; needsRehash() tells the sign-in to store a fresh hash once the password is known.
import { argon2, randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';

const ARGON2ID = { memory: 19_456, passes: 2, parallelism: 1 } as const;
const KEYLEN = 32;
const SALT_BYTES = 16;

// Parameters read back from storage are bounded: a corrupted or hostile row must not make one
// verification allocate gigabytes or run for minutes.
const MAX = { memory: 1 << 20, passes: 16, parallelism: 8, scryptN: 1 << 20 } as const;

interface Argon2Params {
  memory: number;
  passes: number;
  parallelism: number;
}

function deriveArgon2(password: string, salt: Buffer, p: Argon2Params, tagLength = KEYLEN): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    argon2('argon2id', { message: password.normalize('NFKC'), nonce: salt, tagLength, ...p }, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

function deriveScrypt(password: string, salt: Buffer, o: ScryptOptions & { N: number; r: number; p: number }): Promise<Buffer> {
  return new Promise((resolve, reject) =>
    scrypt(password.normalize('NFKC'), salt, KEYLEN, { ...o, maxmem: 128 * o.N * o.r * 2 }, (err, key) => (err ? reject(err) : resolve(key))),
  );
}

// PHC strings use standard base64 without padding.
const b64 = (b: Buffer) => b.toString('base64').replace(/=+$/, '');
const unb64 = (s: string) => Buffer.from(s, 'base64');

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(SALT_BYTES);
  const key = await deriveArgon2(password, salt, ARGON2ID);
  return `$argon2id$v=19$m=${ARGON2ID.memory},t=${ARGON2ID.passes},p=${ARGON2ID.parallelism}$${b64(salt)}$${b64(key)}`;
}

type Parsed =
  | { kind: 'argon2id'; params: Argon2Params; salt: Buffer; hash: Buffer }
  | { kind: 'scrypt'; N: number; r: number; p: number; salt: Buffer; hash: Buffer };

const ARGON2_RE = /^\$argon2id\$v=19\$m=(\d{1,8}),t=(\d{1,3}),p=(\d{1,2})\$([A-Za-z0-9+/]{11,64})\$([A-Za-z0-9+/]{22,128})$/;
const SCRYPT_RE = /^scrypt\$(\d{1,8})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9_-]{11,64})\$([A-Za-z0-9_-]{22,128})$/;

function parse(stored: string): Parsed | null {
  let m = ARGON2_RE.exec(stored);
  if (m) {
    const params = { memory: Number(m[1]), passes: Number(m[2]), parallelism: Number(m[3]) };
    if (params.memory > MAX.memory || params.passes < 1 || params.passes > MAX.passes || params.parallelism < 1 || params.parallelism > MAX.parallelism) return null;
    if (params.memory < 8 * params.parallelism) return null;
    return { kind: 'argon2id', params, salt: unb64(m[4]!), hash: unb64(m[5]!) };
  }
  m = SCRYPT_RE.exec(stored);
  if (m) {
    const N = Number(m[1]);
    const r = Number(m[2]);
    const p = Number(m[3]);
    if (N < 2 || N > MAX.scryptN || (N & (N - 1)) !== 0 || r < 1 || p < 1) return null;
    return { kind: 'scrypt', N, r, p, salt: Buffer.from(m[4]!, 'base64url'), hash: Buffer.from(m[5]!, 'base64url') };
  }
  return null;
}

export async function verifyPassword(password: string, stored: string): Promise<boolean> {
  const h = parse(stored);
  if (!h) return false;
  const key =
    h.kind === 'argon2id'
      ? await deriveArgon2(password, h.salt, h.params, h.hash.length)
      : await deriveScrypt(password, h.salt, { N: h.N, r: h.r, p: h.p });
  return key.length === h.hash.length && timingSafeEqual(key, h.hash);
}

/** True when `stored` is not Argon2id with at least the current parameters: re-hash it at the next successful sign-in. */
export function needsRehash(stored: string): boolean {
  const h = parse(stored);
  if (!h || h.kind !== 'argon2id') return true;
  return h.params.memory < ARGON2ID.memory || h.params.passes < ARGON2ID.passes || h.hash.length < KEYLEN || h.salt.length < SALT_BYTES;
}

export function validatePassword(password: string): string | null {
  if (password.length < 8) return 'password must be at least 8 characters';
  if (password.length > 1024) return 'password must be at most 1024 characters';
  return null;
}
