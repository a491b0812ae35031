// Server secrets: the access-token HMAC key, the cookie keys, the secret-encryption key, the
// job-signing Ed25519 key and the gateway's SSH client key.
//
// Each comes from the environment or, when absent there, is generated once and stored in the
// `server_secret` table, so every replica and the admin CLI agree. Generation is race-safe across
// replicas (insert ... on conflict do nothing, then read back whichever row won). A stored value is
// never regenerated: one that no longer parses stops the process with an error naming the secret.
// Environment values are validated and never written to the database; only a fingerprint of each
// (a public-key thumbprint or an HMAC of a constant) is recorded, so that a process started without
// the gateway's variables refuses to run instead of disagreeing with it.
//
// The gateway should warn at start when any secret came from the database (`startupWarning`):
// production should pass them all in the environment.
import {
  createCipheriv,
  createDecipheriv,
  createHash,
  createHmac,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  randomBytes,
  sign as cryptoSign,
  verify as cryptoVerify,
  type KeyObject,
} from 'node:crypto';
import { checkSsh2PrivateKey, ed25519FromOpenSsh, rethrowKeyError, sshFingerprint, sshPublicBlobOf, toOpenSshPrivateKey } from '../common/openssh.ts';
import type { Database } from './db/database.ts';

export class SecretsError extends Error {
  override name = 'SecretsError';
}

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

/** The public half of the job-signing key as the agents take it (`AGENT_JOB_KEY`). */
export interface Ed25519PublicJwk {
  kty: 'OKP';
  crv: 'Ed25519';
  x: string;
  /** RFC 7638 thumbprint of the key; also the `kid` header of every signed job. */
  kid: string;
  alg: 'EdDSA';
  use: 'sig';
}

export interface JobSigningKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
  publicJwk: Ed25519PublicJwk;
  kid: string;
}

export interface GatewaySshKey {
  /** OpenSSH private key text (`-----BEGIN OPENSSH PRIVATE KEY-----`), the form ssh2's client parses. */
  privateKey: string;
  /** `ssh-ed25519 AAAA… tunnelgate-gateway`: what the agent takes as `AGENT_AUTHORIZED_KEY`. */
  publicKey: string;
  /** `SHA256:<base64>` as OpenSSH prints it. */
  fingerprint: string;
}

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

export type SecretSource = 'env' | 'database' | 'generated';

export interface LoadedSecrets {
  secrets: ServerSecrets;
  /** Secrets this call generated and stored (it won the insert). */
  generated: SecretName[];
  /** Where each secret came from: the environment, a row stored earlier, or generated just now. */
  sources: Record<SecretName, SecretSource>;
}

type Query = Pick<Database, 'query'>;

// ---------------------------------------------------------------------------------------------
// Parsing and generation, per secret. Each `parse` accepts the environment's forms and the stored
// form; `generate` returns the stored form.

interface Spec<T> {
  parse(text: string): T;
  generate(): string;
  /** A non-secret identity of the value (a public-key thumbprint or an HMAC of a constant). */
  fingerprint(value: T): string;
}

const keyFingerprint = (key: Buffer | string) => createHmac('sha256', key).update('tunnelgate secret fingerprint v1').digest('base64url').slice(0, 22);

const BASE64_RE = /^[A-Za-z0-9+/_-]+={0,2}$/;

function decodeBase64(text: string, what: string): Buffer {
  const t = text.trim();
  if (!BASE64_RE.test(t)) throw new SecretsError(`${what} must be base64 or base64url`);
  return Buffer.from(t.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, ''), 'base64url');
}

/** PEM from an environment variable: real newlines, or `\n` escapes as many deploy tools need. */
function pemText(text: string): string {
  const t = text.trim();
  return t.includes('-----BEGIN') && !t.includes('\n') ? t.replace(/\\n/g, '\n') : t.replace(/\r\n/g, '\n');
}

const accessTokenKey: Spec<Buffer> = {
  parse(text) {
    const key = decodeBase64(text, 'access_token_key');
    if (key.length < 32) throw new SecretsError(`access_token_key must be at least 32 bytes, got ${key.length}`);
    return key;
  },
  generate: () => randomBytes(32).toString('base64url'),
  fingerprint: keyFingerprint,
};

