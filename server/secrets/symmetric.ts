// The three symmetric secrets: the access-token HMAC key, the cookie keys and the secret-encryption key.
import { randomBytes } from 'node:crypto';
import { SecretsError } from './errors.ts';
import { decodeBase64, keyFingerprint, type Spec } from './spec.ts';

export const accessTokenKey: Spec<Buffer> = {
  parse(text) {
    const key = decodeBase64(text, 'access_token_key');
    if (key.length < 32) throw new SecretsError(`access_token_key must be at least 32 bytes, got ${key.length}`);
    return key;
  },
  generate: () => randomBytes(32).toString('base64url'),
  fingerprint: keyFingerprint,
};

const MIN_COOKIE_KEY = 32;
export const cookieKeys: Spec<string[]> = {
  parse(text) {
    const keys = text.split(',').map((k) => k.trim());
    if (keys.some((k) => k === '')) throw new SecretsError('cookie_keys must be a comma-separated list with no empty entries');
    if (keys.some((k) => k.length < MIN_COOKIE_KEY)) throw new SecretsError(`every cookie key must be at least ${MIN_COOKIE_KEY} characters`);
    return keys;
  },
  generate: () => randomBytes(32).toString('base64url'),
  fingerprint: (keys) => keyFingerprint(keys[0]!),
};

export const secretEncryptionKey: Spec<Buffer> = {
  parse(text) {
    const t = text.trim();
    // 64 hex digits are also valid base64 (of 48 bytes): hex wins.
    const key = /^[0-9a-fA-F]{64}$/.test(t) ? Buffer.from(t, 'hex') : decodeBase64(t, 'secret_encryption_key');
    if (key.length !== 32) throw new SecretsError(`secret_encryption_key must be exactly 32 bytes (base64, base64url or 64 hex digits), got ${key.length}`);
    return key;
  },
  generate: () => randomBytes(32).toString('base64url'),
  fingerprint: keyFingerprint,
};
