// Server secrets without a database: parsing of every environment form, the OpenSSH key the gateway
// generates (checked by ssh2, by jose and, where installed, by OpenSSH's own ssh-keygen), and the
// AES-256-GCM format of secrets at rest.
import { execFileSync } from 'node:child_process';
import { createHash, createPrivateKey, generateKeyPairSync, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CompactSign, compactVerify, importJWK } from 'jose';
import ssh2 from 'ssh2';
import { afterAll, describe, expect, it } from 'vitest';
import {
  decryptSecret,
  encryptSecret,
  generateSecret,
  parseSecret,
  requireSecretsFromEnv,
  SECRET_ENV,
  SECRET_NAMES,
  SecretsError,
  startupWarning,
  type SecretName,
  type SecretSource,
} from '../../server/secrets.ts';
import { skipUnless } from '../helpers/requirements.ts';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tg-secrets-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

const hasSshKeygen = (() => {
  try {
    execFileSync('ssh-keygen', ['-?'], { stdio: 'ignore' });
    return true;
  } catch (e) {
    // ssh-keygen -? exits 1 after printing usage; only a missing binary is ENOENT.
    return (e as NodeJS.ErrnoException).code !== 'ENOENT';
  }
})();

/** The ssh-ed25519 public-key line for a raw 32-byte key, built here independently of the code under test. */
function expectedSshLine(pub: Buffer): string {
  const str = (b: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, b.length]), b]);
  return `ssh-ed25519 ${Buffer.concat([str(Buffer.from('ssh-ed25519')), str(pub)]).toString('base64')}`;
}

function ssh2Key(text: string) {
  const parsed = ssh2.utils.parseKey(text);
  const key = Array.isArray(parsed) ? parsed[0]! : parsed;
  if (key instanceof Error) throw key;
  return key;
}

describe('gateway SSH key', () => {
  it('generates keys that ssh2 parses and signs with, every time (ssh2 own generator fails ~1/256)', () => {
    for (let i = 0; i < 300; i++) {
      const text = generateSecret('gateway_ssh_key');
      expect(text).toMatch(/^-----BEGIN OPENSSH PRIVATE KEY-----\n[A-Za-z0-9+/=\n]+\n-----END OPENSSH PRIVATE KEY-----\n$/);
      const key = ssh2Key(text.trimEnd());
      expect(key.type).toBe('ssh-ed25519');
      expect(key.isPrivateKey()).toBe(true);
      const data = randomBytes(64);
      const sig = key.sign(data);
      expect(sig).toBeInstanceOf(Buffer);
      expect(key.verify(data, sig as Buffer)).toBe(true);
      const parsed = parseSecret('gateway_ssh_key', text);
      // The printed public key is the same blob ssh2 derives from the private key.
      expect(parsed.publicKey).toBe(`ssh-ed25519 ${key.getPublicSSH().toString('base64')} tunnelgate-gateway`);
      expect(parsed.fingerprint).toBe(`SHA256:${createHash('sha256').update(key.getPublicSSH()).digest('base64').replace(/=+$/, '')}`);
    }
  });

  it('accepts a PKCS#8 PEM key (with real newlines or \\n escapes) and converts it to OpenSSH', () => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    const pub = Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url');
    for (const text of [pem, pem.trim().replace(/\n/g, '\\n')]) {
      const parsed = parseSecret('gateway_ssh_key', text);
      expect(parsed.publicKey).toBe(`${expectedSshLine(pub)} tunnelgate-gateway`);
      expect(parsed.privateKey).toMatch(/^-----BEGIN OPENSSH PRIVATE KEY-----/);
      expect(ssh2Key(parsed.privateKey.trimEnd()).getPublicSSH().toString('base64')).toBe(expectedSshLine(pub).split(' ')[1]);
    }
  });

  it.skipIf(skipUnless(hasSshKeygen, 'ssh-keygen (apt-get install openssh-client)'))('matches OpenSSH: ssh-keygen reads our key, and we read ssh-keygen keys', () => {
    // Ours -> ssh-keygen: the same public key and fingerprint.
    const ours = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));
    const file = path.join(tmp, 'ours');
    fs.writeFileSync(file, ours.privateKey, { mode: 0o600 });
    const derived = execFileSync('ssh-keygen', ['-y', '-f', file], { encoding: 'utf8' }).trim().split(' ');
    expect(`${derived[0]} ${derived[1]}`).toBe(ours.publicKey.split(' ').slice(0, 2).join(' '));
    const listed = execFileSync('ssh-keygen', ['-l', '-f', file], { encoding: 'utf8' });
    expect(listed.split(' ')[1]).toBe(ours.fingerprint);
    // ssh-keygen -> ours: the .pub file names the same key.
    const theirs = path.join(tmp, 'theirs');
    execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'operator@example', '-f', theirs]);
    const parsed = parseSecret('gateway_ssh_key', fs.readFileSync(theirs, 'utf8'));
    const pubFile = fs.readFileSync(`${theirs}.pub`, 'utf8').trim().split(' ');
    expect(parsed.publicKey).toBe(`${pubFile[0]} ${pubFile[1]} tunnelgate-gateway`);
  });

  it('refuses what is not an Ed25519 private key', () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 }).privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    const edPublic = generateKeyPairSync('ed25519').publicKey.export({ format: 'pem', type: 'spki' }).toString();
    for (const bad of [rsa, edPublic, 'not a key', '-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----']) {
      expect(() => parseSecret('gateway_ssh_key', bad)).toThrow(SecretsError);
    }
  });
});

