// Encryption of secrets at rest (OAuth client secrets, under SECRET_ENCRYPTION_KEY): AES-256-GCM, a
// random 12-byte nonce per message, `v1.<nonce>.<ciphertext>.<tag>` in base64url. `aad` binds a
// ciphertext to its row (e.g. a client id) so it cannot be moved to another row; the same `aad` must be
// given to decrypt.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { SecretsError } from './errors.ts';

const CIPHER = 'aes-256-gcm';

function checkKey(key: Buffer): void {
  if (key.length !== 32) throw new SecretsError('the secret-encryption key must be 32 bytes');
}

export function encryptSecret(key: Buffer, plaintext: string, aad?: string): string {
  checkKey(key);
  const nonce = randomBytes(12);
  const cipher = createCipheriv(CIPHER, key, nonce);
  if (aad !== undefined) cipher.setAAD(Buffer.from(aad, 'utf8'));
  const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return ['v1', nonce.toString('base64url'), ct.toString('base64url'), cipher.getAuthTag().toString('base64url')].join('.');
}

export function decryptSecret(key: Buffer, ciphertext: string, aad?: string): string {
  checkKey(key);
  const parts = ciphertext.split('.');
  if (parts.length !== 4 || parts[0] !== 'v1') throw new SecretsError('not a v1 encrypted secret');
  const [, n, c, t] = parts as [string, string, string, string];
  if (![n, c, t].every((s) => /^[A-Za-z0-9_-]*$/.test(s))) throw new SecretsError('malformed encrypted secret');
  const nonce = Buffer.from(n, 'base64url');
  const tag = Buffer.from(t, 'base64url');
  if (nonce.length !== 12 || tag.length !== 16) throw new SecretsError('malformed encrypted secret');
  try {
    const decipher = createDecipheriv(CIPHER, key, nonce, { authTagLength: 16 });
    if (aad !== undefined) decipher.setAAD(Buffer.from(aad, 'utf8'));
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(Buffer.from(c, 'base64url')), decipher.final()]).toString('utf8');
  } catch {
    throw new SecretsError('the encrypted secret does not decrypt with this key (wrong key or tampered data)');
  }
}
