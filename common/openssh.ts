// OpenSSH Ed25519 keys, the one codec both programs use: the gateway's SSH client key (server/secrets.ts)
// and the agent's host key (agent/ssh/keys.ts) are both generated with node:crypto and written in
// OpenSSH's private-key format by hand, because ssh2's own generateKeyPairSync('ed25519') yields an
// unusable key about once in 256 tries (mscdex/ssh2#1390, #1513). Every key is then parsed back by ssh2
// and signs and verifies once through it (checkSsh2PrivateKey) before it is kept or used.
//
// Errors are OpenSshKeyError with a sentence that reads after the key's name ("… must be a private key");
// callers wrap it in their own error class.
import { createHash, createPrivateKey, randomBytes, type KeyObject } from 'node:crypto';
import ssh2 from 'ssh2';
import type { ParsedKey } from 'ssh2';

export class OpenSshKeyError extends Error {
  override name = 'OpenSshKeyError';
}

/** Runs `step`, turning an OpenSshKeyError into the caller's own error (`wrap` gets the reason sentence). */
export function rethrowKeyError<T>(step: () => T, wrap: (reason: string) => Error): T {
  try {
    return step();
  } catch (e) {
    throw e instanceof OpenSshKeyError ? wrap(e.message) : e;
  }
}

/** OpenSSH's fingerprint of a public key blob: `SHA256:<base64 without padding>`, as `ssh-keygen -l` prints it. */
export function sshFingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** An SSH wire-format string: uint32 length, then the bytes. */
function sshString(data: Buffer | string): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

function uint32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
}

/** The ssh-ed25519 public-key blob: string "ssh-ed25519", string key (32 bytes). */
export function sshEd25519PublicBlob(publicKey: Buffer): Buffer {
  if (publicKey.length !== 32) throw new OpenSshKeyError('an Ed25519 public key is 32 bytes');
  return Buffer.concat([sshString('ssh-ed25519'), sshString(publicKey)]);
}

/** Raw 32-byte seed and public key of an Ed25519 node:crypto private key. */
function rawEd25519(privateKey: KeyObject): { seed: Buffer; pub: Buffer } {
  if (privateKey.type !== 'private' || privateKey.asymmetricKeyType !== 'ed25519') {
    throw new OpenSshKeyError(`must be an Ed25519 private key, got ${privateKey.asymmetricKeyType ?? privateKey.type}`);
  }
  const jwk = privateKey.export({ format: 'jwk' });
  return { seed: Buffer.from(jwk.d!, 'base64url'), pub: Buffer.from(jwk.x!, 'base64url') };
}

/** The ssh-ed25519 public-key blob of an Ed25519 node:crypto private key. */
export function sshPublicBlobOf(privateKey: KeyObject): Buffer {
  return sshEd25519PublicBlob(rawEd25519(privateKey).pub);
}

/** `openssh-key-v1` text, unencrypted, one Ed25519 key: the format `ssh-keygen -t ed25519` writes. */
export function toOpenSshPrivateKey(privateKey: KeyObject, comment: string): string {
  const { seed, pub } = rawEd25519(privateKey);
  const blob = sshEd25519PublicBlob(pub);
  const check = randomBytes(4);
  let priv = Buffer.concat([check, check, sshString('ssh-ed25519'), sshString(pub), sshString(Buffer.concat([seed, pub])), sshString(comment)]);
  // Pad to the cipher block size (8 for "none") with 1, 2, 3, ...
  const pad = (8 - (priv.length % 8)) % 8;
  priv = Buffer.concat([priv, Buffer.from(Array.from({ length: pad }, (_, i) => i + 1))]);
  const body = Buffer.concat([
    Buffer.from('openssh-key-v1\0', 'latin1'),
    sshString('none'),
    sshString('none'),
    sshString(Buffer.alloc(0)),
    uint32(1),
    sshString(blob),
    sshString(priv),
  ]).toString('base64');
  const lines = body.match(/.{1,70}/g)!;
  return `-----BEGIN OPENSSH PRIVATE KEY-----\n${lines.join('\n')}\n-----END OPENSSH PRIVATE KEY-----\n`;
}

/** Reads SSH wire-format strings (uint32 length + bytes) one after another. */
function sshReader(buf: Buffer, start: number) {
  let pos = start;
  return {
    skip(n: number) {
      pos += n;
    },
    string(): Buffer {
      if (pos + 4 > buf.length) throw new OpenSshKeyError('is a truncated OpenSSH private key');
      const len = buf.readUInt32BE(pos);
      if (pos + 4 + len > buf.length) throw new OpenSshKeyError('is a truncated OpenSSH private key');
      const out = buf.subarray(pos + 4, pos + 4 + len);
      pos += 4 + len;
      return out;
    },
  };
}

/**
 * The node:crypto private key of an unencrypted one-key OpenSSH Ed25519 private key text. Check the
 * text with checkSsh2PrivateKey first: this reads the layout, it does not judge it.
 */
export function ed25519FromOpenSsh(text: string): KeyObject {
  const data = Buffer.from(text.replace(/-----(BEGIN|END) OPENSSH PRIVATE KEY-----/g, '').replace(/\s+/g, ''), 'base64');
  const outer = sshReader(data, 'openssh-key-v1\0'.length);
  outer.string(); // cipher name ("none")
  outer.string(); // kdf name ("none")
  outer.string(); // kdf options
  outer.skip(4); // number of keys
  outer.string(); // public key blob
  const inner = sshReader(outer.string(), 8); // after the two check ints
  inner.string(); // key type
  inner.string(); // public key
  const sk = inner.string(); // seed || public key
  if (sk.length !== 64) throw new OpenSshKeyError('is a malformed OpenSSH Ed25519 private key');
  // PKCS#8 wrapping of a raw Ed25519 seed (RFC 8410): a fixed 16-byte prefix.
  const prefix = Buffer.from('302e020100300506032b657004220420', 'hex');
  return createPrivateKey({ key: Buffer.concat([prefix, sk.subarray(0, 32)]), format: 'der', type: 'pkcs8' });
}

/** The one key ssh2.utils.parseKey found, or an Error (also when it found several). */
export function singleKey(parsed: ParsedKey | ParsedKey[] | Error): ParsedKey | Error {
  if (parsed instanceof Error) return parsed;
  if (Array.isArray(parsed)) return parsed.length === 1 ? parsed[0]! : new Error(`expected one key, found ${parsed.length}`);
  return parsed;
}

/** Parses one Ed25519 private key with ssh2 (the library both ends speak SSH with) and signs/verifies once through it. */
export function checkSsh2PrivateKey(text: string): ParsedKey {
  const key = singleKey(ssh2.utils.parseKey(text));
  if (key instanceof Error) throw new OpenSshKeyError(`is not a key ssh2 can read: ${key.message}`);
  if (key.type !== 'ssh-ed25519') throw new OpenSshKeyError(`must be an Ed25519 key, got ${key.type}`);
  if (!key.isPrivateKey()) throw new OpenSshKeyError('must be a private key');
  const probe = randomBytes(32);
  const sig = key.sign(probe);
  if (sig instanceof Error || !key.verify(probe, sig)) throw new OpenSshKeyError('failed its ssh2 sign/verify self-test');
  return key;
}