describe('job-signing key', () => {
  it('reads PKCS#8 PEM and private JWK alike and publishes a public JWK that verifies its signatures', async () => {
    const { privateKey } = generateKeyPairSync('ed25519');
    const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    const jwk = JSON.stringify(privateKey.export({ format: 'jwk' }));
    const a = parseSecret('job_signing_key', pem);
    const b = parseSecret('job_signing_key', jwk);
    expect(b.publicJwk).toEqual(a.publicJwk);
    expect(a.publicJwk).not.toHaveProperty('d');
    expect(Object.keys(a.publicJwk).sort()).toEqual(['alg', 'crv', 'kid', 'kty', 'use', 'x']);
    // RFC 7638 thumbprint, computed here by jose's rules: members in lexicographic order.
    const thumb = createHash('sha256').update(JSON.stringify({ crv: 'Ed25519', kty: 'OKP', x: a.publicJwk.x })).digest('base64url');
    expect(a.kid).toBe(thumb);
    // A job signed the way the worker will sign it verifies with what `node add` prints.
    const jws = await new CompactSign(new TextEncoder().encode('{"op":"probe"}'))
      .setProtectedHeader({ alg: 'EdDSA', typ: 'tunnel-job+jwt', kid: a.kid })
      .sign(a.privateKey);
    const verified = await compactVerify(jws, await importJWK(a.publicJwk, 'EdDSA'));
    expect(new TextDecoder().decode(verified.payload)).toBe('{"op":"probe"}');
    // The generated form is PKCS#8 PEM.
    expect(generateSecret('job_signing_key')).toMatch(/^-----BEGIN PRIVATE KEY-----/);
  });

  it('refuses other key types and public-only JWKs', () => {
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
    const pubJwk = JSON.stringify(generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }));
    for (const bad of [ec, pubJwk, '{"kty":"OKP"', 'hello']) expect(() => parseSecret('job_signing_key', bad)).toThrow(SecretsError);
  });
});

