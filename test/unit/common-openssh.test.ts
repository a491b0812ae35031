// The one OpenSSH Ed25519 codec (common/openssh.ts) that both the gateway's SSH client key and the agent's
// host key are written with: read back by OpenSSH's own ssh-keygen (independent of our code and of
// ssh2), by ssh2, and by our reader, and each reader sees the same key.
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync, sign, verify } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { OpenSshKeyError, checkSsh2PrivateKey, ed25519FromOpenSsh, sshFingerprint, sshPublicBlobOf, toOpenSshPrivateKey } from '../../common/openssh.ts';
import { generateHostKey } from '../../agent/ssh/keys.ts';
import { generateSecret, parseSecret } from '../../server/secrets.ts';

const dir = mkdtempSync(join(tmpdir(), 'tg-openssh-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What OpenSSH itself reads from a private key file: the public key line and the SHA256 fingerprint. */
function sshKeygen(text: string, name: string): { publicKey: string; fingerprint: string } {
  const path = join(dir, name);
  writeFileSync(path, text, { mode: 0o600 });
  // ssh-keygen -y prints the comment too on newer OpenSSH: keep type and key.
  const publicKey = execFileSync('ssh-keygen', ['-y', '-f', path], { encoding: 'utf8' }).trim().split(' ').slice(0, 2).join(' ');
  const fingerprint = execFileSync('ssh-keygen', ['-l', '-E', 'sha256', '-f', path], { encoding: 'utf8' }).split(' ')[1]!;
  return { publicKey, fingerprint };
}

describe('OpenSSH Ed25519 codec', () => {
  it('writes keys that ssh-keygen and ssh2 read as the same key, and reads them back to the same node:crypto key', () => {
    for (let i = 0; i < 8; i++) {
      const { privateKey, publicKey } = generateKeyPairSync('ed25519');
      const text = toOpenSshPrivateKey(privateKey, `test-${i}`);
      const blob = sshPublicBlobOf(privateKey);
      const seen = sshKeygen(text, `k${i}`);
      expect(seen.publicKey).toBe(`ssh-ed25519 ${blob.toString('base64')}`);
      expect(seen.fingerprint).toBe(sshFingerprint(blob));
      expect(checkSsh2PrivateKey(text).getPublicSSH().equals(blob)).toBe(true);
      const back = ed25519FromOpenSsh(text);
      const msg = Buffer.from(`message ${i}`);
      expect(verify(null, msg, publicKey, sign(null, msg, back))).toBe(true);
    }
  });

  it('both programs write their keys with it: the agent host key and the gateway SSH key read the same way', () => {
    for (const [name, text] of [['agent', generateHostKey()], ['gateway', generateSecret('gateway_ssh_key')]] as const) {
      const seen = sshKeygen(text, name);
      const blob = checkSsh2PrivateKey(text).getPublicSSH();
      expect(seen.fingerprint, name).toBe(sshFingerprint(blob));
    }
    const gw = parseSecret('gateway_ssh_key', generateSecret('gateway_ssh_key'));
    expect(gw.publicKey).toMatch(/^ssh-ed25519 \S+ tunnelgate-gateway$/);
  });

  it('refuses what is not an Ed25519 private key, with a reason that reads after the key\'s name', () => {
    expect(() => toOpenSshPrivateKey(generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey, 'x')).toThrow(OpenSshKeyError);
    expect(() => checkSsh2PrivateKey('hello')).toThrow(/^is not a key ssh2 can read/);
    const pub = `ssh-ed25519 ${sshPublicBlobOf(generateKeyPairSync('ed25519').privateKey).toString('base64')}`;
    expect(() => checkSsh2PrivateKey(pub)).toThrow(/^must be a private key$/);
  });
});
