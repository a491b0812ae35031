// The job-signing key: Ed25519, from a PKCS#8 PEM or a JWK with "d"; its public half is what the agents
// take as AGENT_JOB_KEY, its RFC 7638 thumbprint the `kid` of every signed job (docs/CONTRACTS.md "Edge jobs").
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type JsonWebKey, type KeyObject } from 'node:crypto';
import { SecretsError } from './errors.ts';
import { checkEd25519, pemText, selfTest, type Spec } from './spec.ts';

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

/** RFC 7638 thumbprint of an Ed25519 JWK. */
function okpThumbprint(x: string): string {
  return createHash('sha256').update(`{"crv":"Ed25519","kty":"OKP","x":"${x}"}`).digest('base64url');
}

export const jobSigningKey: Spec<JobSigningKey> = {
  parse(text) {
    const t = text.trim();
    let privateKey: KeyObject;
    try {
      privateKey = t.startsWith('{')
        ? createPrivateKey({ key: JSON.parse(t) as JsonWebKey, format: 'jwk' })
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
