// The gateway side of docs/CONTRACTS.md "Edge jobs": signs one job for one edge node as the agent expects
// it: compact JWS, alg EdDSA (Ed25519), header {alg, typ: "tunnel-job+jwt", kid}, claims iss "tunnelgate",
// aud the node id, a fresh jti (UUID), iat now, exp at most 60 s later, v (1 unless told: the caller
// picks it from the agent's hello, docs/CONTRACTS.md "Versions"), op and the op's body.
// Pure apart from the clock and the random jti (both injectable). The body is checked with the agent's own
// shape rules (common/job-contract.ts) first, so the gateway never signs a job an agent calls malformed.
import { createPrivateKey, randomUUID, type KeyObject } from 'node:crypto';
import { CompactSign, type CryptoKey, type JWK } from 'jose';
import { JOB_ALG, JOB_ISS, JOB_TYP, JOB_VERSION_1, JOB_VERSIONS, MAX_LIFETIME_S, checkBody, isJobVersion, isOp, type JobBodies, type JobClaims, type JobVersion, type Op } from '../../common/job-contract.ts';
import { isUuid } from '../../common/names.ts';
import { EVENTS_OP } from '../../common/edge-events.ts';
import { checkStatusSince, type StatusCursor } from '../../common/tunnel-status.ts';

export type { JobBodies, JobClaims, Op, ResultLine } from '../../common/job-contract.ts';

/** jose 6 has no KeyLike any more: a node:crypto KeyObject or a WebCrypto CryptoKey. */
export type KeyLike = KeyObject | CryptoKey;

export class JobSigningError extends Error {
  override name = 'JobSigningError';
}

export interface SignJobOptions {
  /** Seconds since the epoch; defaults to the clock. `iat` is its whole part. */
  now?: number;
  /** exp - iat, 1 to 60 seconds (default 60). */
  ttlSeconds?: number;
  /** Defaults to a random UUID: a job is never signed twice with one jti. */
  jti?: string;
  /**
   * The job version (`v`), default 1, which every agent speaks. 2 only for an agent whose hello listed
   * it; a version 1 body cannot carry `tunnel.policy` (JobSigningError).
   */
  version?: JobVersion;
}

function toKey(privateKey: KeyLike | JWK): KeyLike {
  if (typeof (privateKey as JWK).kty === 'string') {
    const jwk = privateKey as JWK;
    if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.d !== 'string') throw new JobSigningError('the job-signing JWK must be an Ed25519 private key (kty OKP, crv Ed25519, d)');
    return createPrivateKey({ key: jwk as import('node:crypto').JsonWebKey, format: 'jwk' });
  }
  const key = privateKey as KeyLike;
  const type = 'asymmetricKeyType' in key ? key.asymmetricKeyType : (key as CryptoKey).algorithm.name.toLowerCase();
  if (type !== 'ed25519' || key.type !== 'private') throw new JobSigningError('the job-signing key must be an Ed25519 private key');
  return key;
}

/**
 * The op `status` (docs/CONTRACTS.md "Version 2"): an empty body, version 2 only. The gateway's side of
 * the op (the agent's answer is common/tunnel-status.ts StatusResult); kept out of common/job-contract.ts
 * OPS until the agent handles it, so no agent verifier takes it for one of the ops it runs.
 */
export const STATUS_OP = 'status';

/**
 * One signed `status` job for an agent whose hello listed version 2 (JobSigningError for version 1). `since`
 * (null or a cursor) only for an agent whose hello lists FEATURE_STATUS_DELTA (docs/CONTRACTS.md "Status by
 * change"): it asks for the changes since that answer; without it the job has no body, as before.
 */
export async function signStatusJob(privateKey: KeyLike | JWK, kid: string, nodeId: string, opts: SignJobOptions & { version: JobVersion; since?: StatusCursor | null }): Promise<string> {
  if (opts.since === undefined) return signBodyless(STATUS_OP, privateKey, kid, nodeId, opts);
  if (opts.version < 2) throw new JobSigningError(`op ${STATUS_OP} needs job version 2; the agent must list 2 in its hello`);
  const why = checkStatusSince(opts.since);
  if (why) throw new JobSigningError(why);
  const std = standardClaims(kid, nodeId, opts);
  return new CompactSign(Buffer.from(JSON.stringify({ ...std, op: STATUS_OP, since: opts.since }), 'utf8')).setProtectedHeader({ alg: JOB_ALG, typ: JOB_TYP, kid }).sign(toKey(privateKey));
}

/**
 * One signed `events` job (docs/CONTRACTS.md "Events stream"): no body, version 2 or later, for an agent whose
 * hello listed the feature `events` (the caller checks that: server/events/streams.ts). Signed as any job, so the
 * agent verifies its audience, expiry and jti like any other; the stream outlives the token, which only opens it.
 */
