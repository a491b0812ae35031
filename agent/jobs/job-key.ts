// The gateway's job-signing public key as the agent takes it (AGENT_JOB_KEY): an Ed25519 JWK (what
// `npm run admin -- node add` prints as gateway_job_public_key) or an SPKI PEM ("BEGIN PUBLIC KEY").
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';

export interface JobKey {
  key: KeyObject;
  /** The JWK's `kid` when it carried one; jobs must then name it. A PEM key checks no kid. */
  kid?: string;
  /** RFC 7638 thumbprint (what the gateway uses as `kid`), for logs. */
  thumbprint: string;
}

export class JobKeyError extends Error {
  override name = 'JobKeyError';
}

export function parseJobKey(text: string): JobKey {
  const t = text.trim();
  let key: KeyObject;
  let kid: string | undefined;
  if (t.startsWith('{')) {
    let jwk: Record<string, unknown>;
    try {
      jwk = JSON.parse(t) as Record<string, unknown>;
    } catch (e) {
      throw new JobKeyError(`not valid JSON: ${(e as Error).message}`);
    }
    if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519') throw new JobKeyError('the JWK must be an Ed25519 key (kty "OKP", crv "Ed25519")');
    if ('d' in jwk) throw new JobKeyError('the JWK holds a private key ("d"); give the agent the public key only');
    if (jwk.alg !== undefined && jwk.alg !== 'EdDSA') throw new JobKeyError(`the JWK's alg must be EdDSA, got ${String(jwk.alg)}`);
    if (jwk.kid !== undefined && (typeof jwk.kid !== 'string' || jwk.kid === '')) throw new JobKeyError('the JWK kid must be a non-empty string');
    kid = jwk.kid as string | undefined;
    try {
      key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x as string }, format: 'jwk' });
    } catch (e) {
      throw new JobKeyError(`unreadable JWK: ${(e as Error).message}`);
    }
  } else if (t.includes('-----BEGIN')) {
    const pem = t.includes('\n') ? t.replace(/\r\n/g, '\n') : t.replace(/\\n/g, '\n');
    if (!pem.startsWith('-----BEGIN PUBLIC KEY-----')) throw new JobKeyError('a PEM job key must be an SPKI public key (-----BEGIN PUBLIC KEY-----)');
    try {
      key = createPublicKey({ key: pem, format: 'pem' });
    } catch (e) {
      throw new JobKeyError(`unreadable PEM: ${(e as Error).message}`);
    }
  } else {
    throw new JobKeyError('must be an Ed25519 public key as a JWK (JSON) or an SPKI PEM');
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new JobKeyError(`must be an Ed25519 key, got ${key.asymmetricKeyType}`);
  const x = key.export({ format: 'jwk' }).x!;
  const thumbprint = createHash('sha256').update(`{"crv":"Ed25519","kty":"OKP","x":"${x}"}`).digest('base64url');
  return { key, kid, thumbprint };
}
