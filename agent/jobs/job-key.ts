// The gateway's job-signing public key as the agent takes it (AGENT_JOB_KEY): an Ed25519 JWK (what
// `npm run admin -- node add` prints as gateway_job_public_key) or an SPKI PEM ("BEGIN PUBLIC KEY"),
// or two of them while the key is being rotated (parseJobKeys).
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

/**
 * AGENT_JOB_KEY: the key(s) a job may be signed with. One key (a JWK or an SPKI PEM), or, while the
 * gateway's job-signing key is being rotated (README "Rotating the job-signing key"), two: a JSON array
 * of two items, each a JWK object or a PEM string (`[{"kty":"OKP",...,"kid":"old"}, "-----BEGIN PUBLIC
 * KEY-----\n..."]`), or two PEM blocks one after the other. A job verifying with either is accepted. More
 * than two is refused: an old key left in the list would stay trusted long after the rotation ended.
 */
export function parseJobKeys(text: string): JobKey[] {
  const t = text.trim();
  let keys: JobKey[];
  if (t.startsWith('[')) {
    let items: unknown;
    try {
      items = JSON.parse(t);
    } catch (e) {
      throw new JobKeyError(`not valid JSON: ${(e as Error).message}`);
    }
    if (!Array.isArray(items) || items.length === 0) throw new JobKeyError('a list of job keys must be a non-empty JSON array');
    keys = items.map((item, i) => {
      const where = `key ${i + 1} of the list`;
      if (typeof item === 'string') return withWhere(where, () => parsePem(item));
      if (item !== null && typeof item === 'object' && !Array.isArray(item)) return withWhere(where, () => parseJwk(item as Record<string, unknown>));
      throw new JobKeyError(`${where} must be a JWK object or a PEM string`);
    });
  } else if (t.startsWith('{')) {
    let jwk: unknown;
    try {
      jwk = JSON.parse(t);
    } catch (e) {
      throw new JobKeyError(`not valid JSON: ${(e as Error).message}`);
    }
    if (jwk === null || typeof jwk !== 'object' || Array.isArray(jwk)) throw new JobKeyError('the JWK must be a JSON object');
    keys = [parseJwk(jwk as Record<string, unknown>)];
  } else if (t.includes('-----BEGIN')) {
    const pem = t.includes('\n') ? t.replace(/\r\n/g, '\n') : t.replace(/\\n/g, '\n');
    const blocks = pem.match(/-----BEGIN [^-]+-----[\s\S]*?-----END [^-]+-----/g) ?? [pem];
    keys = blocks.map((b, i) => (blocks.length > 1 ? withWhere(`PEM block ${i + 1}`, () => parsePem(b)) : parsePem(b)));
  } else {
    throw new JobKeyError('must be an Ed25519 public key as a JWK (JSON) or an SPKI PEM, or a JSON array of two such keys during a rotation');
  }
  if (keys.length > 2) throw new JobKeyError(`at most two keys (the old and the new one during a rotation), got ${keys.length}`);
  if (keys.length === 2 && keys[0]!.thumbprint === keys[1]!.thumbprint) throw new JobKeyError('the two keys are the same key');
  return keys;
}

/** Exactly one key: what the agent took before rotations (kept for callers that trust one key). */
export function parseJobKey(text: string): JobKey {
  const keys = parseJobKeys(text);
  if (keys.length !== 1) throw new JobKeyError(`expected one key, got ${keys.length}`);
  return keys[0]!;
}

function withWhere<T>(where: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof JobKeyError) throw new JobKeyError(`${where}: ${e.message}`);
    throw e;
  }
}

function parseJwk(jwk: Record<string, unknown>): JobKey {
  if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519') throw new JobKeyError('the JWK must be an Ed25519 key (kty "OKP", crv "Ed25519")');
  if ('d' in jwk) throw new JobKeyError('the JWK holds a private key ("d"); give the agent the public key only');
  if (jwk.alg !== undefined && jwk.alg !== 'EdDSA') throw new JobKeyError(`the JWK's alg must be EdDSA, got ${String(jwk.alg)}`);
  if (jwk.kid !== undefined && (typeof jwk.kid !== 'string' || jwk.kid === '')) throw new JobKeyError('the JWK kid must be a non-empty string');
  let key: KeyObject;
  try {
    key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x as string }, format: 'jwk' });
  } catch (e) {
    throw new JobKeyError(`unreadable JWK: ${(e as Error).message}`);
  }
  return finish(key, jwk.kid as string | undefined);
}

function parsePem(text: string): JobKey {
  const t = text.trim();
  const pem = t.includes('\n') ? t.replace(/\r\n/g, '\n') : t.replace(/\\n/g, '\n');
  if (!pem.startsWith('-----BEGIN PUBLIC KEY-----')) throw new JobKeyError('a PEM job key must be an SPKI public key (-----BEGIN PUBLIC KEY-----)');
  let key: KeyObject;
  try {
    key = createPublicKey({ key: pem, format: 'pem' });
  } catch (e) {
    throw new JobKeyError(`unreadable PEM: ${(e as Error).message}`);
  }
  return finish(key, undefined);
}

function finish(key: KeyObject, kid: string | undefined): JobKey {
  if (key.asymmetricKeyType !== 'ed25519') throw new JobKeyError(`must be an Ed25519 key, got ${key.asymmetricKeyType}`);
  const x = key.export({ format: 'jwk' }).x!;
  const thumbprint = createHash('sha256').update(`{"crv":"Ed25519","kty":"OKP","x":"${x}"}`).digest('base64url');
  return { key, kid, thumbprint };
}
