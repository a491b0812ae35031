// SSH keys of the agent: its own host key (generated once, kept in AGENT_STATE_DIR) and the gateway's
// public key it accepts (AGENT_AUTHORIZED_KEY).
//
// The host key is generated with node:crypto and written in OpenSSH's private-key format, because
// ssh2's own generateKeyPairSync('ed25519') yields an unusable key about once in 256 tries (STACK.md,
// mscdex/ssh2#1390): every key is parsed back by ssh2 and signs and verifies once through it before it
// is kept or used. A stored key that fails that check stops the agent: it is never replaced silently,
// since the gateway pins its fingerprint.
import { createHash, generateKeyPairSync, randomBytes, type KeyObject } from 'node:crypto';
import { chmod, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import type { ParsedKey } from 'ssh2';
import { ensureDir, writeFileAtomic } from '../housekeeping/files.ts';

export const HOST_KEY_FILE = 'ssh_host_ed25519_key';

export class SshKeyError extends Error {
  override name = 'SshKeyError';
}

export interface HostKey {
  /** OpenSSH private key text, what ssh2's Server takes in `hostKeys`. */
  privateKey: string;
  /** The ssh-ed25519 public key blob. */
  publicBlob: Buffer;
  /** `ssh-ed25519 AAAA… tunnel-agent`. */
  publicKey: string;
  /** `SHA256:<base64 without padding>`, as `ssh-keygen -l` prints it. */
  fingerprint: string;
  path: string;
  /** True when this call generated the key. */
  created: boolean;
}

/** OpenSSH's fingerprint of a public key blob. */
export function sshFingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

function sshString(data: Buffer | string): Buffer {
  const body = typeof data === 'string' ? Buffer.from(data, 'utf8') : data;
  const len = Buffer.alloc(4);
  len.writeUInt32BE(body.length);
  return Buffer.concat([len, body]);
}

/** `openssh-key-v1`, unencrypted, one Ed25519 key: the format `ssh-keygen -t ed25519` writes. */
export function toOpenSshPrivateKey(privateKey: KeyObject, comment: string): string {
  if (privateKey.type !== 'private' || privateKey.asymmetricKeyType !== 'ed25519') throw new SshKeyError('an Ed25519 private key is needed');
  const jwk = privateKey.export({ format: 'jwk' });
  const seed = Buffer.from(jwk.d!, 'base64url');
  const pub = Buffer.from(jwk.x!, 'base64url');
  const blob = Buffer.concat([sshString('ssh-ed25519'), sshString(pub)]);
  const check = randomBytes(4);
  let priv = Buffer.concat([check, check, sshString('ssh-ed25519'), sshString(pub), sshString(Buffer.concat([seed, pub])), sshString(comment)]);
  const pad = (8 - (priv.length % 8)) % 8;
  priv = Buffer.concat([priv, Buffer.from(Array.from({ length: pad }, (_, i) => i + 1))]);
  const nkeys = Buffer.alloc(4);
  nkeys.writeUInt32BE(1);
  const body = Buffer.concat([
    Buffer.from('openssh-key-v1\0', 'latin1'),
    sshString('none'),
    sshString('none'),
    sshString(Buffer.alloc(0)),
    nkeys,
    sshString(blob),
    sshString(priv),
  ]).toString('base64');
  return `-----BEGIN OPENSSH PRIVATE KEY-----\n${body.match(/.{1,70}/g)!.join('\n')}\n-----END OPENSSH PRIVATE KEY-----\n`;
}

function single(parsed: ParsedKey | ParsedKey[] | Error): ParsedKey | Error {
  if (parsed instanceof Error) return parsed;
  if (Array.isArray(parsed)) return parsed.length === 1 ? parsed[0]! : new Error(`expected one key, found ${parsed.length}`);
  return parsed;
}

/** Parses an OpenSSH Ed25519 private key with ssh2 and signs/verifies once through it. */
export function checkHostKey(text: string): ParsedKey {
  const key = single(ssh2.utils.parseKey(text));
  if (key instanceof Error) throw new SshKeyError(`not a key ssh2 can read: ${key.message}`);
  if (key.type !== 'ssh-ed25519') throw new SshKeyError(`must be an Ed25519 key, got ${key.type}`);
  if (!key.isPrivateKey()) throw new SshKeyError('must be a private key');
  const probe = randomBytes(32);
  const sig = key.sign(probe);
  if (sig instanceof Error || !key.verify(probe, sig)) throw new SshKeyError('failed its ssh2 sign/verify self-test');
  return key;
}

function describe(text: string, path: string, created: boolean): HostKey {
  const key = checkHostKey(text);
  const publicBlob = key.getPublicSSH();
  return {
    privateKey: text,
    publicBlob,
    publicKey: `ssh-ed25519 ${publicBlob.toString('base64')} tunnel-agent`,
    fingerprint: sshFingerprint(publicBlob),
    path,
    created,
  };
}

/** Generates a host key that ssh2 accepts (retrying the rare one it does not). */
export function generateHostKey(): string {
  let last: unknown;
  for (let attempt = 0; attempt < 8; attempt++) {
    const text = toOpenSshPrivateKey(generateKeyPairSync('ed25519').privateKey, 'tunnel-agent');
    try {
      checkHostKey(text);
      return text;
    } catch (e) {
      last = e;
    }
  }
  throw new SshKeyError(`could not generate a usable host key: ${(last as Error)?.message}`);
}

/** The host key in `stateDir`, generated and stored (0600) on first start. */
export async function loadOrCreateHostKey(stateDir: string): Promise<HostKey> {
  await ensureDir(stateDir);
  const path = join(stateDir, HOST_KEY_FILE);
  let text: string | undefined;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw new SshKeyError(`cannot read the host key ${path}: ${(e as Error).message}`);
  }
  if (text === undefined) {
    text = generateHostKey();
    await writeFileAtomic(path, text, 0o600);
    return describe(text, path, true);
  }
  try {
    const host = describe(text, path, false);
    if (((await stat(path)).mode & 0o077) !== 0) await chmod(path, 0o600);
    return host;
  } catch (e) {
    throw new SshKeyError(
      `the host key ${path} is unusable (${(e as Error).message}); it is not replaced automatically because the gateway pins its fingerprint. ` +
        'Restore it, or delete it to generate a new one and record the new fingerprint at the gateway.',
    );
  }
}

export interface AuthorizedKey {
  key: ParsedKey;
  /** The public key blob (type + key data) that clients present. */
  blob: Buffer;
  type: string;
  fingerprint: string;
}

/** The gateway's public key in OpenSSH form (`ssh-ed25519 AAAA… comment`). */
export function parseAuthorizedKey(text: string): AuthorizedKey {
  const t = text.trim();
  if (t === '' || t.includes('\n')) throw new SshKeyError('must be exactly one OpenSSH public key line, e.g. "ssh-ed25519 AAAA… tunnelgate-gateway"');
  const key = single(ssh2.utils.parseKey(t));
  if (key instanceof Error) throw new SshKeyError(`not an OpenSSH public key: ${key.message}`);
  if (key.isPrivateKey()) throw new SshKeyError('this is a private key; give the agent the gateway\'s public key only');
  const blob = key.getPublicSSH();
  return { key, blob, type: key.type, fingerprint: sshFingerprint(blob) };
}
