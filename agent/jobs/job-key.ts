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
 * AGENT_JOB_KEY: the key(s) a job may be signed with (docs/CONTRACTS.md "Agent configuration"). One key, a
 * JWK or an SPKI PEM; or, while the gateway's job-signing key is rotated (docs/OPERATOR.md "Rotating the job-signing
 * key"), two: a JWK Set (`{"keys": [old, new]}`, each with its own `kid`, which tells them apart) or two
 * PEM blocks one after the other (what openssl prints; no kid, so both are tried). A job verifying with
 * either is accepted. More than two is refused: an old key left in the set would stay trusted long after
 * the rotation ended.
 */
export function parseJobKeys(text: string): JobKey[] {
  const t = text.trim();
  let keys: JobKey[];
  if (t.startsWith('{')) {
    let json: unknown;
    try {
      json = JSON.parse(t);
    } catch (e) {
      throw new JobKeyError(`not valid JSON: ${(e as Error).message}`);
    }
    if (!isObject(json)) throw new JobKeyError('the JWK must be a JSON object');
    if ('keys' in json) keys = parseJwkSet(json.keys);
    else keys = [parseJwk(json)];
  } else if (t.includes('-----BEGIN')) {
    const pem = t.includes('\n') ? t.replace(/\r\n/g, '\n') : t.replace(/\\n/g, '\n');
    const blocks = pem.match(/-----BEGIN [^-]+-----[\s\S]*?-----END [^-]+-----/g) ?? [pem];
    keys = blocks.length === 1 ? [parsePem(blocks[0]!)] : blocks.map((b, i) => withWhere(`PEM block ${i + 1}`, () => parsePem(b)));
  } else {
    throw new JobKeyError('must be an Ed25519 public key as a JWK (JSON) or an SPKI PEM, or two keys (a JWK Set or two PEMs) during a rotation');
  }
  if (keys.length > 2) throw new JobKeyError(`at most two keys (the old and the new one during a rotation), got ${keys.length}`);
  if (keys.length === 2 && keys[0]!.thumbprint === keys[1]!.thumbprint) throw new JobKeyError('the two keys are the same key');
  return keys;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/** A JWK Set's `keys`: JWKs that each carry a distinct `kid`, the name a job's header picks its key by. */
function parseJwkSet(keys: unknown): JobKey[] {
  if (!Array.isArray(keys) || keys.length === 0) throw new JobKeyError('a JWK Set\'s "keys" must be a non-empty array');
  const parsed = keys.map((k, i) => {
    const where = `key ${i + 1} of the JWK Set`;
    if (!isObject(k)) throw new JobKeyError(`${where} must be a JWK object`);
    const key = withWhere(where, () => parseJwk(k));
    if (key.kid === undefined) throw new JobKeyError(`${where} has no kid; in a set each key needs the kid node add printed with it`);
    return key;
  });
  const kids = parsed.map((k) => k.kid);
  if (new Set(kids).size !== kids.length) throw new JobKeyError(`two keys of the JWK Set have the same kid ${JSON.stringify(kids.find((k, i) => kids.indexOf(k) !== i))}`);
  return parsed;
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
