// SSH keys of the agent: its own host key (generated once, kept in AGENT_STATE_DIR) and the gateway's
// public key it accepts (AGENT_AUTHORIZED_KEY).
//
// The host key is generated with node:crypto and written in OpenSSH's private-key format by the shared
// codec (common/openssh.ts, which says why): every key is parsed back by ssh2 and signs and verifies once
// through it before it is kept or used. A stored key that fails that check stops the agent: it is never replaced silently,
// since the gateway pins its fingerprint.
import { generateKeyPairSync } from 'node:crypto';
import { chmod, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import type { ParsedKey } from 'ssh2';
import { checkSsh2PrivateKey, rethrowKeyError, singleKey, sshFingerprint, toOpenSshPrivateKey } from '../../common/openssh.ts';
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

/** Runs one step of the shared OpenSSH codec (common/openssh.ts) with the agent's error class. */
const codec = <T>(step: () => T): T => rethrowKeyError(step, (reason) => new SshKeyError(reason));

/** Parses an OpenSSH Ed25519 private key with ssh2 and signs/verifies once through it. */
function checkHostKey(text: string): ParsedKey {
  return codec(() => checkSsh2PrivateKey(text));
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
  const key = singleKey(ssh2.utils.parseKey(t));
  if (key instanceof Error) throw new SshKeyError(`not an OpenSSH public key: ${key.message}`);
  if (key.isPrivateKey()) throw new SshKeyError('this is a private key; give the agent the gateway\'s public key only');
  const blob = key.getPublicSSH();
  return { key, blob, type: key.type, fingerprint: sshFingerprint(blob) };
}
