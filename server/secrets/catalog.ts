// The five server secrets by name: the environment variable that overrides each, the field it fills in
// ServerSecrets, and how each parses and is generated (one Spec per secret, in its own module).
import { jobSigningKey, type JobSigningKey } from './job-signing-key.ts';
import { gatewaySshKey, type GatewaySshKey } from './ssh-keys.ts';
import type { Spec } from './spec.ts';
import { accessTokenKey, cookieKeys, secretEncryptionKey } from './symmetric.ts';

export const SECRET_NAMES = ['access_token_key', 'cookie_keys', 'secret_encryption_key', 'job_signing_key', 'gateway_ssh_key'] as const;
export type SecretName = (typeof SECRET_NAMES)[number];

/** The environment variable that overrides each stored secret. */
export const SECRET_ENV: Record<SecretName, string> = {
  access_token_key: 'ACCESS_TOKEN_KEY',
  cookie_keys: 'COOKIE_KEYS',
  secret_encryption_key: 'SECRET_ENCRYPTION_KEY',
  job_signing_key: 'JOB_SIGNING_KEY',
  gateway_ssh_key: 'GATEWAY_SSH_KEY',
};

export interface ServerSecrets {
  /** HMAC key for HS256 access tokens (at least 32 bytes). */
  accessTokenKey: Buffer;
  /** Cookie signing keys: the first signs, all verify (rotate by prepending a new one). */
  cookieKeys: string[];
  /** AES-256-GCM key for secrets kept at rest (OAuth client secrets): exactly 32 bytes. */
  secretEncryptionKey: Buffer;
  jobSigningKey: JobSigningKey;
  gatewaySshKey: GatewaySshKey;
}

export const SPECS: { [K in SecretName]: Spec<unknown> } = {
  access_token_key: accessTokenKey,
  cookie_keys: cookieKeys,
  secret_encryption_key: secretEncryptionKey,
  job_signing_key: jobSigningKey,
  gateway_ssh_key: gatewaySshKey,
};

/** The ServerSecrets field each secret fills. */
export const FIELD = {
  access_token_key: 'accessTokenKey',
  cookie_keys: 'cookieKeys',
  secret_encryption_key: 'secretEncryptionKey',
  job_signing_key: 'jobSigningKey',
  gateway_ssh_key: 'gatewaySshKey',
} as const satisfies Record<SecretName, keyof ServerSecrets>;

/** A fresh value for one secret, in its stored text form (what loadSecrets stores on first use). */
export function generateSecret(name: SecretName): string {
  return SPECS[name].generate();
}

/** Validates one secret's text (an environment value or a stored value) the way loadSecrets does. */
export function parseSecret<K extends SecretName>(name: K, text: string): ServerSecrets[(typeof FIELD)[K]] {
  return SPECS[name].parse(text) as ServerSecrets[(typeof FIELD)[K]];
}