export async function signEventsJob(privateKey: KeyLike | JWK, kid: string, nodeId: string, opts: SignJobOptions & { version: JobVersion }): Promise<string> {
  return signBodyless(EVENTS_OP, privateKey, kid, nodeId, opts);
}

async function signBodyless(op: typeof STATUS_OP | typeof EVENTS_OP, privateKey: KeyLike | JWK, kid: string, nodeId: string, opts: SignJobOptions & { version: JobVersion }): Promise<string> {
  if (opts.version < 2) throw new JobSigningError(`op ${op} needs job version 2; the agent must list 2 in its hello`);
  const std = standardClaims(kid, nodeId, opts);
  return new CompactSign(Buffer.from(JSON.stringify({ ...std, op }), 'utf8')).setProtectedHeader({ alg: JOB_ALG, typ: JOB_TYP, kid }).sign(toKey(privateKey));
}

/** iss, aud, jti, iat, exp and v, checked: what every job carries besides its op and body. */
function standardClaims(kid: string, nodeId: string, opts: SignJobOptions): { iss: typeof JOB_ISS; aud: string; jti: string; iat: number; exp: number; v: JobVersion } {
  if (typeof kid !== 'string' || kid === '') throw new JobSigningError('kid must be a non-empty string');
  if (!isUuid(nodeId)) throw new JobSigningError(`node id must be a UUID, got ${JSON.stringify(nodeId)}`);
  const ttl = opts.ttlSeconds ?? MAX_LIFETIME_S;
  if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_LIFETIME_S) throw new JobSigningError(`ttlSeconds must be an integer from 1 to ${MAX_LIFETIME_S}`);
  const version = opts.version ?? JOB_VERSION_1;
  if (!isJobVersion(version)) throw new JobSigningError(`version must be one of ${JOB_VERSIONS.join(', ')}, got ${JSON.stringify(version)}`);
  const jti = opts.jti ?? randomUUID();
  if (!isUuid(jti)) throw new JobSigningError('jti must be a UUID');
  const iat = Math.floor(opts.now ?? Date.now() / 1000);
  return { iss: JOB_ISS, aud: nodeId.toLowerCase(), jti, iat, exp: iat + ttl, v: version };
}

/** One signed job: the compact JWS to write to the agent's `tunnel-agent job`. */
export async function signJob<O extends Op>(privateKey: KeyLike | JWK, kid: string, nodeId: string, op: O, body: JobBodies[O], opts: SignJobOptions = {}): Promise<string> {
  if (!isOp(op)) throw new JobSigningError(`op must be one of apply, remove, reconcile, probe; got ${JSON.stringify(op)}`);
  const std = standardClaims(kid, nodeId, opts);
  const version = std.v;
  const bodyKey = op === 'reconcile' ? 'tunnels' : 'tunnel';
  const keys = body && typeof body === 'object' ? Object.keys(body) : [];
  if (keys.length !== 1 || keys[0] !== bodyKey) throw new JobSigningError(`the ${op} body must be exactly {${bodyKey}}`);
  const claims = { ...std, op, ...body } as JobClaims;
  const why = checkBody(op, claims as unknown as Record<string, unknown>, version);
  if (why) throw new JobSigningError(`the ${op} body does not match the job contract: ${why}`);
  return new CompactSign(Buffer.from(JSON.stringify(claims), 'utf8')).setProtectedHeader({ alg: JOB_ALG, typ: JOB_TYP, kid }).sign(toKey(privateKey));
}

/**
 * One signed `traffic` job (docs/CONTRACTS.md "Live traffic"): versions 2 and 3, for an agent whose hello lists
 * the feature traffic_live (the caller checks that: it is not the version's). The body is checked as the agent
 * checks it.
 */
export async function signTrafficJob(privateKey: KeyLike | JWK, kid: string, nodeId: string, body: JobBodies['traffic'], opts: SignJobOptions & { version: JobVersion }): Promise<string> {
  if (opts.version < 2) throw new JobSigningError('op traffic needs job version 2; the agent must list 2 in its hello');
  const claims = { ...standardClaims(kid, nodeId, opts), op: 'traffic' as const, ids: body.ids, ...(body.since !== undefined ? { since: body.since } : {}) };
  const why = checkBody('traffic', claims as unknown as Record<string, unknown>, claims.v);
  if (why) throw new JobSigningError(`the traffic body does not match the job contract: ${why}`);
  return new CompactSign(Buffer.from(JSON.stringify(claims), 'utf8')).setProtectedHeader({ alg: JOB_ALG, typ: JOB_TYP, kid }).sign(toKey(privateKey));
}
