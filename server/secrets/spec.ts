// What each server secret must say about itself (parse, generate, fingerprint), and the small parsing
// helpers the secrets share: base64 in its two alphabets, PEM from an environment variable, Ed25519
// checks. The secrets themselves live in symmetric.ts, job-signing-key.ts and ssh-keys.ts.
import { createHmac, randomBytes, sign as cryptoSign, verify as cryptoVerify, type KeyObject } from 'node:crypto';
import { SecretsError } from './errors.ts';

/** One secret: `parse` accepts the environment's forms and the stored form; `generate` returns the stored form. */
export interface Spec<T> {
  parse(text: string): T;
  generate(): string;
  /** A non-secret identity of the value (a public-key thumbprint or an HMAC of a constant). */
  fingerprint(value: T): string;
}

/** The fingerprint of a symmetric key: an HMAC of a constant, so the key itself is never recorded. */
export const keyFingerprint = (key: Buffer | string) => createHmac('sha256', key).update('tunnelgate secret fingerprint v1').digest('base64url').slice(0, 22);

const BASE64_RE = /^[A-Za-z0-9+/_-]+={0,2}$/;

export function decodeBase64(text: string, what: string): Buffer {
  const t = text.trim();
  if (!BASE64_RE.test(t)) throw new SecretsError(`${what} must be base64 or base64url`);
  return Buffer.from(t.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, ''), 'base64url');
}

/** PEM from an environment variable: real newlines, or `\n` escapes as many deploy tools need. */
export function pemText(text: string): string {
  const t = text.trim();
  return t.includes('-----BEGIN') && !t.includes('\n') ? t.replace(/\\n/g, '\n') : t.replace(/\r\n/g, '\n');
}

export function checkEd25519(key: KeyObject, what: string): void {
  if (key.type !== 'private' || key.asymmetricKeyType !== 'ed25519') {
    throw new SecretsError(`${what} must be an Ed25519 private key, got ${key.asymmetricKeyType ?? key.type}`);
  }
}

/** Signs and verifies once, so a key that cannot do both never gets kept or used. */
export function selfTest(privateKey: KeyObject, publicKey: KeyObject, what: string): void {
  const probe = randomBytes(32);
  const sig = cryptoSign(null, probe, privateKey);
  if (!cryptoVerify(null, probe, publicKey, sig)) throw new SecretsError(`${what} failed its sign/verify self-test`);
}