const MIN_COOKIE_KEY = 32;
const cookieKeys: Spec<string[]> = {
  parse(text) {
    const keys = text.split(',').map((k) => k.trim());
    if (keys.some((k) => k === '')) throw new SecretsError('cookie_keys must be a comma-separated list with no empty entries');
    if (keys.some((k) => k.length < MIN_COOKIE_KEY)) throw new SecretsError(`every cookie key must be at least ${MIN_COOKIE_KEY} characters`);
    return keys;
  },
  generate: () => randomBytes(32).toString('base64url'),
  fingerprint: (keys) => keyFingerprint(keys[0]!),
};

const secretEncryptionKey: Spec<Buffer> = {
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

/** RFC 7638 thumbprint of an Ed25519 JWK. */
function okpThumbprint(x: string): string {
  return createHash('sha256').update(`{"crv":"Ed25519","kty":"OKP","x":"${x}"}`).digest('base64url');
}

function checkEd25519(key: KeyObject, what: string): void {
  if (key.type !== 'private' || key.asymmetricKeyType !== 'ed25519') {
    throw new SecretsError(`${what} must be an Ed25519 private key, got ${key.asymmetricKeyType ?? key.type}`);
  }
}

/** Signs and verifies once, so a key that cannot do both never gets kept or used. */
function selfTest(privateKey: KeyObject, publicKey: KeyObject, what: string): void {
  const probe = randomBytes(32);
  const sig = cryptoSign(null, probe, privateKey);
  if (!cryptoVerify(null, probe, publicKey, sig)) throw new SecretsError(`${what} failed its sign/verify self-test`);
}

const jobSigningKey: Spec<JobSigningKey> = {
  parse(text) {
    const t = text.trim();
    let privateKey: KeyObject;
    try {
      privateKey = t.startsWith('{')
        ? createPrivateKey({ key: JSON.parse(t) as import('node:crypto').JsonWebKey, format: 'jwk' })
        : createPrivateKey({ key: pemText(t), format: 'pem' });
    } catch (e) {
      throw new SecretsError(`job_signing_key must be an Ed25519 private key as PKCS#8 PEM or a JWK with "d": ${(e as Error).message}`);
    }
    checkEd25519(privateKey, 'job_signing_key');
    const publicKey = createPublicKey(privateKey);
    selfTest(privateKey, publicKey, 'job_signing_key');
    const x = publicKey.export({ format: 'jwk' }).x!;
    const kid = okpThumbprint(x);
    return { privateKey, publicKey, kid, publicJwk: { kty: 'OKP', crv: 'Ed25519', x, kid, alg: 'EdDSA', use: 'sig' } };
  },
  generate: () => generateKeyPairSync('ed25519').privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
  fingerprint: (k) => k.kid,
};

// ---------------------------------------------------------------------------------------------
// The gateway's SSH client key, in OpenSSH form through the shared codec (common/openssh.ts).

const SSH_COMMENT = 'tunnelgate-gateway';

/** Runs one step of the shared OpenSSH codec, naming the secret in its error. */
const codec = <T>(step: () => T): T => rethrowKeyError(step, (reason) => new SecretsError(`gateway_ssh_key ${reason}`));

const gatewaySshKey: Spec<GatewaySshKey> = {
  parse(text) {
    const t = pemText(text);
    let privateKey: KeyObject;
    let openssh: string;
    if (t.startsWith('-----BEGIN OPENSSH PRIVATE KEY-----')) {
      codec(() => checkSsh2PrivateKey(t.endsWith('\n') ? t.slice(0, -1) : t));
      privateKey = codec(() => ed25519FromOpenSsh(t));
      // Keep the operator's text (and comment) as is: ssh2 already accepted it.
      openssh = t.endsWith('\n') ? t : `${t}\n`;
    } else if (t.startsWith('-----BEGIN PRIVATE KEY-----')) {
      try {
        privateKey = createPrivateKey({ key: t, format: 'pem' });
      } catch (e) {
        throw new SecretsError(`gateway_ssh_key is not a readable PKCS#8 PEM key: ${(e as Error).message}`);
      }
      checkEd25519(privateKey, 'gateway_ssh_key');
      openssh = codec(() => toOpenSshPrivateKey(privateKey, SSH_COMMENT));
    } else {
      throw new SecretsError('gateway_ssh_key must be an Ed25519 private key in OpenSSH (BEGIN OPENSSH PRIVATE KEY) or PKCS#8 PEM (BEGIN PRIVATE KEY) form');
    }
    const publicKey = createPublicKey(privateKey);
    selfTest(privateKey, publicKey, 'gateway_ssh_key');
    codec(() => checkSsh2PrivateKey(openssh.trimEnd()));
    const blob = codec(() => sshPublicBlobOf(privateKey));
    return { privateKey: openssh, publicKey: `ssh-ed25519 ${blob.toString('base64')} ${SSH_COMMENT}`, fingerprint: sshFingerprint(blob) };
  },
  generate() {
    // node:crypto generates; ssh2 must then parse it and sign/verify (parse() checks both), else try again.
    for (let attempt = 0; attempt < 5; attempt++) {
      const text = toOpenSshPrivateKey(generateKeyPairSync('ed25519').privateKey, SSH_COMMENT);
      try {
        gatewaySshKey.parse(text);
        return text;
      } catch {
        // A key that fails the self-test is dropped, never stored.
      }
    }
    throw new SecretsError('could not generate a usable gateway SSH key');
  },
  fingerprint: (k) => k.fingerprint,
};

const SPECS: { [K in SecretName]: Spec<unknown> } = {
  access_token_key: accessTokenKey,
  cookie_keys: cookieKeys,
  secret_encryption_key: secretEncryptionKey,
  job_signing_key: jobSigningKey,
  gateway_ssh_key: gatewaySshKey,
};

/** A fresh value for one secret, in its stored text form (what loadSecrets stores on first use). */
export function generateSecret(name: SecretName): string {
  return SPECS[name].generate();
}

/** Validates one secret's text (an environment value or a stored value) the way loadSecrets does. */
export function parseSecret<K extends SecretName>(name: K, text: string): ServerSecrets[(typeof FIELD)[K]] {
  return SPECS[name].parse(text) as ServerSecrets[(typeof FIELD)[K]];
}

const FIELD = {
  access_token_key: 'accessTokenKey',
  cookie_keys: 'cookieKeys',
  secret_encryption_key: 'secretEncryptionKey',
  job_signing_key: 'jobSigningKey',
  gateway_ssh_key: 'gatewaySshKey',
} as const satisfies Record<SecretName, keyof ServerSecrets>;

// ---------------------------------------------------------------------------------------------

/**
 * Every server secret: from `env` when set there (validated; a bad value is an error, never replaced),
 * otherwise from `server_secret`, generating and storing it first if no replica has yet.
 *
 * A process that takes a secret from its environment records that secret's fingerprint (never the
 * value) as the row `env_fingerprint.<name>`. A later process without that variable then refuses to
 * start instead of quietly using the stored or a freshly generated value, which would disagree with
 * the gateway (an admin CLI run without the gateway's environment would otherwise encrypt client
 * secrets with the wrong key and print the wrong public keys). Deleting the row undoes the choice.
 */
export async function loadSecrets(db: Query, env: NodeJS.ProcessEnv = process.env): Promise<LoadedSecrets> {
  requireSecretsFromEnv(env);
  const values: Partial<Record<keyof ServerSecrets, unknown>> = {};
  const generated: SecretName[] = [];
  const sources = {} as Record<SecretName, SecretSource>;
  const fromEnvNames = SECRET_NAMES.filter((n) => (env[SECRET_ENV[n]] ?? '').trim() !== '');
  const marks = await db.query<{ name: string; value: string }>('select name, value from server_secret where name like ?', [`${ENV_MARK}%`]);
  const missing = marks.map((m) => m.name.slice(ENV_MARK.length) as SecretName).filter((n) => SECRET_NAMES.includes(n) && !fromEnvNames.includes(n));
  if (missing.length) {
    const vars = missing.map((n) => SECRET_ENV[n]).join(', ');
    throw new SecretsError(
      `the gateway takes ${missing.join(', ')} from its environment, but ${vars} ${missing.length > 1 ? 'are' : 'is'} not set here: ` +
        `run with the same ${vars} as the gateway (or delete the server_secret rows ${missing.map((n) => ENV_MARK + n).join(', ')} ` +
        'to go back to the stored values)',
    );
  }
  for (const name of SECRET_NAMES) {
    const spec = SPECS[name];
    const variable = SECRET_ENV[name];
    const fromEnv = env[variable];
    if (fromEnv !== undefined && fromEnvNames.includes(name)) {
      let value: unknown;
      try {
        value = spec.parse(fromEnv);
      } catch (e) {
        throw new SecretsError(`${variable}: ${(e as Error).message}`);
      }
      await db.query(
        `insert into server_secret (name, value) values (?, ?)
         on conflict (name) do update set value = excluded.value where server_secret.value <> excluded.value`,
        [`${ENV_MARK}${name}`, spec.fingerprint(value)],
      );
      values[FIELD[name]] = value;
      sources[name] = 'env';
      continue;
    }
    const { value, created } = await storedOrGenerated(db, name, spec.generate);
    try {
      values[FIELD[name]] = spec.parse(value);
    } catch (e) {
      // Never regenerate silently: a replaced key would orphan every agent, token and client secret.
      throw new SecretsError(
        `the stored server secret ${name} is unusable (${(e as Error).message}); ` +
          `fix or delete the row in server_secret deliberately, or set ${variable}`,
      );
    }
    sources[name] = created ? 'generated' : 'database';
    if (created) generated.push(name);
  }
  const secrets = values as ServerSecrets;
  // Keep key material out of logs and JSON by accident.
  Object.defineProperty(secrets, 'toJSON', { value: () => '[server secrets]', enumerable: false });
  Object.defineProperty(secrets, Symbol.for('nodejs.util.inspect.custom'), { value: () => '[server secrets]', enumerable: false });
  return { secrets, generated, sources };
}

/**
 * SECRETS_FROM_ENV (docs/CONTRACTS.md "Starting it"): `required` makes every secret an environment variable, so none is
 * ever generated into (or read from) the database; unset or `optional` keeps the database fallback.
 */
export function secretsFromEnvRequired(env: NodeJS.ProcessEnv): boolean {
  const raw = (env.SECRETS_FROM_ENV ?? '').trim().toLowerCase();
  if (raw === '' || raw === 'optional') return false;
  if (raw === 'required') return true;
  throw new SecretsError(`SECRETS_FROM_ENV must be "required" or "optional", got ${JSON.stringify(env.SECRETS_FROM_ENV)}`);
}

/**
 * With SECRETS_FROM_ENV=required, throws naming every secret variable that is unset or empty (the
 * names only: values never appear in an error). Checked before the database is opened.
 */
export function requireSecretsFromEnv(env: NodeJS.ProcessEnv): void {
  if (!secretsFromEnvRequired(env)) return;
  const missing = SECRET_NAMES.map((n) => SECRET_ENV[n]).filter((v) => (env[v] ?? '').trim() === '');
  if (missing.length) {
    throw new SecretsError(`SECRETS_FROM_ENV=required, but ${missing.join(', ')} ${missing.length > 1 ? 'are' : 'is'} not set`);
  }
}

/** Row-name prefix of the fingerprints recorded for secrets taken from the environment. */
export const ENV_MARK = 'env_fingerprint.';

async function storedOrGenerated(db: Query, name: SecretName, generate: () => string): Promise<{ value: string; created: boolean }> {
  const [existing] = await db.query<{ value: string }>('select value from server_secret where name = ?', [name]);
  if (existing) return { value: existing.value, created: false };
  // Several replicas may start at once: exactly one insert wins, everyone reads the winner back.
  const inserted = await db.query<{ name: string }>(
    'insert into server_secret (name, value) values (?, ?) on conflict (name) do nothing returning name',
    [name, generate()],
  );
  const [row] = await db.query<{ value: string }>('select value from server_secret where name = ?', [name]);
  if (!row) throw new SecretsError(`server secret ${name} vanished right after it was stored`);
  return { value: row.value, created: inserted.length > 0 };
}

/** The start-up warning the gateway logs when any secret lives in the database; null when none does. */
export function startupWarning(loaded: Pick<LoadedSecrets, 'sources' | 'generated'>): string | null {
  const stored = SECRET_NAMES.filter((n) => loaded.sources[n] !== 'env');
  if (!stored.length) return null;
  const vars = stored.map((n) => SECRET_ENV[n]).join(', ');
  const gen = loaded.generated.length ? ` (generated now: ${loaded.generated.join(', ')})` : '';
  return `server secrets kept in the database${gen}: ${stored.join(', ')}. Production should pass them in the environment (${vars}).`;
}

// ---------------------------------------------------------------------------------------------
// Encryption of secrets at rest: AES-256-GCM, a random 12-byte nonce per message,
// `v1.<nonce>.<ciphertext>.<tag>` in base64url. `aad` binds a ciphertext to its row (e.g. a client id)
// so it cannot be moved to another row; the same `aad` must be given to decrypt.

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