describe('symmetric secrets', () => {
  it('access_token_key: base64 or base64url of at least 32 bytes', () => {
    const key = randomBytes(48);
    expect(parseSecret('access_token_key', key.toString('base64')).equals(key)).toBe(true);
    expect(parseSecret('access_token_key', key.toString('base64url')).equals(key)).toBe(true);
    expect(parseSecret('access_token_key', generateSecret('access_token_key')).length).toBe(32);
    expect(() => parseSecret('access_token_key', randomBytes(31).toString('base64url'))).toThrow(/at least 32 bytes/);
    expect(() => parseSecret('access_token_key', 'correct horse battery staple, long enough?')).toThrow(SecretsError);
  });

  it('secret_encryption_key: exactly 32 bytes as base64, base64url or hex', () => {
    const key = randomBytes(32);
    for (const text of [key.toString('base64'), key.toString('base64url'), key.toString('hex'), key.toString('hex').toUpperCase()]) {
      expect(parseSecret('secret_encryption_key', text).equals(key)).toBe(true);
    }
    expect(() => parseSecret('secret_encryption_key', randomBytes(33).toString('base64'))).toThrow(/exactly 32 bytes/);
    expect(() => parseSecret('secret_encryption_key', randomBytes(16).toString('hex'))).toThrow(/exactly 32 bytes/);
  });

  it('cookie_keys: comma-separated, none empty or short', () => {
    const a = randomBytes(32).toString('base64url');
    const b = randomBytes(32).toString('hex');
    expect(parseSecret('cookie_keys', `${a}, ${b}`)).toEqual([a, b]);
    expect(parseSecret('cookie_keys', generateSecret('cookie_keys'))).toHaveLength(1);
    expect(() => parseSecret('cookie_keys', `${a},,${b}`)).toThrow(/empty/);
    expect(() => parseSecret('cookie_keys', `${a},short`)).toThrow(/at least 32/);
  });

  it('every generated value is fresh and parses back', () => {
    for (const name of SECRET_NAMES) {
      const one = generateSecret(name);
      expect(one).not.toBe(generateSecret(name));
      expect(() => parseSecret(name, one)).not.toThrow();
    }
  });
});

describe('encryptSecret / decryptSecret', () => {
  const key = randomBytes(32);

  it('round-trips in the v1 format with a fresh nonce each time', () => {
    const secret = randomBytes(32).toString('base64url');
    const a = encryptSecret(key, secret, 'cl_aaaaaaaaaaaaaaaa');
    const b = encryptSecret(key, secret, 'cl_aaaaaaaaaaaaaaaa');
    expect(a).toMatch(/^v1\.[A-Za-z0-9_-]{16}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{22}$/);
    expect(a).not.toBe(b);
    expect(a).not.toContain(secret);
    expect(decryptSecret(key, a, 'cl_aaaaaaaaaaaaaaaa')).toBe(secret);
    expect(decryptSecret(key, encryptSecret(key, 'héllo ✓'))).toBe('héllo ✓');
    expect(decryptSecret(key, encryptSecret(key, ''))).toBe('');
  });

  it('refuses a wrong key, a wrong context, tampering and other versions', () => {
    const ct = encryptSecret(key, 'the secret', 'cl_a');
    expect(() => decryptSecret(randomBytes(32), ct, 'cl_a')).toThrow(SecretsError);
    expect(() => decryptSecret(key, ct, 'cl_b')).toThrow(SecretsError);
    expect(() => decryptSecret(key, ct)).toThrow(SecretsError);
    const parts = ct.split('.');
    for (let i = 1; i < 4; i++) {
      const buf = Buffer.from(parts[i]!, 'base64url');
      buf[0]! ^= 1;
      const tampered = [...parts];
      tampered[i] = buf.toString('base64url');
      expect(() => decryptSecret(key, tampered.join('.'), 'cl_a')).toThrow(SecretsError);
    }
    expect(() => decryptSecret(key, ct.replace(/^v1/, 'v2'), 'cl_a')).toThrow(/not a v1/);
    expect(() => decryptSecret(key, 'garbage', 'cl_a')).toThrow(SecretsError);
    expect(() => encryptSecret(randomBytes(16), 'x')).toThrow(/32 bytes/);
  });
});

