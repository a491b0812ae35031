// The gateway's SSH client key, in OpenSSH form through the shared codec (common/openssh.ts): accepted
// as OpenSSH or PKCS#8 PEM, always checked against ssh2's own parser, since ssh2 is what will use it.
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { checkSsh2PrivateKey, ed25519FromOpenSsh, rethrowKeyError, sshFingerprint, sshPublicBlobOf, toOpenSshPrivateKey } from '../../common/openssh.ts';
import { SecretsError } from './errors.ts';
import { checkEd25519, pemText, selfTest, type Spec } from './spec.ts';

export interface GatewaySshKey {
  /** OpenSSH private key text (`-----BEGIN OPENSSH PRIVATE KEY-----`), the form ssh2's client parses. */
  privateKey: string;
  /** `ssh-ed25519 AAAA… tunnelgate-gateway`: what the agent takes as `AGENT_AUTHORIZED_KEY`. */
  publicKey: string;
  /** `SHA256:<base64>` as OpenSSH prints it. */
  fingerprint: string;
}

const SSH_COMMENT = 'tunnelgate-gateway';

/** Runs one step of the shared OpenSSH codec, naming the secret in its error. */
const codec = <T>(step: () => T): T => rethrowKeyError(step, (reason) => new SecretsError(`gateway_ssh_key ${reason}`));

export const gatewaySshKey: Spec<GatewaySshKey> = {
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