describe('startupWarning', () => {
  const all = (s: SecretSource) => Object.fromEntries(SECRET_NAMES.map((n) => [n, s])) as Record<SecretName, SecretSource>;

  it('is silent when every secret comes from the environment, and names the variables otherwise', () => {
    expect(startupWarning({ sources: all('env'), generated: [] })).toBeNull();
    const sources = { ...all('env'), job_signing_key: 'database' as const, cookie_keys: 'generated' as const };
    const w = startupWarning({ sources, generated: ['cookie_keys'] });
    expect(w).toContain('JOB_SIGNING_KEY');
    expect(w).toContain('COOKIE_KEYS');
    expect(w).toContain('COOKIE_KEYS (generated now)');
    expect(w).not.toContain('JOB_SIGNING_KEY (generated now)');
    expect(w).not.toContain('ACCESS_TOKEN_KEY');
  });

  it('names each of the five secrets once on a first start that generated them all', () => {
    const w = startupWarning({ sources: all('generated'), generated: [...SECRET_NAMES] })!;
    expect(w).toBe(
      'server secrets generated now and kept in the database, not taken from the environment: ' +
        'ACCESS_TOKEN_KEY, COOKIE_KEYS, SECRET_ENCRYPTION_KEY, JOB_SIGNING_KEY, GATEWAY_SSH_KEY. Production should set these variables.',
    );
    for (const name of SECRET_NAMES) {
      // Neither the variable nor the secret's own name appears a second time.
      const mentions = w.split(/[^A-Za-z_]+/).filter((word) => word.toLowerCase() === name);
      expect(mentions, name).toHaveLength(1);
    }
  });

  it('names each secret once on a restart that read them all back from the database', () => {
    const w = startupWarning({ sources: all('database'), generated: [] })!;
    expect(w).not.toContain('generated');
    for (const name of SECRET_NAMES) expect(w.split(SECRET_ENV[name]).length - 1, name).toBe(1);
  });
});

// Keep the PKCS#8 seed trick in secrets.ts honest: the DER prefix must give back the same key.
it('OpenSSH key round-trips to the same Ed25519 key through every form', () => {
  const { privateKey } = generateKeyPairSync('ed25519');
  const pem = privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();
  const fromPem = parseSecret('gateway_ssh_key', pem);
  const fromOpenSsh = parseSecret('gateway_ssh_key', fromPem.privateKey);
  expect(fromOpenSsh.publicKey).toBe(fromPem.publicKey);
  expect(createPrivateKey(pem).export({ format: 'jwk' }).x).toBe(
    Buffer.from(ssh2Key(fromOpenSsh.privateKey.trimEnd()).getPublicSSH().subarray(19)).toString('base64url'),
  );
});

describe('SECRETS_FROM_ENV=required', () => {
  const full = () => Object.fromEntries(SECRET_NAMES.map((n) => [SECRET_ENV[n], generateSecret(n)])) as Record<string, string>;

  it('names every missing or empty secret variable, and never a value', () => {
    const env: Record<string, string> = { ...full(), SECRETS_FROM_ENV: 'required' };
    const present = env.ACCESS_TOKEN_KEY!;
    delete env.JOB_SIGNING_KEY;
    env.COOKIE_KEYS = '  ';
    let message = '';
    try {
      requireSecretsFromEnv(env);
    } catch (e) {
      expect(e).toBeInstanceOf(SecretsError);
      message = (e as Error).message;
    }
    expect(message).toMatch(/SECRETS_FROM_ENV=required/);
    expect(message).toContain('JOB_SIGNING_KEY');
    expect(message).toContain('COOKIE_KEYS');
    expect(message).not.toContain('ACCESS_TOKEN_KEY');
    expect(message).not.toContain(present);
  });

  it('passes with every variable set, and is off unless asked for', () => {
    expect(() => requireSecretsFromEnv({ ...full(), SECRETS_FROM_ENV: 'required' })).not.toThrow();
    expect(() => requireSecretsFromEnv({})).not.toThrow();
    expect(() => requireSecretsFromEnv({ SECRETS_FROM_ENV: 'optional' })).not.toThrow();
    expect(() => requireSecretsFromEnv({ SECRETS_FROM_ENV: 'yes please' })).toThrow(/SECRETS_FROM_ENV must be/);
  });
});
